package storekind

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/ocistore"
)

// OCI is the OCIStateStore kind: a base repository in an OCI registry, each
// destination published as the artifact <repository>/<destination path>,
// written by statestore/ocistore. Its secret, when it has one, holds
// username and password, or token, and optionally ca.crt.
func OCI() Kind {
	return factory[*OCIStateStore]{name: "OCIStateStore", apiVersion: OCIAPIVersion,
		newSpec: func(name, file string) *OCIStateStore { return &OCIStateStore{Name: name, File: file} },
		source:  func(s *OCIStateStore) WorkerSource { return WorkerSource{OCI: s} },
		check:   checkOCI, checkDestination: checkOCIDestination, open: openOCI,
		caps: Capabilities{Uploads: true, FluxSource: "OCIRepository"}}
}

// checkOCI validates an OCIStateStore's spec: its references as the
// registry client reads them.
func checkOCI(s *OCIStateStore) error {
	if s.Registry == "" || s.Repository == "" {
		return errors.New("spec.registry and spec.repository are required")
	}
	if err := ocistore.CheckConfig(ocistore.Config{Registry: s.Registry, Repository: s.Repository, Tag: s.Tag, Source: s.Source}); err != nil {
		return fmt.Errorf("spec.%v", err) // CheckConfig's errors start with the field's name
	}
	return s.MassDeletion.Check()
}

// checkOCIDestination refuses a destination path that cannot name an
// artifact below the store's repository.
func checkOCIDestination(s *OCIStateStore, path string) error {
	if err := ocistore.CheckConfig(ocistore.Config{Registry: s.Registry, Repository: s.Repository + "/" + path}); err != nil {
		return fmt.Errorf("spec.path %q cannot name an artifact of OCIStateStore %s: %v", path, s.Name, err)
	}
	return nil
}

// openOCI builds an OCIStateStore's client.
func openOCI(os *OCIStateStore, v env) (statestore.Store, string, error) {
	cfg := ocistore.Config{
		Name: v.name, Registry: os.Registry, Repository: os.Repository, Tag: os.Tag,
		Insecure: os.Insecure, Create: os.Create, Source: os.Source, Author: os.Author,
		RetryDeadline: v.opts.RetryDeadline, Transport: v.opts.Transport,
		Warn: v.log(slog.LevelWarn), Debug: v.log(slog.LevelDebug),
	}
	secret, err := v.secret(os.SecretRef, false)
	if err != nil {
		return nil, "", err
	}
	if secret != nil {
		cfg.Username, cfg.Password, cfg.Token = string(secret["username"]), string(secret["password"]), string(secret["token"])
		if cfg.Token == "" && (cfg.Username == "" || cfg.Password == "") {
			return nil, "", v.bad(fmt.Sprintf("secret %s has neither a token nor both username and password", os.SecretRef.Name))
		}
		cfg.CA = secret["ca.crt"]
	}
	s, err := ocistore.Open(cfg)
	if err != nil {
		return nil, "", v.bad(err.Error())
	}
	key := fmt.Sprintf("oci|%s|%s|%s|%t|%t", os.Registry, os.Repository, os.Tag, os.Insecure, os.Create)
	return s, key + secretDigest(secret), nil
}
