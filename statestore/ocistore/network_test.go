package ocistore_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/ocistore"
)

// unresolvable fails every request as a registry name that does not
// resolve does.
type unresolvable struct{}

func (unresolvable) RoundTrip(req *http.Request) (*http.Response, error) {
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: req.URL.Hostname(), IsNotFound: true}}
}

// Failures below HTTP are classified as every backend classifies them: a
// name that does not resolve and a TLS failure are reported at once,
// naming the registry and the field to check; a refused connection is
// unreachable, and retried until the deadline. Each names the store.
func TestNetworkFailures(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := closed.Addr().String()
	closed.Close()
	tlsServer := httptest.NewUnstartedServer(http.NotFoundHandler())
	tlsServer.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes it refuses
	tlsServer.StartTLS()
	defer tlsServer.Close()
	for _, tc := range []struct {
		name        string
		cfg         ocistore.Config
		want        string
		unreachable bool
	}{
		{"name does not resolve", ocistore.Config{Registry: "registry.invalid", Transport: unresolvable{}},
			"the host name of registry.invalid does not resolve (check the store's registry)", false},
		{"TLS", ocistore.Config{Registry: tlsServer.Listener.Addr().String()},
			"TLS with " + tlsServer.Listener.Addr().String() + ": ", false},
		{"connection refused", ocistore.Config{Registry: refusing, Insecure: true, RetryDeadline: 300 * time.Millisecond},
			"store unreachable: " + refusing + ": ", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Repository = "platform/state"
			s, err := ocistore.Open(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = s.Records(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), s.String()+": read: ") {
				t.Fatalf("got %v, want %q naming %s", err, tc.want, s)
			}
			if errors.Is(err, statestore.ErrUnreachable) != tc.unreachable {
				t.Fatalf("%v: unreachable %v, want %v", err, !tc.unreachable, tc.unreachable)
			}
			if !tc.unreachable && time.Since(start) > 2*time.Second {
				t.Fatalf("reported after %v: it was retried", time.Since(start))
			}
		})
	}
}
