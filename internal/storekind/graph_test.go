package storekind

import (
	"go/build"
	"strings"
	"testing"
)

// Store clients are built here and nowhere else: package inputs checks a
// store's spec through the registry, with no backend and no git library
// of its own, and the engine opens stores by kind name, with no S3, OCI,
// git transport or SSH client of its own.
func TestOnlyTheRegistryBuildsStoreClients(t *testing.T) {
	clients := []string{"github.com/go-git/go-git", "github.com/minio/minio-go", "oras.land/", "golang.org/x/crypto/ssh",
		"github.com/render-dev/render/statestore/s3store", "github.com/render-dev/render/statestore/ocistore"}
	for dir, banned := range map[string][]string{
		"../inputs": append(clients, "github.com/render-dev/render/statestore"),
		"../engine": clients,
	} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range pkg.Imports {
			for _, b := range banned {
				if strings.HasPrefix(imp, b) {
					t.Errorf("package %s imports %s", pkg.Name, imp)
					break
				}
			}
		}
	}
}
