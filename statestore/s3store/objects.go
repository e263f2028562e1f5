package s3store

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/statestore"
)

// revisionField is the field sealRecord adds to a stored record.
const revisionField = "s3Revision"

func nonce() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail
	}
	return hex.EncodeToString(b[:])
}

// sealRecord adds a random revision to an encoded record, so that every
// commit changes the record's ETag even when the record itself is
// unchanged: the ETag is what writers of one workload synchronise on. The
// result is still the record's JSON (decoders ignore the extra field).
func sealRecord(canonical []byte) []byte {
	body, ok := bytes.CutSuffix(canonical, []byte("\n}\n"))
	if !ok || !bytes.HasPrefix(canonical, []byte("{\n")) {
		panic("s3store: record encoding changed: " + string(canonical))
	}
	out := append(make([]byte, 0, len(canonical)+64), body...)
	return fmt.Appendf(out, ",\n  %q: %q\n}\n", revisionField, nonce())
}

// unsealRecord returns a stored record as Record.Encode wrote it: decoded
// (which drops the revision) and encoded again. A stored object that is not
// a record is returned as it is, so it compares unequal to any record.
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

// MarkerName is the name of the completeness marker Apply writes in each
// destination folder, after the destination's files. It is JSON, never
// YAML, so GitOps tools that read *.yaml ignore it.
const MarkerName = layout.MarkerName

// MarkerFormat is the version of the marker layout.
const MarkerFormat = 1

// Marker is the content of a destination's completeness marker.
type Marker struct {
	Format int `json:"format"`
	// Destination is the destination's path, relative to the store's path.
	Destination string `json:"destination"`
	// Digest is DestinationDigest of the destination's objects as the
	// writer left them.
	Digest string `json:"digest"`
	// Objects counts the objects the digest covers.
	Objects int `json:"objects"`
	// Workload is the workload whose render wrote the marker.
	Workload string `json:"workload"`
	// Subject and Trailers are the render's provenance (Update.Message).
	Subject  string               `json:"subject"`
	Trailers []statestore.Trailer `json:"trailers,omitempty"`
}

// DestinationDigest is the digest a marker records. etags maps every object
// below the destination folder, by path relative to that folder, to its
// ETag as ListObjectsV2 reports it, without quotes; objects named MarkerName
// are left out. The digest is "sha256:" and the hex SHA-256 of one line
// "<etag>  <path>\n" per object, sorted by path, so that a reader can
// verify a destination with one listing.
func DestinationDigest(etags map[string]string) string {
	paths := make([]string, 0, len(etags))
	for p := range etags {
		if !isMarker(p) {
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

func newMarker(dest string, etags map[string]string, u statestore.Update) Marker {
	m := Marker{Destination: dest, Digest: DestinationDigest(etags), Workload: u.Workload, Subject: u.Message.Subject}
	for p := range etags {
		if !isMarker(p) {
			m.Objects++
		}
	}
	m.Trailers = append(m.Trailers, u.Message.Trailers...)
	return m
}
