package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxy is a TCP proxy on a loopback port in front of one server, run in
// this process with toxiproxy's library: render talks to the proxy, and the
// campaign adds and removes faults (toxics) on it while renders run. A
// toxic applies to every connection open while it is active and to every
// new one, in one direction (upstream: client to server; downstream: server
// to client).
type Proxy struct {
	p    *toxiproxy.Proxy
	mu   sync.Mutex
	next int
}

// NewProxy starts a proxy on 127.0.0.1 (a free port) to upstream.
func NewProxy(name, upstream string) (*Proxy, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("proxy %s to %s: %w", name, upstream, err)
	}
	return &Proxy{p: p}, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.p.Listen }

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() { p.p.Stop() }

// Toxic is one fault on a proxy, as toxiproxy names its kinds and
// attributes: reset_peer {timeout}, limit_data {bytes}, latency {latency,
// jitter}, bandwidth {rate} (KB/s), timeout {timeout}, slow_close {delay}.
type Toxic struct {
	Type       string           `json:"type"`
	Stream     string           `json:"stream"` // upstream or downstream
	Attributes map[string]int64 `json:"attributes"`
}

func (t Toxic) String() string {
	var attrs []string
	for _, k := range sortedKeys(t.Attributes) {
		attrs = append(attrs, fmt.Sprintf("%s=%d", k, t.Attributes[k]))
	}
	return fmt.Sprintf("%s(%s %s)", t.Type, t.Stream, strings.Join(attrs, " "))
}

// Add adds a toxic and returns its name, for Remove.
func (p *Proxy) Add(t Toxic) (string, error) {
	p.mu.Lock()
	p.next++
	name := fmt.Sprintf("%s-%d", t.Type, p.next)
	p.mu.Unlock()
	b, err := json.Marshal(struct {
		Toxic
		Name     string  `json:"name"`
		Toxicity float32 `json:"toxicity"`
	}{t, name, 1})
	if err != nil {
		return "", err
	}
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(string(b))); err != nil {
		return "", fmt.Errorf("add toxic %s: %w", t, err)
	}
	return name, nil
}

// Remove removes a toxic Add added; a toxic already gone is not an error.
func (p *Proxy) Remove(name string) {
	_ = p.p.Toxics.RemoveToxic(context.Background(), name)
}

// Clear removes every toxic.
func (p *Proxy) Clear() { p.p.Toxics.ResetToxics(context.Background()) }
