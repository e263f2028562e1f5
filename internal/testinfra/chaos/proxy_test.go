package chaos

import (
	"io"
	"net"
	"testing"
	"time"
)

// The proxy passes bytes through, and limit_data cuts each connection
// after the given number of bytes.
func TestProxyLimitData(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	p, err := NewProxy("echo", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	echo := func(n int) int {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() { c.Write(make([]byte, n)) }()
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		got, _ := io.ReadAtLeast(c, make([]byte, n), n)
		return got
	}
	if got := echo(1000); got != 1000 {
		t.Fatalf("without toxics: echoed %d of 1000 bytes", got)
	}
	name, err := p.Add(Toxic{Type: "limit_data", Stream: "downstream", Attributes: map[string]int64{"bytes": 300}})
	if err != nil {
		t.Fatal(err)
	}
	if got := echo(1000); got != 300 {
		t.Fatalf("limit_data 300: echoed %d bytes", got)
	}
	p.Remove(name)
	if got := echo(1000); got != 1000 {
		t.Fatalf("after removing the toxic: echoed %d of 1000 bytes", got)
	}
}
