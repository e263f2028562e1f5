package sim

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/render-dev/render/statestore/wait"
)

// Link is one writer's network: every request it sends goes through it,
// meets the fault its number draws (Faults), and is logged. It is the S3
// and OCI clients' http.RoundTripper (engine.Options.Transport); git's
// requests reach it through go-git's protocol registry (gitproto.go),
// which finds the writer's Link in the request's context.
type Link struct {
	ID    int
	clock *Clock
	part  *Part
	// faults is the fault of request n.
	faults func(n int) Fault
	// die kills the writer: its context ends, and it sends nothing more.
	die func()
	// stop asks the writer to stop (engine.WithStop).
	stop func()
	base time.Time // the trial's virtual start
	tr   *http.Transport

	mu   sync.Mutex
	n    int
	log  []*Request
	dead bool
}

// Request is one request of a writer, as it went.
type Request struct {
	N     int
	What  string // "PUT /bucket/key", "git receive-pack", ...
	Fault Fault
	// At is when the writer sent it, End when the writer had its answer
	// or error (virtual, since the trial's start): a pause, latency or
	// stall lasts from At past End's beginning.
	At, End time.Duration
	Status  int
	// Sent: the server may have seen the request. Delivered: the writer
	// got the server's answer's status. Answered: it read all of it.
	Sent, Delivered, Answered bool
	Err                       string
	// Push is what a git push asked and the server said, when it did.
	Push *Push
	// Deletes are the keys an S3 multi-object delete names.
	Deletes []string
	// Real is the real time the server took to answer (to its status, for
	// HTTP; to the end of the call, for SSH).
	Real time.Duration
}

// Unknown reports whether the request may have changed the store without
// the writer learning whether it did: a request that may change the store,
// sent, whose answer the writer did not get (a git push's answer is its
// report, in the body).
func (r *Request) Unknown() bool {
	if !r.Mutating() || !r.Sent {
		return false
	}
	if strings.Contains(r.What, "receive-pack") {
		return !r.Answered
	}
	return !r.Delivered
}

// Mutating reports whether the request may change the store.
func (r *Request) Mutating() bool {
	switch {
	case strings.HasPrefix(r.What, "git "):
		return r.What == "git receive-pack"
	case strings.HasPrefix(r.What, "GET "), strings.HasPrefix(r.What, "HEAD "):
		return false
	case strings.Contains(r.What, "/git-upload-pack"), strings.Contains(r.What, "/info/refs"):
		return false
	}
	return true
}

type linkKey struct{}

// withLink puts l in ctx, for git's requests.
func withLink(ctx context.Context, l *Link) context.Context {
	return context.WithValue(ctx, linkKey{}, l)
}

func linkOf(ctx context.Context) *Link {
	l, _ := ctx.Value(linkKey{}).(*Link)
	return l
}

// The errors faults cause, as the network would.
var (
	errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	errReset   = &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	errTimeout = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
)

// begin numbers a request, draws its fault and logs it.
func (l *Link) begin(what string) (*Request, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead {
		return nil, ErrDead
	}
	l.n++
	r := &Request{N: l.n, What: what, Fault: l.faults(l.n), At: l.clock.Now().Sub(l.base)}
	l.log = append(l.log, r)
	return r, nil
}

// end notes when the writer had r's answer or error.
func (l *Link) end(r *Request) {
	if r != nil {
		r.End = l.clock.Now().Sub(l.base)
	}
}

// kill makes the writer dead.
func (l *Link) kill() {
	l.mu.Lock()
	already := l.dead
	l.dead = true
	l.mu.Unlock()
	if !already {
		l.part.Kill()
		l.die()
	}
}

// Requests is the writer's request log.
func (l *Link) Requests() []*Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Request(nil), l.log...)
}

// Dead reports whether the writer died.
func (l *Link) Dead() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

// before applies what a fault does before the request is sent; it returns
// an error when the request must not be sent.
func (l *Link) before(ctx context.Context, r *Request) error {
	f := r.Fault
	if f.Stop && l.stop != nil {
		l.stop()
	}
	if f.Pause > 0 {
		if err := l.clock.Sleep(ctx, f.Pause); err != nil {
			return err
		}
	}
	switch f.Kind {
	case Death:
		if !f.After {
			l.kill()
			return ErrDead
		}
	case Refuse:
		return errRefused
	case Latency:
		if err := l.clock.Sleep(ctx, f.For); err != nil {
			return err
		}
	case Stall:
		if !f.After {
			return l.stall(ctx)
		}
	}
	if l.Dead() {
		return ErrDead
	}
	return nil
}

// after applies what a fault does once the server answered: it returns an
// error when the writer must not see the answer.
func (l *Link) after(ctx context.Context, r *Request) error {
	switch r.Fault.Kind {
	case Lost:
		return errReset
	case Stall:
		return l.stall(ctx)
	case Death:
		l.kill()
		return ErrDead
	}
	return nil
}

// stall waits, as for a server that never answers, until the writer's
// retry deadline or the request's own deadline, and fails as a read that
// timed out.
func (l *Link) stall(ctx context.Context) error {
	at, _ := wait.RetryDeadline(ctx)
	if d, ok := ctx.Deadline(); ok && d.Before(at) {
		at = d
	}
	wait := at.Sub(l.clock.Now())
	if wait < time.Second {
		wait = time.Second // a request past the deadline (finishing work) still waits a while
	}
	if err := l.clock.Sleep(ctx, wait); err != nil {
		return err
	}
	return errTimeout
}

func (r *Request) finish(err error) {
	if err != nil && r.Err == "" {
		r.Err = err.Error()
	}
}

// RoundTrip sends one HTTP request of the writer.
func (l *Link) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	r, err := l.begin(req.Method + " " + req.URL.Path)
	defer l.end(r)
	if err == nil && req.Method == http.MethodPost && req.URL.Query().Has("delete") && req.Body != nil {
		r.Deletes = deleteKeys(req)
	}
	if err == nil {
		err = l.before(ctx, r)
	}
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		if r != nil {
			r.finish(err)
		}
		return nil, err
	}
	end := l.part.Begin()
	t0 := time.Now()
	resp, err := l.tr.RoundTrip(req)
	r.Real = time.Since(t0)
	end()
	r.Sent = true
	if err != nil {
		r.finish(err)
		return nil, err
	}
	r.Status = resp.StatusCode
	if err := l.after(ctx, r); err != nil {
		// The server answered; the writer never reads it.
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		r.finish(err)
		return nil, err
	}
	r.Delivered = true
	resp.Body = &body{rc: resp.Body, part: l.part, r: r, cut: r.Fault.Kind == Cut, left: r.Fault.Bytes}
	return resp, nil
}

// body is a response body as the writer reads it: time spent reading
// counts as waiting for the server, and a Cut fault ends it early.
type body struct {
	rc   io.ReadCloser
	part *Part
	r    *Request
	cut  bool
	left int64
}

func (b *body) Read(p []byte) (int, error) {
	if b.cut {
		if b.left <= 0 {
			b.r.finish(errReset)
			return 0, errReset
		}
		if int64(len(p)) > b.left {
			p = p[:b.left]
		}
	}
	end := b.part.Begin()
	n, err := b.rc.Read(p)
	end()
	b.left -= int64(n)
	if errors.Is(err, io.EOF) {
		b.r.Answered = true
	}
	return n, err
}

func (b *body) Close() error { return b.rc.Close() }

// close releases the writer's idle connections.
func (l *Link) close() { l.tr.CloseIdleConnections() }

// deleteKeys reads the keys of an S3 multi-object delete request, and
// leaves its body to be sent.
func deleteKeys(req *http.Request) []string {
	data, err := io.ReadAll(req.Body)
	req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(data))
	if err != nil {
		return nil
	}
	var d struct {
		Objects []struct {
			Key string `xml:"Key"`
		} `xml:"Object"`
	}
	if xml.Unmarshal(data, &d) != nil {
		return nil
	}
	var keys []string
	for _, o := range d.Objects {
		keys = append(keys, o.Key)
	}
	return keys
}

func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 8
	t.DisableCompression = true
	return t
}
