// Package s3store is the S3 state store backend, written with minio-go. It
// works with AWS S3, MinIO and other S3-compatible servers that honour
// conditional writes (If-Match and If-None-Match on PUT).
//
// # Layout
//
// Everything lives under Config.Path inside the bucket, exactly as in the git
// backend: destination folders with the workloads' files, and render's own
// folder .render/ with one record per workload (.render/workloads/<key>.json)
// and the parts of aggregated files (.render/aggregate/...). Ownership,
// pruning, shared files and aggregation are decided by statestore.PlanUpdate;
// this package only provides the snapshot it plans against and publishes the
// operations it returns.
//
// # Reading
//
// Nothing is listed in full. A snapshot is lazy: asked whether a file
// exists or what it holds, it lists the folder the file is in, delimited
// (sub-folders are not descended), starting just before the file's name and
// stopping at the first name past the last one it was asked about in that
// folder; asked for a folder's files (List), it lists that folder
// recursively. What a listing showed is kept for the snapshot's lifetime.
// Apply first looks up, all at once and in parallel, every path the planner
// will ask about (the record, the files, shared files, aggregated files and
// their parts, claims, markers, then the files the record owned), grouped
// by folder. So a render costs requests in proportion to the folders it
// touches, never to the objects in the bucket or in a destination: one
// request per folder, unless more than 1,000 names of other workloads lie
// between two of the render's own in one folder, which render's own layouts
// never do. Store.Records still lists every record (one request per 1,000)
// and reads each (one GET per workload): it is for tools that move
// workloads (drain) and tests, not for renders.
//
// Whether a file already holds the wanted content is decided from the
// listing alone: the ETag of a single-part object is the MD5 of its
// content, so Compare does not read files. render always uploads with a
// single-part PUT (multipart disabled), so its own objects always compare
// this way. An object uploaded by someone else as a multipart upload has an
// ETag of the form "<hex>-<parts>", which is not an MD5 of the content:
// Compare then answers "changed" when the size differs and otherwise reads
// the object (one GET) and compares the bytes. Such an object is therefore
// never re-uploaded when its content is already right; it costs one GET per
// render while it stays multipart. (A stored digest in user metadata would
// not help: listings do not return metadata.) Buckets whose single-part
// ETags are not the MD5 of the content (AWS SSE-KMS or SSE-C encryption) are
// not supported: every render would re-upload every file.
//
// The records and aggregate parts the planner reads are fetched with
// If-Match on the listed ETag, so a plan is made from exactly the listed
// versions or not at all (a record is compared by content, which the
// planner has always read already).
//
// Requests per Apply of a workload whose files share one folder per
// destination (Kratix's nested layout), whatever the size of the bucket:
//   - unchanged: 1 LIST per folder looked at (the record's, the files',
//     each claim's, each marker's, each canary's, each placement-index
//     entry's, and .render/ for the index's marker), 1 GET (the record)
//     and 1 GET per destination (is the workload's marker current?); no
//     PUT, no DELETE;
//   - changed: the same LISTs, 1 GET (the record), 1 PUT per added or
//     changed file, 1 DeleteObjects request per 1,000 deleted files, 1 PUT
//     for the record (the commit, always) and 1 PUT per changed
//     destination's marker;
//   - a workload's first render under this version (or ever) also deletes
//     the old per-destination markers of its destinations: 1 DeleteObjects;
//   - the first write into a store without the placement index migrates it
//     (see statestore's index): it lists and reads every record, once;
//   - with an empty Config.Region, one more request (the bucket's
//     location) the first time a Store talks to the bucket.
//
// Snapshot checks that the bucket exists (1 request) and lists nothing else
// until asked. Records costs 1 LIST per 1,000 records and 1 GET per record.
//
// # Load summaries
//
// The spread strategy weighs the load of every candidate destination: the
// resource entries of the placement index below
// .render/placed/<destination>/resource/ (see statestore's index.go).
// Counting them by listing costs a request per 1,000 entries and, on the
// server, time in proportion to the entries (about 10 s for 100,000 on a
// 2-core MinIO). So each destination also has a load summary,
// .render/load/<destination>.json: its resource entries by name, with
// their flavour folder (about 30 bytes each), and the changes under way.
// A render reads one summary per candidate (one GET each, in parallel),
// whatever the number of workloads.
//
// There is no lock between workloads on S3 (each record is its own lock),
// so a summary is not a counter: a counter incremented beside a commit
// drifts when a writer dies between the two, and concurrent increments
// need the summary to be the only source of truth. Instead it is kept
// exact by a two-phase protocol built on conditional writes of the
// summary (If-Match, retried on conflict):
//
//  1. announce: before writing any index entry, a writer whose plan
//     changes the workload's resource entries on a destination (places,
//     moves, re-flavours or removes it) adds to that destination's
//     summary a pending change, under a random nonce of its Apply: the
//     workload and every entry name it may add or remove there (the
//     record's before and after). A missing summary is created from one
//     listing of the destination's entries, If-None-Match;
//  2. publish and commit as above;
//  3. settle, whatever the outcome: it reads the summary, then the
//     workload's record as it is now, sets the announced names from that
//     record, drops its own pending change, and writes the summary
//     conditionally. When the summary is still the version its
//     announcement wrote and it committed, it writes at once from the
//     record it committed: any later commit that changes those entries
//     announces first, which would have changed the summary.
//
// A reader counts a summary's entries, except the names of pending
// changes, which it decides from their workloads' records (one GET per
// workload with a change under way). The count is right at every moment:
// a name is pending from before its entry can change until after a fold
// that read the record after the change; a fold that read an older
// record loses its conditional write to the announcement or to the fold
// of the writer that changed it. A writer that dies after announcing
// leaves its change pending, which costs readers that one GET and nothing
// else; only the Apply that made an announcement settles it. Renders of
// different workloads on one destination contend only on its summary,
// and only renders that place, move or remove a resource there (an
// unchanged render does not touch it); each costs two writes to it (three
// requests: a GET and two PUTs, plus a listing the first time).
//
// Stores written before summaries, and destinations with none, are
// counted from a listing of their entries, and the next render that
// writes creates the summaries of every destination it listed, each
// If-None-Match: a listing older than that write is still exact, since a
// writer that keeps summaries creates one before changing any entry. A
// summary in a format this render does not know is not changed (writes
// that would change it fail, naming it) and readers list the entries
// instead. Renders that predate summaries must not write into a store
// once a newer render has made summaries: their changes to the index
// would not be counted (delete .render/load/ to have them rebuilt).
//
// # Writing, and racing writers
//
// S3 has no transactions. Each workload's record object is its lock: Apply
// lists, plans, then
//
//  1. uploads the workload's new and changed files and aggregate parts,
//     each conditioned on the ETag it had in the listing (If-None-Match: *
//     for a new file, If-Match for a changed one), and shared files (the
//     canaries) with If-None-Match: * (losing that race is fine: somebody
//     else created it first), with at most Config.Concurrency uploads in
//     flight;
//  2. deletes the files the workload no longer wants, and its markers in
//     destinations it no longer writes to, in batches (DeleteObjects);
//  3. rewrites aggregated targets from their parts, conditioned on the ETag
//     they were planned against (a target that becomes empty is deleted and
//     its parts folder listed again, to catch a contributor that arrived
//     meanwhile);
//  4. commits: writes the record conditioned on the ETag the record had when
//     the plan was made. The stored record carries a random "s3Revision"
//     field, so every commit changes the ETag even when the record's
//     content does not (which would otherwise let two writers both "win");
//     a removed workload's record is replaced by a small tombstone object
//     (S3 has no conditional DELETE), which render reads as "no record";
//  5. writes the workload's completeness markers (below).
//
// Any precondition failure in steps 1-4, or an object changing between the
// listing and its read, means another writer got there first: Apply waits a
// jittered backoff, looks again and re-plans against what is there now (the
// planner deletes whatever the fresh record lists that this update does not
// want), up to Config.MaxAttempts times. A writer that has written anything
// always finishes with a successful commit (even when its new plan is
// empty), which fences out every other writer of the same workload that
// planned before it.
//
// Guarantees, and their limits:
//   - Renders of different workloads never conflict on records, so any
//     number of them can write into one bucket and one destination at once
//     and all of them land.
//   - Two renders of the same workload that both return without error leave
//     exactly one of them, whole: the store holds the files of whichever
//     committed last, and no file of the other. Every write of a writer
//     happens before its commit and every other writer's commit is
//     conditioned on the record it planned against, so a writer whose writes
//     landed inside another's plan-to-commit window makes that commit fail.
//   - While two writers race, readers can see a mix (S3 readers see objects
//     one by one in any case). A writer that gives up (retry budget, context
//     cancelled, crash) after uploading can leave the other's state mixed
//     with its own files until the next render of that workload, which
//     repairs it; files it uploaded that no record lists are then left
//     behind.
//   - Two different workloads that both create the same new path at the
//     same moment can both claim it; the git backend would refuse the
//     second with ErrConflict. Sequential renders are refused correctly.
//   - Servers that ignore If-Match / If-None-Match on PUT degrade all of
//     this to "last writer wins".
//
// # Completeness markers
//
// After its commit, a render writes one small JSON object per destination
// it writes to: the workload's marker, at MarkerPath, e.g.
// "clusters/dev/.render/complete/resource/team/pg/orders/configure.json"
// (see Marker). It names each of the workload's files in the destination
// with the ETag it was left with, and the aggregated and shared files the
// workload wants there. A marker is only rewritten when the render changed
// the destination, or when it is missing or no longer describes the files
// as listed (checking that costs one GET per destination on an otherwise
// unchanged render). The destinations holding a workload's markers are
// named in its stored record (the "s3Markers" field, beside "s3Revision"),
// so a render that leaves a destination, or a removal, deletes the marker
// there without listing anything.
//
// Markers are per workload, not per destination, so that no render has to
// list a destination of 1,000 workloads to describe it, and so that
// renders of different workloads never contend for one object: only
// renders of the same workload write the same marker. It is written
// conditionally on the version the render saw; a render that loses that
// race looks at the marker and then at the record, and rewrites the marker
// only while the record is still the one it committed (a later commit
// belongs to a render that writes its own marker after it). A render whose
// objects landed never fails because of markers while its retry deadline
// has not passed.
//
// A reader (VerifyDestination, CheckListing) lists the destination, which a
// Flux Bucket with the destination's prefix does anyway, and reads its
// markers (one GET per workload): the destination is complete when every
// file a marker names is listed with the marker's ETag, every aggregated
// and shared file a marker names is there, and every other object is a
// marker. A file no marker names is a render under way, or one that died
// before its marker (the next render of that workload repairs it). Markers
// live in the destination's .render/ folder, which no workload file may
// use, outside the dependencies/ and resources/ folders that Flux builds,
// and they are JSON, never YAML. Update paths in that folder are refused.
//
// render before this version kept one marker per destination, at
// "<destination>/.render-complete.json", with a digest of the whole
// destination. It is no longer written: the first render of each workload
// under this version (one whose record names no markers) deletes it in its
// destinations, and that name stays reserved for files.
//
// # Failures
//
// Errors are *statestore.StoreError naming the store and its bucket. An
// unreachable endpoint (connection errors, 5xx, throttling) is retried with
// backoff until Config.RetryDeadline and then wraps statestore.ErrUnreachable;
// refused credentials wrap statestore.ErrAuth; a missing bucket wraps
// statestore.ErrNotFound unless Config.CreateBucket is set. Credentials never
// appear in errors.
package s3store

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
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
	// carries no render-wide deadline (statestore.WithRetryDeadline); it
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
	// Writer gives the Store Apply and ApplyAll, through statestore.Write
	// with this package's backend.
	statestore.Writer
	cfg    Config
	prefix string // Config.Path, cleaned, "" for the bucket's root
	client *minio.Client
	owned  *http.Transport // the transport New built, closed by Close
	// located is set once the client knows the bucket's region.
	located bool
	// listed holds the resource index entries of the destinations whose
	// load was counted from a listing, for lack of a load summary: the
	// next Apply that writes creates their summaries from it.
	listedMu sync.Mutex
	listed   map[string]map[string]string
}

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
		cfg.RetryDeadline = statestore.DefaultRetryDeadline
	}
	s := &Store{cfg: cfg}
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
	s.Writer = statestore.Writer{
		Backend: backend{s},
		Policy:  statestore.RetryPolicy{Limit: retryLimit, MaxAttempts: cfg.MaxAttempts, Deadline: cfg.RetryDeadline},
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
			return statestore.InOp("read", err)
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
		return nil, statestore.Wrap(s.String(), "read records", err)
	}
	return recs, nil
}

// Snapshot returns a lazy view of the store: it checks that the bucket
// exists (one request) and lists nothing else until it is asked about a
// path or a folder (see snapshot). Contents are read on demand, each exactly
// in the listed version: a file that changed since its listing fails to
// read with an error wrapping statestore.ErrConflict.
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
		return nil, statestore.Wrap(s.String(), "read", err)
	case !ok && s.cfg.CreateBucket:
		return s.emptySnapshot(ctx), nil
	case !ok:
		return nil, statestore.Wrap(s.String(), "read", fmt.Errorf("bucket %q does not exist at %s: %w", s.cfg.Bucket, s.cfg.Endpoint, errNoBucket))
	}
	return s.newSnapshot(ctx), nil
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
