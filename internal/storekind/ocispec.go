package storekind

import (
	"fmt"
	"strings"

	"github.com/render-dev/render/internal/inputs"
)

// OCIAPIVersion is the apiVersion of render's own kinds.
const OCIAPIVersion = "render.dev/v1alpha1"

// OCIStateStore is render's own kind (Kratix has no OCI store): a base
// repository in an OCI registry, each destination published as the artifact
// <repository>/<destination path>. Its secret holds username and password,
// or token, and optionally ca.crt.
type OCIStateStore struct {
	Name       string `yaml:"-"`
	File       string `yaml:"-"`
	Registry   string `yaml:"registry"`
	Repository string `yaml:"repository"`
	// Tag is the moving tag of every destination artifact ("latest").
	Tag       string            `yaml:"tag"`
	Insecure  bool              `yaml:"insecure"`
	SecretRef *inputs.SecretRef `yaml:"secretRef"`
	// Create lets the first write start a store in a repository that has none.
	Create bool `yaml:"create"`
	// Source is org.opencontainers.image.source on the artifacts.
	Source string `yaml:"source"`
	// Author is added to each write's provenance.
	Author string `yaml:"author"`
	// MassDeletion sets the store's mass-deletion breaker.
	MassDeletion inputs.MassDeletion `yaml:"massDeletion"`
}

// Meta implements inputs.StoreSpec. An OCI store has no folder of its own.
func (s *OCIStateStore) Meta() inputs.StoreMeta {
	return inputs.StoreMeta{Kind: "OCIStateStore", Name: s.Name, File: s.File, SecretRef: s.SecretRef, MassDeletion: s.MassDeletion}
}

// Location implements inputs.StoreSpec: the base repository.
func (s *OCIStateStore) Location() (string, string) {
	return fmt.Sprintf("repository %s/%s", strings.ToLower(s.Registry), s.Repository), ""
}
