package driver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/render-dev/render/statestore"
)

// The classification every backend shares for failures below its
// protocol (a connection, a name, TLS): TranslateNetwork turns them into
// the contract's errors, wrapping statestore.ErrUnreachable only what
// waiting may cure (Transient), so that the waits of statestore/wait
// retry it, and reporting the rest at once.

// Transient reports whether err is a network failure that trying again may
// cure: a refused, reset or aborted connection, a timeout, an unreachable
// network, or a connection that ended early. A name that does not resolve,
// a TLS or certificate failure, and a cancelled context are not transient:
// waiting does not fix them.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return !dns.IsNotFound && (dns.IsTimeout || dns.IsTemporary)
	}
	if TLSFailure(err) {
		return false
	}
	for _, errno := range []syscall.Errno{
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.ENETUNREACH, syscall.EHOSTUNREACH, syscall.ETIMEDOUT, syscall.ENETDOWN,
	} {
		if errors.Is(err, errno) {
			return true
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	// net/http's "server closed idle connection" has no exported type: a
	// kept-alive connection the server had closed (a restarting server
	// does), so the request never reached it. Matched by its text.
	if strings.Contains(err.Error(), "server closed idle connection") {
		return true
	}
	// A response cut off in the middle of its headers ("malformed MIME
	// header"): the connection broke after the request was sent.
	var cut textproto.ProtocolError
	if errors.As(err, &cut) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op)
}

// NameNotFound reports whether err says a host name does not resolve, which
// is a configuration mistake to report at once, not a server to wait for.
func NameNotFound(err error) bool {
	var dns *net.DNSError
	return errors.As(err, &dns) && dns.IsNotFound
}

// TLSFailure reports whether err is a TLS handshake or certificate failure:
// an unknown authority, a wrong host name, an invalid certificate, or a
// server that does not speak TLS.
func TLSFailure(err error) bool {
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	var record tls.RecordHeaderError
	return errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &verify) || errors.As(err, &record)
}

// Network describes, for TranslateNetwork's messages, what a backend was
// talking to: the server (an endpoint, a host) and the field of the
// store's spec that names it.
type Network struct {
	// Server is what was dialled ("127.0.0.1:9000", "git.example").
	Server string
	// Field is the spec field that names it ("endpoint", "url").
	Field string
	// Redact removes credentials from a message (nil: none to remove).
	Redact func(string) string
}

// TranslateNetwork is the error classification every backend shares, for
// failures below its protocol: a host name that does not resolve and a TLS
// failure are reported at once, naming the field to check (waiting does
// not fix them); a refused, reset or timed-out connection wraps
// statestore.ErrUnreachable, so wait.Policy.Retry waits for it. ok is false when err
// is none of these: the backend's own classification stands.
func TranslateNetwork(err error, n Network) (out error, ok bool) {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, statestore.ErrUnreachable) || errors.Is(err, statestore.ErrAuth) || errors.Is(err, statestore.ErrNotFound) || errors.Is(err, statestore.ErrConflict) {
		return err, false
	}
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = ue.Err.Error() // without the request's URL
	}
	if n.Redact != nil {
		msg = n.Redact(msg)
	}
	server := ""
	if n.Server != "" {
		server = " of " + n.Server
	}
	field := n.Field
	if field == "" {
		field = "address"
	}
	switch {
	case NameNotFound(err):
		return statestore.Redacted(fmt.Sprintf("the host name%s does not resolve (check the store's %s): %s", server, field, msg), err), true
	case Transient(err):
		return statestore.Redacted(fmt.Sprintf("%v: %s", statestore.ErrUnreachable, withServer(n.Server, msg)), errors.Join(statestore.ErrUnreachable, err)), true
	case TLSFailure(err):
		return statestore.Redacted("TLS"+strings.Replace(server, " of ", " with ", 1)+": "+msg, err), true
	}
	return err, false
}

func withServer(server, msg string) string {
	if server == "" {
		return msg
	}
	return server + ": " + msg
}
