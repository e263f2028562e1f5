package memstore_test

import (
	"testing"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/driver"
	"github.com/render-dev/render/statestore/memstore"
	"github.com/render-dev/render/statestore/storetest"
)

// The conformance suite on the shared write loop, with no server: it runs
// on every `go test`.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Fresh: func(t *testing.T) func() statestore.Store {
			m := memstore.New()
			return func() statestore.Store { return m.Open(t.Name(), driver.RetryPolicy{}) }
		},
		Missing: func(t *testing.T) statestore.Store { return memstore.Missing(t.Name()) },
	})
}
