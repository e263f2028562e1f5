package ocistore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote/errcode"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/wait"
)

// The writers' lock is Lamport's bakery algorithm, with tags of the base
// repository as its shared variables. The registry can only create,
// list and delete tags, never compare-and-set one, and the bakery needs
// nothing more:
//
//  1. A writer announces that it is choosing a number: tag
//     lock-c-<expiry>-<id>.
//  2. It lists the tags and takes a number above every ticket it sees.
//  3. It tags its ticket, lock-t-<number>-<expiry>-<id>, and deletes its
//     choosing tag.
//  4. It lists the tags again, waits until those it saw choosing then have
//     stopped, and until no ticket is below its own (number, then id,
//     order them).
//
// A writer that started choosing after that listing sees our ticket and
// takes a higher number; one seen choosing in it is waited for until its
// ticket is tagged, and then compared by ticket. The argument needs only
// that a listing shows every tag created before it began and not deleted
// before it ended, so a ticket is trusted to be absent only from a listing
// that began after its writer stopped choosing.
//
// Each tag names a small manifest of its own; the writer deletes its tags
// when done. A tag whose expiry (Unix seconds, in its name) has passed
// belongs to a writer that died: waiters delete it. A holder checks its
// lease before committing, so a slow writer whose lock was taken from it
// commits nothing.
//
// The lock therefore needs a registry that deletes tags (DELETE of a
// manifest by tag). Tags cannot be given back any other way: one that is
// overwritten still names something, and the tags of every writer that
// ever ran would pile up in each listing. So before its first lock a Store
// asks the registry to delete a tag that does not exist: a registry that
// refuses deletes (distribution without storage.delete.enabled answers 405
// to every DELETE) is refused at once, with the fix, and nothing is
// written.

const (
	lockArtifactType = "application/vnd.render.lock.v1"
	choosingPrefix   = "lock-c-"
	ticketPrefix     = "lock-t-"
	// A waiter looks at the queue again after about pollStep per writer
	// ahead of it, at most pollLimit (queue).
	pollStep  = 40 * time.Millisecond
	pollLimit = time.Second
)

// queue is how a waiter for the lock waits: at most pollLimit, half of it
// at random, so that waiters do not look in lockstep.
var queue = wait.Policy{Limit: pollLimit, Jitter: 0.5}

type lockTag struct {
	tag     string
	number  uint64
	expires int64
	id      string
}

// parseLockTag reads a lock tag's fields; ok is false for other tags.
func parseLockTag(tag string) (lockTag, bool) {
	lt := lockTag{tag: tag}
	var fields []string
	switch {
	case strings.HasPrefix(tag, ticketPrefix):
		fields = strings.Split(strings.TrimPrefix(tag, ticketPrefix), "-")
		if len(fields) != 3 {
			return lt, false
		}
		n, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil || n == 0 {
			return lt, false
		}
		lt.number, fields = n, fields[1:]
	case strings.HasPrefix(tag, choosingPrefix):
		fields = strings.Split(strings.TrimPrefix(tag, choosingPrefix), "-")
		if len(fields) != 2 {
			return lt, false
		}
	default:
		return lt, false
	}
	exp, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil {
		return lt, false
	}
	lt.expires, lt.id = exp, fields[1]
	return lt, true
}

func (lt lockTag) choosing() bool { return lt.number == 0 }

func (lt lockTag) expired(now time.Time) bool { return now.Unix() > lt.expires }

// before orders tickets: by number, then by id.
func (lt lockTag) before(o lockTag) bool {
	if lt.number != o.number {
		return lt.number < o.number
	}
	return lt.id < o.id
}

// lock is a held lock.
type lock struct {
	s       *Store
	id      string
	ticket  string
	expires time.Time
}

// ErrLeaseExpired says a writer held the lock past its lease: others may
// have taken it, so it must not commit.
var errLeaseExpired = errors.New("the writers' lock lease ran out before the commit")

// valid reports whether the lease leaves margin for the commit.
func (l *lock) valid(ctx context.Context) error {
	if l.expires.Sub(wait.Now(ctx)) < l.s.cfg.LockLease/6 {
		return errLeaseExpired
	}
	return nil
}

func newID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail
	}
	return hex.EncodeToString(b[:])
}

// pushLockTag pushes a small manifest of its own under tag and returns it.
func (s *Store) pushLockTag(ctx context.Context, tag, id string) (ocispec.Descriptor, error) {
	if err := s.ensureBlob(ctx, s.base, ocispec.DescriptorEmptyJSON, ocispec.DescriptorEmptyJSON.Data); err != nil {
		return ocispec.Descriptor{}, err
	}
	m := ocispec.Manifest{
		Versioned:    specsVersioned,
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: lockArtifactType,
		Config:       ocispec.DescriptorEmptyJSON,
		Layers:       []ocispec.Descriptor{ocispec.DescriptorEmptyJSON},
		Annotations:  map[string]string{"dev.render.lock": tag, "dev.render.writer": id},
	}
	data, err := json.Marshal(m)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc := ocispec.Descriptor{MediaType: m.MediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}
	// The push itself is not cut short when ctx ends: a registry that
	// finishes a request after the client gave up on it would keep a tag
	// that nobody deletes, and that holds every other writer back for a
	// lease. It ends with ctx's error then, and the caller deletes the tag.
	pctx, cancel := wait.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err = s.retry(ctx, func() error { return s.base.PushReference(pctx, desc, bytes.NewReader(data), tag) })
	if err == nil {
		err = ctx.Err()
	}
	return desc, err
}

// errNoDeletes is a registry that refuses to delete tags.
var errNoDeletes = errors.New("the registry refuses to delete tags")

// noDeletes is the one line for a registry that refuses DELETE: what it
// answered, and what it must allow.
func noDeletes(method, path string, status int) error {
	return fmt.Errorf("%w (%s %s: %d %s), which the writers' lock needs: allow DELETE of manifests by tag (distribution's registry: storage.delete.enabled: true)",
		errNoDeletes, method, path, status, http.StatusText(status))
}

// checkDeletes makes sure, once per Store, that the registry deletes tags,
// by deleting one that does not exist, before the lock writes any tag.
func (s *Store) checkDeletes(ctx context.Context) error {
	s.mu.Lock()
	checked := s.deletesOK
	s.mu.Unlock()
	if checked {
		return nil
	}
	if err := s.untag(ctx, "lock-probe-"+newID()); err != nil {
		return err
	}
	s.mu.Lock()
	s.deletesOK = true
	s.mu.Unlock()
	return nil
}

// untag deletes a tag of the base repository (DELETE by tag, which
// distribution answers by removing the tag alone); one already gone is not
// an error. The lock's manifests, once untagged, are left to the
// registry's garbage collection: deleting a manifest by digest makes
// distribution look every tag up, which costs more than the manifest does.
func (s *Store) untag(ctx context.Context, tag string) error {
	scheme := "https"
	if s.cfg.Insecure {
		scheme = "http"
	}
	u := fmt.Sprintf("%s://%s/v2/%s/manifests/%s", scheme, s.cfg.Registry, s.cfg.Repository, tag)
	err := s.retry(ctx, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodDelete, u, nil)
		if err != nil {
			return err
		}
		resp, err := s.client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		switch {
		case resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusOK:
			return nil
		case resp.StatusCode == http.StatusNotFound:
			return nil // gone already
		case resp.StatusCode == http.StatusMethodNotAllowed:
			return noDeletes(req.Method, req.URL.Path, resp.StatusCode)
		}
		return &errcode.ErrorResponse{Method: req.Method, URL: req.URL, StatusCode: resp.StatusCode}
	})
	return err
}

// lockTags lists the base repository's lock tags.
func (s *Store) lockTags(ctx context.Context) ([]lockTag, error) {
	var out []lockTag
	err := s.retry(ctx, func() error {
		out = out[:0]
		return s.base.Tags(ctx, "", func(tags []string) error {
			for _, t := range tags {
				if lt, ok := parseLockTag(t); ok {
					out = append(out, lt)
				}
			}
			return nil
		})
	})
	if errors.Is(err, statestore.ErrNotFound) { // a repository with no tags yet
		return nil, nil
	}
	return out, err
}

// acquire takes the writers' lock, waiting for earlier writers up to the
// render's retry deadline. When it fails, the tags it had pushed are
// deleted; those it could not delete are named in its error (they hold
// other writers back until their lease ends).
func (s *Store) acquire(ctx context.Context) (*lock, error) {
	if err := s.checkDeletes(ctx); err != nil {
		return nil, err
	}
	l := &lock{s: s, id: newID()}
	l.expires = wait.Now(ctx).Add(s.cfg.LockLease)
	exp := l.expires.Unix()
	choosing := fmt.Sprintf("%s%d-%s", choosingPrefix, exp, l.id)
	// fail deletes tags and returns err, with the tags that stay.
	fail := func(err error, tags ...string) (*lock, error) {
		return nil, withLeft(err, s.untagAll(ctx, tags...))
	}
	if _, err := s.pushLockTag(ctx, choosing, l.id); err != nil {
		return fail(err, choosing) // it may have been tagged (a cancelled render)
	}
	tags, err := s.lockTags(ctx)
	if err != nil {
		return fail(err, choosing)
	}
	var number uint64
	for _, t := range tags {
		number = max(number, t.number)
	}
	number++
	me := lockTag{number: number, id: l.id, expires: exp}
	me.tag = fmt.Sprintf("%s%020d-%d-%s", ticketPrefix, number, exp, l.id)
	l.ticket = me.tag
	if _, err = s.pushLockTag(ctx, me.tag, l.id); err != nil {
		return fail(err, choosing, me.tag)
	}
	if err := s.untag(ctx, choosing); err != nil {
		return fail(err, me.tag, choosing)
	}
	// Writers choosing in a listing made after our ticket was tagged: wait
	// until each has its ticket (or is gone). Writers that start choosing
	// later see our ticket and queue behind it, so they need no wait.
	if tags, err = s.lockTags(ctx); err != nil {
		return fail(err, me.tag)
	}
	choosers := map[string]bool{}
	for _, t := range tags {
		if t.choosing() && t.id != l.id {
			choosers[t.tag] = true
		}
	}
	first := ""
	for attempt := 1; ; attempt++ {
		ahead, err := s.ahead(ctx, me, choosers)
		if err != nil {
			return fail(err, me.tag)
		}
		if first != "" && (len(ahead) == 0 || ahead[0] != first) {
			// The writer ahead let go of the lock (or lost it): the
			// registry is busy, not down.
			wait.Progress(ctx)
		}
		if len(ahead) > 0 {
			first = ahead[0]
		}
		if len(ahead) == 0 {
			if l.expires.Sub(wait.Now(ctx)) < s.cfg.LockLease/2 {
				// The wait ate most of the lease: take a fresh one. A
				// ticket left behind holds the next one back until its
				// lease ends: say so, and go on.
				if err := s.untagAll(ctx, me.tag); err != nil {
					s.warn("could not delete this writer's expired lock ticket: the next lock waits until its lease ends", "ticket", me.tag, "error", err.Error())
				}
				return s.acquire(ctx)
			}
			return l, nil
		}
		cause := fmt.Errorf("%w: waited for the writers' lock behind %d writers (first %s)", statestore.ErrConflict, len(ahead), ahead[0])
		// The further back in the queue, the less often it is worth
		// looking: about one writer's turn per writer ahead.
		if err := wait.For(ctx, queue.Jittered(time.Duration(len(ahead))*pollStep), attempt, cause); err != nil {
			return fail(err, me.tag)
		}
	}
}

// untagAll deletes tags, even when ctx was cancelled, and returns what
// could not be deleted.
func (s *Store) untagAll(ctx context.Context, tags ...string) error {
	cctx, cancel := wait.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var errs []string
	for _, t := range tags {
		if err := s.untag(cctx, t); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", t, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("could not delete lock tags, which hold other writers back until their lease ends: %s", strings.Join(errs, "; "))
	}
	return nil
}

// withLeft is err, with the lock tags left behind if there are some.
func withLeft(err, left error) error {
	if left == nil {
		return err
	}
	return fmt.Errorf("%w (and %w)", err, left)
}

// warn passes a message to the store's Warn, if it has one.
func (s *Store) warn(msg string, args ...any) {
	if s.cfg.Warn != nil {
		s.cfg.Warn(msg, args...)
	}
}

// ahead returns the tags of the writers that go before me: those of
// choosers still choosing, and tickets below mine, in one listing. The
// choosing tags of choosers found gone are forgotten. Abandoned tags are
// deleted on the way.
func (s *Store) ahead(ctx context.Context, me lockTag, choosers map[string]bool) ([]string, error) {
	tags, err := s.lockTags(ctx)
	if err != nil {
		return nil, err
	}
	now := wait.Now(ctx)
	present := map[string]bool{}
	var out []string
	for _, t := range tags {
		present[t.tag] = true
		if t.id == me.id || (t.choosing() && !choosers[t.tag]) || (!t.choosing() && !t.before(me)) {
			continue
		}
		if t.expired(now) {
			if err := s.untag(ctx, t.tag); err != nil {
				return nil, err
			}
			delete(choosers, t.tag)
			continue
		}
		out = append(out, t.tag)
	}
	for c := range choosers {
		if !present[c] {
			// Its ticket may have been tagged while this listing ran,
			// and be missing from it: look again before trusting it.
			delete(choosers, c)
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out, nil
}

// release lets the lock go, even when ctx was cancelled. A ticket that
// could not be deleted holds the next writer back until its lease ends.
func (l *lock) release(ctx context.Context) error {
	cctx, cancel := wait.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := l.s.untag(cctx, l.ticket); err != nil {
		return fmt.Errorf("release the writers' lock (%s; other writers wait until its lease ends at %s): %w", l.ticket, l.expires.UTC().Format(time.RFC3339), err)
	}
	return nil
}
