package driver

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"net/url"
	"os"
	"syscall"
	"testing"
)

func TestTransientIsDecidedByType(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"refused connection", refused, true},
		{"refused, wrapped in a url.Error", &url.Error{Op: "Get", URL: "http://x", Err: refused}, true},
		{"reset connection", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"connection ended early", fmt.Errorf("reading pack: %w", io.ErrUnexpectedEOF), true},
		{"i/o timeout", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, true},
		{"response cut in its headers", &url.Error{Op: "Post", URL: "http://x", Err: fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", textproto.ProtocolError("malformed MIME header line: Co"))}, true},
		{"name does not resolve", &url.Error{Op: "Get", URL: "http://x", Err: &net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}}, false},
		{"resolver timed out", &net.DNSError{Err: "timeout", Name: "x", IsTimeout: true}, true},
		{"unknown certificate authority", &url.Error{Op: "Get", URL: "https://x", Err: x509.UnknownAuthorityError{}}, false},
		{"cancelled", fmt.Errorf("push: %w", context.Canceled), false},
		// net/http's own error for a kept-alive connection the server
		// closed, which it does not export: the one message matched.
		{"server closed an idle connection", &url.Error{Op: "Get", URL: "http://x", Err: errors.New("http: server closed idle connection")}, true},
		// The old classifier matched words; a message is not a type.
		{"words only", errors.New("EOF timeout connection refused no such host"), false},
		{"nil", nil, false},
	}
	for _, c := range cases {
		if got := Transient(c.err); got != c.want {
			t.Errorf("%s: Transient(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
	if !NameNotFound(fmt.Errorf("fetch: %w", &net.DNSError{IsNotFound: true})) {
		t.Error("NameNotFound missed a wrapped *net.DNSError with IsNotFound")
	}
}
