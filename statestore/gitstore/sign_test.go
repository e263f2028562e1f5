package gitstore_test

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/gitstore"
)

func bareRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", "-b", "main", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	return dir
}

func signedStore(t *testing.T, url string, s gitstore.Signer) *gitstore.Store {
	t.Helper()
	st, err := gitstore.New(gitstore.Config{Name: "GitStateStore/signed", URL: url, Path: "clusters",
		AuthorName: "render", AuthorEmail: "render@example.com", Signer: s})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func allowedSigners(t *testing.T, lines ...string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "allowed_signers")
	if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSSHSignedCommitsVerify: commits signed with ssh-keygen's keys, each
// type, encrypted or not, are accepted by `git verify-commit` with
// gpg.format=ssh and an allowed-signers file, and refused with a file
// naming another key.
func TestSSHSignedCommitsVerify(t *testing.T) {
	for _, tc := range []struct{ typ, pass string }{{"ed25519", ""}, {"ecdsa", ""}, {"rsa", ""}, {"ed25519", "s3cret pass"}} {
		t.Run(tc.typ+map[bool]string{true: "-encrypted"}[tc.pass != ""], func(t *testing.T) {
			key, line := testenv.SSHSigningKey(t, tc.typ, tc.pass, "render@example.com")
			signer, err := gitstore.NewSigner(gitstore.FormatSSH, key, []byte(tc.pass))
			if err != nil {
				t.Fatal(err)
			}
			repo := bareRepo(t)
			st := signedStore(t, "file://"+repo, signer)
			res, err := st.Apply(context.Background(), groupUpdate("w/a", map[string]string{"d1/a/x.yaml": "x\n"}))
			if err != nil || !res.Updated {
				t.Fatalf("apply: %+v %v", res, err)
			}
			out := testenv.VerifyCommit(t, repo, res.Revision, nil, "gpg.format=ssh", "gpg.ssh.allowedSignersFile="+allowedSigners(t, line))
			if !strings.Contains(out, `Good "git" signature for render@example.com`) {
				t.Errorf("verify-commit output: %s", out)
			}
			_, other := testenv.SSHSigningKey(t, "ed25519", "", "render@example.com")
			cmd := exec.Command("git", "-C", repo, "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+allowedSigners(t, other), "verify-commit", res.Revision)
			if out, err := cmd.CombinedOutput(); err == nil {
				t.Errorf("verify-commit accepted the signature with another key allowed:\n%s", out)
			}
		})
	}
}

// TestOpenPGPSignedCommitsVerify: commits signed with gpg's own keys
// (ed25519 and rsa, encrypted or not) verify with git verify-commit, the
// public key imported into a GNUPGHOME.
func TestOpenPGPSignedCommitsVerify(t *testing.T) {
	for _, tc := range []struct{ algo, pass string }{{"ed25519", ""}, {"rsa3072", "gpg pass"}} {
		t.Run(tc.algo, func(t *testing.T) {
			key, home := testenv.OpenPGPKey(t, tc.algo, tc.pass, "render <render@example.com>")
			signer, err := gitstore.NewSigner(gitstore.FormatOpenPGP, key, []byte(tc.pass))
			if err != nil {
				t.Fatal(err)
			}
			repo := bareRepo(t)
			st := signedStore(t, "file://"+repo, signer)
			res, err := st.Apply(context.Background(), groupUpdate("w/a", map[string]string{"d1/a/x.yaml": "x\n"}))
			if err != nil || !res.Updated {
				t.Fatalf("apply: %+v %v", res, err)
			}
			out := testenv.VerifyCommit(t, repo, res.Revision, []string{"GNUPGHOME=" + home})
			if !strings.Contains(out, `Good signature from "render <render@example.com>"`) {
				t.Errorf("verify-commit output: %s", out)
			}
		})
	}
}

type failingSigner struct{}

func (failingSigner) Sign(io.Reader) ([]byte, error) {
	return nil, errors.New("the signing device is gone")
}

// TestSigningFailurePushesNothing: when the signer fails, Apply fails
// naming it, and the branch does not move.
func TestSigningFailurePushesNothing(t *testing.T) {
	repo := bareRepo(t)
	ctx := context.Background()
	plain := signedStore(t, "file://"+repo, nil)
	if _, err := plain.Apply(ctx, groupUpdate("w/seed", map[string]string{"d1/seed/a.yaml": "a\n"})); err != nil {
		t.Fatal(err)
	}
	tip := func() plumbing.Hash {
		r, err := git.PlainOpen(repo)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := r.Reference(plumbing.NewBranchReferenceName("main"), true)
		if err != nil {
			t.Fatal(err)
		}
		return ref.Hash()
	}
	before := tip()
	st := signedStore(t, "file://"+repo, failingSigner{})
	_, err := st.Apply(ctx, groupUpdate("w/a", map[string]string{"d1/a/x.yaml": "x\n"}))
	if err == nil || !strings.Contains(err.Error(), "sign commit: the signing device is gone") {
		t.Fatalf("apply with a failing signer: %v", err)
	}
	if tip() != before {
		t.Fatal("the branch moved although signing failed")
	}
}

// TestBadSigningKeys: keys that cannot sign are refused with a message
// that never quotes the key.
func TestBadSigningKeys(t *testing.T) {
	sshKey, _ := testenv.SSHSigningKey(t, "ed25519", "right", "x@example.com")
	for _, tc := range []struct {
		format, key, pass, want string
	}{
		{"ssh", "-----BEGIN OPENSSH PRIVATE KEY-----\nbm90IGEga2V5\n-----END OPENSSH PRIVATE KEY-----\n", "", "not an SSH private key"},
		{"ssh", string(sshKey), "", "the SSH key is encrypted: add its passphrase as signingKeyPassphrase"},
		{"ssh", string(sshKey), "wrong", "the SSH key's passphrase is wrong"},
		{"openpgp", string(sshKey), "", "not an armored OpenPGP key"},
		{"x509", "whatever", "", `signing format "x509" is unknown: use ssh or openpgp`},
	} {
		_, err := gitstore.NewSigner(tc.format, []byte(tc.key), []byte(tc.pass))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s key: %v, want %q", tc.format, err, tc.want)
		}
		for _, l := range strings.Split(tc.key, "\n") {
			if err != nil && len(l) > 8 && !strings.HasPrefix(l, "-----") && strings.Contains(err.Error(), l) {
				t.Errorf("the error quotes the key: %v", err)
			}
		}
	}
}

// TestGroupCommitsAreSigned: the commits a leader folds for other writers
// (group commit, against a real Gitea) are signed with its key too, and
// keep their owner's message body and author.
func TestGroupCommitsAreSigned(t *testing.T) {
	g := testenv.Gitea(t)
	key, line := testenv.SSHSigningKey(t, "ed25519", "", "render@example.com")
	signer, err := gitstore.NewSigner(gitstore.FormatSSH, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	url := g.CreateRepo(t, "group-signed")
	ctx := context.Background()
	open := func(s gitstore.Signer) *gitstore.Store {
		st, err := gitstore.New(gitstore.Config{Name: "GitStateStore/gitea", URL: url, Path: "clusters", Auth: giteaAuth(g), Signer: s})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	if _, err := open(signer).Apply(ctx, groupUpdate("w/seed", map[string]string{"d1/seed/a.yaml": "seed\n"})); err != nil {
		t.Fatal(err)
	}
	dead := groupUpdate("w/dead", map[string]string{"d1/dead/a.yaml": "dead\n"})
	dead.Message.Body = "requested by Ada"
	dead.Author = &statestore.Author{Name: "Ada Lovelace", Email: "ada@example.com"}
	if err := gitstore.PublishRequest(ctx, open(signer), dead); err != nil {
		t.Fatal(err)
	}
	if _, err := open(signer).Apply(ctx, groupUpdate("w/live", map[string]string{"d1/live/a.yaml": "live\n"})); err != nil {
		t.Fatal(err)
	}
	// A copy of the branch on disk, for the git CLI.
	dir := filepath.Join(t.TempDir(), "copy.git")
	if _, err := git.PlainClone(dir, true, &git.CloneOptions{URL: url, Auth: giteaAuth(g), ReferenceName: plumbing.NewBranchReferenceName("main"), SingleBranch: true}); err != nil {
		t.Fatalf("clone: %v", err)
	}
	allowed := allowedSigners(t, line)
	log := branchLog(t, g, url)
	var subjects []string
	for _, c := range log {
		subjects = append(subjects, strings.SplitN(c.Message, "\n", 2)[0])
		testenv.VerifyCommit(t, dir, c.Hash.String(), nil, "gpg.format=ssh", "gpg.ssh.allowedSignersFile="+allowed)
	}
	if strings.Join(subjects, ",") != "render: w/dead,render: w/live,render: w/seed" {
		t.Fatalf("branch log = %q: the dead writer's update was not folded", subjects)
	}
	// The folded commit keeps its owner's body and author, and names the
	// request it was made of (Render-Request, which a carried writer
	// looks for); render commits it.
	folded := regexp.MustCompile(`^render: w/dead\n\nrequested by Ada\n\nRender-Workload: w/dead\nRender-Request: [0-9a-f]{40}\n$`)
	if c := log[0]; !folded.MatchString(c.Message) || c.Author.Email != "ada@example.com" || c.Committer.Email == "ada@example.com" {
		t.Errorf("folded commit: %q by %s, committed by %s", c.Message, c.Author.Email, c.Committer.Email)
	}
}

// TestSigningKeyCostIsBounded: a key whose passphrase derivation asks for
// too much memory or time is refused before anything is derived (an
// Argon2 memory of 2^31 KiB crashed render with an out-of-memory error; 255
// passes over 64 MiB took 20 s, 257 bcrypt rounds 5 s), with a message that
// never quotes the key; keys within the bounds still sign.
func TestSigningKeyCostIsBounded(t *testing.T) {
	ok := testenv.OpenPGPArgon2Key(t, "pw", 1, 6)
	if _, err := gitstore.NewSigner(gitstore.FormatOpenPGP, ok, []byte("pw")); err != nil {
		t.Fatalf("an Argon2 key within the bounds: %v", err)
	}
	if _, err := gitstore.NewSigner(gitstore.FormatOpenPGP, ok, []byte("wrong")); err == nil || !strings.Contains(err.Error(), "passphrase is wrong") {
		t.Fatalf("a wrong passphrase: %v", err)
	}
	sshKey, _ := testenv.SSHSigningKey(t, "ed25519", "right", "x@example.com")
	if _, err := gitstore.NewSigner(gitstore.FormatSSH, sshKey, []byte("right")); err != nil {
		t.Fatalf("an SSH key of ssh-keygen's 16 rounds: %v", err)
	}
	for _, tc := range []struct {
		name, format string
		key          []byte
		want         string
	}{
		{"argon2 memory", "openpgp", testenv.OpenPGPArgon2Key(t, "pw", 1, 31), "the OpenPGP key's passphrase derivation (Argon2) asks for 2 TiB of memory; render allows at most 256 MiB"},
		{"argon2 memory just over", "openpgp", testenv.OpenPGPArgon2Key(t, "pw", 1, 19), "asks for 512 MiB of memory; render allows at most 256 MiB"},
		{"argon2 passes", "openpgp", testenv.OpenPGPArgon2Key(t, "pw", 255, 16), "the OpenPGP key's passphrase derivations ask for more work than render allows"},
		{"bcrypt rounds", "ssh", testenv.WithBcryptRounds(t, sshKey, 1<<32-1), "the SSH key's passphrase derivation (bcrypt) asks for 4294967295 rounds; render allows at most 256"},
		{"bcrypt rounds just over", "ssh", testenv.WithBcryptRounds(t, sshKey, 257), "asks for 257 rounds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pass := "pw"
			if tc.format == "ssh" {
				pass = "right"
			}
			_, err := gitstore.NewSigner(tc.format, tc.key, []byte(pass))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			for _, l := range strings.Split(string(tc.key), "\n") {
				if len(l) > 8 && !strings.HasPrefix(l, "-----") && strings.Contains(err.Error(), l) {
					t.Errorf("the error quotes the key: %v", err)
				}
			}
		})
	}
}
