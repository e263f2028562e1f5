package engine

import (
	"fmt"
	"log/slog"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/s3store"
)

// openBucket builds the client for a BucketStateStore. Its secret holds
// accessKeyID and secretAccessKey (authMethod accessKey, the default) and
// optionally ca.crt; authMethod IAM uses the ambient credential chain.
func (e *Engine) openBucket(p *inputs.Platform, ref renderer.StoreRef, bs *inputs.BucketStateStore) (statestore.Store, string, error) {
	where := "BucketStateStore " + bs.Name
	cfg := s3store.Config{
		Name: ref.String(), Endpoint: bs.Endpoint, Bucket: bs.BucketName, Path: bs.Path,
		Region: bs.Region, Insecure: bs.Insecure, CreateBucket: bs.CreateBucket,
		RetryDeadline: e.opts.RetryDeadline, Debug: e.storeLog(slog.LevelDebug, ref),
	}
	var secret map[string][]byte
	switch bs.AuthMethod {
	case "IAM":
		cfg.UseIAM = true
		secret = secretOrNil(p, bs.SecretRef)
	default:
		var err error
		if secret, err = e.secret(p, bs.File, where, bs.SecretRef, true); err != nil {
			return nil, "", err
		}
		for _, k := range []string{"accessKeyID", "secretAccessKey"} {
			if len(secret[k]) == 0 {
				return nil, "", &renderer.InputError{File: bs.File, Where: where, Msg: fmt.Sprintf("secret %s has no key %q, which authMethod accessKey needs", bs.SecretRef.Name, k)}
			}
		}
		cfg.AccessKeyID, cfg.SecretAccessKey = string(secret["accessKeyID"]), string(secret["secretAccessKey"])
	}
	if ca, ok := secret["ca.crt"]; ok {
		cfg.CABundle = ca
	}
	s, err := s3store.New(cfg)
	if err != nil {
		return nil, "", &renderer.InputError{File: bs.File, Where: where, Msg: err.Error()}
	}
	key := fmt.Sprintf("s3|%s|%s|%s|%s|%t|%s|%t", bs.Endpoint, bs.BucketName, bs.Path, bs.Region, bs.Insecure, bs.AuthMethod, bs.CreateBucket)
	return s, key + secretDigest(secret), nil
}
