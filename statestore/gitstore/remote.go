package gitstore

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/render-dev/render/statestore"
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
	}
}

func (r *remoteRepo) head(ctx context.Context, refresh bool) (plumbing.Hash, storer.EncodedObjectStorer, error) {
	if refresh || !r.fetched {
		if err := r.fetch(ctx); err != nil {
			return plumbing.ZeroHash, nil, err
		}
	}
	return r.tip(), r.st, nil
}

func (r *remoteRepo) tip() plumbing.Hash {
	ref, err := r.st.Reference(r.tracked)
	if err != nil {
		return plumbing.ZeroHash
	}
	return ref.Hash()
}

// fetch brings the branch tip (depth 1). A missing branch or an empty
// repository is an empty tip, not an error: the first push creates it.
func (r *remoteRepo) fetch(ctx context.Context) error {
	spec := config.RefSpec(fmt.Sprintf("+%s:%s", r.branch, r.tracked))
	err := r.retry(ctx, func() error {
		return r.remote.FetchContext(ctx, &git.FetchOptions{
			RefSpecs:        []config.RefSpec{spec},
			Depth:           1,
			Auth:            r.cfg.Auth,
			CABundle:        r.cfg.CABundle,
			InsecureSkipTLS: r.cfg.InsecureSkipTLS,
			Tags:            git.NoTags,
			Force:           true,
		})
	})
	var noMatch git.NoMatchingRefSpecError
	switch {
	case err == nil, errors.Is(err, git.NoErrAlreadyUpToDate):
	case errors.Is(err, transport.ErrEmptyRemoteRepository), errors.As(err, &noMatch):
		_ = r.st.RemoveReference(r.tracked)
	default:
		return err
	}
	r.fetched = true
	return nil
}

// publish pushes commit to the branch without force. When the push fails
// and the branch has moved, the failure is a lost race (errStale); when it
// has not, the server refused for its own reasons, which are returned.
func (r *remoteRepo) publish(ctx context.Context, objs storer.EncodedObjectStorer, old, commit plumbing.Hash) error {
	ov := objs.(*overlay)
	// The clone keeps only objects the server has (fetched, or pushed
	// successfully): the overlay's new objects are flushed into it after the
	// push lands, so a retry after a lost race sends everything it needs.
	// The server's own words (a pre-receive hook's output) arrive on the
	// sideband; keep them for the error message.
	var server strings.Builder
	err := r.retry(ctx, func() error {
		server.Reset()
		return r.send(ctx, ov, old, commit, &server)
	})
	if err == nil || errors.Is(err, git.NoErrAlreadyUpToDate) {
		if ferr := ov.flush(); ferr != nil {
			return ferr
		}
		_ = r.st.SetReference(plumbing.NewHashReference(r.tracked, commit))
		return nil
	}
	if errors.Is(err, statestore.ErrAuth) || errors.Is(err, statestore.ErrUnreachable) || errors.Is(err, statestore.ErrNotFound) || ctx.Err() != nil {
		return err
	}
	if ferr := r.fetch(ctx); ferr != nil {
		return fmt.Errorf("%w (and fetching again failed: %v)", err, ferr)
	}
	if r.tip() != old {
		return errStale
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

// send pushes commit over old with exactly the objects this render made.
// go-git's own Push works out what to send by walking everything reachable
// from the remote's tip, which costs as much as the repository is large;
// the overlay already knows the new objects, so the cost follows the change.
// A branch that moved since old is a lost race (errStale), found before
// anything is sent when the advertisement already shows it.
func (r *remoteRepo) send(ctx context.Context, ov *overlay, old, commit plumbing.Hash, progress io.Writer) error {
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
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return err
	}
	cur := plumbing.ZeroHash
	req := packp.NewReferenceUpdateRequest()
	if adv != nil {
		if refs, rerr := adv.AllReferences(); rerr == nil {
			if ref, ok := refs[r.branch]; ok {
				cur = ref.Hash()
			}
		}
		req = packp.NewReferenceUpdateRequestFromCapabilities(adv.Capabilities)
		if adv.Capabilities.Supports(capability.Sideband64k) {
			_ = req.Capabilities.Set(capability.Sideband64k)
		} else if adv.Capabilities.Supports(capability.Sideband) {
			_ = req.Capabilities.Set(capability.Sideband)
		}
		req.Progress = progress
	}
	if cur != old {
		return errStale
	}
	req.Commands = []*packp.Command{{Name: r.branch, Old: old, New: commit}}
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

// retry runs op until it succeeds, fails for a reason retrying cannot fix,
// or the store's deadline passes. Transport errors are translated to the
// statestore sentinels here, at the boundary.
func (r *remoteRepo) retry(ctx context.Context, op func() error) error {
	deadline := time.Now().Add(r.cfg.RetryDeadline)
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil {
			return nil
		}
		err = translate(err)
		if !errors.Is(err, statestore.ErrUnreachable) {
			return err
		}
		wait := backoff(attempt + 3)
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("%w (gave up after %s)", err, r.cfg.RetryDeadline)
		}
		if serr := sleep(ctx, wait); serr != nil {
			return fmt.Errorf("%w: %v", err, serr)
		}
	}
}

var unreachable = regexp.MustCompile(`(?i)connection refused|no such host|i/o timeout|connection reset|network is unreachable|EOF|timeout|502 Bad Gateway|503 Service Unavailable|504 Gateway Timeout|TLS handshake timeout|server misbehaving`)

func translate(err error) error {
	switch {
	case errors.Is(err, git.NoErrAlreadyUpToDate),
		errors.Is(err, transport.ErrEmptyRemoteRepository),
		errors.Is(err, errStale):
		return err
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed):
		return fmt.Errorf("%w: %s", statestore.ErrAuth, redactErr(err))
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return fmt.Errorf("%w: repository: %s", statestore.ErrNotFound, redactErr(err))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	var noMatch git.NoMatchingRefSpecError
	if errors.As(err, &noMatch) {
		return err
	}
	msg := redactErr(err)
	switch {
	case strings.Contains(msg, "x509:") || strings.Contains(msg, "certificate"):
		return fmt.Errorf("TLS: %s", msg)
	case strings.Contains(msg, "unable to authenticate"):
		// go-git passes the SSH handshake's refusal through unwrapped.
		return fmt.Errorf("%w: %s", statestore.ErrAuth, msg)
	case strings.Contains(msg, "knownhosts:") || strings.Contains(msg, "host key"):
		return fmt.Errorf("SSH host key not trusted (check the secret's knownHosts): %s", msg)
	}
	if unreachable.MatchString(msg) {
		return fmt.Errorf("%w: %s", statestore.ErrUnreachable, msg)
	}
	return errors.New(msg)
}

// redactErr is an error's text without credentials, on one line (servers'
// messages can hold newlines).
func redactErr(err error) string {
	return strings.Join(strings.Fields(RedactURL(err.Error())), " ")
}

var userinfo = regexp.MustCompile(`://[^/@\s]+@`)

// RedactURL removes credentials from any URL in s.
func RedactURL(s string) string {
	return userinfo.ReplaceAllString(s, "://***@")
}
