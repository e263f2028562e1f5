package gitstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A branch lock ("<ref>.lock") follows git's protocol: created exclusively,
// it ends up holding the new commit id and is renamed over the ref. While
// render holds one, before it writes the commit id, the lock holds one line
// naming its owner:
//
//	render-lock pid=1234 host=worker-7 boot=<boot id> start=<start time> ns=<pid namespace>
//
// so that a waiter on the same host can tell at once that the owner's
// process is gone (a render killed mid-write) and take the lock over,
// instead of waiting for the lock to age. boot, start and ns are Linux's
// (/proc), empty elsewhere: a different boot means the owner died with the
// machine; a different start time means its pid was reused; a different
// pid namespace (another container) means the pid cannot be checked here.
// A lock whose owner cannot be checked (another host, another namespace,
// git's own lock holding a commit id) is taken over once it is older than
// staleLock.
//
// A take-over removes only the lock it judged: under a second lock file
// ("<ref>.lock.takeover", so two waiters never take over at once) it checks
// that the lock is still the same file (same inode, time, size and
// content) before it removes it. A lock released and taken again meanwhile
// is a new file, and is left alone.

const lockMagic = "render-lock"

// lockOwner identifies the process holding a lock.
type lockOwner struct {
	pid            int
	host, boot, ns string
	start          string
}

func (o lockOwner) String() string {
	return fmt.Sprintf("pid %d on host %s", o.pid, o.host)
}

func (o lockOwner) line() string {
	return fmt.Sprintf("%s pid=%d host=%s boot=%s start=%s ns=%s\n", lockMagic, o.pid, o.host, o.boot, o.start, o.ns)
}

// parseOwner reads an owner line; ok is false for anything else (an empty
// lock being written, git's lock holding a commit id).
func parseOwner(data []byte) (lockOwner, bool) {
	fields := strings.Fields(string(data))
	if len(fields) < 3 || fields[0] != lockMagic {
		return lockOwner{}, false
	}
	var o lockOwner
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "pid":
			o.pid, _ = strconv.Atoi(v)
		case "host":
			o.host = v
		case "boot":
			o.boot = v
		case "start":
			o.start = v
		case "ns":
			o.ns = v
		}
	}
	return o, o.pid > 0 && o.host != ""
}

var (
	selfOnce sync.Once
	self     lockOwner
)

// thisProcess is the owner line of this process.
func thisProcess() lockOwner {
	selfOnce.Do(func() {
		self.pid = os.Getpid()
		self.host, _ = os.Hostname()
		if self.host == "" {
			self.host = "unknown"
		}
		self.host = strings.Join(strings.Fields(self.host), "_")
		self.boot = bootID()
		self.start = processStart(self.pid)
		self.ns = pidNamespace()
	})
	return self
}

func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}

func pidNamespace() string {
	ns, _ := os.Readlink("/proc/self/ns/pid")
	return strings.Join(strings.Fields(ns), "_")
}

// processStart is the start time of process pid, in clock ticks since
// boot (field 22 of /proc/<pid>/stat), or "" when it cannot be read.
func processStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return ""
	}
	return fields[19] // field 22 overall; fields[0] is field 3
}

// gone reports whether o's process has certainly ended: o is on this host
// and either the machine rebooted since, or (in the same pid namespace) no
// process has its pid, or the one that has it started at another time.
func (o lockOwner) gone() bool {
	me := thisProcess()
	switch {
	case o.host != me.host:
		return false
	case o.boot != "" && me.boot != "" && o.boot != me.boot:
		return true
	case o.ns != me.ns:
		return false
	case o.pid == me.pid:
		return o.start != "" && me.start != "" && o.start != me.start
	}
	p, err := os.FindProcess(o.pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	switch {
	case errors.Is(err, os.ErrProcessDone), errors.Is(err, syscall.ESRCH):
		return true
	case err != nil && !errors.Is(err, syscall.EPERM):
		return false
	}
	start := processStart(o.pid)
	return o.start != "" && start != "" && start != o.start
}

// lockTestHook, when set by a test, is called with the lock's path right
// before a take-over checks that the lock is still the one it judged.
var lockTestHook func(lock string)

// readLock reads a lock file's facts.
func readLock(lock string) (os.FileInfo, []byte, error) {
	f, err := os.Open(lock)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, 4096))
	return fi, data, err
}

// sameLock reports whether b is still the lock file a was.
func sameLock(a os.FileInfo, adata []byte, b os.FileInfo, bdata []byte) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size() && bytes.Equal(adata, bdata)
}

// takeOver judges the held lock and removes it when its owner is gone (at
// once) or it is older than staleLock, and only if it is still the same
// file then. It reports whether the lock was removed (or was already gone),
// so the caller may try to take it again at once.
func (l *localRepo) takeOver(lock string) bool {
	fi, data, err := readLock(lock)
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	owner, known := parseOwner(data)
	age := time.Since(fi.ModTime())
	var why string
	switch {
	case known && owner.gone():
		why = "its owner, " + owner.String() + ", is gone"
	case known && owner.host == thisProcess().host && owner.ns == thisProcess().ns:
		// A live process on this host holds it: never take it over.
		l.waiting(lock, age, "held by "+owner.String()+", which is running")
		return false
	case age > staleLock:
		why = fmt.Sprintf("it is %s old", age.Round(time.Second))
	default:
		holder := "held"
		if known {
			holder = "held by " + owner.String()
		}
		l.waiting(lock, age, holder+"; waiting until it is released or older than "+staleLock.String())
		return false
	}

	// One take-over at a time, so the check and the removal below are not
	// interleaved with another waiter's.
	guard := lock + ".takeover"
	g, err := os.OpenFile(guard, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		if gi, serr := os.Stat(guard); serr == nil && time.Since(gi.ModTime()) > staleLock {
			os.Remove(guard) // a waiter died mid take-over, which takes microseconds
		}
		return false
	}
	defer func() {
		g.Close()
		os.Remove(guard)
	}()
	if lockTestHook != nil {
		lockTestHook(lock)
	}
	fi2, data2, err := readLock(lock)
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil || !sameLock(fi, data, fi2, data2) {
		return false // released and taken again meanwhile: a live lock
	}
	if err := os.Remove(lock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false
	}
	if l.warn != nil {
		l.warn("took over the branch lock: "+why, "lock", lock)
	}
	return true
}

// waiting tells the user, once per store, that a lock held longer than a
// live writer needs is being waited for.
func (l *localRepo) waiting(lock string, age time.Duration, what string) {
	if age > 2*time.Second && l.warn != nil && !l.warned {
		// Live writers hold the lock for milliseconds.
		l.warned = true
		l.warn("the branch lock is "+what, "lock", lock, "age", age.Round(time.Second).String())
	}
}

// stillMine reports whether the lock file at lock is the one f created.
func stillMine(f *os.File, lock string) bool {
	mine, err := f.Stat()
	if err != nil {
		return false
	}
	cur, err := os.Lstat(lock)
	return err == nil && os.SameFile(mine, cur)
}
