package storekind

import (
	"net/url"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/transport"
)

// FuzzGitURL: a store URL checkGitURL accepts carries no credential as
// go-git parses it (no password; no user at all over http(s)); a refusal
// never quotes the URL nor its password.
func FuzzGitURL(f *testing.F) {
	for _, s := range []string{
		"https://git.example.com/org/state.git", "http://render:pw@host/x", "https://tok@github.com/o/r",
		"ssh://git:pw@host/x", "git:pw@host:org/r", "git@host:org/r", "ssh://host/org/repo@v2.git",
		"https://u:p@ss@host/x", "http://[::1", "file:///srv/x.git", "./x.git", "ftp://h/x", "https://h:99999/x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		err := checkGitURL(raw)
		if err != nil {
			msg := err.Error()
			if len(raw) >= 8 && strings.Contains(msg, raw) {
				t.Fatalf("the refusal quotes the URL: %s", msg)
			}
			if u, perr := url.Parse(raw); perr == nil && u.User != nil {
				if pw, ok := u.User.Password(); ok && len(pw) >= 6 && strings.Contains(msg, pw) {
					t.Fatalf("the refusal quotes the password: %s", msg)
				}
			}
			return
		}
		ep, perr := transport.NewEndpoint(raw)
		if perr != nil {
			return // a local path go-git takes as it is
		}
		if ep.Password != "" {
			t.Fatalf("accepted %q, which carries a password", raw)
		}
		if (ep.Protocol == "http" || ep.Protocol == "https") && ep.User != "" {
			t.Fatalf("accepted %q, which carries a user over http(s)", raw)
		}
		if strings.Contains(ep.User, ":") {
			t.Fatalf("accepted %q, whose user holds a password", raw)
		}
	})
}
