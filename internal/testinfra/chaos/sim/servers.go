package sim

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/minio/minio-go/v7"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/testinfra/chaos"
	"github.com/render-dev/render/internal/testinfra/testenv"
)

// server is one real server of a store kind, kept running for a whole
// campaign and shared by its trials, each in a repository, bucket or
// repository name of its own.
type server interface {
	// newStore makes a fresh store for one trial.
	newStore(name string) (*store, error)
	// restart stops the server, calls down, and starts it again (a
	// trial that draws a restart runs alone on its server).
	restart(down func()) error
}

// store is one trial's store.
type store struct {
	// kind is its platform kind; docs its platform documents (the store,
	// named "chaos", and its Secret).
	kind, docs string
	// read reads what the store holds, from the server directly.
	read func(ctx context.Context) (*chaos.State, error)
	// place leaves foreign state in the store, as someone else would.
	place func(ctx context.Context, s Schedule, f Foreign, p placed) error
	// cleanup removes the store.
	cleanup func()
}

// newServer starts kind's server for a campaign.
func newServer(t testing.TB, kind chaos.Kind) server {
	t.Helper()
	switch kind {
	case chaos.GitHTTP:
		return newGitHTTP(t)
	case chaos.GitSSH:
		return &sshServer{s: testenv.SSHGit(t)}
	case chaos.S3:
		m := testenv.PrivateMinIO(t)
		return &minioServer{m: m, c: m.Client(t)}
	case chaos.OCI:
		return &registryServer{r: testenv.PrivateRegistry(t)}
	}
	t.Fatalf("sim: unknown store kind %q", kind)
	return nil
}

// gitStore is a trial's store in the fresh bare repository dir, which its
// server serves at url (with auth and its Secret's pairs).
func gitStore(dir, url, auth string, secret ...string) (*store, error) {
	if err := gitInit(dir); err != nil {
		return nil, err
	}
	return &store{
		kind:    "GitStateStore",
		docs:    chaos.GitStoreDocs("chaos", url, chaos.StorePath, auth, secret...),
		read:    func(context.Context) (*chaos.State, error) { return chaos.ReadLocalGit(dir, chaos.StorePath) },
		place:   func(_ context.Context, s Schedule, f Foreign, p placed) error { return placeGit(dir, s, f, p) },
		cleanup: func() { os.RemoveAll(dir) },
	}, nil
}

func (s *gitHTTPServer) newStore(name string) (*store, error) {
	dir := filepath.Join(s.root, name+".git")
	st, err := gitStore(dir, "http://"+s.addr+"/"+name+".git", "")
	if err != nil {
		return nil, err
	}
	s.memoMu.Lock()
	s.memo[dir] = &repoMemo{adv: map[string]advertisement{}, fetch: map[string][]byte{}}
	s.memoMu.Unlock()
	remove := st.cleanup
	st.cleanup = func() {
		s.memoMu.Lock()
		delete(s.memo, dir)
		s.memoMu.Unlock()
		remove()
	}
	return st, nil
}

type sshServer struct{ s *testenv.SSHGitServer }

func (s *sshServer) restart(down func()) error { s.s.Stop(); down(); return s.s.Start() }

func (s *sshServer) newStore(name string) (*store, error) {
	dir := filepath.Join(s.s.Root, name+".git")
	return gitStore(dir, "ssh://git@"+s.s.Addr+dir, "ssh",
		"sshPrivateKey", string(s.s.ClientKeyPEM), "knownHosts", strings.TrimSpace(string(s.s.KnownHosts)))
}

type minioServer struct {
	m *testenv.MinIOServer
	c *minio.Client
}

func (s *minioServer) restart(down func()) error { return s.m.RestartWith(down) }

func (s *minioServer) newStore(name string) (*store, error) {
	bucket := "sim-" + name
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: testenv.Region}); err != nil {
		return nil, fmt.Errorf("make bucket %s: %w", bucket, err)
	}
	return &store{
		kind: "BucketStateStore",
		docs: chaos.BucketStoreDocs("chaos", s.m.Endpoint(), bucket, chaos.StorePath, s.m.AccessKey(), s.m.SecretKey()),
		read: func(ctx context.Context) (*chaos.State, error) {
			return chaos.ReadBucket(ctx, s.c, bucket, chaos.StorePath)
		},
		place: func(ctx context.Context, _ Schedule, _ Foreign, p placed) error {
			return placeBucket(ctx, s.c, bucket, p)
		},
		cleanup: func() {},
	}, nil
}

type registryServer struct{ r *testenv.RegistryServer }

func (s *registryServer) restart(down func()) error { return s.r.RestartWith(down) }

func (s *registryServer) newStore(name string) (*store, error) {
	repo := "sim/" + name
	return &store{
		kind: "OCIStateStore",
		docs: chaos.OCIStoreDocs("chaos", s.r.Addr(), repo, s.r.User(), s.r.Password()),
		read: func(ctx context.Context) (*chaos.State, error) {
			return chaos.ReadOCI(ctx, s.r.Addr(), s.r.User(), s.r.Password(), repo)
		},
		cleanup: func() {},
	}, nil
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K { return slices.Sorted(maps.Keys(m)) }
