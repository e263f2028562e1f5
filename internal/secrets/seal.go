package secrets

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"

	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
)

// Previous is what one store held of the workload when the render read it:
// its record (nil when none) and a view to read the files it names.
type Previous struct {
	Record *statestore.Record
	Snap   statestore.Snapshot
}

// Sealed is what Seal did.
type Sealed struct {
	// Plan is the plan with every plaintext Secret bound for an
	// encrypting destination encrypted; the plan given when there is none.
	Plan *renderer.Plan
	// Files are, per store, the record's entries for the files that hold
	// encrypted Secrets (statestore.Record.Sealed).
	Files map[renderer.StoreRef]map[string]statestore.SealedFile
	// Notes say what happened to each Secret, for the reports.
	Notes []Note
}

// Seal encrypts, in the files plan writes for workload, every plaintext
// Secret bound for a destination whose policy is encrypt (Check has
// refused what cannot be). A file whose plaintext, path and recipients are
// those the workload's record in the store has a digest of, and which the
// store still holds as render wrote it, keeps its stored bytes; any other
// is encrypted afresh. An aggregatedYAML destination's part is one file
// here: its Secrets are encrypted one document at a time, so the
// aggregated file holds each with its own sops metadata, as Flux decrypts
// them. prev gives what each store held (nil: nothing).
func Seal(ctx context.Context, plan *renderer.Plan, workload string, dests Destinations, prev func(renderer.StoreRef) Previous) (*Sealed, error) {
	out := &Sealed{Plan: plan, Files: map[renderer.StoreRef]map[string]statestore.SealedFile{}}
	var writes []renderer.StoreWrite
	changed := false
	for _, w := range plan.Writes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var p Previous
		if prev != nil {
			p = prev(w.Store)
		}
		sw, err := out.sealWrite(w, workload, dests, p)
		if err != nil {
			return nil, err
		}
		if sw != nil {
			writes = append(writes, *sw)
			changed = true
			continue
		}
		writes = append(writes, w)
	}
	if changed {
		c := *plan
		c.Writes = writes
		out.Plan = &c
	}
	sort.SliceStable(out.Notes, func(i, j int) bool {
		a, b := out.Notes[i], out.Notes[j]
		if a.Store != b.Store {
			return a.Store.String() < b.Store.String()
		}
		if a.Destination != b.Destination {
			return a.Destination < b.Destination
		}
		return a.File < b.File
	})
	return out, nil
}

// sealWrite seals one store's write; nil when nothing in it changes.
func (s *Sealed) sealWrite(w renderer.StoreWrite, workload string, dests Destinations, p Previous) (*renderer.StoreWrite, error) {
	var files map[string][]byte
	var aggs []renderer.Aggregate
	paths := make([]string, 0, len(w.Files))
	for f := range w.Files {
		paths = append(paths, f)
	}
	sort.Strings(paths)
	for _, f := range paths {
		d, ok := dests.at(w.Store, f)
		if !ok {
			continue
		}
		b, err := s.seal(w.Store, d, f, f, strings.TrimPrefix(f, d.Path+"/"), w.Files[f], p)
		if err != nil {
			return nil, err
		}
		if b != nil {
			if files == nil {
				files = maps.Clone(w.Files)
			}
			files[f] = b
		}
	}
	for i, a := range w.Aggregates {
		d, ok := dests.at(w.Store, a.Target)
		if !ok {
			continue
		}
		part := statestore.AggregatePath(a.Target, workload)
		b, err := s.seal(w.Store, d, a.Target, part, strings.TrimPrefix(a.Target, d.Path+"/"), a.Contribution, p)
		if err != nil {
			return nil, err
		}
		if b != nil {
			if aggs == nil {
				aggs = append([]renderer.Aggregate(nil), w.Aggregates...)
			}
			aggs[i].Contribution = b
		}
	}
	if files == nil && aggs == nil {
		return nil, nil
	}
	c := w
	if files != nil {
		c.Files = files
	}
	if aggs != nil {
		c.Aggregates = aggs
	}
	return &c, nil
}

// seal returns data (the content of file, whose bytes the store keeps at
// stored) with its plaintext Secrets encrypted for destination d, or nil
// when it is written as it is; rel names it in notes.
func (s *Sealed) seal(ref renderer.StoreRef, d Destination, file, stored, rel string, data []byte, p Previous) ([]byte, error) {
	sc, err := scan(file, data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err) // Check read it: cannot happen
	}
	if !sc.secrets {
		return nil, nil
	}
	note := func(a Action, doc doc) {
		n := Note{Store: ref, Destination: d.Name, File: rel, Secret: strings.TrimPrefix(doc.name, "Secret "), Action: a}
		if a == Encrypted || a == Kept {
			n.Recipients = len(d.Policy.Recipients)
		}
		s.Notes = append(s.Notes, n)
	}
	notes := func(plain Action) {
		for _, doc := range sc.docs {
			switch doc.kind {
			case plainSecret:
				note(plain, doc)
			case sopsSecret:
				note(PreEncrypted, doc)
			}
		}
	}
	if d.Policy.Mode != Encrypt || !sc.plain() {
		notes(Plaintext)
		return nil, nil
	}
	if len(d.Policy.DigestKey) == 0 || len(d.Policy.Recipients) == 0 {
		return nil, errors.New("secrets: destination " + d.Name + " encrypts without a digest key or recipients") // the engine checks both
	}
	digest := Digest(d.Policy.DigestKey, stored, d.Policy.Recipients, data)
	if b := s.kept(ref, stored, digest, p); b != nil {
		notes(Kept)
		return b, nil
	}
	b, err := sealFile(sc, d.Policy.Recipients)
	if err != nil {
		return nil, fmt.Errorf("encrypt the Secrets of %s for destination %s: %w", file, d.Name, err)
	}
	s.record(ref, stored, statestore.SealedFile{Plain: digest, Stored: storedDigest(b)})
	notes(Encrypted)
	return b, nil
}

// kept returns the bytes the store holds at path when the workload's
// record has digest for them and the store still holds what render
// wrote there; nil otherwise.
func (s *Sealed) kept(ref renderer.StoreRef, path, digest string, p Previous) []byte {
	if p.Record == nil || p.Snap == nil {
		return nil
	}
	e, ok := p.Record.Sealed[path]
	if !ok || e.Plain != digest {
		return nil
	}
	b, err := p.Snap.ReadFile(path)
	if err != nil || storedDigest(b) != e.Stored {
		return nil // gone or changed in the store: encrypt again
	}
	s.record(ref, path, e)
	return b
}

func (s *Sealed) record(ref renderer.StoreRef, path string, e statestore.SealedFile) {
	if s.Files[ref] == nil {
		s.Files[ref] = map[string]statestore.SealedFile{}
	}
	s.Files[ref][path] = e
}
