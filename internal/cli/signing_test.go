package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

// signingPlatform writes a file:// store that signs with format, and the
// Secret "signing" holding key.
func signingPlatform(w *world, format string, key []byte, extra string) {
	indented := "    " + strings.ReplaceAll(strings.TrimRight(string(key), "\n"), "\n", "\n    ")
	w.file("platform/store.yaml", gitStore("default", "file://"+w.repo)+fmt.Sprintf(`  signing:
    format: %s
    secretRef: {name: signing}
---
apiVersion: v1
kind: Secret
metadata: {name: signing}
stringData:
  signingKey: |
%s
%s`, format, indented, extra))
	w.file("platform/destinations.yaml", dest("dev", nil))
}

func TestRenderSignsCommits(t *testing.T) {
	t.Parallel()
	t.Run("ssh", func(t *testing.T) {
		w := newWorld(t)
		key, line := testenv.SSHSigningKey(t, "ed25519", "", "render@example.com")
		signingPlatform(w, "ssh", key, "")
		w.workflow("r1").setOutput(map[string]string{"db.yaml": obj("ConfigMap")}).mustRun(0, resourceEnv("pg", "team", "r1", "configure"))
		allowed := filepath.Join(t.TempDir(), "allowed")
		if err := os.WriteFile(allowed, []byte(line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out := testenv.VerifyCommit(t, w.repo, "main", nil, "gpg.format=ssh", "gpg.ssh.allowedSignersFile="+allowed)
		if !strings.Contains(out, `Good "git" signature`) {
			t.Errorf("verify-commit: %s", out)
		}
	})
	t.Run("openpgp", func(t *testing.T) {
		w := newWorld(t)
		key, home := testenv.OpenPGPKey(t, "ed25519", "pgp pass", "render <render@example.com>")
		signingPlatform(w, "openpgp", key, "  signingKeyPassphrase: pgp pass\n")
		w.workflow("r1").setOutput(map[string]string{"db.yaml": obj("ConfigMap")}).mustRun(0, resourceEnv("pg", "team", "r1", "configure"))
		out := testenv.VerifyCommit(t, w.repo, "main", []string{"GNUPGHOME=" + home})
		if !strings.Contains(out, "Good signature from") {
			t.Errorf("verify-commit: %s", out)
		}
	})
}

func TestSigningBadInput(t *testing.T) {
	key, _ := testenv.SSHSigningKey(t, "ed25519", "", "render@example.com")
	for _, tc := range []struct {
		name, format string
		key          []byte
		want, extra  string
	}{
		{"unknown format", "x509", key, `(GitStateStore default): spec.signing.format "x509" is unknown: use ssh or openpgp`, ""},
		{"a key of the other format", "openpgp", key, "GitStateStore default: spec.signing: secret signing (spec.signing.secretRef) signingKey (format openpgp): not an armored OpenPGP key", ""},
		{"not a key", "ssh", []byte("just some text"), "spec.signing: secret signing (spec.signing.secretRef) signingKey (format ssh): not an SSH private key", ""},
		{"a key asking for 2 TiB to derive", "openpgp", testenv.OpenPGPArgon2Key(t, "pw", 1, 31),
			"GitStateStore default: spec.signing: secret signing (spec.signing.secretRef) signingKey (format openpgp): the OpenPGP key's passphrase derivation (Argon2) asks for 2 TiB of memory; render allows at most 256 MiB", "  signingKeyPassphrase: pw\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			signingPlatform(w, tc.format, tc.key, tc.extra)
			r := w.workflow("r1").setOutput(map[string]string{"db.yaml": obj("ConfigMap")}).mustRun(2, resourceEnv("pg", "team", "r1", "configure"))
			if !strings.Contains(r.errout, tc.want) || !strings.Contains(r.errout, "store.yaml") {
				t.Errorf("stderr lacks %q: %s", tc.want, r)
			}
			for _, l := range strings.Split(string(tc.key), "\n") {
				if len(l) > 8 && !strings.HasPrefix(l, "-----") && strings.Contains(r.out+r.errout, l) {
					t.Fatalf("key material printed: %s", r)
				}
			}
			if branchTip(t, w.repo) != "" {
				t.Error("something was written")
			}
		})
	}
}
