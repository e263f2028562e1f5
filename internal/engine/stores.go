package engine

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/layout"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/gitstore"
)

// openStore builds the client for one store from the platform
// configuration. Problems with the configuration (a missing secret or key)
// are InputErrors: they are known before anything is written.
func (e *Engine) openStore(p *inputs.Platform, ref renderer.StoreRef) (statestore.Store, string, error) {
	switch ref.Kind {
	case "GitStateStore":
		gs := p.GitStores[ref.Name]
		cfg := gitstore.Config{
			Name: ref.String(), URL: gs.URL, Branch: gs.Branch, Path: gs.Path,
			AuthorName: gs.GitAuthor.Name, AuthorEmail: gs.GitAuthor.Email,
			InsecureSkipTLS: gs.InsecureSkipTLSVerify,
			RetryDeadline:   e.opts.RetryDeadline,
			Warn:            e.storeLog(slog.LevelWarn, ref), Debug: e.storeLog(slog.LevelDebug, ref),
		}
		where := "GitStateStore " + gs.Name
		if dir, local := gitstore.LocalPath(gs.URL); local {
			// A repository on this machine is created on first use, but
			// only inside a folder that exists: a missing one is a mistyped
			// URL, known before any store is contacted.
			if parent := filepath.Dir(dir); !isDir(parent) {
				msg := fmt.Sprintf("spec.url %s: folder %s does not exist (a local repository is created on first use, inside an existing folder)", gs.URL, parent)
				if _, err := os.Stat(dir); err != nil {
					if tl, ok := inputs.TooLong(err); ok {
						msg = fmt.Sprintf("spec.url %s: %s", gs.URL, tl)
					}
				}
				return nil, "", &renderer.InputError{File: gs.File, Where: where, Msg: msg}
			}
		} else {
			secret, err := e.secret(p, gs.File, where, gs.SecretRef, gs.AuthMethod != "")
			if err != nil {
				return nil, "", err
			}
			if cfg.Auth, err = gitAuth(gs, secret, where); err != nil {
				return nil, "", err
			}
			if ca, ok := secret["ca.crt"]; ok {
				cfg.CABundle = ca
			}
		}
		if gs.AllowInsecureHTTP && sendsPasswordInClear(gs) {
			e.log.Warn("basic auth goes over plain http:// (allowInsecureHTTP: true): the password crosses the network unencrypted", "store", ref.String())
		}
		if gs.InsecureSkipTLSVerify {
			e.log.Warn("TLS verification is off for this store (insecureSkipTLSVerify: true)", "store", ref.String())
		}
		signer, signKey, err := e.gitSigner(p, gs, where)
		if err != nil {
			return nil, "", err
		}
		cfg.Signer = signer
		s, err := gitstore.New(cfg)
		if err != nil {
			return nil, "", &renderer.InputError{File: gs.File, Where: where, Msg: err.Error()}
		}
		return s, gitKey(gs) + secretDigest(secretOrNil(p, gs.SecretRef)) + signKey, nil
	case "BucketStateStore":
		bs := p.BucketStores[ref.Name]
		return e.openBucket(p, ref, bs)
	case "OCIStateStore":
		return e.openOCI(p, ref, p.OCIStores[ref.Name])
	}
	return nil, "", fmt.Errorf("unknown store kind %s", ref.Kind)
}

// storeLog logs at level, naming the store: a store's Warn or Debug.
func (e *Engine) storeLog(level slog.Level, ref renderer.StoreRef) func(msg string, args ...any) {
	return func(msg string, args ...any) {
		e.log.Log(context.Background(), level, msg, append([]any{"store", ref.String()}, args...)...)
	}
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// secret resolves a secretRef; required says whether the store needs one.
func (e *Engine) secret(p *inputs.Platform, file, where string, ref *inputs.SecretRef, required bool) (map[string][]byte, error) {
	if ref == nil {
		if required {
			return nil, &renderer.InputError{File: file, Where: where, Msg: "spec.secretRef is required for this authMethod"}
		}
		return nil, nil
	}
	s, ok := p.Secret(ref)
	if !ok {
		hint := "define a Secret document"
		if e.opts.SecretsDir != "" {
			hint += " or mount it as " + e.opts.SecretsDir + "/" + ref.Name + "/<key>"
		} else {
			hint += " or pass --secrets-dir"
		}
		return nil, &renderer.InputError{File: file, Where: where, Msg: fmt.Sprintf("secret %q (spec.secretRef) was not found: %s", ref.Name, hint)}
	}
	return s, nil
}

func gitAuth(gs *inputs.GitStateStore, secret map[string][]byte, where string) (transport.AuthMethod, error) {
	need := func(keys ...string) error {
		for _, k := range keys {
			if len(secret[k]) == 0 {
				return &renderer.InputError{File: gs.File, Where: where, Msg: fmt.Sprintf("secret %s has no key %q, which authMethod %s needs", gs.SecretRef.Name, k, gs.AuthMethod)}
			}
		}
		return nil
	}
	switch gs.AuthMethod {
	case "":
		return nil, nil
	case "basicAuth":
		if err := need("username", "password"); err != nil {
			return nil, err
		}
		if err := plainHTTP(gs, where); err != nil {
			return nil, err
		}
		return &githttp.BasicAuth{Username: strings.TrimSpace(string(secret["username"])), Password: strings.TrimSpace(string(secret["password"]))}, nil
	case "ssh":
		if err := need("sshPrivateKey", "knownHosts"); err != nil {
			return nil, err
		}
		keys, err := gitssh.NewPublicKeys(sshUser(gs.URL), secret["sshPrivateKey"], "")
		if err != nil {
			return nil, &renderer.InputError{File: gs.File, Where: where, Msg: fmt.Sprintf("secret %s: sshPrivateKey cannot be parsed: %v", gs.SecretRef.Name, redactKeyErr(err))}
		}
		cb, err := knownHostsCallback(secret["knownHosts"])
		if err != nil {
			return nil, &renderer.InputError{File: gs.File, Where: where, Msg: fmt.Sprintf("secret %s: knownHosts: %v", gs.SecretRef.Name, err)}
		}
		keys.HostKeyCallback = cb
		return keys, nil
	}
	return nil, &renderer.InputError{File: gs.File, Where: where, Msg: fmt.Sprintf("authMethod %q is unknown", gs.AuthMethod)}
}

// sshUser is the user an ssh URL names, as go-git parses it (scp-like
// user@host:path too), or "git" when it names none:
// ssh://host/org/repo@v2.git names none.
func sshUser(u string) string {
	ep, err := transport.NewEndpoint(u)
	if err != nil || ep.User == "" {
		return "git"
	}
	return ep.User
}

// plainHTTP refuses basic auth over plain http:// to another machine
// unless the store opts in with spec.allowInsecureHTTP: the password
// would cross the network unencrypted. A loopback host is allowed: the
// password never leaves this machine.
func plainHTTP(gs *inputs.GitStateStore, where string) error {
	if !sendsPasswordInClear(gs) || gs.AllowInsecureHTTP {
		return nil
	}
	return &renderer.InputError{File: gs.File, Where: where, Msg: "spec.url is plain http:// and authMethod basicAuth would send the password unencrypted: use https://, or set spec.allowInsecureHTTP: true to accept that"}
}

// sendsPasswordInClear reports whether the store's basic auth goes over
// plain http:// to another machine.
func sendsPasswordInClear(gs *inputs.GitStateStore) bool {
	ep, err := transport.NewEndpoint(gs.URL)
	return err == nil && gs.AuthMethod == "basicAuth" && ep.Protocol == "http" && !loopback(ep.Host)
}

// loopback reports whether host is this machine: localhost or a loopback
// address.
func loopback(host string) bool {
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func redactKeyErr(err error) string {
	s := err.Error()
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

// knownHostsCallback verifies host keys against the secret's known_hosts
// lines. go-git reads them from a file: memFile gives it one that lives in
// memory, as a sidecar's root file system is read-only and has no /tmp.
func knownHostsCallback(data []byte) (ssh.HostKeyCallback, error) {
	name, release, err := memFile("render-known-hosts", data)
	if err != nil {
		return nil, err
	}
	defer release()
	cb, err := gitssh.NewKnownHostsCallback(name)
	if err != nil {
		return nil, err
	}
	return cb, nil
}

// gitKey identifies a store's configuration, so a kept client is reused
// only while its configuration is unchanged.
func gitKey(gs *inputs.GitStateStore) string {
	return fmt.Sprintf("git|%s|%s|%s|%s|%t", gs.URL, gs.Branch, gs.Path, gs.AuthMethod, gs.InsecureSkipTLSVerify)
}

func secretOrNil(p *inputs.Platform, ref *inputs.SecretRef) map[string][]byte {
	s, _ := p.Secret(ref)
	return s
}

// secretDigest lets a kept client notice rotated credentials without
// keeping or printing them.
func secretDigest(s map[string][]byte) string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%x;", k, s[k])
	}
	return fmt.Sprintf("|%x", h.Sum(nil)[:8])
}

// checkStorePaths refuses a path the plan would write that a store could
// not hold once joined to the store's own path (too long, or a name too
// long): the renderer checks paths inside a store, and only the platform
// knows the store's path. Render's own files for the workload (its record,
// its aggregate parts) are checked too. S3's limits hold for every store,
// so the same output is accepted or refused whatever the backend.
func checkStorePaths(p *inputs.Platform, plan *renderer.Plan, key string) error {
	for _, w := range plan.Writes {
		var prefix string
		switch w.Store.Kind {
		case "GitStateStore":
			prefix = p.GitStores[w.Store.Name].Path
		case "BucketStateStore":
			prefix = p.BucketStores[w.Store.Name].Path
		}
		prefix = strings.Trim(prefix, "/")
		check := func(rel string) error {
			if err := layout.ValidPath(path.Join(prefix, rel)); err != nil {
				return &renderer.InputError{Where: w.Store.String(), Msg: fmt.Sprintf("cannot be written with the store's path %q: %v", prefix, err)}
			}
			return nil
		}
		paths := []string{statestore.RecordPath(key)}
		for rel := range w.Files {
			paths = append(paths, rel)
		}
		for _, a := range w.Aggregates {
			paths = append(paths, a.Target, statestore.AggregatePath(a.Target, key))
		}
		sort.Strings(paths)
		for _, rel := range paths {
			if err := check(rel); err != nil {
				return err
			}
		}
	}
	return nil
}
