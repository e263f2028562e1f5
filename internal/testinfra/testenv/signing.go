package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// RequireTool skips the test when the command is not installed (fails it
// when CI=true).
func RequireTool(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		SkipOrFail(t, name+" is not installed (apt-get install "+map[string]string{"ssh-keygen": "openssh-client", "gpg": "gnupg"}[name]+")")
	}
}

// SSHSigningKey makes an SSH key of the given type (ed25519, ecdsa, rsa)
// with ssh-keygen, encrypted with passphrase when it is not empty. It
// returns the private key file's content and the allowed-signers line
// (for gpg.ssh.allowedSignersFile) naming principal.
func SSHSigningKey(t testing.TB, typ, passphrase, principal string) (private []byte, allowedSigner string) {
	t.Helper()
	RequireTool(t, "ssh-keygen")
	f := filepath.Join(t.TempDir(), "key")
	run(t, nil, "ssh-keygen", "-q", "-t", typ, "-N", passphrase, "-C", principal, "-f", f)
	private, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(f + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(pub))
	return private, principal + ` namespaces="git" ` + fields[0] + " " + fields[1]
}

// OpenPGPKey makes an OpenPGP signing key with gpg in a GNUPGHOME of its
// own (its agent stopped when the test ends), encrypted with passphrase
// when it is not empty. It returns the armored secret key and the
// GNUPGHOME, which holds the public key for verification.
func OpenPGPKey(t testing.TB, algo, passphrase, uid string) (armoredSecret []byte, gnupgHome string) {
	t.Helper()
	RequireTool(t, "gpg")
	home, err := os.MkdirTemp("", "gpg-") // short: the agent's socket path is limited
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	env := []string{"GNUPGHOME=" + home}
	t.Cleanup(func() {
		cmd := exec.Command("gpgconf", "--kill", "all")
		cmd.Env = append(os.Environ(), env...)
		_ = cmd.Run()
		os.RemoveAll(home)
	})
	run(t, env, "gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", passphrase, "--quick-gen-key", uid, algo, "sign", "never")
	out := run(t, env, "gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", passphrase, "--armor", "--export-secret-keys", uid)
	return out, home
}

// VerifyCommit runs `git verify-commit` on rev in the repository dir, with
// extra `-c` settings and environment, and returns its output; it fails
// the test when git does not accept the signature.
func VerifyCommit(t testing.TB, dir, rev string, env []string, config ...string) string {
	t.Helper()
	args := []string{"-C", dir}
	for _, c := range config {
		args = append(args, "-c", c)
	}
	args = append(args, "verify-commit", "-v", rev)
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git verify-commit %s: %v\n%s", rev, err, out)
	}
	return string(out)
}

func run(t testing.TB, env []string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("%s: %v\n%s", name, err, stderr)
	}
	return out
}
