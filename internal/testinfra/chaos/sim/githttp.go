package sim

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gitHTTPServer is git's smart HTTP protocol served by real git: each
// request runs `git upload-pack` or `git receive-pack --stateless-rpc` on
// the bare repository, as a forge does (Gitea runs them the same way),
// with a forge's settings (partial clones allowed). This process only
// frames the requests, as `git http-backend` would, and spares a second
// process per request.
//
// A process costs 10-20 ms of CPU on the campaign's machine, and about
// half of a render's git requests are ref advertisements (GET info/refs),
// most of them of refs no push has moved since the last one. git's
// advertisement is a function of the repository's refs alone (its HEAD,
// its loose refs and packed-refs; this server sets nothing else that
// changes it, such as a push-certificate nonce), so the server keeps the
// last one git wrote per repository and service, with the refs it was made
// from, and answers with it while the refs read the same: an answer git
// itself would give at that moment. A miss runs git, and keeps its answer
// only when the refs read the same before and after.
type gitHTTPServer struct {
	root string
	addr string
	git  string
	mu   sync.Mutex
	srv  *http.Server

	memoMu sync.Mutex
	memo   map[string]*repoMemo // by repository folder
	// Ran counts git's runs, Memo the answers from the memo.
	Ran, Memo atomic.Int64
}

// repoMemo is what git answered about one repository: its last ref
// advertisement by service, and whole fetches by request.
type repoMemo struct {
	adv   map[string]advertisement
	fetch map[string][]byte
}

// advertisement is git's answer to an info/refs request, and the refs it
// was made from.
type advertisement struct {
	refs string
	out  []byte
}

// gitArgs are the server's settings, as a forge's: partial clones allowed,
// no gc in the middle of a trial.
var gitArgs = []string{"-c", "uploadpack.allowFilter=true", "-c", "uploadpack.allowAnySHA1InWant=true", "-c", "receive.autogc=false"}

func newGitHTTP(t testing.TB) *gitHTTPServer {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("sim: git over HTTP needs git: %v", err)
	}
	s := &gitHTTPServer{root: t.TempDir(), git: git, memo: map[string]*repoMemo{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	s.serve(ln)
	t.Cleanup(s.stop)
	return s
}

func (s *gitHTTPServer) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(s.handle), ReadHeaderTimeout: time.Minute}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go srv.Serve(ln)
}

// handle serves one request of git's smart HTTP protocol (gitprotocol-http).
func (s *gitHTTPServer) handle(w http.ResponseWriter, req *http.Request) {
	p := req.URL.Path
	var repo, service string
	advertise := false
	switch {
	case req.Method == http.MethodGet && strings.HasSuffix(p, "/info/refs"):
		repo, service, advertise = strings.TrimSuffix(p, "/info/refs"), req.URL.Query().Get("service"), true
	case req.Method == http.MethodPost && strings.HasSuffix(p, "/git-upload-pack"):
		repo, service = strings.TrimSuffix(p, "/git-upload-pack"), "git-upload-pack"
	case req.Method == http.MethodPost && strings.HasSuffix(p, "/git-receive-pack"):
		repo, service = strings.TrimSuffix(p, "/git-receive-pack"), "git-receive-pack"
	default:
		http.Error(w, "not a git request", http.StatusNotFound)
		return
	}
	if service != "git-upload-pack" && service != "git-receive-pack" {
		http.Error(w, "unknown service", http.StatusForbidden)
		return
	}
	dir := filepath.Join(s.root, filepath.FromSlash(path.Clean("/"+repo)))
	if fi, err := os.Stat(filepath.Join(dir, "HEAD")); err != nil || fi.IsDir() {
		http.Error(w, "repository not found", http.StatusNotFound)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	if advertise {
		w.Header().Set("Content-Type", "application/x-"+service+"-advertisement")
		line := "# service=" + service + "\n"
		fmt.Fprintf(w, "%04x%s0000", len(line)+4, line)
		w.Write(s.advertise(dir, service))
		return
	}
	w.Header().Set("Content-Type", "application/x-"+service+"-result")
	in := io.Reader(req.Body)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		in = zr
	}
	if service == "git-upload-pack" {
		body, err := io.ReadAll(in)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Write(s.uploadPack(dir, body))
		return
	}
	s.Ran.Add(1)
	cmd := s.command(service, dir)
	cmd.Stdin, cmd.Stdout = in, w
	cmd.Run() // a failure is git's to report, in its output
}

// command is git serving service on dir.
func (s *gitHTTPServer) command(service, dir string, extra ...string) *exec.Cmd {
	args := append(append(append([]string(nil), gitArgs...), strings.TrimPrefix(service, "git-"), "--stateless-rpc"), extra...)
	cmd := exec.Command(s.git, append(args, dir)...)
	cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "HOME=" + s.root, "PATH=" + os.Getenv("PATH")}
	return cmd
}

// uploadPack is git's answer to a fetch (the POST of upload-pack) of
// body on dir. A fetch that names no object the client has ("have"), only
// what it wants (by ref tip or, partial clones allowed, by any object's
// id), gets the objects reachable from those, filtered as it asks: a
// function of objects that never change once written (nothing collects
// garbage here). So a fetch git answered whole is answered again from the
// memo, as git would.
func (s *gitHTTPServer) uploadPack(dir string, body []byte) []byte {
	memo := !bytes.Contains(body, []byte("have "))
	key := string(body)
	if memo {
		s.memoMu.Lock()
		var out []byte
		hit := false
		if m := s.memo[dir]; m != nil {
			out, hit = m.fetch[key]
		}
		s.memoMu.Unlock()
		if hit {
			s.Memo.Add(1)
			return out
		}
	}
	s.Ran.Add(1)
	var out bytes.Buffer
	cmd := s.command("git-upload-pack", dir)
	cmd.Stdin, cmd.Stdout = bytes.NewReader(body), &out
	if err := cmd.Run(); err == nil && memo {
		s.memoMu.Lock()
		if m := s.memo[dir]; m != nil {
			m.fetch[key] = out.Bytes()
		}
		s.memoMu.Unlock()
	}
	return out.Bytes()
}

// advertise is git's ref advertisement of service on dir: the last one
// git wrote, while the refs read the same, or git's own.
func (s *gitHTTPServer) advertise(dir, service string) []byte {
	before, ok := readRefs(dir)
	if ok {
		s.memoMu.Lock()
		var a advertisement
		hit := false
		if m := s.memo[dir]; m != nil {
			a, hit = m.adv[service]
		}
		s.memoMu.Unlock()
		if hit && a.refs == before {
			s.Memo.Add(1)
			return a.out
		}
	}
	s.Ran.Add(1)
	var out bytes.Buffer
	cmd := s.command(service, dir, "--advertise-refs")
	cmd.Stdout = &out
	err := cmd.Run()
	if after, ok2 := readRefs(dir); err == nil && ok && ok2 && after == before {
		s.memoMu.Lock()
		if m := s.memo[dir]; m != nil {
			m.adv[service] = advertisement{refs: before, out: out.Bytes()}
		}
		s.memoMu.Unlock()
	}
	return out.Bytes()
}

// readRefs reads what git's ref advertisement is made of in the bare
// repository dir: HEAD, packed-refs and every loose ref, as one string.
// It reports false when it could not read them whole (a ref moved while
// it read: its lock file came and went).
func readRefs(dir string) (string, bool) {
	var b strings.Builder
	for _, name := range []string{"HEAD", "packed-refs"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", false
		}
		fmt.Fprintf(&b, "%s\x00%s\x00", name, data)
	}
	err := filepath.WalkDir(filepath.Join(dir, "refs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || strings.HasSuffix(p, ".lock") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s\x00%s\x00", p[len(dir):], data)
		return nil
	})
	return b.String(), err == nil
}

func (s *gitHTTPServer) restart(down func()) error {
	s.stop()
	down()
	return s.start()
}

func (s *gitHTTPServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		s.srv.Close()
		s.srv = nil
	}
}

func (s *gitHTTPServer) start() error {
	var err error
	for range 50 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			s.serve(ln)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// gitInit makes an empty bare repository whose HEAD is main, as
// `git init --bare -b main` does, without a process, configured as a
// server that spends the least on each push (gitConfig). Its object
// folder is objects/, a link to odb/ beside it (see gitConfig).
func gitInit(dir string) error {
	for _, d := range []string{"odb/info", "odb/pack", "refs/heads", "refs/tags"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Symlink("odb", filepath.Join(dir, "objects")); err != nil {
		return err
	}
	for name, data := range map[string]string{
		"HEAD":   "ref: refs/heads/main\n",
		"config": "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n" + gitConfig,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// gitConfig is the trial repositories' server settings, the same for the
// HTTP and the SSH server's git, chosen for what a request costs: on this
// campaign's machines a process costs 10-20 ms of processor time, a file
// created a good part of a millisecond, and a push runs four processes.
// None changes what a client can see: the refs, the objects, and what
// each request answers or refuses are git's as with its defaults.
//
//   - receive.autogc false: no gc after a push (a process, and a repack
//     the trial does not test).
//   - transfer.unpackLimit 1: a push's objects are kept as the pack the
//     client sent (git index-pack), not exploded into a loose object file
//     each (git unpack-objects, below 100 objects): one pack and its index
//     written instead of dozens of files, and a later fetch reads them
//     from the pack instead of opening and inflating each file. (Forges
//     keep packs the same way.)
//   - core.fsync none: nothing is flushed to the disk (a trial's
//     repository never outlives the machine's crash; a server restart
//     stops the process, not the machine).
//
// And the object folder is objects/, a link to odb/: a push's
// connectivity check (git rev-list ... --not --all --alternate-refs)
// otherwise runs a fourth process, git for-each-ref on the repository
// itself, because receive-pack's quarantine folder names the
// repository's objects/ as its alternate, and git asks any alternate
// whose real path ends in /objects for its refs (the same refs --all has
// already named: the check's answer is the same without them).
const gitConfig = "\tfsync = none\n[receive]\n\tautogc = false\n[transfer]\n\tunpackLimit = 1\n"
