package fluxcheck

import (
	"fmt"
	"path"
	"sort"

	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/renderer"
)

// Duplicates finds an object this workload writes that another workload
// already writes to the same section of the same destination: Flux builds
// that section as one kustomization, so the build would fail for every
// workload there. mine comes from CheckPlan; others holds, by workload key,
// the objects other workloads recorded (also from CheckPlan, so Store and
// Destination are set). The error is a *renderer.InputError naming this
// workload's file, the other workload and its file.
//
// The same object in two different sections or destinations is allowed:
// those are different Flux Kustomizations (which then share ownership of
// it, as they would in Kratix).
func Duplicates(mine []Object, others map[string][]Object) error {
	if len(mine) == 0 || len(others) == 0 {
		return nil
	}
	index := make(map[string]int, len(mine))
	for i, o := range mine {
		k := place(o) + "|" + identity(o)
		if _, ok := index[k]; !ok {
			index[k] = i
		}
	}
	keys := make([]string, 0, len(others))
	for k := range others {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, wl := range keys {
		for _, other := range others[wl] {
			i, clash := index[place(other)+"|"+identity(other)]
			if !clash {
				continue
			}
			o := mine[i]
			where := fmt.Sprintf("%s of %s", layout.Quote(path.Join(o.Destination, sectionDir(o.Section))), o.Store)
			return &renderer.InputError{
				File: display(o),
				Msg: fmt.Sprintf("%s is already written by workload %s (from %s) to %s; Flux builds them together, so its build would fail for every workload there",
					o, wl, otherFile(other), where),
			}
		}
	}
	return nil
}

func otherFile(o Object) string {
	if o.Source != "" {
		return layout.Quote(o.Source) + ", at " + layout.Quote(path.Join(o.Destination, o.File))
	}
	return layout.Quote(path.Join(o.Destination, o.File))
}
