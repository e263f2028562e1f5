package testenv

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// SSHGitServer is a real SSH server on loopback that serves the bare
// repositories under Root with the git binaries (git-upload-pack,
// git-receive-pack), as a git host's SSH endpoint does. It accepts exactly
// one client key.
type SSHGitServer struct {
	Root string
	// Addr is host:port on 127.0.0.1.
	Addr string
	// ClientKeyPEM is the OpenSSH private key the server accepts.
	ClientKeyPEM []byte
	// KnownHosts is a known_hosts line for the server's host key.
	KnownHosts []byte
	// Partial makes CreateRepo allow partial clones (filters and wants of
	// any reachable commit), as Gitea and GitHub do; git's own default
	// allows neither.
	Partial bool
	// Served, when set (before the first session), is called after each
	// session has sent its answer, with the program (git-upload-pack or
	// git-receive-pack), the start of what the client sent (its wants, or
	// a push's commands), and the time the answer ended: the benchmark
	// counts sessions, fetches and pushes, and notes when a push landed.
	Served func(prog string, head []byte, answered time.Time)
	cfg    *ssh.ServerConfig
	busy   atomic.Int64 // sessions running a git command
	wg     sync.WaitGroup

	mu    sync.Mutex
	ln    net.Listener // nil while stopped
	conns map[net.Conn]bool
}

// SSHGit starts an SSH git server for the test; it stops when the test ends.
// It needs only the git binaries, which the project's tests need anyway.
func SSHGit(t testing.TB) *SSHGitServer {
	t.Helper()
	s, err := NewSSHGit(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// NewSSHGit starts an SSH git server serving the bare repositories under
// root, outside a test (the benchmark); Close stops it.
func NewSSHGit(root string) (*SSHGitServer, error) {
	for _, bin := range []string{"git-upload-pack", "git-receive-pack"} {
		if _, err := exec.LookPath(bin); err != nil {
			if _, gerr := exec.LookPath("git"); gerr != nil {
				return nil, fmt.Errorf("the SSH git server needs git: %v", err)
			}
		}
	}
	_, hostPriv, _ := ed25519.GenerateKey(rand.Reader)
	hostSigner, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		return nil, err
	}
	clientPub, clientPriv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(clientPriv, "render test client")
	if err != nil {
		return nil, err
	}
	allowed, err := ssh.NewPublicKey(clientPub)
	if err != nil {
		return nil, err
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if string(key.Marshal()) == string(allowed.Marshal()) {
				return &ssh.Permissions{}, nil
			}
			return nil, errors.New("unknown key")
		},
	}
	cfg.AddHostKey(hostSigner)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &SSHGitServer{Root: root, Addr: ln.Addr().String(), ClientKeyPEM: pem.EncodeToMemory(block), cfg: cfg, conns: map[net.Conn]bool{}}
	host, port, _ := net.SplitHostPort(s.Addr)
	s.KnownHosts = []byte(fmt.Sprintf("[%s]:%s %s", host, port, ssh.MarshalAuthorizedKey(hostSigner.PublicKey())))
	s.serveOn(ln)
	return s, nil
}

// WaitIdle waits, up to timeout, until no session runs a git command,
// and says whether none does: a client may exit as soon as it has read
// its answer, before the session that sent it has been counted.
func (s *SSHGitServer) WaitIdle(timeout time.Duration) bool {
	for end := time.Now().Add(timeout); s.busy.Load() > 0; {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// Close stops the server and waits for its sessions to end.
func (s *SSHGitServer) Close() {
	s.Stop()
	s.wg.Wait()
}

func (s *SSHGitServer) serveOn(ln net.Listener) {
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = true
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c, s.cfg)
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
			}()
		}
	}()
}

// Stop closes the listener and every open connection, as a restarted git
// host drops its clients: a git process serving one sees its input end
// and exits (git applies a push whole or not at all). Safe on any
// goroutine; a no-op when stopped.
func (s *SSHGitServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		s.ln.Close()
		s.ln = nil
	}
	for c := range s.conns {
		c.Close()
	}
}

// Start listens again on Addr after Stop; a no-op when running.
func (s *SSHGitServer) Start() error {
	s.mu.Lock()
	running := s.ln != nil
	s.mu.Unlock()
	if running {
		return nil
	}
	var err error
	for range 50 { // the port may linger briefly
		var ln net.Listener
		if ln, err = net.Listen("tcp", s.Addr); err == nil {
			s.serveOn(ln)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("testenv: ssh git server: listen again on %s: %w", s.Addr, err)
}

// CreateRepo makes a bare repository and returns its ssh:// URL.
func (s *SSHGitServer) CreateRepo(t testing.TB, name string) string {
	t.Helper()
	u, err := s.NewRepo(name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// NewRepo makes a bare repository under Root, named after name, and
// returns its ssh:// URL (whose path is the repository's folder).
func (s *SSHGitServer) NewRepo(name string) (string, error) {
	dir := filepath.Join(s.Root, UniqueName(name)+".git")
	if out, err := exec.Command("git", "init", "--bare", "-q", "-b", "main", dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git init: %v\n%s", err, out)
	}
	if s.Partial {
		for _, kv := range [][2]string{{"uploadpack.allowFilter", "true"}, {"uploadpack.allowReachableSHA1InWant", "true"}} {
			if out, err := exec.Command("git", "-C", dir, "config", kv[0], kv[1]).CombinedOutput(); err != nil {
				return "", fmt.Errorf("git config: %v\n%s", err, out)
			}
		}
	}
	return "ssh://git@" + s.Addr + dir, nil
}

func (s *SSHGitServer) serve(c net.Conn, cfg *ssh.ServerConfig) {
	defer c.Close()
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, chReqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go s.session(ch, chReqs)
	}
}

func (s *SSHGitServer) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" {
			req.Reply(req.Type == "env", nil)
			continue
		}
		if len(req.Payload) < 4 {
			req.Reply(false, nil)
			return
		}
		n := binary.BigEndian.Uint32(req.Payload)
		cmdline := string(req.Payload[4 : 4+n])
		prog, arg, _ := strings.Cut(cmdline, " ")
		arg = strings.Trim(arg, "'\"")
		if (prog != "git-upload-pack" && prog != "git-receive-pack") || !strings.HasPrefix(filepath.Clean(arg), s.Root) {
			req.Reply(false, nil)
			return
		}
		req.Reply(true, nil)
		s.busy.Add(1)
		defer s.busy.Add(-1)
		cmd := exec.Command("git", strings.TrimPrefix(prog, "git-"), arg)
		cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
		// Not cmd.Stdin = ch: Wait would then wait for the client to close
		// its side, which it does only after the command has finished.
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return
		}
		var in io.Reader = ch
		var head *lockedHead
		if s.Served != nil {
			head = &lockedHead{max: 1 << 16}
			in = io.TeeReader(ch, head)
		}
		status := uint32(0)
		if err := cmd.Start(); err != nil {
			status = 1
		} else {
			go func() { io.Copy(stdin, in); stdin.Close() }()
			if err := cmd.Wait(); err != nil {
				status = 1
			}
		}
		// The answer is all written (Wait waits for the copy of the
		// command's output): the client may act on it from now on.
		if head != nil {
			s.Served(prog, head.bytes(), time.Now())
		}
		ch.CloseWrite()
		ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, status))
		return
	}
}

// lockedHead keeps the first max bytes written to it; the copy into a
// session's git process writes it while the session reads it.
type lockedHead struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (h *lockedHead) Write(b []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if keep := min(len(b), h.max-len(h.buf)); keep > 0 {
		h.buf = append(h.buf, b[:keep]...)
	}
	return len(b), nil
}

func (h *lockedHead) bytes() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]byte(nil), h.buf...)
}
