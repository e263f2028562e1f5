package testenv

import (
	"os"
	"testing"
)

// Environment variables written by `scripts/testservers.sh start DIR argocd`
// (or `with --argocd`): Argo CD's repo server and application controller,
// with Redis, running against the Flux stack's API server (the Kube*
// variables), whose in-cluster destination https://kubernetes.default.svc
// is that API server.
const (
	EnvArgoCDNamespace = "RENDER_TEST_ARGOCD_NAMESPACE" // where Argo CD reads Applications and Secrets
	EnvArgoCDLogs      = "RENDER_TEST_ARGOCD_LOGS"      // folder holding its logs
)

// ArgoCDServer is the Argo CD of the test stack: no API server or UI, so it
// is driven through the Kubernetes API (Applications, repository Secrets).
type ArgoCDServer struct {
	// Kube is the API server Argo CD reads its objects from and deploys to.
	Kube *KubeServer
	// Namespace is Argo CD's namespace (argocd).
	Namespace string
	// Logs is the folder holding its logs, for failure messages.
	Logs string
}

// ArgoCD returns the running Argo CD; it skips the test (fails it when
// CI=true) when Argo CD or the API server is not running.
func ArgoCD(t testing.TB) *ArgoCDServer {
	t.Helper()
	requireEnv(t, "Argo CD", EnvArgoCDNamespace)
	return &ArgoCDServer{Kube: Kube(t), Namespace: os.Getenv(EnvArgoCDNamespace), Logs: os.Getenv(EnvArgoCDLogs)}
}
