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
