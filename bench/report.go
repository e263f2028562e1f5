package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Row is one measured figure: its samples, their summary, and its target.
type Row struct {
	Scenario string    `json:"scenario"`
	Name     string    `json:"name"`
	Unit     string    `json:"unit"`
	Samples  []float64 `json:"samples"`
	N        int       `json:"n"`
	Median   float64   `json:"median"`
	Min      float64   `json:"min"`
	Max      float64   `json:"max"`
	P10      float64   `json:"p10"`
	P90      float64   `json:"p90"`
	P99      float64   `json:"p99,omitempty"`
	// Target is the goal in words; Met says whether the median meets it
	// (absent for rows without a target).
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"`
	Note   string `json:"note,omitempty"`
}

// Results is the JSON document written under .bench/.
type Results struct {
	Started  time.Time         `json:"started"`
	Duration string            `json:"duration"`
	Runs     int               `json:"runs"`
	Host     map[string]string `json:"host"`
	Rows     []*Row            `json:"rows"`
	Errors   []string          `json:"errors,omitempty"`
}

// percentile of sorted s, nearest rank.
func percentile(s []float64, p float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(len(s)-1, i))]
}

func median(s []float64) float64 {
	c := slices.Clone(s)
	slices.Sort(c)
	n := len(c)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return c[n/2]
	}
	return (c[n/2-1] + c[n/2]) / 2
}

func newRow(scenario, name, unit string, samples []float64) *Row {
	s := slices.Clone(samples)
	slices.Sort(s)
	r := &Row{Scenario: scenario, Name: name, Unit: unit, Samples: samples, N: len(s)}
	if len(s) > 0 {
		r.Median, r.Min, r.Max = median(s), s[0], s[len(s)-1]
		r.P10, r.P90 = percentile(s, 0.10), percentile(s, 0.90)
		if len(s) >= 20 {
			r.P99 = percentile(s, 0.99)
		}
	}
	return r
}

// target sets the row's target and whether value meets it.
func (r *Row) target(desc string, met bool) *Row {
	r.Target, r.Met = desc, &met
	return r
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func format(v float64, unit string) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case unit == "ms" && v >= 10000:
		return fmt.Sprintf("%.1fs", v/1000)
	case unit == "ms":
		return fmt.Sprintf("%.0fms", v)
	case unit == "x":
		return fmt.Sprintf("%.2fx", v)
	case unit == "MB":
		return fmt.Sprintf("%.0fMB", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func printTable(w io.Writer, res *Results) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tfigure\tn\tmedian\tmin..max\tp10..p90\ttarget\tmet")
	for _, r := range res.Rows {
		met := ""
		if r.Met != nil {
			met = map[bool]string{true: "yes", false: "NO"}[*r.Met]
		}
		spread := format(r.Min, r.Unit) + ".." + format(r.Max, r.Unit)
		pp := format(r.P10, r.Unit) + ".." + format(r.P90, r.Unit)
		if r.P99 != 0 {
			pp += " p99 " + format(r.P99, r.Unit)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.Name, r.N, format(r.Median, r.Unit), spread, pp, r.Target, met)
	}
	tw.Flush()
	for _, r := range res.Rows {
		if r.Note != "" {
			fmt.Fprintf(w, "  note [%s %s]: %s\n", r.Scenario, r.Name, r.Note)
		}
	}
	for _, e := range res.Errors {
		fmt.Fprintf(w, "ERROR: %s\n", e)
	}
}

func writeJSON(dir string, res *Results) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return "", err
	}
	name := filepath.Join(dir, "bench-"+res.Started.UTC().Format("20060102T150405Z")+".json")
	if err := os.WriteFile(name, append(data, '\n'), 0o644); err != nil {
		return "", err
	}
	return name, os.WriteFile(filepath.Join(dir, "latest.json"), append(data, '\n'), 0o644)
}

func hostInfo() map[string]string {
	h := map[string]string{}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		n := 0
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "model name") {
				n++
				if _, v, ok := strings.Cut(l, ":"); ok {
					h["cpu"] = strings.TrimSpace(v)
				}
			}
		}
		h["cpus"] = fmt.Sprint(n)
	}
	return h
}
