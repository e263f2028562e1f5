package s3store

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/bookkeeping"
	"github.com/render-dev/render/statestore/driver"
)

// revisionField is the field sealRecord adds to a stored record, and
// markersField the one naming the destinations holding the workload's
// completeness marker.
const (
	revisionField = "s3Revision"
	markersField  = "s3Markers"
	// pendingField names, in a stored record, the paths a write of the
	// workload is creating and has not committed yet (see withPending).
	pendingField = "s3Pending"
	// writerField and untilField are, beside pendingField, the intent's
	// lease (see lease.go).
	writerField = "s3Writer"
	untilField  = "s3Until"
)

func nonce() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail
	}
	return hex.EncodeToString(b[:])
}

// sealRecord adds a random revision to an encoded record, so that every
// commit changes the record's ETag even when the record itself is
// unchanged: the ETag is what writers of one workload synchronise on. It
// also adds the destinations that hold (or are about to hold) the
// workload's completeness marker, so that a later render knows which
// markers to delete without listing any destination. The result is still
// the record's JSON (decoders ignore the extra fields).
func sealRecord(canonical []byte, markers []string) []byte {
	body, ok := bytes.CutSuffix(canonical, []byte("\n}\n"))
	if !ok || !bytes.HasPrefix(canonical, []byte("{\n")) {
		panic("s3store: record encoding changed: " + string(canonical))
	}
	out := append(make([]byte, 0, len(canonical)+64), body...)
	if len(markers) > 0 {
		list, err := json.Marshal(markers)
		if err != nil {
			panic(err) // only strings
		}
		out = fmt.Appendf(out, ",\n  %q: %s", markersField, list)
	}
	return fmt.Appendf(out, ",\n  %q: %q\n}\n", revisionField, nonce())
}

// withPending is a sealed record with the paths a write is about to
// create that the record does not own yet: its intent, written (with the
// record's ETag as the precondition) before the write uploads anything. A
// write that dies or gives up before its commit leaves them owned by the
// workload (readers of the record see them among its files: absorbPending),
// so that the workload's next write deletes those it does not want, and
// its intent, a change of the record, fails the commit of every other
// writer of the workload that planned before it, as a commit would.
//
// The intent carries its writer's lease (see lease.go; the zero lease:
// none).
func withPending(sealed []byte, pending []string, l lease) []byte {
	body, ok := bytes.CutSuffix(sealed, []byte("\n}\n"))
	if !ok || len(pending) == 0 {
		return sealed
	}
	list, err := json.Marshal(pending)
	if err != nil {
		panic(err) // only strings
	}
	body = fmt.Appendf(slices.Clip(body), ",\n  %q: %s", pendingField, list) // sealed stays as it is
	if l.Writer != "" {
		body = fmt.Appendf(body, ",\n  %q: %q,\n  %q: %q", writerField, l.Writer, untilField, l.Until.UTC().Format(time.RFC3339Nano))
	}
	return append(body, "\n}\n"...)
}

// storedPending returns the paths a stored record's pending write was
// creating.
func storedPending(stored []byte) []string {
	var probe struct {
		Pending []string `json:"s3Pending"`
	}
	if json.Unmarshal(stored, &probe) != nil {
		return nil
	}
	// A write before the index marker was made apart from plans could
	// name it (see ensureIndexed): it is nobody's.
	return slices.DeleteFunc(probe.Pending, func(p string) bool { return p == bookkeeping.IndexMarker })
}

// absorbPending returns a stored record with its pending paths among its
// files, as the planner and every reader take it: the workload owns them.
// A record without any is returned as it is.
func absorbPending(stored []byte) []byte {
	var probe map[string]json.RawMessage
	if json.Unmarshal(stored, &probe) != nil || probe[pendingField] == nil {
		return stored
	}
	var pending, files []string
	if json.Unmarshal(probe[pendingField], &pending) != nil {
		return stored
	}
	pending = slices.DeleteFunc(pending, func(p string) bool { return p == bookkeeping.IndexMarker })
	_ = json.Unmarshal(probe["files"], &files)
	set := setOf(files)
	for _, p := range pending {
		set[p] = true
	}
	b, err := json.Marshal(sortedSet(set))
	if err != nil {
		return stored
	}
	probe["files"] = b
	delete(probe, pendingField)
	out, err := json.Marshal(probe)
	if err != nil {
		return stored
	}
	return out
}

// storedMarkers returns the destinations a stored record says hold the
// workload's marker, and whether the record says it at all (records
// written before per-workload markers do not).
func storedMarkers(stored []byte) ([]string, bool) {
	var probe struct {
		Markers *[]string `json:"s3Markers"`
	}
	if json.Unmarshal(stored, &probe) != nil || probe.Markers == nil {
		return nil, false
	}
	return *probe.Markers, true
}

// unsealRecord returns a stored record as Record.Encode wrote it: decoded
// (which drops the revision and the markers) and encoded again. A stored
// object that is not a record is returned as it is, so it compares unequal
// to any record.
func unsealRecord(stored []byte) []byte {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(stored, &probe); err != nil {
		return stored
	}
	if _, ok := probe[revisionField]; !ok {
		return stored
	}
	rec, err := statestore.DecodeRecord("", stored)
	if err != nil {
		return stored
	}
	return rec.Encode()
}

// A tombstone replaces the record of a removed workload: S3 cannot delete
// conditionally, and an unconditional delete could remove the record of a
// writer that re-created the workload meanwhile. Tombstones have a fixed
// size, far below any record's, so the listing alone tells them apart.
const tombstonePrefix = `{"s3Tombstone":"`

var tombstoneSize = int64(len(tombstone()))

func tombstone() []byte { return []byte(tombstonePrefix + nonce() + "\"}\n") }

func isTombstone(p string, size int64) bool { return size == tombstoneSize && isRecordPath(p) }

// MarkerName is the name of the completeness marker that render before
// per-workload markers kept at the root of each destination. Render no
// longer writes it, deletes it where a workload's first render under this
// version writes its own marker, and still refuses it as a file name.
const MarkerName = layout.MarkerName

// MarkerDir is the folder, relative to a destination, that holds the
// completeness markers of the workloads writing there: one per workload,
// at MarkerDir/<workload key>.json (see MarkerPath). It is inside the
// destination, so a reader that lists the destination (a Flux Bucket with
// the destination's prefix) sees them, and outside every folder Flux or
// Argo CD builds; no workload file may be written there.
var MarkerDir = path.Join(layout.MetaDir, "complete")

// MarkerPath is where workload's marker in destination dest lives,
// relative to the store's path.
func MarkerPath(dest, workload string) string {
	return path.Join(dest, MarkerDir, workload+".json")
}

// isMarker reports whether the store-relative path p is a completeness
// marker: a per-workload one, or an old per-destination one.
func isMarker(p string) bool {
	return path.Base(p) == MarkerName || strings.Contains("/"+p, "/"+MarkerDir+"/") && !layout.IsMeta(p)
}

// MarkerFormat is the version of the marker layout: 2 is one marker per
// workload and destination (1 was one marker per destination).
const MarkerFormat = 2

// Marker is the content of one workload's completeness marker in one
// destination. It is written after everything else of the workload's
// render, so a reader that lists the destination and finds every file of
// Files with the ETag the marker gives knows that the workload's render in
// this destination is complete.
type Marker struct {
	Format int `json:"format"`
	// Destination is the destination's path, relative to the store's path.
	Destination string `json:"destination"`
	// Workload is the workload whose render wrote the marker.
	Workload string `json:"workload"`
	// Files maps each of the workload's files in the destination, by path
	// relative to the destination, to its ETag as ListObjectsV2 reports it
	// (without quotes).
	Files map[string]string `json:"files"`
	// Aggregates are the aggregated files of the destination (relative to
	// it) that hold a part of this workload's. Other workloads rewrite them,
	// so the marker names them without an ETag.
	Aggregates []string `json:"aggregates,omitempty"`
	// Shared are the shared files (the canaries) of the destination the
	// workload wants present; they are owned by nobody and never change.
	Shared []string `json:"shared,omitempty"`
	// Digest is DestinationDigest(Files), and Objects len(Files).
	Digest  string `json:"digest"`
	Objects int    `json:"objects"`
	// Subject and Trailers are the render's provenance (Update.Message).
	Subject  string               `json:"subject"`
	Trailers []statestore.Trailer `json:"trailers,omitempty"`
}

// DestinationDigest is the digest a marker records. etags maps objects,
// by path relative to the destination folder, to their ETags as
// ListObjectsV2 reports them, without quotes; markers are left out. The
// digest is "sha256:" and the hex SHA-256 of one line "<etag>  <path>\n"
// per object, sorted by path.
func DestinationDigest(etags map[string]string) string {
	paths := make([]string, 0, len(etags))
	for p := range etags {
		if !isMarker(p) && !strings.HasPrefix(p, MarkerDir+"/") {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	h := sha256.New()
	for _, p := range paths {
		fmt.Fprintf(h, "%s  %s\n", strings.ToLower(strings.Trim(etags[p], `"`)), p)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func encodeMarker(m Marker) []byte {
	m.Format = MarkerFormat
	b, err := json.MarshalIndent(&m, "", "  ")
	if err != nil {
		panic(err) // only strings and ints
	}
	return append(b, '\n')
}

// newMarker describes workload u's files (etags, relative to dest) and
// aggregated files in dest, with u's provenance.
func newMarker(dest string, etags map[string]string, aggregates, shared []string, u statestore.Update) Marker {
	m := Marker{
		Destination: dest, Workload: u.Workload, Files: etags, Aggregates: aggregates, Shared: shared,
		Digest: DestinationDigest(etags), Objects: len(etags), Subject: u.Message.Subject,
	}
	if m.Files == nil {
		m.Files = map[string]string{}
	}
	m.Trailers = append(m.Trailers, u.Message.Trailers...)
	return m
}

// sameContent reports whether a stored marker describes exactly what m
// does (provenance aside).
func (m Marker) sameContent(stored []byte) bool {
	var old Marker
	if json.Unmarshal(stored, &old) != nil {
		return false
	}
	return old.Format == MarkerFormat && old.Destination == m.Destination && old.Workload == m.Workload &&
		maps.Equal(old.Files, m.Files) && slices.Equal(old.Aggregates, m.Aggregates) && slices.Equal(old.Shared, m.Shared)
}

// DestinationState is what VerifyDestination found in one destination.
type DestinationState struct {
	// Markers are the destination's per-workload markers.
	Markers []Marker
	// Mismatched are the files (relative to the destination) that a marker
	// names and that are missing or have another ETag, and the aggregated
	// and shared files a marker names that are missing.
	Mismatched []string
	// Unnamed are the objects no marker names: files of a render under way
	// (or of one that died before its marker), or not render's.
	Unnamed []string
}

// Complete reports whether every workload's render in the destination is
// whole: everything a marker names is there as named, and nothing else is.
func (st DestinationState) Complete() bool { return len(st.Mismatched) == 0 && len(st.Unnamed) == 0 }

// VerifyDestination checks destination dest (a path relative to the
// store's path) as a reader of the bucket would: one listing of the
// destination (one request per 1,000 objects) and one GET per workload
// marker in it. It is what a tool that wants to know "is what I see
// complete?" does; render itself never needs it.
func (s *Store) VerifyDestination(ctx context.Context, dest string) (DestinationState, error) {
	var st DestinationState
	dest = strings.Trim(dest, "/")
	if err := layout.ValidPath(dest); err != nil {
		return st, driver.Wrap(s.String(), "verify", err)
	}
	ctx = s.Policy.Context(ctx)
	sn, err := s.list(ctx, dest)
	if err != nil {
		return st, driver.Wrap(s.String(), "verify", err)
	}
	listing := map[string]string{}
	var markers []Marker
	for p, o := range sn.objs {
		rel := strings.TrimPrefix(p, dest+"/")
		listing[rel] = o.etag
		if !strings.HasPrefix(rel, MarkerDir+"/") {
			continue
		}
		data, err := sn.ReadFile(p)
		if err != nil {
			return st, driver.Wrap(s.String(), "verify", err)
		}
		var m Marker
		if err := json.Unmarshal(data, &m); err != nil {
			return st, driver.Wrap(s.String(), "verify", fmt.Errorf("marker %s: %w", p, err))
		}
		markers = append(markers, m)
	}
	return CheckListing(listing, markers), nil
}

// IsMarkerKey reports whether p, relative to a destination, is a
// completeness marker (a workload's, or the old per-destination one).
func IsMarkerKey(p string) bool { return p == MarkerName || strings.HasPrefix(p, MarkerDir+"/") }

// CheckListing is the check VerifyDestination makes, over a listing of
// a destination a reader has already made (ETags by path relative to the
// destination, markers included or not) and the workload markers it read
// from it.
func CheckListing(listing map[string]string, markers []Marker) DestinationState {
	st := DestinationState{Markers: append([]Marker(nil), markers...)}
	named := map[string]bool{}
	for _, m := range markers {
		for f, etag := range m.Files {
			named[f] = true
			if got, ok := listing[f]; !ok || trimETag(got) != trimETag(etag) {
				st.Mismatched = append(st.Mismatched, f)
			}
		}
		for _, f := range append(append([]string(nil), m.Aggregates...), m.Shared...) {
			named[f] = true
			if _, ok := listing[f]; !ok {
				st.Mismatched = append(st.Mismatched, f)
			}
		}
	}
	for p := range listing {
		if !named[p] && !IsMarkerKey(p) {
			st.Unnamed = append(st.Unnamed, p)
		}
	}
	sort.Slice(st.Markers, func(i, j int) bool { return st.Markers[i].Workload < st.Markers[j].Workload })
	st.Mismatched = sortedSet(setOf(st.Mismatched))
	sort.Strings(st.Unnamed)
	return st
}

func setOf(list []string) map[string]bool {
	m := make(map[string]bool, len(list))
	for _, x := range list {
		m[x] = true
	}
	return m
}
