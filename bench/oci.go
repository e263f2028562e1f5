package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/ocistore"
)

// Scenario 9: OCI. The S3 scenario's three steps against the registry of
// scripts/testservers.sh, with ocistore.Apply (1,000 documents to one
// destination): the first write, an unchanged re-render and a one-file
// change, timed, with the registry requests of each counted in
// ocistore.Config.Transport.
func ociScenario(ctx context.Context, b *bench) ([]*Row, error) {
	addr, user, pass := os.Getenv("RENDER_TEST_REGISTRY_ADDR"), os.Getenv("RENDER_TEST_REGISTRY_USER"), os.Getenv("RENDER_TEST_REGISTRY_PASSWORD")
	if addr == "" {
		return nil, fmt.Errorf("RENDER_TEST_REGISTRY_ADDR is unset: the registry of scripts/testservers.sh is not running")
	}
	docs := 1000
	if b.quick {
		docs = 200
	}
	var tFirst, tSame, tOne, wFirst, wSame, wOne, rSame, rOne []float64
	var cFirst, cSame, cOne map[string]int
	for run := range b.runs {
		c := &counter{n: map[string]int{}}
		st, err := ocistore.Open(ocistore.Config{
			Registry: addr, Repository: fmt.Sprintf("bench/oci-%d-%d", time.Now().UnixNano(), run),
			Insecure: true, Username: user, Password: pass, Create: true,
			Transport: &countingTransport{base: http.DefaultTransport.(*http.Transport).Clone(), c: c},
		})
		if err != nil {
			return nil, err
		}
		files := map[string][]byte{}
		for i := range docs {
			files[fmt.Sprintf("worker-00/dependencies/ocibench/configure/5058f/doc-%05d.yaml", i)] = doc("ocibench", i, "v1")
		}
		update := statestore.Update{
			Workload: "promise/ocibench/configure", Files: files, Destinations: []string{"worker-00"},
			Record:  &statestore.Record{Type: "promise", Promise: "ocibench", Pipeline: "configure"},
			Message: statestore.Message{Subject: "bench"},
		}
		step := func(times, w, reqs *[]float64, counts *map[string]int, wantUpdated bool) error {
			c.reset()
			t0 := time.Now()
			res, err := st.Apply(ctx, update)
			if err != nil {
				return err
			}
			// The next write plans on the state this one left, as a
			// render's write plans on the state its read saw.
			update.View = res.View
			if res.Updated != wantUpdated {
				return fmt.Errorf("ocistore.Apply reports Updated=%v, want %v", res.Updated, wantUpdated)
			}
			*times = append(*times, ms(time.Since(t0)))
			m := c.snapshot()
			*w = append(*w, float64(writes(m)))
			if reqs != nil {
				*reqs = append(*reqs, float64(total(m)))
			}
			*counts = m
			return nil
		}
		if err := step(&tFirst, &wFirst, nil, &cFirst, true); err != nil {
			return nil, err
		}
		if err := step(&tSame, &wSame, &rSame, &cSame, false); err != nil {
			return nil, err
		}
		files[fmt.Sprintf("worker-00/dependencies/ocibench/configure/5058f/doc-%05d.yaml", run%docs)] = doc("ocibench", run, "v2")
		if err := step(&tOne, &wOne, &rOne, &cOne, true); err != nil {
			return nil, err
		}
		st.Close()
		b.log("oci run %d: first %.0fms (%s); unchanged %.0fms (%s); one change %.0fms (%s)", run+1,
			tFirst[run], describeCounts(cFirst), tSame[run], describeCounts(cSame), tOne[run], describeCounts(cOne))
	}
	rows := []*Row{
		newRow("", fmt.Sprintf("ocistore.Apply first write, %d files", docs), "ms", tFirst),
		newRow("", "ocistore.Apply unchanged re-render", "ms", tSame),
		newRow("", "ocistore.Apply one-file change", "ms", tOne),
	}
	rows[0].Note = "requests of the last run: " + describeCounts(cFirst)
	rows[1].Note = "requests of the last run: " + describeCounts(cSame)
	rows[2].Note = "requests of the last run: " + describeCounts(cOne)
	ws := newRow("", "unchanged re-render: write requests", "req", wSame)
	return append(rows, ws.target("0", ws.Max == 0),
		newRow("", "unchanged re-render: all requests", "req", rSame),
		newRow("", "one-file change: write requests", "req", wOne),
		newRow("", "one-file change: all requests", "req", rOne)), nil
}
