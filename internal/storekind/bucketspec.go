package storekind

import (
	"fmt"
	"strings"

	"github.com/render-dev/render/internal/inputs"
)

// BucketStateStore is Kratix's BucketStateStore spec, plus region and bucket creation.
type BucketStateStore struct {
	Name         string            `yaml:"-"`
	File         string            `yaml:"-"`
	Endpoint     string            `yaml:"endpoint"`
	BucketName   string            `yaml:"bucketName"`
	Path         string            `yaml:"path"`
	Insecure     bool              `yaml:"insecure"`
	Region       string            `yaml:"region"`
	AuthMethod   string            `yaml:"authMethod"`
	SecretRef    *inputs.SecretRef `yaml:"secretRef"`
	CreateBucket bool              `yaml:"createBucket"`
	// MassDeletion sets the store's mass-deletion breaker.
	MassDeletion inputs.MassDeletion `yaml:"massDeletion"`
}

// Meta implements inputs.StoreSpec.
func (s *BucketStateStore) Meta() inputs.StoreMeta {
	return inputs.StoreMeta{Kind: "BucketStateStore", Name: s.Name, File: s.File, Path: s.Path, SecretRef: s.SecretRef, MassDeletion: s.MassDeletion}
}

// Location implements inputs.StoreSpec: the bucket and its endpoint.
func (s *BucketStateStore) Location() (string, string) {
	host := strings.ToLower(s.Endpoint)
	if _, rest, ok := strings.Cut(host, "://"); ok {
		host = rest
	}
	return fmt.Sprintf("bucket %s at %s", s.BucketName, strings.TrimSuffix(host, "/")), inputs.TrimFolder(s.Path)
}
