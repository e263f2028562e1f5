package storekind

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/s3store"
)

// Bucket is the BucketStateStore kind: a folder of an S3 bucket, written by
// statestore/s3store. Its secret holds accessKeyID and secretAccessKey
// (authMethod accessKey, the default) and optionally ca.crt; authMethod
// IAM uses the ambient credential chain.
func Bucket() Kind {
	return factory[*BucketStateStore]{name: "BucketStateStore", apiVersion: inputs.KratixAPIVersion,
		newSpec: func(name, file string) *BucketStateStore { return &BucketStateStore{Name: name, File: file} },
		source:  func(s *BucketStateStore) WorkerSource { return WorkerSource{Bucket: s} },
		check:   checkBucket, open: openBucket,
		caps: Capabilities{Uploads: true, FluxSource: "Bucket"}}
}

// checkBucket validates a BucketStateStore's spec.
func checkBucket(s *BucketStateStore) error {
	if s.Endpoint == "" || s.BucketName == "" {
		return errors.New("spec.endpoint and spec.bucketName are required")
	}
	if err := storePath(s.Path); err != nil {
		return fmt.Errorf("spec.path: %v", err)
	}
	if err := checkEndpoint(s.Endpoint); err != nil {
		return err
	}
	switch s.AuthMethod {
	case "", "accessKey", "IAM":
	default:
		return fmt.Errorf("spec.authMethod %q is unknown: use accessKey or IAM", s.AuthMethod)
	}
	return s.MassDeletion.Check()
}

// openBucket builds a BucketStateStore's client.
func openBucket(bs *BucketStateStore, v env) (statestore.Store, string, error) {
	cfg := s3store.Config{
		Name: v.name, Endpoint: bs.Endpoint, Bucket: bs.BucketName, Path: bs.Path,
		Region: bs.Region, Insecure: bs.Insecure, CreateBucket: bs.CreateBucket,
		RetryDeadline: v.opts.RetryDeadline, Debug: v.log(slog.LevelDebug),
		Transport: v.opts.Transport,
	}
	var secret map[string][]byte
	switch bs.AuthMethod {
	case "IAM":
		cfg.UseIAM = true
		secret = v.secretOrNil(bs.SecretRef)
	default:
		var err error
		if secret, err = v.secret(bs.SecretRef, true); err != nil {
			return nil, "", err
		}
		for _, k := range []string{"accessKeyID", "secretAccessKey"} {
			if len(secret[k]) == 0 {
				return nil, "", v.bad(fmt.Sprintf("secret %s has no key %q, which authMethod accessKey needs", bs.SecretRef.Name, k))
			}
		}
		cfg.AccessKeyID, cfg.SecretAccessKey = string(secret["accessKeyID"]), string(secret["secretAccessKey"])
	}
	if ca, ok := secret["ca.crt"]; ok {
		cfg.CABundle = ca
	}
	s, err := s3store.New(cfg)
	if err != nil {
		return nil, "", v.bad(err.Error())
	}
	key := fmt.Sprintf("s3|%s|%s|%s|%s|%t|%s|%t", bs.Endpoint, bs.BucketName, bs.Path, bs.Region, bs.Insecure, bs.AuthMethod, bs.CreateBucket)
	return s, key + secretDigest(secret), nil
}
