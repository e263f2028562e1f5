package redact

import (
	"bytes"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
)

func TestMasksEveryForm(t *testing.T) {
	var s Set
	pw := "p@ss/w:rd secret"
	key := "-----BEGIN KEY-----\nAAAAB3NzaC1yc2EAAAADAQABAAABAQ\nCcQ2Y6hZ\n-----END KEY-----\n"
	s.Add(pw, key, "abc", "")
	for _, leak := range []string{
		pw, base64.StdEncoding.EncodeToString([]byte(pw)), url.QueryEscape(pw), url.PathEscape(pw),
		url.UserPassword("u", pw).String(), "AAAAB3NzaC1yc2EAAAADAQABAAABAQ", key,
	} {
		var b bytes.Buffer
		w := s.Writer(&b)
		msg := "error: https://" + leak + "@host failed\n"
		n, err := w.Write([]byte(msg))
		if err != nil || n != len(msg) {
			t.Fatalf("Write = %d, %v", n, err)
		}
		out := b.String()
		if strings.Contains(out, leak) || !strings.Contains(out, Mask) {
			t.Errorf("%q written as %q", leak, out)
		}
	}
	// Short values are not masked: they would shred the text.
	if got := s.String("abc def"); got != "abc def" {
		t.Errorf("a 3-byte value was masked: %q", got)
	}
}

// A value that holds another registered value is masked whole.
func TestLongestFirst(t *testing.T) {
	var s Set
	s.Add("hunter2", "hunter2-and-more")
	if got := s.String("x hunter2-and-more y"); got != "x "+Mask+" y" {
		t.Errorf("got %q", got)
	}
}
