// Package ocistore keeps a GitOps state store in an OCI registry: every
// destination folder is an artifact that Flux's OCIRepository and Argo CD's
// OCI source pull, published atomically by moving a tag.
//
// The base repository's tag "render-state" names the state: one manifest
// whose tar+gzip layers are the store's folders (each destination folder,
// render's own .render folder with records, index and claims, and "." for
// files at the top), so that one manifest digest is one consistent
// Snapshot; layers are pulled when first looked at and kept by digest.
// Each destination folder d is also published as the artifact
// <repository>/<d>, whose one layer is the very blob of d's state layer, at
// a moving tag (Config.Tag, "latest" by default) and at
// render-<generation>. Its manifest depends on the folder's files alone
// (sorted entries, fixed times, no clock), so the same files always give
// the same digest and an unchanged render pushes nothing.
//
// Writes go through driver.Write (Store embeds driver.Writer; a
// batch is one new state). Registries cannot update a tag conditionally,
// so writers take turns under a lock made of tags, taken with Lamport's
// bakery algorithm (lock.go). A write plans on the state read without the
// lock, and ends there when its plan changes nothing. Otherwise its commit
// takes the lock and reads the state again; when another writer moved it,
// the loop plans again on the state read under the lock, which the write
// keeps holding. Then it pushes the changed layers, moves the state tag
// (the commit point) and the changed destinations' tags, and lets the lock
// go. A writer that died between the two leaves destinations behind the
// state: the next write takes the lock to move them, even when its own plan
// changes nothing (its Result says Updated).
//
// A large layer (render's own folder in a store of 100,000 workloads) is
// spilled to a temporary file as it is read, and a commit that changes it
// packs the changes laid over it into another (layerFiles), so a write's
// memory follows what it reads and changes, not the store.
//
// docs/design.md, section "OCI", has the protocol's details and limits.
package ocistore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/driver"
	"github.com/render-dev/render/statestore/wait"
)

// Media types and annotations of what the store writes.
const (
	// LayerMediaType is every layer's: the OCI tar+gzip layer, which Flux
	// extracts (it takes the first layer of any type unless told
	// otherwise) and Argo CD accepts by default.
	LayerMediaType = ocispec.MediaTypeImageLayerGzip
	// FluxConfigMediaType is the config of a destination artifact, as
	// `flux push artifact` writes it.
	FluxConfigMediaType = "application/vnd.cncf.flux.config.v1+json"
	// StateArtifactType marks the state manifest.
	StateArtifactType = "application/vnd.render.state.v1"
	// StateTag names the state manifest in the base repository.
	StateTag = "render-state"
	// DefaultTag is the moving tag of destination artifacts.
	DefaultTag = "latest"

	annotationGeneration = "dev.render.generation"
	annotationArtifact   = "dev.render.artifact" // on a state layer: its destination manifest's digest
	annotationSubject    = "dev.render.subject"
	annotationBody       = "dev.render.body"
	annotationTrailers   = "dev.render.trailers"
)

// rootFolder holds files at the top of the store, outside every folder.
const rootFolder = "."

// Config says how to reach one OCI state store.
type Config struct {
	// Registry is host[:port].
	Registry string
	// Repository is the base repository; destination d is published as
	// Repository/d.
	Repository string
	// Tag is the moving tag of every destination artifact (DefaultTag
	// when empty).
	Tag string
	// Insecure speaks plain HTTP.
	Insecure bool
	// Username and Password, or Token (a bearer token), authenticate.
	Username, Password, Token string
	// CA is extra PEM certificates to trust.
	CA []byte
	// Create lets the first write start a store in a repository that
	// holds none; without it a missing store is an error (ErrNotFound), so
	// that a mistyped repository is not silently started.
	Create bool
	// Source is org.opencontainers.image.source on destination artifacts
	// (default oci://<registry>/<repository>).
	Source string
	// Author is added to the state's provenance.
	Author string
	// Name names the store in messages (default oci://<registry>/<repository>).
	Name string
	// RetryDeadline is the retry budget when the caller's context has none.
	RetryDeadline time.Duration
	// LockLease is how long a writer may hold the lock before others take
	// it from it as abandoned (default 60s).
	LockLease time.Duration
	// Transport replaces the HTTP transport (tests).
	Transport http.RoundTripper
	// Warn, when set, is told what the user should know of although the
	// write went on, such as a lock that could not be released.
	Warn func(msg string, args ...any)
	// Debug, when set, is told what helps to explain a slow render, such
	// as a prefetch that failed (see statestore.Prefetch).
	Debug func(msg string, args ...any)
}

// Store is an open OCI state store. Its Apply and ApplyAll are
// driver.Write's (see write in apply.go).
type Store struct {
	driver.Writer
	cfg    Config
	name   string
	client *auth.Client
	base   *remote.Repository

	mu     sync.Mutex
	layers map[digest.Digest]layerFiles // unpacked layers, by digest (see layerFiles)
	repos  map[string]*remote.Repository
	pushed map[string]bool // repo + "@" + digest known to exist
	// deletesOK is set once the registry showed it deletes tags (see
	// checkDeletes).
	deletesOK bool
}

// CheckConfig refuses a configuration that cannot name a store: an empty
// registry, or a repository name or tag the OCI spec forbids, and
// credentials written into the registry or the source (never quoted). Each
// error starts with the name of the field at fault as an OCIStateStore's
// spec spells it (registry, repository, tag, token, source), so that
// callers can name the field.
func CheckConfig(cfg Config) error {
	if cfg.Registry == "" {
		return errors.New("registry is empty")
	}
	if strings.Contains(cfg.Registry, "@") {
		// user:password@host, or a URL with them: never echo it.
		return errors.New("registry holds credentials (user:password@): credentials belong in the Secret spec.secretRef names, never in spec.registry")
	}
	if u, err := url.Parse(cfg.Source); err == nil && u.User != nil {
		if _, pw := u.User.Password(); pw || u.Scheme == "http" || u.Scheme == "https" {
			return errors.New("source holds credentials (user:password@): it is published on every artifact; remove them")
		}
	}
	if strings.Contains(cfg.Registry, "/") {
		return fmt.Errorf("registry %q must be host[:port], with no scheme or path", cfg.Registry)
	}
	ref := registry.Reference{Registry: cfg.Registry, Repository: cfg.Repository}
	if err := ref.ValidateRegistry(); err != nil {
		return fmt.Errorf("registry %q is not a valid host[:port]", cfg.Registry)
	}
	if err := ref.ValidateRepository(); err != nil {
		return fmt.Errorf("repository %q is not a valid OCI repository name (lowercase letters, digits and separators . _ __ - between them, components joined by /)", cfg.Repository)
	}
	if cfg.Tag != "" {
		if err := checkTag(cfg.Tag); err != nil {
			return err
		}
	}
	if cfg.Token != "" && (cfg.Username != "" || cfg.Password != "") {
		return errors.New("token: give a token or a username and password, not both")
	}
	return nil
}

func checkTag(tag string) error {
	ref := registry.Reference{Registry: "r", Repository: "r", Reference: tag}
	if len(tag) > 128 {
		return fmt.Errorf("tag %q is longer than 128 characters", tag[:20]+"...")
	}
	if err := ref.ValidateReferenceAsTag(); err != nil {
		return fmt.Errorf("tag %q is not a valid OCI tag ([A-Za-z0-9_][A-Za-z0-9._-]{0,127})", tag)
	}
	return nil
}

// Open returns a client of the store cfg names. It does not contact the
// registry.
func Open(cfg Config) (*Store, error) {
	if err := CheckConfig(cfg); err != nil {
		return nil, err
	}
	if cfg.Tag == "" {
		cfg.Tag = DefaultTag
	}
	if cfg.LockLease <= 0 {
		cfg.LockLease = 60 * time.Second
	}
	name := cfg.Name
	if name == "" {
		name = "oci://" + cfg.Registry + "/" + cfg.Repository
	}
	if cfg.Source == "" {
		cfg.Source = "oci://" + cfg.Registry + "/" + cfg.Repository
	}
	tr := cfg.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		if len(cfg.CA) > 0 {
			pool, err := x509.SystemCertPool()
			if err != nil || pool == nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM(cfg.CA) {
				return nil, errors.New("ca: no PEM certificate found")
			}
			t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
		}
		tr = t
	}
	cred := auth.Credential{Username: cfg.Username, Password: cfg.Password, AccessToken: cfg.Token}
	client := &auth.Client{
		Client:     &http.Client{Transport: tr},
		Credential: auth.StaticCredential(cfg.Registry, cred),
		Cache:      auth.NewCache(),
	}
	client.SetUserAgent("render")
	if cfg.Username != "" || cfg.Password != "" {
		// A username and password go with the first request, as the
		// registry's Basic challenge would ask for them: without this,
		// every render process's first request (the state manifest's
		// read) is sent twice. A registry that wants a bearer token
		// answers with its challenge, which the client then follows.
		basic := base64.StdEncoding.EncodeToString([]byte(cfg.Username + ":" + cfg.Password))
		_, _ = client.Cache.Set(context.Background(), cfg.Registry, auth.SchemeBasic, "", func(context.Context) (string, error) {
			return basic, nil
		})
	}
	s := &Store{
		cfg: cfg, name: name, client: client,
		layers: map[digest.Digest]layerFiles{},
		repos:  map[string]*remote.Repository{},
		pushed: map[string]bool{},
	}
	s.base = s.repo(cfg.Repository)
	s.Writer = driver.Writer{Backend: backend{s}, Policy: driver.RetryPolicy{Deadline: cfg.RetryDeadline}, Batch: true}
	return s, nil
}

// repo returns the client of one repository of the registry.
func (s *Store) repo(name string) *remote.Repository {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.repos[name]; ok {
		return r
	}
	r := &remote.Repository{
		Client:    s.client,
		Reference: registry.Reference{Registry: s.cfg.Registry, Repository: name},
		PlainHTTP: s.cfg.Insecure,
		// Render's own artifacts carry no subject: skip the referrers dance.
		SkipReferrersGC: true,
	}
	s.repos[name] = r
	return r
}

// String names the store.
func (s *Store) String() string { return s.name }

// Close releases nothing: the store holds no connection of its own.
func (s *Store) Close() error { return nil }

// DestinationRepository is the repository destination folder d is published to.
func (s *Store) DestinationRepository(d string) string { return s.cfg.Repository + "/" + d }

// Records returns every workload record in the store.
func (s *Store) Records(ctx context.Context) ([]statestore.Record, error) {
	ctx = wait.EnsureRetryDeadline(ctx, s.cfg.RetryDeadline)
	snap, err := s.snapshot(ctx)
	if err != nil {
		return nil, driver.Wrap(s.name, "read", err)
	}
	recs, err := statestore.ReadRecords(snap)
	if err != nil {
		return nil, driver.Wrap(s.name, "read", err)
	}
	return recs, nil
}

// Snapshot reads the state manifest; layers are pulled when first looked at.
// The Store's next write plans its first attempt on the same state (see
// write.Snapshot), so a render reads the manifest once.
func (s *Store) Snapshot(ctx context.Context) (statestore.Snapshot, error) {
	ctx = wait.EnsureRetryDeadline(ctx, s.cfg.RetryDeadline)
	snap, err := s.snapshot(ctx)
	if err != nil {
		return nil, driver.Wrap(s.name, "read", err)
	}
	return snap, nil
}

// retryLimit caps the wait between two tries of one request.
const retryLimit = 2 * time.Second

// retry runs op while the registry cannot be reached, as
// wait.Unreachable(retryLimit) waits, translating its errors.
func (s *Store) retry(ctx context.Context, op func() error) error {
	return wait.Unreachable(retryLimit).Retry(ctx, func() error { return s.translate(op()) })
}

// translate maps a registry error to the statestore sentinels: the
// registry's answers here, failures below HTTP (DNS, TLS, a connection
// that fails) as every backend classifies them.
func (s *Store) translate(err error) error {
	if err == nil {
		return nil
	}
	var er *errcode.ErrorResponse
	if errors.As(err, &er) {
		msg := fmt.Sprintf("%s %s: %d %s", er.Method, er.URL.Path, er.StatusCode, http.StatusText(er.StatusCode))
		if len(er.Errors) > 0 {
			// The registry's words, without their details (a dump of
			// the access it wanted, on one long line).
			brief := make(errcode.Errors, len(er.Errors))
			for i, e := range er.Errors {
				brief[i] = errcode.Error{Code: e.Code, Message: e.Message}
			}
			msg += ": " + brief.Error()
		}
		switch {
		case er.StatusCode == http.StatusUnauthorized || er.StatusCode == http.StatusForbidden:
			return statestore.Redacted(fmt.Sprintf("%v: %s", statestore.ErrAuth, msg), fmt.Errorf("%w: %w", statestore.ErrAuth, err))
		case er.StatusCode == http.StatusNotFound:
			return statestore.Redacted(fmt.Sprintf("%v: %s", statestore.ErrNotFound, msg), fmt.Errorf("%w: %w", statestore.ErrNotFound, err))
		case er.StatusCode == http.StatusTooManyRequests || er.StatusCode >= 500:
			return statestore.Redacted(fmt.Sprintf("%v: %s", statestore.ErrUnreachable, msg), fmt.Errorf("%w: %w", statestore.ErrUnreachable, err))
		}
		return statestore.Redacted(fmt.Sprintf("%v: %s", statestore.ErrRejected, msg), fmt.Errorf("%w: %w", statestore.ErrRejected, err))
	}
	if errors.Is(err, errdef.ErrNotFound) {
		return fmt.Errorf("%w: %w", statestore.ErrNotFound, err)
	}
	if out, ok := driver.TranslateNetwork(err, driver.Network{Server: s.cfg.Registry, Field: "registry"}); ok {
		return out
	}
	return err
}

// state is one state manifest, as read.
type state struct {
	exists     bool
	desc       ocispec.Descriptor
	generation int
	// folders maps a folder to its layer in the state.
	folders map[string]ocispec.Descriptor
}

// readState reads the state manifest. A store with none is empty when
// Create is set and missing otherwise.
func (s *Store) readState(ctx context.Context) (*state, error) {
	st := &state{folders: map[string]ocispec.Descriptor{}}
	var m ocispec.Manifest
	err := s.retry(ctx, func() error {
		desc, rc, err := s.base.FetchReference(ctx, StateTag)
		if err != nil {
			return err
		}
		defer rc.Close()
		st.desc = desc
		return decodeJSON(rc, desc, &m)
	})
	if errors.Is(err, statestore.ErrNotFound) {
		if s.cfg.Create {
			return st, nil
		}
		return nil, fmt.Errorf("%w: repository %s holds no render state (tag %s); set create: true to start one there", statestore.ErrNotFound, s.cfg.Repository, StateTag)
	}
	if err != nil {
		return nil, err
	}
	if m.ArtifactType != StateArtifactType {
		return nil, fmt.Errorf("%s:%s is not a render state (artifact type %q)", s.cfg.Repository, StateTag, m.ArtifactType)
	}
	st.exists = true
	fmt.Sscan(m.Annotations[annotationGeneration], &st.generation)
	for _, l := range m.Layers {
		if l.MediaType == ocispec.MediaTypeEmptyJSON {
			continue // a state with no folders
		}
		f := l.Annotations[ocispec.AnnotationTitle]
		if f == "" || (f != rootFolder && layout.ValidPath(f) != nil) {
			return nil, fmt.Errorf("state layer %s has no valid folder title (%q)", l.Digest, f)
		}
		st.folders[f] = l
	}
	return st, nil
}

// folderOf returns the folder of st that holds p, if any.
func (st *state) folderOf(p string) (string, bool) {
	if layout.IsMeta(p) {
		_, ok := st.folders[layout.MetaDir]
		return layout.MetaDir, ok
	}
	best := ""
	for f := range st.folders {
		if f != rootFolder && strings.HasPrefix(p, f+"/") && len(f) > len(best) {
			best = f
		}
	}
	if best != "" {
		return best, true
	}
	if !strings.Contains(p, "/") {
		_, ok := st.folders[rootFolder]
		return rootFolder, ok
	}
	return "", false
}

// folderFor returns the folder a new path p goes to: the folder of st that
// holds it, else the longest destination that holds it, else its first
// path element ("." for a file at the top).
func (st *state) folderFor(p string, dests []string) string {
	if f, ok := st.folderOf(p); ok || layout.IsMeta(p) || f == rootFolder {
		return f
	}
	best := ""
	for _, d := range dests {
		d = strings.Trim(d, "/")
		if d != "" && strings.HasPrefix(p, d+"/") && len(d) > len(best) {
			best = d
		}
	}
	if best != "" {
		return best
	}
	first, _, _ := strings.Cut(p, "/")
	return first
}

// rel returns p relative to folder f.
func rel(f, p string) string {
	if f == rootFolder {
		return p
	}
	return strings.TrimPrefix(p, f+"/")
}

// abs returns the store path of r, relative to folder f.
func abs(f, r string) string {
	if f == rootFolder {
		return r
	}
	return path.Join(f, r)
}

// published reports whether folder f is published as a destination artifact.
func published(f string) bool { return f != rootFolder && f != layout.MetaDir }
