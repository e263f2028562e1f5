package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

// "Landing to exit" (scenario 5, git): how long a render runs on after its
// commit is on the branch. The counting proxy in front of Gitea reads the
// commands of every push (receive-pack's pkt-lines before the pack) and
// notes when the server's answer to it ended; the branch's history then
// says which push put each render's commit on the branch (the push of that
// commit, or of the first later commit in the branch's first-parent chain
// that was pushed as its tip: a leader's push carries a chain of folded
// commits).

// pushLog notes, per commit pushed as the branch's new tip, when the
// first push of it was answered.
type pushLog struct {
	mu     sync.Mutex
	branch string // the branch ref, refs/heads/main
	at     map[string]time.Time
}

func (l *pushLog) note(newTip string, t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.at[newTip]; !ok || t.Before(old) {
		l.at[newTip] = t
	}
}

// take returns what was noted since the last take, and forgets it.
func (l *pushLog) take() map[string]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.at
	l.at = map[string]time.Time{}
	return out
}

// gitCountingProxy is countingProxy for Gitea, which also notes every
// push's branch tip and when its answer ended.
func gitCountingProxy(target string) (addr string, c *counter, pushes *pushLog, stop func(), err error) {
	c = &counter{n: map[string]int{}}
	pushes = &pushLog{branch: "refs/heads/main", at: map[string]time.Time{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, nil, err
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 64
	rp := &httputil.ReverseProxy{
		Director:      func(r *http.Request) { r.URL.Scheme, r.URL.Host = "http", target },
		Transport:     &pushNoting{next: &countingTransport{base: base, c: c}, log: pushes},
		FlushInterval: -1,
	}
	srv := &http.Server{Handler: rp}
	go srv.Serve(ln)
	return ln.Addr().String(), c, pushes, func() { srv.Close() }, nil
}

// pushNoting reads the commands at the start of each receive-pack request
// and notes the branch's new tip when the answer has been read to its end.
type pushNoting struct {
	next http.RoundTripper
	log  *pushLog
}

func (p *pushNoting) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/git-receive-pack") || r.Body == nil {
		return p.next.RoundTrip(r)
	}
	head := &bytes.Buffer{}
	r.Body = struct {
		io.Reader
		io.Closer
	}{&headTee{r: r.Body, head: head, max: 1 << 16}, r.Body}
	resp, err := p.next.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	tip := branchTip(head.Bytes(), p.log.branch)
	if tip == "" {
		return resp, nil
	}
	resp.Body = &onEnd{ReadCloser: resp.Body, end: func() { p.log.note(tip, time.Now()) }}
	return resp, nil
}

// headTee passes a body through whole, keeping its first max bytes in
// head.
type headTee struct {
	r    io.Reader
	head *bytes.Buffer
	max  int
}

func (t *headTee) Read(b []byte) (int, error) {
	n, err := t.r.Read(b)
	if keep := min(n, t.max-t.head.Len()); keep > 0 {
		t.head.Write(b[:keep])
	}
	return n, err
}

// onEnd calls end once, when the body has been read to its end or closed.
type onEnd struct {
	io.ReadCloser
	once sync.Once
	end  func()
}

func (o *onEnd) Read(b []byte) (int, error) {
	n, err := o.ReadCloser.Read(b)
	if err == io.EOF {
		o.once.Do(o.end)
	}
	return n, err
}

func (o *onEnd) Close() error {
	o.once.Do(o.end)
	return o.ReadCloser.Close()
}

// branchTip reads the new value of branch from a receive-pack request's
// commands (pkt-lines: "<old> <new> <ref>[\0caps]", up to a flush).
func branchTip(req []byte, branch string) string {
	for len(req) >= 4 {
		n, err := strconv.ParseUint(string(req[:4]), 16, 16)
		if err != nil || n == 0 || int(n) > len(req) || n < 4 {
			return ""
		}
		line := string(req[4:n])
		req = req[n:]
		line, _, _ = strings.Cut(strings.TrimSuffix(line, "\n"), "\x00")
		f := strings.Fields(line)
		if len(f) == 3 && f[2] == branch {
			return f[1]
		}
	}
	return ""
}

// landingToExit is, for each workflow, the time from the answer to the
// push that put its commit on the branch of r to its render's exit.
func (b *bench) landingToExit(ctx context.Context, r repo, ws []*workflow, exits []time.Time, pushed map[string]time.Time, dir string) ([]time.Duration, error) {
	if err := b.git(ctx, "", "clone", "-q", "--bare", b.authURL(r.CloneURL), dir); err != nil {
		return nil, err
	}
	out := func(args ...string) (string, error) {
		p, err := run(ctx, "", b.gitEnv(), "git", append([]string{"--git-dir", dir}, args...)...)
		if err == nil && p.Code != 0 {
			err = fmt.Errorf("git %s: exit %d: %s", args[0], p.Code, strings.TrimSpace(p.Stderr))
		}
		return p.Stdout, err
	}
	log, err := out("log", "--first-parent", "--format=%H", "main")
	if err != nil {
		return nil, err
	}
	chain := strings.Fields(log) // newest first
	var res []time.Duration
	for i, w := range ws {
		f := path.Join("clusters/worker-git/dependencies", w.promise, "configure/5058f/doc-00000.yaml")
		added, err := out("log", "--first-parent", "--format=%H", "--diff-filter=A", "main", "--", f)
		if err != nil {
			return nil, err
		}
		c := strings.TrimSpace(added)
		if c == "" {
			return nil, fmt.Errorf("%s: no commit on the branch adds %s", w.promise, f)
		}
		c = strings.Fields(c)[len(strings.Fields(c))-1]
		// The first push of c or of a later commit of the chain.
		var landed time.Time
		for j := len(chain) - 1; j >= 0; j-- {
			if chain[j] == c {
				for k := j; k >= 0; k-- {
					if t, ok := pushed[chain[k]]; ok {
						landed = t
						break
					}
				}
				break
			}
		}
		if landed.IsZero() {
			return nil, fmt.Errorf("%s: no push put commit %s on the branch", w.promise, c[:7])
		}
		res = append(res, exits[i].Sub(landed))
	}
	return res, nil
}
