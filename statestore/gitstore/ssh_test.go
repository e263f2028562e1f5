package gitstore_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"

	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/gitstore"
	"github.com/render-dev/render/statestore/storetest"
)

func sshAuth(t *testing.T, keyPEM, knownHosts []byte) *gitssh.PublicKeys {
	t.Helper()
	keys, err := gitssh.NewPublicKeys("git", keyPEM, "")
	if err != nil {
		t.Fatal(err)
	}
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(kh, knownHosts, 0o600); err != nil {
		t.Fatal(err)
	}
	if keys.HostKeyCallback, err = gitssh.NewKnownHostsCallback(kh); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestSSHConformance runs the store suite over ssh://, against a real SSH
// server running git's own upload-pack and receive-pack: once with git's
// defaults, once allowing partial clones as Gitea and GitHub do (an ssh
// session carries one request, so the probe of a store's size and the
// fetch after it each need their own: render in its image once sent the
// second on the probe's session and every fetch from Gitea failed).
func TestSSHConformance(t *testing.T) {
	for _, partial := range []bool{false, true} {
		name := "git-defaults"
		if partial {
			name = "partial-clones"
		}
		t.Run(name, func(t *testing.T) { sshConformance(t, partial) })
	}
}

func sshConformance(t *testing.T, partial bool) {
	srv := testenv.SSHGit(t)
	srv.Partial = partial
	open := func(t *testing.T, url string) statestore.Store {
		s, err := gitstore.New(gitstore.Config{Name: "GitStateStore/ssh", URL: url, Path: "clusters", Auth: sshAuth(t, srv.ClientKeyPEM, srv.KnownHosts)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	storetest.Run(t, storetest.Harness{
		Fresh: func(t *testing.T) func() statestore.Store {
			u := srv.CreateRepo(t, "conformance")
			return func() statestore.Store { return open(t, u) }
		},
		Missing: func(t *testing.T) statestore.Store {
			return open(t, "ssh://git@"+srv.Addr+srv.Root+"/never-created.git")
		},
		Pending: pendingHook, Fold: foldHook,
	})
}

// A key the server does not know is ErrAuth; a host key that does not
// match known_hosts is refused before any credential is offered.
func TestSSHRefusals(t *testing.T) {
	srv := testenv.SSHGit(t)
	url := srv.CreateRepo(t, "refusals")
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	block, _ := ssh.MarshalPrivateKey(other, "")
	s, _ := gitstore.New(gitstore.Config{Name: "GitStateStore/ssh", URL: url, Auth: sshAuth(t, pem.EncodeToMemory(block), srv.KnownHosts)})
	if _, err := s.Records(context.Background()); !errors.Is(err, statestore.ErrAuth) {
		t.Fatalf("unknown client key: err = %v, want ErrAuth", err)
	}
	stranger := testenv.SSHGit(t) // another host key under the same address pattern
	wrongHosts := []byte(strings.Replace(string(stranger.KnownHosts), stranger.Addr[strings.LastIndex(stranger.Addr, ":")+1:], srv.Addr[strings.LastIndex(srv.Addr, ":")+1:], 1))
	s, _ = gitstore.New(gitstore.Config{Name: "GitStateStore/ssh", URL: url, Auth: sshAuth(t, srv.ClientKeyPEM, wrongHosts)})
	_, err := s.Records(context.Background())
	if err == nil || !strings.Contains(err.Error(), "key") {
		t.Fatalf("mismatched host key: err = %v, want a host key error", err)
	}
}
