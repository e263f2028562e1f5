package engine

import (
	"fmt"
	"log/slog"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/ocistore"
)

// openOCI builds the client for an OCIStateStore. Its secret, when it has
// one, holds username and password, or token, and optionally ca.crt.
func (e *Engine) openOCI(p *inputs.Platform, ref renderer.StoreRef, os *inputs.OCIStateStore) (statestore.Store, string, error) {
	where := "OCIStateStore " + os.Name
	cfg := ocistore.Config{
		Name: ref.String(), Registry: os.Registry, Repository: os.Repository, Tag: os.Tag,
		Insecure: os.Insecure, Create: os.Create, Source: os.Source, Author: os.Author,
		RetryDeadline: e.opts.RetryDeadline,
		Warn:          e.storeLog(slog.LevelWarn, ref), Debug: e.storeLog(slog.LevelDebug, ref),
	}
	secret, err := e.secret(p, os.File, where, os.SecretRef, false)
	if err != nil {
		return nil, "", err
	}
	if secret != nil {
		cfg.Username, cfg.Password, cfg.Token = string(secret["username"]), string(secret["password"]), string(secret["token"])
		if cfg.Token == "" && (cfg.Username == "" || cfg.Password == "") {
			return nil, "", &renderer.InputError{File: os.File, Where: where, Msg: fmt.Sprintf("secret %s has neither a token nor both username and password", os.SecretRef.Name)}
		}
		cfg.CA = secret["ca.crt"]
	}
	s, err := ocistore.Open(cfg)
	if err != nil {
		return nil, "", &renderer.InputError{File: os.File, Where: where, Msg: err.Error()}
	}
	key := fmt.Sprintf("oci|%s|%s|%s|%t|%t", os.Registry, os.Repository, os.Tag, os.Insecure, os.Create)
	return s, key + secretDigest(secret), nil
}
