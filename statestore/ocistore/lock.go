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
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote/errcode"

	"github.com/render-dev/render/statestore"
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
//  4. It waits until a listing shows nobody choosing, and a later listing
//     shows no ticket below its own (number, then id, order them).
//
// A writer that started choosing after our ticket was tagged sees our
// ticket and takes a higher number; one that was choosing before is seen
// choosing in step 4, or its ticket is. Each tag names a manifest of its
// own; the writer deletes its tags when done. A tag whose expiry
// (Unix seconds, in its name) has passed belongs to a writer that died:
// waiters delete it. A holder checks its lease before committing, so a
// slow writer whose lock was taken from it commits nothing.

const (
	lockArtifactType = "application/vnd.render.lock.v1"
	choosingPrefix   = "lock-c-"
	ticketPrefix     = "lock-t-"
	// pollLimit caps the wait between two looks at the queue.
	pollLimit = 400 * time.Millisecond
)

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
func (l *lock) valid() error {
	if time.Until(l.expires) < l.s.cfg.LockLease/6 {
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
	err = s.retry(ctx, func() error { return s.base.PushReference(ctx, desc, bytes.NewReader(data), tag) })
	return desc, err
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
// render's retry deadline.
func (s *Store) acquire(ctx context.Context) (*lock, error) {
	l := &lock{s: s, id: newID()}
	l.expires = time.Now().Add(s.cfg.LockLease)
	exp := l.expires.Unix()
	choosing := fmt.Sprintf("%s%d-%s", choosingPrefix, exp, l.id)
	if _, err := s.pushLockTag(ctx, choosing, l.id); err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	cleanup := func(tags ...string) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, t := range tags {
			_ = s.untag(cctx, t)
		}
	}
	tags, err := s.lockTags(ctx)
	if err != nil {
		cleanup(choosing)
		return nil, fmt.Errorf("lock: %w", err)
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
		cleanup(choosing, me.tag)
		return nil, fmt.Errorf("lock: %w", err)
	}
	if err := s.untag(ctx, choosing); err != nil {
		cleanup(me.tag, choosing)
		return nil, fmt.Errorf("lock: %w", err)
	}
	waitingFor := ""
	for attempt := 1; ; attempt++ {
		blocker, err := s.blocker(ctx, me)
		if err != nil {
			cleanup(l.ticket)
			return nil, fmt.Errorf("lock: %w", err)
		}
		if blocker == "" {
			if time.Until(l.expires) < s.cfg.LockLease/2 {
				// The wait ate most of the lease: take a fresh one.
				cleanup(l.ticket)
				return s.acquire(ctx)
			}
			return l, nil
		}
		if blocker != waitingFor {
			waitingFor, attempt = blocker, 1
		}
		cause := fmt.Errorf("%w: waited for the writers' lock, held by %s", statestore.ErrConflict, blocker)
		if err := statestore.Pause(ctx, min(attempt, 5), pollLimit, cause); err != nil {
			cleanup(l.ticket)
			return nil, err
		}
	}
}

// blocker returns the tag of a writer that goes before me, or "" when
// there is none. Abandoned tags are deleted on the way.
func (s *Store) blocker(ctx context.Context, me lockTag) (string, error) {
	for _, choosingPass := range []bool{true, false} {
		tags, err := s.lockTags(ctx)
		if err != nil {
			return "", err
		}
		now := time.Now()
		for _, t := range tags {
			if t.id == me.id || t.choosing() != choosingPass || (!choosingPass && !t.before(me)) {
				continue
			}
			if t.expired(now) {
				if err := s.untag(ctx, t.tag); err != nil {
					return "", err
				}
				continue
			}
			return t.tag, nil
		}
	}
	return "", nil
}

// release lets the lock go.
func (l *lock) release(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return l.s.untag(cctx, l.ticket)
}
