// Package storekind is the registry of state store kinds: GitStateStore (a
// git repository, written with go-git), BucketStateStore (an S3 bucket,
// minio-go) and OCIStateStore (an OCI registry, oras-go). Each kind owns
// its spec type (gitspec.go, bucketspec.go, ocispec.go), checks it, and builds its client from it: the
// credentials in the store's secret (basic auth, SSH keys and known hosts,
// S3 access keys or the IAM chain, registry passwords or tokens), TLS (a
// CA bundle, or verification turned off) and, for git, the commit signing
// key. It declares what callers would otherwise learn from its name
// (Capabilities: uploads, the Flux source, pull requests), its commit
// settings, its pull-request mode and what a worker reads it from
// (WorkerSource, for render bootstrap).
//
// Package inputs decodes each store's document into its kind's spec type
// and asks the registry to check it (its user passes Default to
// inputs.LoadPlatform); the engine and bootstrap ask the registry by the
// kind's name. A problem with a spec or its secret is a
// renderer.InputError naming the file and the store, found before any
// store is contacted. The backends (statestore/gitstore, s3store,
// ocistore) know nothing of specs: a kind fills their Config. A new kind
// is its spec type and a factory here, and a line in Default.
package storekind

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/render-dev/render/internal/forge"
	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
)

// Kind is one kind of state store.
type Kind interface {
	// Name is the kind of the documents that declare such stores.
	Name() string
	// Document is how such documents are written: their apiVersion,
	// their shape and the kind's spec type, which package inputs decodes
	// them into.
	Document() inputs.StoreDocument
	// Check validates a spec as decoded from its document and fills in
	// its defaults. The error is the message, naming the field (spec.…).
	Check(spec inputs.StoreSpec) error
	// CheckDestination validates what a destination at path needs of a
	// store of this kind; the error is the message.
	CheckDestination(spec inputs.StoreSpec, path string) error
	// Open builds the store's client from its spec and its secret, and
	// returns with it a key identifying what the client was built from
	// (the spec's fields, and digests of the secrets used, never the
	// secrets), so that a client kept between renders is reused only
	// while the key is unchanged.
	Open(spec inputs.StoreSpec, secrets Secrets, opts Options) (statestore.Store, string, error)
	// Capabilities are what the kind declares of itself, for callers
	// that would otherwise ask by its name.
	Capabilities() Capabilities
	// Commit is how a store of a kind that writes commits composes
	// their messages and authors (spec.commit; nil for the defaults);
	// ok is false for a kind that writes no commits.
	Commit(spec inputs.StoreSpec) (c *inputs.Commit, ok bool)
	// PullRequests resolves a store's pull-request mode: the forge's
	// client and the branch the pull requests go into. It is nil for a
	// store that writes directly (a kind without PullRequests, or a
	// store that does not ask for them).
	PullRequests(spec inputs.StoreSpec, secrets Secrets, opts Options) (*PullRequests, error)
	// WorkerSource is what a worker cluster's Flux or Argo CD reads a
	// store of the kind from (see WorkerSource); ok is false for a kind
	// no worker reads.
	WorkerSource(spec inputs.StoreSpec) (src WorkerSource, ok bool)
}

// WorkerSource is what a worker cluster's reconciler reads a store from,
// as the store's kind describes it for render bootstrap (package
// internal/bootstrap, which writes the Flux source or Argo CD
// Applications): a git repository and branch, a bucket, or a base
// repository in an OCI registry whose destinations are artifacts. Exactly
// one is set, in the shape of the kind that reads that way: a new kind
// read like an existing one describes itself in that kind's shape, and
// bootstrap needs no change.
type WorkerSource struct {
	Git    *GitStateStore
	Bucket *BucketStateStore
	OCI    *OCIStateStore
}

// PullRequests is a store's pull-request mode, resolved before anything is
// written: the engine writes such a store's changes through its client,
// which is a statestore.Proposer, and opens their pull requests on Forge.
type PullRequests struct {
	// Spec is the store's spec.pullRequest.
	Spec *PullRequest
	// Forge is the client of the forge the pull requests go to.
	Forge *forge.Gitea
	// Base is the branch the pull requests go into.
	Base string
}

// Capabilities are what a kind of store is, besides a place for files,
// declared once where the kind is made, so that no caller switches on a
// kind's name to learn it.
type Capabilities struct {
	// Uploads is true when a write uploads objects (S3, OCI) rather than
	// committing (git): what the metrics call the write.
	Uploads bool
	// FluxSource is the kind of Flux source that reads such a store
	// (GitRepository, Bucket, OCIRepository): it decides which files Flux
	// serves of a folder (see fluxcheck.Source).
	FluxSource string
	// PullRequests is true when a store of the kind may write through
	// pull requests (Kind.PullRequests): its client is then a
	// statestore.Proposer.
	PullRequests bool
}

// Secrets resolves a store's secretRef (an *inputs.Platform does).
type Secrets interface {
	Secret(ref *inputs.SecretRef) (map[string][]byte, bool)
}

// Options are what every store's client gets from the command line.
type Options struct {
	// SecretsDir is --secrets-dir, named in the hint for a missing secret.
	SecretsDir string
	// RetryDeadline is how long an unreachable store is retried.
	RetryDeadline time.Duration
	// Log gets a store's warnings and debug lines, naming the store.
	Log *slog.Logger
	// Transport, when set, replaces the HTTP transport of the S3 and OCI
	// clients (tests, and the in-process fault campaign).
	Transport http.RoundTripper
}

// Registry holds the kinds a program knows, by name.
type Registry struct {
	kinds map[string]Kind
	names []string // in the order the kinds were registered
}

// NewRegistry makes a registry of kinds.
func NewRegistry(kinds ...Kind) *Registry {
	r := &Registry{kinds: map[string]Kind{}}
	for _, k := range kinds {
		r.Register(k)
	}
	return r
}

// Register adds a kind, replacing one of the same name.
func (r *Registry) Register(k Kind) {
	if _, ok := r.kinds[k.Name()]; !ok {
		r.names = append(r.names, k.Name())
	}
	r.kinds[k.Name()] = k
}

// StoreDocument implements inputs.StoreKinds: how the kind of that name
// is written.
func (r *Registry) StoreDocument(kind string) (inputs.StoreDocument, bool) {
	k, ok := r.kinds[kind]
	if !ok {
		return inputs.StoreDocument{}, false
	}
	return k.Document(), true
}

// StoreKindNames implements inputs.StoreKinds: the kinds' names in the
// order they were registered.
func (r *Registry) StoreKindNames() []string { return append([]string(nil), r.names...) }

// Capabilities are what the kind of that name declares; the zero value
// for a kind the registry does not hold.
func (r *Registry) Capabilities(kind string) Capabilities {
	if k, ok := r.kinds[kind]; ok {
		return k.Capabilities()
	}
	return Capabilities{}
}

// Commit is what the store's kind says of its commits (Kind.Commit); ok
// is false for a store of a kind that writes none, or of no kind the
// registry holds.
func (r *Registry) Commit(spec inputs.StoreSpec) (*inputs.Commit, bool) {
	k, err := r.kindOf(spec)
	if err != nil {
		return nil, false
	}
	return k.Commit(spec)
}

// PullRequests resolves the pull-request mode of the store ref names in
// the platform (Kind.PullRequests): nil for a store that writes directly.
// What is missing or wrong is an InputError naming the store and the
// field, before any store is contacted.
func (r *Registry) PullRequests(p *inputs.Platform, ref renderer.StoreRef, opts Options) (*PullRequests, error) {
	k, ok := r.Lookup(ref.Kind)
	spec := p.Store(ref)
	if !ok || spec == nil || !k.Capabilities().PullRequests {
		return nil, nil
	}
	return k.PullRequests(spec, p, opts)
}

// WorkerSource is what a worker reads the store ref names in the platform
// from (Kind.WorkerSource); ok is false for a store the platform does not
// define, or of a kind no worker reads.
func (r *Registry) WorkerSource(p *inputs.Platform, ref renderer.StoreRef) (WorkerSource, bool) {
	k, ok := r.Lookup(ref.Kind)
	spec := p.Store(ref)
	if !ok || spec == nil {
		return WorkerSource{}, false
	}
	return k.WorkerSource(spec)
}

// Lookup returns the kind of that name.
func (r *Registry) Lookup(name string) (Kind, bool) {
	k, ok := r.kinds[name]
	return k, ok
}

// Default is the registry of every kind render writes: git, S3 and OCI.
// Its user passes it to inputs.LoadPlatform and opens stores with it.
var Default = NewRegistry(Git(), Bucket(), OCI())

// CheckStore implements inputs.StoreKinds: the spec's kind checks it.
func (r *Registry) CheckStore(spec inputs.StoreSpec) error {
	k, err := r.kindOf(spec)
	if err != nil {
		return err
	}
	return k.Check(spec)
}

// CheckDestination implements inputs.StoreKinds.
func (r *Registry) CheckDestination(spec inputs.StoreSpec, path string) error {
	k, err := r.kindOf(spec)
	if err != nil {
		return err
	}
	return k.CheckDestination(spec, path)
}

func (r *Registry) kindOf(spec inputs.StoreSpec) (Kind, error) {
	kind := spec.Meta().Kind
	k, ok := r.Lookup(kind)
	if !ok {
		return nil, fmt.Errorf("unknown store kind %s", kind)
	}
	return k, nil
}

// Open builds the client of the store ref names in the platform, with the
// platform's secrets. Problems with the configuration (a missing secret
// or key) are InputErrors: they are known before anything is written.
func (r *Registry) Open(p *inputs.Platform, ref renderer.StoreRef, opts Options) (statestore.Store, string, error) {
	k, ok := r.Lookup(ref.Kind)
	if !ok {
		return nil, "", fmt.Errorf("unknown store kind %s", ref.Kind)
	}
	spec := p.Store(ref)
	if spec == nil {
		return nil, "", fmt.Errorf("%s is not defined", ref)
	}
	return k.Open(spec, p, opts)
}

// SecretName names the secret a store's credentials come from
// ("namespace/name", or the name alone), for messages; "" when the store
// has no secretRef.
func SecretName(spec inputs.StoreSpec) string {
	sr := spec.Meta().SecretRef
	if sr == nil {
		return ""
	}
	if sr.Namespace != "" {
		return sr.Namespace + "/" + sr.Name
	}
	return sr.Name
}

// factory is a Kind made of functions of its own spec type S, a pointer
// to the struct its documents' spec decodes into.
type factory[S inputs.StoreSpec] struct {
	name             string
	apiVersion       string
	newSpec          func(name, file string) S
	check            func(S) error
	checkDestination func(S, string) error
	open             func(S, env) (statestore.Store, string, error)
	caps             Capabilities
	// commit, for a kind that writes commits, is the spec's commit
	// settings.
	commit func(S) *inputs.Commit
	// pullRequests, for a kind with Capabilities.PullRequests, resolves
	// the store's pull-request mode.
	pullRequests func(S, env) (*PullRequests, error)
	// source is what a worker reads a store of the kind from.
	source func(S) WorkerSource
}

func (f factory[S]) Name() string { return f.name }

func (f factory[S]) Document() inputs.StoreDocument {
	return inputs.StoreDocument{
		APIVersion: f.apiVersion,
		Shape:      reflect.TypeFor[inputs.Document[S]](),
		New:        func(name, file string) inputs.StoreSpec { return f.newSpec(name, file) },
	}
}

func (f factory[S]) Capabilities() Capabilities { return f.caps }

func (f factory[S]) spec(spec inputs.StoreSpec) (S, error) {
	s, ok := spec.(S)
	if !ok {
		return s, fmt.Errorf("%s cannot take the spec of a %s", f.name, spec.Meta().Kind)
	}
	return s, nil
}

func (f factory[S]) Check(spec inputs.StoreSpec) error {
	s, err := f.spec(spec)
	if err != nil {
		return err
	}
	return f.check(s)
}

func (f factory[S]) CheckDestination(spec inputs.StoreSpec, path string) error {
	s, err := f.spec(spec)
	if err != nil || f.checkDestination == nil {
		return err
	}
	return f.checkDestination(s, path)
}

func (f factory[S]) Commit(spec inputs.StoreSpec) (*inputs.Commit, bool) {
	s, err := f.spec(spec)
	if err != nil || f.commit == nil {
		return nil, false
	}
	return f.commit(s), true
}

func (f factory[S]) PullRequests(spec inputs.StoreSpec, secrets Secrets, opts Options) (*PullRequests, error) {
	s, err := f.spec(spec)
	if err != nil || f.pullRequests == nil {
		return nil, err
	}
	return f.pullRequests(s, newEnv(spec, secrets, opts))
}

func (f factory[S]) WorkerSource(spec inputs.StoreSpec) (WorkerSource, bool) {
	s, err := f.spec(spec)
	if err != nil || f.source == nil {
		return WorkerSource{}, false
	}
	return f.source(s), true
}

func (f factory[S]) Open(spec inputs.StoreSpec, secrets Secrets, opts Options) (statestore.Store, string, error) {
	s, err := f.spec(spec)
	if err != nil {
		return nil, "", err
	}
	return f.open(s, newEnv(spec, secrets, opts))
}

// env is what opening one store has at hand: the platform's secrets, the
// options, and how messages name the store.
type env struct {
	secrets Secrets
	opts    Options
	meta    inputs.StoreMeta
	// name is the store as logs and clients name it (Kind/name); where
	// as messages about its document do (Kind name).
	name, where string
}

func newEnv(spec inputs.StoreSpec, secrets Secrets, opts Options) env {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	m := spec.Meta()
	return env{secrets: secrets, opts: opts, meta: m, name: m.Ref().String(), where: m.Kind + " " + m.Name}
}

// bad is an InputError about the store's document.
func (v env) bad(msg string) error {
	return &renderer.InputError{File: v.meta.File, Where: v.where, Msg: msg}
}

// log logs at level, naming the store: a store's Warn or Debug.
func (v env) log(level slog.Level) func(msg string, args ...any) {
	return func(msg string, args ...any) {
		v.opts.Log.Log(context.Background(), level, msg, append([]any{"store", v.name}, args...)...)
	}
}

// secret resolves a secretRef; required says whether the store needs one.
func (v env) secret(ref *inputs.SecretRef, required bool) (map[string][]byte, error) {
	if ref == nil {
		if required {
			return nil, v.bad("spec.secretRef is required for this authMethod")
		}
		return nil, nil
	}
	s, ok := v.secrets.Secret(ref)
	if !ok {
		// The platform says why (a Secret of that name in another
		// namespace is never used instead).
		if ex, ok := v.secrets.(interface {
			SecretNotFound(*inputs.SecretRef) string
		}); ok {
			return nil, v.bad(fmt.Sprintf("spec.secretRef %s: %s", ref, ex.SecretNotFound(ref)))
		}
		hint := "define a Secret document"
		if v.opts.SecretsDir != "" {
			hint += " or mount it as " + v.opts.SecretsDir + "/" + ref.Name + "/<key>"
		} else {
			hint += " or pass --secrets-dir"
		}
		return nil, v.bad(fmt.Sprintf("secret %s (spec.secretRef) was not found: %s", ref, hint))
	}
	return s, nil
}

// secretOrNil is the secret ref names, or nil.
func (v env) secretOrNil(ref *inputs.SecretRef) map[string][]byte {
	s, _ := v.secrets.Secret(ref)
	return s
}

// secretDigest lets a kept client notice rotated credentials without
// keeping or printing them.
func secretDigest(s map[string][]byte) string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%x;", k, s[k])
	}
	return fmt.Sprintf("|%x", h.Sum(nil)[:8])
}

// storePath checks a state store's spec.path as the stores will use it.
func storePath(p string) error {
	p = strings.Trim(p, "/")
	if p == "" || p == "." {
		return nil
	}
	return layout.ValidPath(p)
}
