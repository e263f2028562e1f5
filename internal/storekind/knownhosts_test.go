package storekind

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/crypto/ssh"
)

// The secret's known hosts need no writable folder: in a sidecar the root
// file system is read-only and the image (scratch) has no /tmp. A TMPDIR
// that does not exist stands for that here.
func TestKnownHostsWithoutTempDir(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("known hosts are kept in memory on Linux only; elsewhere they go through a temporary file")
	}
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	key := func() ssh.PublicKey {
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		k, err := ssh.NewPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	host, other := key(), key()
	line := fmt.Sprintf("[gitea]:2222 %s", ssh.MarshalAuthorizedKey(host))
	cb, err := knownHostsCallback([]byte(line))
	if err != nil {
		t.Fatalf("knownHostsCallback: %v", err)
	}
	addr := &net.TCPAddr{IP: net.IPv4(172, 18, 0, 2), Port: 2222}
	if err := cb("gitea:2222", addr, host); err != nil {
		t.Errorf("the known host key is refused: %v", err)
	}
	if err := cb("gitea:2222", addr, other); err == nil {
		t.Error("another host key is accepted")
	}
}
