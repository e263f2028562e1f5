package testenv

import (
	"os"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// MinIOServer is a running MinIO test server (plain HTTP on loopback).
type MinIOServer struct {
	endpoint  string
	accessKey string
	secretKey string
	ctl       serverControl
}

// MinIO returns the shared MinIO test server described by the
// RENDER_TEST_MINIO_* variables; it skips the test (fails it when CI=true) if
// they are unset.
func MinIO(t testing.TB) *MinIOServer {
	t.Helper()
	requireEnv(t, "MinIO", minioVars...)
	return newMinIO(os.Getenv)
}

// PrivateMinIO starts a MinIO server used only by this test (fresh data, own
// port), stopped and removed when the test ends. Use it for tests that Stop
// the server. It skips/fails like MinIO when the test servers are not set up.
func PrivateMinIO(t testing.TB) *MinIOServer {
	t.Helper()
	vars := startPrivate(t, "minio", "MinIO", minioVars...)
	return newMinIO(func(k string) string { return vars[k] })
}

var minioVars = []string{EnvMinIOEndpoint, EnvMinIOAccessKey, EnvMinIOSecretKey, EnvMinIOPIDFile}

func newMinIO(get func(string) string) *MinIOServer {
	return &MinIOServer{
		endpoint:  get(EnvMinIOEndpoint),
		accessKey: get(EnvMinIOAccessKey),
		secretKey: get(EnvMinIOSecretKey),
		ctl:       newServerControl("minio", get(EnvServersDir), get(EnvMinIOPIDFile)),
	}
}

// Endpoint returns host:port, e.g. "127.0.0.1:34567" (use without TLS).
func (m *MinIOServer) Endpoint() string { return m.endpoint }

// URL returns "http://" + Endpoint().
func (m *MinIOServer) URL() string { return "http://" + m.endpoint }

// AccessKey returns the root access key.
func (m *MinIOServer) AccessKey() string { return m.accessKey }

// SecretKey returns the root secret key.
func (m *MinIOServer) SecretKey() string { return m.secretKey }

// Region is the region the test server reports.
const Region = "us-east-1"

// Client returns a minio-go client using the root credentials.
func (m *MinIOServer) Client(t testing.TB) *minio.Client {
	t.Helper()
	c, err := minio.New(m.endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(m.accessKey, m.secretKey, ""),
		Secure: false,
		Region: Region,
	})
	if err != nil {
		t.Fatalf("testenv: minio client: %v", err)
	}
	return c
}

// CreateBucket creates a bucket named UniqueName(name) and returns its name.
func (m *MinIOServer) CreateBucket(t testing.TB, name string) string {
	t.Helper()
	bucket := UniqueName(name)
	if err := m.Client(t).MakeBucket(t.Context(), bucket, minio.MakeBucketOptions{Region: Region}); err != nil {
		t.Fatalf("testenv: minio make bucket %s: %v", bucket, err)
	}
	return bucket
}

// Stop stops the MinIO server (SIGTERM, then SIGKILL) keeping its data and
// ports. If the test does not call Start, the server is restarted when the
// test ends.
func (m *MinIOServer) Stop(t testing.TB) { t.Helper(); m.ctl.stop(t) }

// Start restarts a server stopped by Stop on the same ports with the same
// data and waits until it is healthy. It is a no-op if the server is running.
func (m *MinIOServer) Start(t testing.TB) { t.Helper(); m.ctl.start(t) }

// Restart stops the server, waits down and starts it again (same ports and
// data), returning what failed instead of failing the test: unlike Stop
// and Start it may be called from any goroutine. Use it on a PrivateMinIO.
func (m *MinIOServer) Restart(down time.Duration) error { return m.ctl.restart(down) }

// RestartWith is Restart with the wait while the server is down given as
// a function (one that waits on a simulation's clock).
func (m *MinIOServer) RestartWith(down func()) error { return m.ctl.restartWith(down) }
