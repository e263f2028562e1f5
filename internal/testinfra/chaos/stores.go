package chaos

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/render-dev/render/internal/testinfra/testenv"
)

// server is one real server of a store kind, behind a Proxy, shared by the
// trials of a campaign: each trial gets a fresh repository or bucket.
type server interface {
	proxy() *Proxy
	// newStore makes a fresh store for one trial.
	newStore(t testing.TB) target
	// restart stops the server, waits down, and starts it again. It may
	// run on any goroutine.
	restart(down time.Duration) error
	close()
}

// target is one trial's store.
type target struct {
	// kind is the store's platform kind (GitStateStore, ...); docs its
	// platform documents (the store, named "chaos", and its Secret).
	kind, docs string
	// read reads what the store holds, from the server directly.
	read func(ctx context.Context, dests []string) (*State, error)
}

// storePath is the path of git and S3 stores (OCI stores have none).
const storePath = "clusters"

// newServer starts kind's server (a private one: trials restart it) and
// its proxy.
func newServer(t testing.TB, kind Kind) server {
	t.Helper()
	switch kind {
	case GitHTTP:
		g := testenv.PrivateGitea(t)
		u, err := url.Parse(g.URL())
		if err != nil {
			t.Fatal(err)
		}
		return &giteaServer{g: g, p: mustProxy(t, "gitea", u.Host)}
	case GitSSH:
		s := testenv.SSHGit(t)
		return &sshServer{s: s, p: mustProxy(t, "ssh", s.Addr)}
	case S3:
		m := testenv.PrivateMinIO(t)
		return &minioServer{m: m, p: mustProxy(t, "minio", m.Endpoint())}
	case OCI:
		r := testenv.PrivateRegistry(t)
		return &registryServer{r: r, p: mustProxy(t, "registry", r.Addr())}
	}
	t.Fatalf("chaos: unknown store kind %q", kind)
	return nil
}

func mustProxy(t testing.TB, name, upstream string) *Proxy {
	t.Helper()
	p, err := NewProxy(name, upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

type giteaServer struct {
	g *testenv.GiteaServer
	p *Proxy
}

func (s *giteaServer) proxy() *Proxy                    { return s.p }
func (s *giteaServer) restart(down time.Duration) error { return s.g.Restart(down) }
func (s *giteaServer) close()                           { s.p.Close() }

func (s *giteaServer) newStore(t testing.TB) target {
	t.Helper()
	repo := s.g.CreateRepoInfo(t, "chaos")
	u, err := url.Parse(repo.CloneURL)
	if err != nil {
		t.Fatal(err)
	}
	direct := u.String()
	u.Host = s.p.Addr()
	return target{
		kind: "GitStateStore",
		docs: GitStoreDocs("chaos", u.String(), storePath, "basicAuth", "username", s.g.AdminUser(), "password", s.g.AdminToken()),
		read: func(ctx context.Context, _ []string) (*State, error) {
			return readRemoteGit(ctx, direct, s.g.AdminUser(), s.g.AdminToken(), storePath)
		},
	}
}

type sshServer struct {
	s *testenv.SSHGitServer
	p *Proxy
}

func (s *sshServer) proxy() *Proxy { return s.p }
func (s *sshServer) close()        { s.p.Close() }

func (s *sshServer) restart(down time.Duration) error {
	s.s.Stop()
	time.Sleep(down)
	return s.s.Start()
}

func (s *sshServer) newStore(t testing.TB) target {
	t.Helper()
	direct := s.s.CreateRepo(t, "chaos")
	dir := strings.TrimPrefix(direct, "ssh://git@"+s.s.Addr)
	// The server's host key, known under the proxy's address.
	_, key, _ := strings.Cut(strings.TrimSpace(string(s.s.KnownHosts)), " ")
	host, port, _ := strings.Cut(s.p.Addr(), ":")
	known := fmt.Sprintf("[%s]:%s %s", host, port, key)
	return target{
		kind: "GitStateStore",
		docs: GitStoreDocs("chaos", "ssh://git@"+s.p.Addr()+dir, storePath, "ssh", "sshPrivateKey", string(s.s.ClientKeyPEM), "knownHosts", known),
		read: func(context.Context, []string) (*State, error) {
			return readLocalGit(filepath.FromSlash(dir), storePath)
		},
	}
}

type minioServer struct {
	m *testenv.MinIOServer
	p *Proxy
}

func (s *minioServer) proxy() *Proxy                    { return s.p }
func (s *minioServer) restart(down time.Duration) error { return s.m.Restart(down) }
func (s *minioServer) close()                           { s.p.Close() }

func (s *minioServer) newStore(t testing.TB) target {
	t.Helper()
	bucket := s.m.CreateBucket(t, "chaos")
	c := s.m.Client(t)
	return target{
		kind: "BucketStateStore",
		docs: BucketStoreDocs("chaos", s.p.Addr(), bucket, storePath, s.m.AccessKey(), s.m.SecretKey()),
		read: func(ctx context.Context, _ []string) (*State, error) {
			return readBucket(ctx, c, bucket, storePath)
		},
	}
}

type registryServer struct {
	r *testenv.RegistryServer
	p *Proxy
}

func (s *registryServer) proxy() *Proxy                    { return s.p }
func (s *registryServer) restart(down time.Duration) error { return s.r.Restart(down) }
func (s *registryServer) close()                           { s.p.Close() }

func (s *registryServer) newStore(t testing.TB) target {
	t.Helper()
	repo := "chaos/" + testenv.UniqueName("t")
	rd := ociReader{addr: s.r.Addr(), user: s.r.User(), password: s.r.Password(), repo: repo}
	return target{
		kind: "OCIStateStore",
		docs: OCIStoreDocs("chaos", s.p.Addr(), repo, s.r.User(), s.r.Password()),
		read: rd.read,
	}
}
