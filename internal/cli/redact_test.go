package cli_test

import (
	"strings"
	"testing"
)

// Redaction is by value: a secret value that reaches a message by any
// road (here an output file named like a loaded password, in a bad-input
// message, and a label in the dry-run report) is masked in everything
// printed, text and JSON, logs included.
func TestSecretValuesAreMaskedWherever(t *testing.T) {
	const password = "hunter2-by-value-Q7"
	w := newWorld(t)
	w.file("platform/secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: unused-creds\nstringData:\n  password: "+password+"\n")
	w.file("platform/destinations.yaml", dest("dev", map[string]string{"env": password}))
	wf := w.workflow("wf").setOutput(map[string]string{password + ".yaml": "kind: [\n"})
	r := wf.run(promiseEnv("p", "pipe"), "--log-level", "debug")
	if r.code != 2 {
		t.Fatalf("want exit 2, got %s", r)
	}
	if strings.Contains(r.out+r.errout, password) || !strings.Contains(r.errout, "[redacted].yaml") {
		t.Errorf("the password was not masked:\n%s", r)
	}
	wf.setOutput(map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, namespace: x}\n"})
	for _, format := range []string{"text", "json"} {
		r = wf.run(promiseEnv("p", "pipe"), "--dry-run", "--explain", "-o", format, "--log-format", format, "--log-level", "debug")
		if r.code != 0 {
			t.Fatalf("want exit 0, got %s", r)
		}
		if strings.Contains(r.out+r.errout, password) {
			t.Errorf("-o %s printed the password:\n%s", format, r)
		}
	}
}

// fluxe2ePlatform is a small set-up with one name for the bot everywhere:
// the Gitea user and owner of the repository, and the S3 access key ID
// and bucket, are all fluxe2e. Another Secret holds a token spelled like a
// name the printed documents hold.
const fluxe2ePlatform = `apiVersion: platform.kratix.io/v1alpha1
kind: GitStateStore
metadata: {name: gitea}
spec:
  url: http://127.0.0.1:3000/fluxe2e/state.git
  branch: main
  path: clusters
  authMethod: basicAuth
  secretRef: {name: gitea-creds}
---
apiVersion: v1
kind: Secret
metadata: {name: gitea-creds}
stringData: {username: fluxe2e, password: fluxe2e-gitea-pw-7}
---
apiVersion: platform.kratix.io/v1alpha1
kind: BucketStateStore
metadata: {name: minio}
spec:
  endpoint: 127.0.0.1:9000
  bucketName: fluxe2e
  insecure: true
  secretRef: {name: minio-creds}
---
apiVersion: v1
kind: Secret
metadata: {name: minio-creds}
stringData: {accessKeyID: fluxe2e, secretAccessKey: fluxe2e-minio-secret-9}
---
apiVersion: v1
kind: Secret
metadata: {name: notify}
stringData: {token: bot-dev-dependencies}
---
apiVersion: platform.kratix.io/v1alpha1
kind: Destination
metadata: {name: bot-dev}
spec:
  stateStoreRef: {kind: GitStateStore, name: gitea}
`

// What render bootstrap prints is never altered by redaction: it names
// Secrets and holds none, so it is printed byte for byte, whatever the
// secret values loaded happen to spell.
func TestBootstrapIsPrintedExactly(t *testing.T) {
	w := newWorld(t)
	w.file("platform/store.yaml", fluxe2ePlatform)
	r := run(t, nil, "bootstrap", "flux", "bot-dev", "--platform", w.platform)
	want := `# Flux on the worker of destination bot-dev: GitRepository gitea, then bot-dev-dependencies, then bot-dev-resources.
# Create Secret gitea-creds in namespace flux-system on the worker first, with keys username and password (a read-only credential).
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata:
  name: gitea
  namespace: flux-system
spec:
  interval: 1m
  url: http://127.0.0.1:3000/fluxe2e/state.git
  ref:
    branch: main
  secretRef:
    name: gitea-creds
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: bot-dev-dependencies
  namespace: flux-system
spec:
  interval: 1m
  sourceRef:
    kind: GitRepository
    name: gitea
  path: ./clusters/bot-dev/dependencies
  prune: true
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: bot-dev-resources
  namespace: flux-system
spec:
  interval: 1m
  dependsOn:
    - name: bot-dev-dependencies
  sourceRef:
    kind: GitRepository
    name: gitea
  path: ./clusters/bot-dev/resources
  prune: true
`
	if r.code != 0 || r.out != want {
		t.Errorf("render bootstrap flux bot-dev: exit %d, printed:\n%s\nwant:\n%s", r.code, r.out, want)
	}
}

// Messages mask the secret fields (a password, a secret access key, a
// token) and keep the identifiers that also name things (a user name, an
// access key ID): here output files named like each, in a bad-input
// message.
func TestMessagesMaskSecretsNotIdentifiers(t *testing.T) {
	w := newWorld(t)
	w.file("platform/creds.yaml", fluxe2ePlatform)
	for _, name := range []string{"fluxe2e", "fluxe2e-gitea-pw-7", "fluxe2e-minio-secret-9"} {
		wf := w.workflow(name).setOutput(map[string]string{name + ".yaml": "kind: [\n"})
		r := wf.run(promiseEnv("p", "pipe"))
		if r.code != 2 {
			t.Fatalf("%s: want exit 2, got %s", name, r)
		}
		secret := name != "fluxe2e"
		switch {
		case secret && (strings.Contains(r.out+r.errout, name) || !strings.Contains(r.errout, "[redacted].yaml")):
			t.Errorf("the secret %s was not masked:\n%s", name, r)
		case !secret && (!strings.Contains(r.errout, name+".yaml") || strings.Contains(r.errout, "[redacted]")):
			t.Errorf("the identifier %s was masked:\n%s", name, r)
		}
	}
}
