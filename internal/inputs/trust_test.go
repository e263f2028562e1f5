package inputs_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/render-dev/render/internal/inputs"
)

// No destination, and so no store's path, may lie inside the folder where
// another store of the same location keeps render's records: git stores
// of one repository (however its URL is spelled) and branch, bucket stores
// of one bucket. Stores of other branches or buckets do not share files.
func TestDestinationInsideAnotherStoresRecords(t *testing.T) {
	doc := func(kind, name, spec string) string {
		return fmt.Sprintf("apiVersion: platform.kratix.io/v1alpha1\nkind: %s\nmetadata:\n  name: %s\nspec:\n%s", kind, name, spec)
	}
	dst := func(name, kind, store, path string) string {
		return doc("Destination", name, fmt.Sprintf("  path: %s\n  stateStoreRef: {kind: %s, name: %s}\n", path, kind, store))
	}
	git := func(name, url, branch, path string) string {
		return doc("GitStateStore", name, fmt.Sprintf("  url: %s\n  branch: %s\n  path: %s\n", url, branch, path))
	}
	bucket := func(name, bucket, path string) string {
		return doc("BucketStateStore", name, fmt.Sprintf("  endpoint: minio.example.com:9000\n  bucketName: %s\n  path: %s\n", bucket, path))
	}
	for _, c := range []struct {
		name string
		docs []string
		want []string // nil: accepted
	}{
		{"git store path in another's records", []string{
			git("a", "https://git.example.com/org/state.git", "main", "clusters"),
			git("b", "ssh://git@git.example.com/org/state", "main", "clusters/.render/workloads"),
			dst("dev", "GitStateStore", "a", "dev"), dst("x", "GitStateStore", "b", "x"),
		}, []string{"Destination x", `folder "clusters/.render/workloads/x" of GitStateStore/b, inside "clusters/.render"`, "GitStateStore/a (the store of Destination dev)"}},
		{"git destination in another's records", []string{
			git("a", "https://git.example.com/org/state.git", "main", "clusters"),
			git("b", "https://git.example.com/org/state.git", "main", "/"),
			dst("dev", "GitStateStore", "a", "dev"), dst("x", "GitStateStore", "b", "clusters/.render/placed/dev"),
		}, []string{"Destination x", `"clusters/.render/placed/dev"`, "GitStateStore/a"}},
		{"bucket destination in another's records", []string{
			bucket("a", "state", "clusters"), bucket("b", "state", ""),
			dst("dev", "BucketStateStore", "a", "dev"), dst("x", "BucketStateStore", "b", "clusters/.render/load"),
		}, []string{"Destination x", "BucketStateStore/b", "BucketStateStore/a", "bucket state at minio.example.com:9000"}},
		{"another branch", []string{
			git("a", "https://git.example.com/org/state.git", "main", "clusters"),
			git("b", "https://git.example.com/org/state.git", "other", "clusters/.render/workloads"),
			dst("dev", "GitStateStore", "a", "dev"), dst("x", "GitStateStore", "b", "x"),
		}, nil},
		{"another bucket", []string{
			bucket("a", "state", "clusters"), bucket("b", "other", ""),
			dst("dev", "BucketStateStore", "a", "dev"), dst("x", "BucketStateStore", "b", "clusters/.render/load"),
		}, nil},
		{"a .render folder that is nobody's records", []string{
			git("a", "https://git.example.com/org/state.git", "main", "clusters"),
			git("b", "https://git.example.com/org/state.git", "main", "/"),
			dst("dev", "GitStateStore", "a", "dev"), dst("x", "GitStateStore", "b", "elsewhere/.render/x"),
		}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			f := write(t, filepath.Join(dir, "platform.yaml"), joinDocs(c.docs))
			_, err := inputs.LoadPlatform(kinds, []string{dir}, "")
			if c.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			inputErr(t, err, append([]string{f}, c.want...)...)
		})
	}
}

func joinDocs(docs []string) string {
	out := ""
	for i, d := range docs {
		if i > 0 {
			out += "---\n"
		}
		out += d
	}
	return out
}
