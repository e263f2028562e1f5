// Package s3store is the S3 state store backend, written with minio-go. It
// works with AWS S3, MinIO and other S3-compatible servers that honour
// conditional writes (If-Match and If-None-Match on PUT).
//
// Everything lives under Config.Path inside the bucket, as in the git
// backend: destination folders with the workloads' files, and render's own
// folder .render/ (records, aggregated files' parts, the placement index,
// load summaries). Writes go through driver.Write, one update at a
// time: each gets a committer whose snapshot is lazy, listing only the
// folders the update touches (a range of the folder a path is in,
// delimited, or a folder recursively when the planner lists it), all looked
// up at once before planning; whether a file holds the wanted bytes is
// decided from the listed ETags. A render's requests grow with the folders
// it touches, never with the bucket.
//
// S3 has no transactions: each workload's record object is its lock. A
// commit first names in the record what it is about to create, change or
// delete (its intent, conditioned on the record's ETag: a write that dies
// leaves a record that says so, and the files it created owned, for the
// workload's next write to finish; the intent carries a short lease its
// writer renews and never acts past, which another write of the workload
// waits for: see lease.go), writes again any file the record does
// not own yet that is listed already with the wanted bytes (never trusting
// a write that did not commit), then uploads claims, files and parts, each
// conditioned on the ETag it was listed with, deletes what the workload no
// longer wants, rebuilds aggregated files, then writes the record
// conditioned on the ETag it was planned against (a random revision in it
// makes every commit move the ETag; a removed workload's record becomes a
// tombstone). A failed
// precondition is a lost race, which driver.Write answers by planning
// again on a fresh listing; a write that has written anything ends only
// with a successful commit of the record, or fails. Last, the workload's
// completeness marker in each destination (MarkerPath) names its files
// with their ETags, so that a reader listing a destination can tell a
// whole render from one under way (VerifyDestination). A load summary per
// destination (.render/load/) counts its placed resources for the spread
// strategy, kept exact by announcing a change before making it and
// settling it after, whatever the outcome, each in an object of the
// write's own, folded into the summary later. The placement index's
// marker is made by a step of its own before a write plans
// (ensureIndexed), never by a plan: writers of different workloads share
// no object whose newest version they need. ApplyAll writes a batch's
// updates side by side, with one announcement in the load summaries for
// all of them.
//
// A bucket's keys are flat, its readers' paths are not: before it writes
// anything, a write refuses a file below a key, or where keys lie below
// it, with a *statestore.BlockedError, from what its listings show and,
// for a file in a folder they showed empty, a look at the folders above
// it (shape.go).
//
// Errors are *statestore.StoreError naming the store and its bucket. An
// unreachable endpoint (connection errors, 5xx, throttling) is retried with
// backoff until Config.RetryDeadline and then wraps statestore.ErrUnreachable;
// refused credentials wrap statestore.ErrAuth; a missing bucket wraps
// statestore.ErrNotFound unless Config.CreateBucket is set. Credentials never
// appear in errors.
//
// docs/design.md, section "S3", gives the layout, the requests a render
// costs, the load summaries' protocol, the order of the writes with the
// guarantees and limits it gives, and the markers.
package s3store

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/driver"
	"github.com/render-dev/render/statestore/wait"
)

// Config describes one S3 state store.
type Config struct {
	// Name identifies the store in messages, e.g. "BucketStateStore/default".
	Name string
	// Endpoint is host:port, with no scheme.
	Endpoint string
	// Bucket holds the store.
	Bucket string
	// Path is the prefix inside the bucket that holds the destinations.
	Path string
	// Region is the bucket's region; empty makes each Store ask the server
	// once (one more request).
	Region string
	// Insecure talks plain HTTP, exactly as Kratix's `insecure: true`.
	Insecure bool
	// AccessKeyID and SecretAccessKey are the static credentials
	// (authMethod accessKey). With neither set and UseIAM false, requests
	// are anonymous.
	AccessKeyID, SecretAccessKey string
	// UseIAM uses the ambient credential chain (authMethod IAM): the
	// AWS_* and MINIO_* environment variables, the AWS credentials file, then
	// the instance, container or EKS identity.
	UseIAM bool
	// CABundle adds trusted roots (PEM) for TLS, which is always verified.
	CABundle []byte
	// CreateBucket creates a missing bucket on the first write instead of
	// failing with ErrNotFound.
	CreateBucket bool
	// Concurrency bounds the uploads in flight (default 16).
	Concurrency int
	// RetryDeadline is the retry budget used when the caller's context
	// carries no render-wide deadline (wait.WithRetryDeadline); it
	// bounds waits for an unreachable endpoint and for busy objects alike.
	RetryDeadline time.Duration
	// MaxAttempts, when positive, also bounds how often an update is
	// re-planned after losing a race to another writer. By default only the
	// retry deadline bounds it.
	MaxAttempts int
	// Transport is the HTTP transport (optional; tests wrap it to count
	// requests). CABundle is applied to it when it is an *http.Transport.
	Transport http.RoundTripper
	// Debug, when set, is told what helps to explain a slow render, such
	// as a prefetch that failed (see statestore.Prefetch).
	Debug func(msg string, args ...any)
}

// Store is an S3 state store. It is safe for one goroutine at a time, like
// the git backend; separate Stores may write one bucket concurrently.
type Store struct {
	// Writer gives the Store Apply and ApplyAll, through driver.Write
	// with this package's backend.
	driver.Writer
	cfg    Config
	prefix string // Config.Path, cleaned, "" for the bucket's root
	client *minio.Client
	owned  *http.Transport // the transport New built, closed by Close
	// located is set once the client knows the bucket's region.
	located bool
	// listed holds the resource index entries of the destinations whose
	// load was counted from a listing, for lack of a load summary: the
	// next Apply that writes creates their summaries from it.
	listed bookkeeping.Listed
	// foldAt and foldEvery replace bookkeeping's defaults for folding the
	// load summaries when set (tests).
	foldAt, foldEvery int
}

// ledgerFoldAt and ledgerFoldEvery are what New sets a Store's foldAt and
// foldEvery to: bookkeeping's defaults, except in this package's tests,
// whose request counts must not depend on a write's random nonce.
var ledgerFoldAt, ledgerFoldEvery int

var _ statestore.Store = (*Store)(nil)

// New opens the store described by cfg. It does not contact the endpoint;
// the first Records, Snapshot or Apply does.
func New(cfg Config) (*Store, error) {
	if cfg.Name == "" {
		cfg.Name = "s3://" + cfg.Endpoint + "/" + cfg.Bucket
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.RetryDeadline <= 0 {
		cfg.RetryDeadline = wait.DefaultRetryDeadline
	}
	s := &Store{cfg: cfg, foldAt: ledgerFoldAt, foldEvery: ledgerFoldEvery}
	fail := func(format string, args ...any) (*Store, error) {
		return nil, &statestore.StoreError{Store: s.String(), Op: "configure", Err: fmt.Errorf(format, args...)}
	}
	switch {
	case cfg.Endpoint == "":
		return fail("no endpoint")
	case strings.Contains(cfg.Endpoint, "://") || strings.ContainsAny(cfg.Endpoint, "/?#@"):
		return fail("endpoint %q must be host:port, without a scheme or a path", cfg.Endpoint)
	}
	if err := s3utils.CheckValidBucketNameStrict(cfg.Bucket); err != nil {
		return fail("bucket %q: %v", cfg.Bucket, err)
	}
	prefix := strings.Trim(cfg.Path, "/")
	if prefix == "." {
		prefix = ""
	}
	if prefix != "" {
		if err := layout.ValidPath(prefix); err != nil {
			return fail("path: %v", err)
		}
	}
	s.prefix = prefix

	var creds *credentials.Credentials
	switch {
	case cfg.UseIAM && (cfg.AccessKeyID != "" || cfg.SecretAccessKey != ""):
		return fail("both IAM and static credentials are configured; choose one")
	case cfg.UseIAM:
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.EnvMinio{},
			&credentials.FileAWSCredentials{},
			&credentials.IAM{},
		})
	case (cfg.AccessKeyID == "") != (cfg.SecretAccessKey == ""):
		return fail("an access key needs both an access key ID and a secret access key")
	default:
		creds = credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, "")
	}

	rt, owned, err := transport(cfg)
	if err != nil {
		return fail("%v", err)
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:     creds,
		Secure:    !cfg.Insecure,
		Region:    cfg.Region,
		Transport: rt,
		// One try per request: retries, with their deadline, are ours.
		MaxRetries: 1,
	})
	if err != nil {
		return fail("%s", s.redact(err.Error()))
	}
	s.client, s.owned = client, owned
	s.Writer = driver.Writer{
		Backend: backend{s: s},
		Policy:  driver.RetryPolicy{Limit: retryLimit, MaxAttempts: cfg.MaxAttempts, Deadline: cfg.RetryDeadline},
	}
	return s, nil
}

func transport(cfg Config) (http.RoundTripper, *http.Transport, error) {
	var t *http.Transport
	switch rt := cfg.Transport.(type) {
	case nil:
		var err error
		if t, err = minio.DefaultTransport(!cfg.Insecure); err != nil {
			return nil, nil, err
		}
	case *http.Transport:
		if len(cfg.CABundle) == 0 {
			return rt, nil, nil
		}
		t = rt.Clone()
	default:
		if len(cfg.CABundle) > 0 {
			return nil, nil, errors.New("a CA bundle cannot be added to a custom transport")
		}
		return rt, nil, nil
	}
	if len(cfg.CABundle) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(cfg.CABundle) {
			return nil, nil, errors.New("the CA bundle holds no PEM certificate")
		}
		if t.TLSClientConfig == nil {
			t.TLSClientConfig = newTLSConfig()
		}
		t.TLSClientConfig.RootCAs = pool
	}
	return t, t, nil
}

// String names the store, its bucket and endpoint, with no credentials.
func (s *Store) String() string {
	where := s.cfg.Bucket
	if s.prefix != "" {
		where += "/" + s.prefix
	}
	return fmt.Sprintf("%s (bucket %s at %s)", s.cfg.Name, where, s.cfg.Endpoint)
}

// Close releases idle connections of the transport New built.
func (s *Store) Close() error {
	if s.owned != nil {
		s.owned.CloseIdleConnections()
	}
	return nil
}

// key is the object key of a path relative to the store.
func (s *Store) key(p string) string {
	if s.prefix == "" {
		return p
	}
	return s.prefix + "/" + p
}

// Records reads every workload record: one listing of the records folder
// and one GET per record, Concurrency of them at a time.
func (s *Store) Records(ctx context.Context) ([]statestore.Record, error) {
	ctx = s.Policy.Context(ctx)
	var recs []statestore.Record
	err := s.Policy.Conflicts(ctx, "the bucket changed underneath", func(int) error {
		snap, err := s.list(ctx, statestore.RecordsDir)
		if err != nil {
			return driver.InOp("read", err)
		}
		var paths []string
		for p := range snap.objs {
			if isRecordPath(p) && !snap.objs[p].tomb {
				paths = append(paths, p)
			}
		}
		if err := snap.prefetch(paths); err != nil {
			return err
		}
		recs, err = statestore.ReadRecords(snap)
		return err
	})
	switch {
	case errors.Is(err, errNoBucket) && s.cfg.CreateBucket:
		return nil, nil
	case err != nil:
		return nil, driver.Wrap(s.String(), "read records", err)
	}
	return recs, nil
}

// Snapshot returns a lazy view of the store: it checks that the bucket
// exists (one request) and lists nothing else until it is asked about a
// path or a folder (see snapshot). Contents are read on demand, each exactly
// in the listed version: a file that changed since its listing fails to
// read with an error wrapping statestore.ErrConflict.
//
// Given back to a write (Update.View), what the snapshot looked up is
// where the write starts: its first attempt plans on those listings (as a
// render plans its writes on the view it read its records from) and lists
// only what they did not cover (see viewOf). Every object the write
// changes is still written conditionally on the version it was planned
// against, so a view that another writer has moved meanwhile costs a
// second attempt, on a fresh listing, and nothing else (docs/design.md,
// "S3", "Reading").
func (s *Store) Snapshot(ctx context.Context) (statestore.Snapshot, error) {
	ctx = s.Policy.Context(ctx)
	var ok bool
	err := s.retry(ctx, func() error {
		var err error
		ok, err = s.client.BucketExists(ctx, s.cfg.Bucket)
		return err
	})
	switch {
	case err != nil:
		return nil, driver.Wrap(s.String(), "read", err)
	case !ok && s.cfg.CreateBucket:
		return s.emptySnapshot(ctx), nil
	case !ok:
		return nil, driver.Wrap(s.String(), "read", fmt.Errorf("bucket %q does not exist at %s: %w", s.cfg.Bucket, s.cfg.Endpoint, errNoBucket))
	}
	return s.newSnapshot(ctx), nil
}

// viewOf returns a copy of what view, a snapshot the caller read this
// Store through (Update.View), looked up, for a write's first attempt; nil
// when view is none, another store's, or of a bucket that did not exist.
func (s *Store) viewOf(ctx context.Context, view statestore.Snapshot) *snapshot {
	v, ok := view.(*snapshot)
	if !ok || v.s != s {
		return nil
	}
	return v.fork(ctx)
}

// locate asks for the bucket's region once, when none is configured, so
// that the parallel listings that follow do not each ask for it.
func (s *Store) locate(ctx context.Context) error {
	if s.cfg.Region != "" || s.located {
		return nil
	}
	err := s.retry(ctx, func() error {
		_, err := s.client.GetBucketLocation(ctx, s.cfg.Bucket)
		return err
	})
	if err == nil {
		s.located = true
	}
	return err
}

// retryLimit caps this backend's backoff between attempts.
const retryLimit = 2 * time.Second
