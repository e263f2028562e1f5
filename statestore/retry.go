package statestore

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
	"time"
)

// The render's retry deadline, and the error classification every backend
// shares. How a loop waits (backoff, jitter, the deadline rule) is
// statestore/wait's.
//
// A render has ONE retry deadline: WithRetryDeadline starts its clock when
// the render starts, and every wait of every store during that render (an
// unreachable server, a lost race for a branch or an object) stops once it
// has passed. A backend asked to work with no deadline in its context starts
// one of its own with EnsureRetryDeadline, so nothing retries forever.
//
// What is retried is decided by type, never by an error's text: an error is
// retried when it wraps ErrUnreachable, and backends wrap a raw error in
// ErrUnreachable only when Transient says so (or when their protocol says so:
// an HTTP 503, S3's SlowDown).

// DefaultRetryDeadline is the retry budget of a render that sets none.
const DefaultRetryDeadline = 2 * time.Minute

type deadlineKey struct{}

type retryDeadline struct {
	at     time.Time
	budget time.Duration
}

// WithRetryDeadline starts the render's retry clock: from now, every retry of
// every store stops once budget has passed. A budget of zero or less means
// DefaultRetryDeadline.
func WithRetryDeadline(ctx context.Context, budget time.Duration) context.Context {
	if budget <= 0 {
		budget = DefaultRetryDeadline
	}
	return context.WithValue(ctx, deadlineKey{}, retryDeadline{at: Now(ctx).Add(budget), budget: budget})
}

// EnsureRetryDeadline returns ctx unchanged when it already carries a retry
// deadline, and otherwise starts one of budget from now.
func EnsureRetryDeadline(ctx context.Context, budget time.Duration) context.Context {
	if _, ok := ctx.Value(deadlineKey{}).(retryDeadline); ok {
		return ctx
	}
	return WithRetryDeadline(ctx, budget)
}

// RetryDeadline returns the render's retry deadline and its budget. Without
// one in ctx it is DefaultRetryDeadline from now.
func RetryDeadline(ctx context.Context) (at time.Time, budget time.Duration) {
	if d, ok := ctx.Value(deadlineKey{}).(retryDeadline); ok {
		return d.at, d.budget
	}
	return Now(ctx).Add(DefaultRetryDeadline), DefaultRetryDeadline
}

// ErrDeadline is wrapped by the error a wait returns when the render's
// retry deadline would pass during it (see statestore/wait).
var ErrDeadline = errors.New("retry deadline passed")

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
// ErrUnreachable, so wait.Policy.Retry waits for it. ok is false when err
// is none of these: the backend's own classification stands.
func TranslateNetwork(err error, n Network) (out error, ok bool) {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, ErrUnreachable) || errors.Is(err, ErrAuth) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) {
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
		return Redacted(fmt.Sprintf("the host name%s does not resolve (check the store's %s): %s", server, field, msg), err), true
	case Transient(err):
		return Redacted(fmt.Sprintf("%v: %s", ErrUnreachable, withServer(n.Server, msg)), errors.Join(ErrUnreachable, err)), true
	case TLSFailure(err):
		return Redacted("TLS"+strings.Replace(server, " of ", " with ", 1)+": "+msg, err), true
	}
	return err, false
}

func withServer(server, msg string) string {
	if server == "" {
		return msg
	}
	return server + ": " + msg
}

// Classify says what the write loop does with err.
func Classify(err error) Class {
	switch {
	case err == nil:
		return ClassDone
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ClassPermanent
	case errors.Is(err, ErrDeadline):
		return ClassPermanent // a step's own retries spent the render's budget
	case errors.Is(err, ErrConflict):
		var oe *OwnedError
		if errors.As(err, &oe) {
			return ClassPermanent // another workload's file or object: bad input
		}
		return ClassConflict
	case errors.Is(err, ErrUnreachable):
		return ClassTransient
	}
	return ClassPermanent
}

// Class is how the write loop treats an error.
type Class int

// Classes of errors.
const (
	// ClassDone: no error.
	ClassDone Class = iota
	// ClassConflict: another writer was first; plan again on a fresh view.
	ClassConflict
	// ClassTransient: the server could not be reached; try the same again.
	ClassTransient
	// ClassPermanent: trying again does not help.
	ClassPermanent
)
