package cli_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

func indent(s, pad string) string {
	return pad + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+pad)
}

// A GitStateStore with authMethod ssh takes its key and known hosts from a
// Secret and pushes over ssh:// to a real SSH server; a secret without
// knownHosts is bad input.
func TestRenderOverSSH(t *testing.T) {
	srv := testenv.SSHGit(t)
	url := srv.CreateRepo(t, "cli")
	w := newWorld(t)
	store := fmt.Sprintf("apiVersion: platform.kratix.io/v1alpha1\nkind: GitStateStore\nmetadata:\n  name: ssh\nspec:\n  url: %s\n  branch: main\n  path: clusters\n  authMethod: ssh\n  secretRef:\n    name: git-ssh\n", url)
	secret := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: git-ssh\nstringData:\n  sshPrivateKey: |\n%s\n  knownHosts: |\n%s\n", indent(string(srv.ClientKeyPEM), "    "), indent(string(srv.KnownHosts), "    "))
	w.file("platform/ssh.yaml", docs(store, secret))
	w.file("platform/destinations.yaml", dest("edge", nil, "store=ssh"))
	wf := w.workflow("wf").setOutput(map[string]string{"db.yaml": objNamed("ConfigMap", "db")})
	r := wf.mustRun(0, resourceEnv("pg", "team", "orders", "configure"))
	if !strings.Contains(r.out, "GitStateStore/ssh") || !strings.Contains(r.out, "wrote") {
		t.Fatalf("report: %s", r.out)
	}
	if strings.Contains(r.out+r.errout, "PRIVATE KEY") {
		t.Fatal("the private key was printed")
	}
	noHosts := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: git-ssh\nstringData:\n  sshPrivateKey: |\n%s\n", indent(string(srv.ClientKeyPEM), "    "))
	w.file("platform/ssh.yaml", docs(store, noHosts))
	bad := wf.run(resourceEnv("pg", "team", "orders", "configure"))
	if bad.code != 2 || !strings.Contains(bad.errout, `no key "knownHosts"`) || strings.Contains(bad.errout, "PRIVATE KEY") {
		t.Fatalf("missing knownHosts: %s", bad)
	}
}
