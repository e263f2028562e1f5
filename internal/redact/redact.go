// Package redact keeps secret values out of the messages render prints.
// The inputs register every secret field as they load it (Secret data and
// stringData, mounted secret files, the password of a URL), except the
// identifiers that also name things (a user name, an access key ID) and
// public material; the command line wraps its standard output and standard
// error in a Writer, which replaces each registered value, and its base64
// and URL-escaped forms, wherever it appears: messages, log lines and
// reports alike, however the value got there. The documents render prints
// (render bootstrap) bypass it: they hold no secret by construction, and a
// value that happens to spell a name in them must not break them.
//
// Redaction works on each Write: a value split across two writes is not
// seen. The loggers and reports render writes each line or document in one
// write.
package redact

import (
	"encoding/base64"
	"io"
	"net/url"
	"sort"
	"strings"
	"sync"
)

// Mask replaces a secret value.
const Mask = "[redacted]"

// MinLen is the shortest value redacted. Shorter values are too short to be
// a credential, and masking every occurrence of them would shred the text.
const MinLen = 4

// Set is a set of secret values. Its zero value is empty and ready.
type Set struct {
	mu       sync.RWMutex
	values   map[string]bool
	replacer *strings.Replacer
}

// Default is the set the inputs register into and the CLI's writers read.
var Default = &Set{}

// Add registers values in the Default set.
func Add(values ...string) { Default.Add(values...) }

// String removes the Default set's values from s.
func String(s string) string { return Default.String(s) }

// Add registers values: each as given and without surrounding white space,
// each line of a multi-line value (a line of a key can turn up alone in an
// error), and the base64 and URL-escaped forms of each.
func (s *Set) Add(values ...string) {
	var forms []string
	for _, v := range values {
		cands := []string{v, strings.TrimSpace(v)}
		if strings.Contains(v, "\n") {
			for _, line := range strings.Split(v, "\n") {
				cands = append(cands, strings.TrimSpace(line))
			}
		}
		for _, c := range cands {
			if len(c) < MinLen {
				continue
			}
			forms = append(forms, c, base64.StdEncoding.EncodeToString([]byte(c)), url.QueryEscape(c), url.PathEscape(c), url.UserPassword("", c).String()[1:])
		}
	}
	if len(forms) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.values == nil {
		s.values = map[string]bool{}
	}
	added := false
	for _, f := range forms {
		if len(f) >= MinLen && !s.values[f] {
			s.values[f] = true
			added = true
		}
	}
	if !added {
		return
	}
	// Longest first, so a value that holds another is masked whole.
	all := make([]string, 0, len(s.values))
	for v := range s.values {
		all = append(all, v)
	}
	sort.Slice(all, func(i, j int) bool {
		if len(all[i]) != len(all[j]) {
			return len(all[i]) > len(all[j])
		}
		return all[i] < all[j]
	})
	pairs := make([]string, 0, 2*len(all))
	for _, v := range all {
		pairs = append(pairs, v, Mask)
	}
	s.replacer = strings.NewReplacer(pairs...)
}

// String returns str with every registered value masked.
func (s *Set) String(str string) string {
	s.mu.RLock()
	r := s.replacer
	s.mu.RUnlock()
	if r == nil {
		return str
	}
	return r.Replace(str)
}

// Writer returns a writer that masks the Default set's values in
// everything written through it to w.
func Writer(w io.Writer) io.Writer { return &writer{w: w, set: Default} }

// SetWriter is Writer for another set.
func (s *Set) Writer(w io.Writer) io.Writer { return &writer{w: w, set: s} }

type writer struct {
	w   io.Writer
	set *Set
}

func (w *writer) Write(p []byte) (int, error) {
	out := w.set.String(string(p))
	if _, err := io.WriteString(w.w, out); err != nil {
		return 0, err
	}
	return len(p), nil
}
