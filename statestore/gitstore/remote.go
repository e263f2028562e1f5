package gitstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/driver"
	"github.com/render-dev/render/statestore/wait"
)

// remoteRepo keeps a shallow, single-branch clone in memory. Kept between
// renders, it fetches only what is new.
type remoteRepo struct {
	cfg     Config
	st      *memory.Storage
	remote  *git.Remote
	tracked plumbing.ReferenceName // refs/remotes/origin/<branch>
	branch  plumbing.ReferenceName
	fetched bool
	// space is the ref folder of this branch's group-commit requests (see
	// pending.go); "" once the server has shown it cannot take part.
	space string

	// The partial clone (see lazy.go): the server's capabilities, whether
	// it serves objects one by one, and a kept http session; how this
	// clone fetches, and whether the store is large (see lazy.go).
	caps    *capability.List
	partial bool
	up      transport.UploadPackSession
	mode    fetchMode
	large   bool
	// whole is set while takeWhole fetches a small store whole through
	// takeAdvertised.
	whole bool
	// unknown is a store render had not written when the clone began
	// (see isLarge).
	unknown bool
	// What fetching cost, for tests and the benchmark.
	requests       int
	objectsFetched int
	wholeFetched   int
	bytesFetched   int64
	// everSawRefs is set once an advertisement listed the branch or a
	// request: from then on an empty one is not believed.
	everSawRefs bool
}

// reset forgets everything the clone holds (a kept clone that grew past
// maxKeptObjects); the next fetch starts again.
func (r *remoteRepo) reset() {
	r.mode = modeUndecided
	r.st = memory.NewStorage()
	r.remote = git.NewRemote(r.st, &config.RemoteConfig{Name: "origin", URLs: []string{r.cfg.URL}})
	r.fetched = false
}

func newRemoteRepo(cfg Config) *remoteRepo {
	st := memory.NewStorage()
	rc := &config.RemoteConfig{Name: "origin", URLs: []string{cfg.URL}}
	return &remoteRepo{
		cfg:     cfg,
		st:      st,
		remote:  git.NewRemote(st, rc),
		tracked: plumbing.NewRemoteReferenceName("origin", cfg.Branch),
		branch:  plumbing.NewBranchReferenceName(cfg.Branch),
		space:   pendingSpace(cfg.Branch, strings.Trim(cfg.Path, "/")),
	}
}

func (r *remoteRepo) head(ctx context.Context, refresh bool) (plumbing.Hash, storer.EncodedObjectStorer, error) {
	if refresh || !r.fetched {
		if err := r.fetch(ctx); err != nil {
			return plumbing.ZeroHash, nil, err
		}
	}
	return r.tip(), &lazyObjects{EncodedObjectStorer: r.st, r: r, ctx: ctx}, nil
}

func (r *remoteRepo) tip() plumbing.Hash {
	ref, err := r.st.Reference(r.tracked)
	if err != nil {
		return plumbing.ZeroHash
	}
	return ref.Hash()
}

// fetch brings the branch tip and the requests waiting on it: partially
// (fetchTips) in a store its last commit marks as large, whole at depth 1
// otherwise (fetchWhole). A clone decides once; a kept one keeps its way.
func (r *remoteRepo) fetch(ctx context.Context) error {
	if r.cfg.Debug == nil {
		return r.fetchTip(ctx)
	}
	t0, reqs, objs, whole, bytes := wait.Now(ctx), r.requests, r.objectsFetched, r.wholeFetched, r.bytesFetched
	err := r.fetchTip(ctx)
	pending := 0
	if r.space != "" {
		for name := range r.st.ReferenceStorage {
			if strings.HasPrefix(name.String(), r.space) {
				pending++
			}
		}
	}
	args := []any{"tip", r.tip().String(), "requests_waiting", pending, "fetches", r.requests - reqs,
		"objects", r.objectsFetched - objs + r.wholeFetched - whole, "bytes", r.bytesFetched - bytes,
		"took", wait.Since(ctx, t0).Round(time.Millisecond).String()}
	if err != nil {
		args = append(args, "error", err.Error())
	}
	r.cfg.Debug("fetch", args...)
	return err
}

// fetchTip is fetch, without its log line.
func (r *remoteRepo) fetchTip(ctx context.Context) error {
	if r.mode == modeUndecided {
		m, err := r.probe(ctx)
		if err != nil {
			return err
		}
		r.mode = m
		if r.fetched {
			return nil // the probe fetched the tip and the requests
		}
	}
	var err error
	if r.mode == modePartial {
		err = r.fetchTips(ctx)
	} else {
		err = r.fetchWhole(ctx)
	}
	if err != nil {
		return err
	}
	r.fetched = true
	return nil
}

// fetchWhole brings the branch tip (depth 1, everything in it) and the
// requests waiting on it, and forgets requests the server no longer has;
// a kept clone fetches only what is new. A missing branch or an empty
// repository is an empty tip, not an error: the first push creates it.
func (r *remoteRepo) fetchWhole(ctx context.Context) error {
	specs := []config.RefSpec{config.RefSpec(fmt.Sprintf("+%s:%s", r.branch, r.tracked))}
	if r.space != "" {
		specs = append(specs, config.RefSpec(fmt.Sprintf("+%s*:%s*", r.space, r.space)))
	}
	before := len(r.st.ObjectStorage.Objects)
	err := r.retry(ctx, func() error {
		return r.remote.FetchContext(ctx, &git.FetchOptions{
			RefSpecs:        specs,
			Depth:           1,
			Auth:            r.cfg.Auth,
			CABundle:        r.cfg.CABundle,
			InsecureSkipTLS: r.cfg.InsecureSkipTLS,
			Tags:            git.NoTags,
			Force:           true,
			Prune:           true,
		})
	})
	var noMatch git.NoMatchingRefSpecError
	r.wholeFetched += len(r.st.ObjectStorage.Objects) - before
	switch {
	case err == nil, errors.Is(err, git.NoErrAlreadyUpToDate):
	case errors.Is(err, transport.ErrEmptyRemoteRepository) && r.sawRefs():
		return errNoAdvertisement
	case errors.Is(err, transport.ErrEmptyRemoteRepository), errors.As(err, &noMatch):
		// No branch yet. Requests (if any) are read from the
		// advertisement when this writer next pushes.
		_ = r.st.RemoveReference(r.tracked)
	default:
		return err
	}
	if !r.tip().IsZero() {
		r.everSawRefs = true
	}
	r.requests++
	if len(r.st.ObjectStorage.Objects) > largeStore {
		r.large = true
	}
	return nil
}

// list reads the server's refs (an advertisement only: no objects move).
func (r *remoteRepo) list(ctx context.Context) (map[plumbing.ReferenceName]plumbing.Hash, error) {
	var refs []*plumbing.Reference
	err := r.retry(ctx, func() error {
		var err error
		refs, err = r.remote.ListContext(ctx, &git.ListOptions{
			Auth: r.cfg.Auth, CABundle: r.cfg.CABundle, InsecureSkipTLS: r.cfg.InsecureSkipTLS,
		})
		if errors.Is(err, transport.ErrEmptyRemoteRepository) && r.sawRefs() {
			return errNoAdvertisement
		}
		return err
	})
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return nil, err
	}
	out := make(map[plumbing.ReferenceName]plumbing.Hash, len(refs))
	for _, ref := range refs {
		if ref.Type() == plumbing.HashReference {
			out[ref.Name()] = ref.Hash()
		}
	}
	return out, nil
}

// publish pushes commit to the branch without force. When the push fails
// and the branch has moved, the failure is a lost race (errStale); when it
// has not, the server refused for its own reasons, which are returned.
func (r *remoteRepo) publish(ctx context.Context, objs storer.EncodedObjectStorer, old, commit plumbing.Hash) error {
	return r.publishCommands(ctx, objs.(*overlay), []*packp.Command{{Name: r.branch, Old: old, New: commit}})
}

// publishCommands sends cmds in one push, atomically when there are several
// (the server must offer "atomic"). cmds[0] may move the branch; the others
// create or delete request refs. A command whose ref moved since its Old is
// a lost race (errStale).
func (r *remoteRepo) publishCommands(ctx context.Context, ov *overlay, cmds []*packp.Command) error {
	// The clone keeps only objects the server has (fetched, or pushed
	// successfully): the overlay's new objects are flushed into it after the
	// push lands, so a retry after a lost race sends everything it needs.
	// The server's own words (a pre-receive hook's output) arrive on the
	// sideband; keep them for the error message.
	var server strings.Builder
	err := r.retry(ctx, func() error {
		server.Reset()
		return r.send(ctx, ov, cmds, &server)
	})
	if err == nil || errors.Is(err, git.NoErrAlreadyUpToDate) {
		if ferr := ov.flush(); ferr != nil {
			return ferr
		}
		for _, c := range cmds {
			r.track(c)
		}
		return nil
	}
	if errors.Is(err, statestore.ErrAuth) || errors.Is(err, statestore.ErrUnreachable) || errors.Is(err, statestore.ErrNotFound) ||
		errors.Is(err, errStale) || errors.Is(err, errNoGroup) || ctx.Err() != nil {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// Called a refusal, a request's push cut off so turned group
		// commit off for the store (at a load average of 55, with pushes
		// taking minutes).
		return cutOff(err)
	}
	if ferr := r.fetch(ctx); ferr != nil {
		return fmt.Errorf("%w (and fetching again failed: %v)", err, ferr)
	}
	for _, c := range cmds {
		local := c.Name
		if c.Name == r.branch {
			local = r.tracked
		}
		now := plumbing.ZeroHash
		if ref, rerr := r.st.Reference(local); rerr == nil {
			now = ref.Hash()
		}
		if now != c.Old {
			return errStale
		}
	}
	msg := strings.TrimSpace(err.Error())
	if said := serverMessage(server.String()); said != "" {
		msg += "; the server said: " + said
	}
	return fmt.Errorf("%w: %s", statestore.ErrRejected, RedactURL(msg))
}

// serverMessage keeps the lines a server printed, without progress counters.
func serverMessage(s string) string {
	var lines []string
	for _, l := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }) {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "remote:"))
		if l == "" || strings.Contains(l, "Counting objects") || strings.Contains(l, "Compressing objects") || strings.Contains(l, "Processing") {
			continue
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, " | ")
}

func (r *remoteRepo) close() error { return nil }

func (r *remoteRepo) server() *remoteRepo { return r }

// track sets the clone's ref for c as the server now holds it (the branch
// as its tracking ref).
func (r *remoteRepo) track(c *packp.Command) {
	local := c.Name
	if c.Name == r.branch {
		local = r.tracked
	}
	if c.New.IsZero() {
		_ = r.st.RemoveReference(local)
	} else {
		_ = r.st.SetReference(plumbing.NewHashReference(local, c.New))
	}
}

// send pushes cmds with exactly the objects this render made (the
// overlay's). go-git's own Push works out what to send by walking
// everything reachable from the remote's tip, which costs as much as the
// repository is large; the overlay already knows the new objects, so the
// cost follows the change. A command whose ref moved since its Old is a
// lost race (errStale), found before anything is sent when the
// advertisement already shows it.
func (r *remoteRepo) send(ctx context.Context, ov *overlay, cmds []*packp.Command, progress io.Writer) error {
	ep, err := transport.NewEndpoint(r.cfg.URL)
	if err != nil {
		return err
	}
	ep.CaBundle, ep.InsecureSkipTLS = r.cfg.CABundle, r.cfg.InsecureSkipTLS
	cli, err := client.NewClient(ep)
	if err != nil {
		return err
	}
	sess, err := cli.NewReceivePackSession(ep, r.cfg.Auth)
	if err != nil {
		return err
	}
	defer sess.Close()
	adv, err := sess.AdvertisedReferencesContext(ctx)
	if errors.Is(err, transport.ErrEmptyRemoteRepository) && r.sawRefs() {
		return errNoAdvertisement
	}
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return err
	}
	var refs map[plumbing.ReferenceName]*plumbing.Reference
	req := packp.NewReferenceUpdateRequest()
	if adv != nil {
		refs, _ = adv.AllReferences()
		req = packp.NewReferenceUpdateRequestFromCapabilities(adv.Capabilities)
		if adv.Capabilities.Supports(capability.Sideband64k) {
			_ = req.Capabilities.Set(capability.Sideband64k)
		} else if adv.Capabilities.Supports(capability.Sideband) {
			_ = req.Capabilities.Set(capability.Sideband)
		}
		req.Progress = progress
	}
	for _, c := range cmds {
		cur := plumbing.ZeroHash
		if ref, ok := refs[c.Name]; ok {
			cur = ref.Hash()
		}
		if cur != c.Old {
			return errStale
		}
	}
	if len(cmds) > 1 || touchesRequests(cmds) {
		if adv == nil || !adv.Capabilities.Supports(capability.Atomic) || !adv.Capabilities.Supports(capability.DeleteRefs) {
			return errNoGroup
		}
		_ = req.Capabilities.Set(capability.Atomic)
	}
	req.Commands = cmds
	// From here the push is the server's: it lands whole or not at all, so
	// the render's cancellation must not cut it off half-way (a file://
	// repository's receive-pack killed while it holds the branch's lock
	// file leaves the lock behind). It still ends at the retry deadline.
	ctx, cancel := driver.Finishing(ctx)
	defer cancel()
	if len(ov.added) == 0 && allDeletes(cmds) {
		// Only deletions: git sends no packfile at all.
		rs, err := sess.ReceivePack(ctx, req)
		if err != nil {
			return err
		}
		if rs != nil {
			return rs.Error()
		}
		return nil
	}
	rd, wr := io.Pipe()
	req.Packfile = rd
	done := make(chan error, 1)
	go func() {
		_, err := packfile.NewEncoder(wr, ov.mem, false).Encode(ov.added, 0)
		done <- wr.CloseWithError(err)
	}()
	rs, err := sess.ReceivePack(ctx, req)
	if err != nil {
		_ = rd.Close()
		<-done
		return err
	}
	if err := <-done; err != nil {
		return err
	}
	if rs != nil {
		return rs.Error()
	}
	return nil
}

func touchesRequests(cmds []*packp.Command) bool {
	for _, c := range cmds {
		if strings.HasPrefix(c.Name.String(), pendingRoot) {
			return true
		}
	}
	return false
}

func allDeletes(cmds []*packp.Command) bool {
	for _, c := range cmds {
		if !c.New.IsZero() {
			return false
		}
	}
	return true
}

// errNoAdvertisement is an empty advertisement from a repository this
// clone saw refs in: go-git reports a connection that closed before the
// server said anything (an overloaded ssh server) as an empty repository.
// Believing it would make a waiting writer think its request was folded,
// so it is retried as a network error.
var errNoAdvertisement = fmt.Errorf("%w: the server advertised no refs in a repository that had some", statestore.ErrUnreachable)

// sawRefs reports whether the clone knows the branch or a request.
func (r *remoteRepo) sawRefs() bool {
	if !r.tip().IsZero() {
		return true
	}
	for name := range r.st.ReferenceStorage {
		if r.space != "" && strings.HasPrefix(name.String(), r.space) {
			return true
		}
	}
	return r.everSawRefs
}

// errNoGroup means the server cannot take a group commit (no atomic push or
// no ref deletion): the writer goes back to re-planning alone.
var errNoGroup = errors.New("the server does not offer atomic pushes")

// retry runs op while the server cannot be reached (unreachable): until
// it succeeds, fails for a reason retrying cannot fix, or the render's
// retry deadline passes. Transport errors are translated to the
// statestore sentinels here, at the boundary.
func (r *remoteRepo) retry(ctx context.Context, op func() error) error {
	return unreachable.Retry(ctx, func() error { return translate(op()) })
}

// unreachable is how a git store waits for a server it could not reach:
// from 320ms up to 1s (S3 and OCI wait up to 2s).
var unreachable = wait.Unreachable(time.Second)

// translate classifies a go-git or network error by its type, keeps its
// chain, and removes credentials from its text: go-git's own errors and
// statuses here, what is below git's protocol (a name that does not
// resolve, a connection that fails, TLS) as every backend classifies it
// (driver.TranslateNetwork).
func translate(err error) error {
	switch {
	case err == nil,
		errors.Is(err, git.NoErrAlreadyUpToDate),
		errors.Is(err, transport.ErrEmptyRemoteRepository),
		errors.Is(err, errStale), errors.Is(err, errNoGroup), errors.Is(err, errNoFilter),
		errors.Is(err, statestore.ErrAuth), errors.Is(err, statestore.ErrUnreachable),
		errors.Is(err, statestore.ErrNotFound),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed):
		return wrapf(statestore.ErrAuth, err)
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return wrapf(statestore.ErrNotFound, err, "repository")
	}
	var noMatch git.NoMatchingRefSpecError
	if errors.As(err, &noMatch) {
		return err
	}
	cause := goGitCause(err)
	var status *githttp.Err
	var keyErr *knownhosts.KeyError
	var revoked *knownhosts.RevokedError
	switch {
	case errors.As(cause, &status) && retryableStatus(status.StatusCode()):
		return wrapf(statestore.ErrUnreachable, cause)
	case errors.As(cause, &keyErr), errors.As(cause, &revoked):
		return statestore.Redacted("SSH host key not trusted (check the secret's knownHosts): "+redactErr(err), cause)
	case strings.Contains(err.Error(), "ssh: unable to authenticate"):
		// x/crypto/ssh (client_auth.go) reports a refused key as a plain
		// fmt.Errorf, with no type or sentinel to test (its own tests
		// match the text too): this one message is matched by its text.
		return wrapf(statestore.ErrAuth, cause)
	}
	if out, ok := driver.TranslateNetwork(cause, driver.Network{Field: "url", Redact: redactLine}); ok {
		return out
	}
	return statestore.Redacted(redactErr(err), cause)
}

// goGitCause unwraps go-git's UnexpectedError and PermanentError, which
// hold the underlying error in a field but do not implement Unwrap.
func goGitCause(err error) error {
	for {
		var ue *plumbing.UnexpectedError
		var pe *plumbing.PermanentError
		switch {
		case errors.As(err, &ue) && ue.Err != nil:
			err = ue.Err
		case errors.As(err, &pe) && pe.Err != nil:
			err = pe.Err
		default:
			return err
		}
	}
}

// retryableStatus reports whether an HTTP status means "try again later".
func retryableStatus(code int) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// wrapf wraps err under sentinel, with its text redacted and an optional
// word of context: "<sentinel>: [what: ]<err>".
func wrapf(sentinel, err error, what ...string) error {
	msg := redactErr(err)
	if len(what) > 0 {
		msg = what[0] + ": " + msg
	}
	return statestore.Redacted(sentinel.Error()+": "+msg, errors.Join(sentinel, err))
}

// redactErr is an error's text without credentials, on one line (servers'
// messages can hold newlines).
func redactErr(err error) string { return redactLine(err.Error()) }

// redactLine is s without credentials, on one line.
func redactLine(s string) string { return strings.Join(strings.Fields(RedactURL(s)), " ") }

var userinfo = regexp.MustCompile(`://[^/\s]*@`) // to the last @ of the authority: a password may hold one

// RedactURL removes credentials from any URL in s.
func RedactURL(s string) string {
	return userinfo.ReplaceAllString(s, "://***@")
}

// cutOff is the error of a push that was still on its way when the latest
// retry deadline (past which a sent push may not run: driver.Finishing)
// passed: the server was too slow, it did not refuse.
func cutOff(err error) error {
	return fmt.Errorf("%w (%w: the push was still on its way)", err, statestore.ErrDeadline)
}
