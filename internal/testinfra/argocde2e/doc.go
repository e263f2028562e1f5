// Package argocde2e tests that real Argo CD reconciles what render writes.
//
// Each test runs the render binary (built once per test run) as Kratix runs
// it in a pipeline, into a real Gitea repository or OCI registry, then
// applies what `render bootstrap argocd` prints, as printed, and the
// repository Secret the README tells users to create, to a real
// kube-apiserver (with its etcd) that Argo CD's own repo server and
// application controller (with Redis) reconcile as local processes; the
// in-cluster destination https://kubernetes.default.svc is that API server.
// The tests read the API server back with plain REST calls:
//
//   - a promise workflow and a resource workflow into a private Gitea
//     repository, two Applications: the objects appear, tracked by their
//     Application, the dependencies' sync done before the resources' one;
//     a changed resource is updated; `--action delete` of the resource, then
//     of the promise, has Argo CD prune their objects;
//   - the same into the OCI registry (an oci:// repoURL on the destination's
//     artifact, plain HTTP set in the repository Secret), which shows that
//     Argo CD reads render's one-layer artifacts with no setting;
//   - aggregatedYAML and none destinations, in git and in the registry, read
//     by the one Application printed for them;
//   - a destination in an S3 bucket: `render bootstrap argocd` refuses it
//     with exit code 2.
//
// There is no kubelet, scheduler or controller-manager: objects are stored,
// nothing runs them, and without the garbage collector an object Argo CD
// prunes (with foreground propagation, its default) keeps its
// deletionTimestamp instead of vanishing. No Argo CD API server or UI runs.
//
// Argo CD tracks an object by one Application's annotation, and every
// destination's Applications apply the same canary objects (the one worker
// namespace, kratix-worker-system), so tests on one API server would fight
// over them: the tests here run one at a time, and each deletes its
// Applications (without cascading) when it ends.
//
// The stack comes from scripts/testservers.sh (`with --flux --argocd`, which
// `make test` uses for this package). Without it the tests skip, or fail
// when CI=true. The package has no non-test code.
package argocde2e
