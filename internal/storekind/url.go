package storekind

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/render-dev/render/internal/redact"
)

// The spec fields that hold an address (a git URL, an S3 endpoint) never
// hold a credential: credentials come only from the Secret spec.secretRef
// names, so they are never copied where the address is (messages, the
// manifests `render bootstrap` prints).

// gitSchemes are the URL schemes go-git can write to.
var gitSchemes = map[string]bool{"http": true, "https": true, "ssh": true, "git": true, "file": true}

// checkGitURL validates a GitStateStore's spec.url, as go-git parses it:
// a URL whose scheme go-git writes to, git's scp-like user@host:path, or a
// path on this machine (absolute, or starting with ./ or ../). It holds no
// credential: a password in any URL, or a user name in an http(s) URL
// (which is sent as one), is refused, so credentials only come from the
// Secret that spec.secretRef names, and are never copied anywhere the URL
// is (messages, the manifests `render bootstrap` prints). The message
// never quotes the URL.
func checkGitURL(raw string) error {
	if raw != strings.TrimSpace(raw) || strings.ContainsAny(raw, "\x00\n\r\t") {
		return errors.New("spec.url holds white space or a control character")
	}
	if strings.HasPrefix(raw, "/") || strings.HasPrefix(raw, "./") || strings.HasPrefix(raw, "../") {
		return nil // a repository on this machine
	}
	if !strings.Contains(raw, "://") {
		ep, err := transport.NewEndpoint(raw)
		if err != nil || ep.Protocol != "ssh" {
			return errors.New("spec.url is neither a URL (https://, http://, ssh://, git://, file://), user@host:path, nor a path on this machine (absolute, or starting with ./)")
		}
		if strings.Contains(ep.User, ":") {
			_, pw, _ := strings.Cut(ep.User, ":")
			redact.Add(pw)
			return errors.New("spec.url holds a password: remove it, and put the credentials in the Secret that spec.secretRef names")
		}
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a password
		}
		if pw := userinfoPassword(raw); pw != "" {
			redact.Add(pw)
		}
		return fmt.Errorf("spec.url is not a valid URL: %v", err)
	}
	if pw, ok := u.User.Password(); ok {
		redact.Add(pw)
		return errors.New("spec.url holds a password: remove it, and put the credentials in the Secret that spec.secretRef names (authMethod basicAuth)")
	}
	switch {
	case !gitSchemes[u.Scheme]:
		return fmt.Errorf("spec.url has the scheme %q: use https, http, ssh, git or file", u.Scheme)
	case u.Scheme != "file" && u.Host == "":
		return errors.New("spec.url names no host")
	case u.Scheme != "file" && u.Port() != "" && !validPort(u.Port()):
		return fmt.Errorf("spec.url has the port %q, which is not a port number", u.Port())
	case (u.Scheme == "http" || u.Scheme == "https") && u.User != nil:
		redact.Add(u.User.Username())
		return errors.New("spec.url holds a user name, which git sends as a credential over http(s): remove it, and put the credentials in the Secret that spec.secretRef names (authMethod basicAuth)")
	}
	return nil
}

// checkEndpoint validates a BucketStateStore's spec.endpoint: it holds no
// credential (the access key comes from the Secret spec.secretRef names),
// and its port, if any, is a port number.
func checkEndpoint(raw string) error {
	at := strings.LastIndex(raw, "@")
	if at < 0 {
		hostport := raw
		if _, rest, ok := strings.Cut(raw, "://"); ok {
			hostport = rest
		}
		hostport = strings.TrimSuffix(hostport, "/")
		if host, port, err := net.SplitHostPort(hostport); err == nil {
			switch {
			case host == "":
				return errors.New("spec.endpoint names no host: it is host:port")
			case !validPort(port):
				return fmt.Errorf("spec.endpoint has the port %q, which is not a port number", port)
			}
		}
		return nil
	}
	info := raw[:at]
	if i := strings.Index(info, "://"); i >= 0 {
		info = info[i+3:]
	}
	if _, pw, ok := strings.Cut(info, ":"); ok {
		redact.Add(pw)
	}
	redact.Add(info)
	return errors.New("spec.endpoint holds credentials: it is host:port; put the access key in the Secret that spec.secretRef names")
}

// userinfoPassword finds the password of a URL that does not parse: what
// lies between the first ':' after the scheme and the last '@' before the
// path.
func userinfoPassword(raw string) string {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 && strings.LastIndex(rest[:i], "@") < 0 {
		rest = rest[:i]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	_, pw, _ := strings.Cut(rest[:at], ":")
	return pw
}

func validPort(p string) bool {
	if len(p) > 5 {
		return false
	}
	n := 0
	for _, c := range p {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n > 0 && n < 65536
}
