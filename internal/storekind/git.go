package storekind

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
	"github.com/render-dev/render/statestore/gitstore"
)

// Git is the GitStateStore kind: a branch of a git repository, written by
// statestore/gitstore. Its secret holds username and password (authMethod
// basicAuth), or sshPrivateKey and knownHosts (ssh), and optionally
// ca.crt; spec.signing's secret holds signingKey.
func Git() Kind {
	return factory[*GitStateStore]{name: "GitStateStore", apiVersion: inputs.KratixAPIVersion,
		newSpec: func(name, file string) *GitStateStore { return &GitStateStore{Name: name, File: file} },
		source:  func(s *GitStateStore) WorkerSource { return WorkerSource{Git: s} },
		check:   checkGit, open: openGit,
		caps:   Capabilities{FluxSource: "GitRepository", PullRequests: true},
		commit: func(s *GitStateStore) *inputs.Commit { return s.Commit },
		pullRequests: func(s *GitStateStore, v env) (*PullRequests, error) {
			if s.PullRequest == nil {
				return nil, nil
			}
			c, err := openForge(s, v)
			if err != nil {
				return nil, err
			}
			return &PullRequests{Spec: s.PullRequest, Forge: c, Base: s.Branch}, nil
		}}
}

// checkGit validates a GitStateStore's spec and fills its defaults (the
// branch main; authMethod basicAuth when only a secretRef is given).
func checkGit(s *GitStateStore) error {
	if s.URL == "" {
		return errors.New("spec.url is missing")
	}
	if err := checkGitURL(s.URL); err != nil {
		return err
	}
	if s.Branch == "" {
		s.Branch = "main"
	}
	if err := plumbing.NewBranchReferenceName(s.Branch).Validate(); err != nil || s.Branch == "HEAD" {
		return fmt.Errorf("spec.branch %q is not a branch name git accepts (see git check-ref-format)", s.Branch)
	}
	if err := storePath(s.Path); err != nil {
		return fmt.Errorf("spec.path: %v", err)
	}
	switch s.AuthMethod {
	case "", "basicAuth", "ssh":
	default:
		return fmt.Errorf("spec.authMethod %q is unknown: use basicAuth or ssh", s.AuthMethod)
	}
	if s.AuthMethod == "" && s.SecretRef != nil {
		// Kratix's CRD defaults authMethod to basicAuth: a store
		// written for Kratix with only a secretRef sends its
		// credentials.
		s.AuthMethod = "basicAuth"
	}
	if err := s.MassDeletion.Check(); err != nil {
		return err
	}
	if c := s.Commit; c != nil && c.Template != "" {
		if _, err := inputs.ParseCommitTemplate(c.Template); err != nil {
			return fmt.Errorf("spec.commit.template: %v", err)
		}
	}
	if err := s.GitAuthor.Check(); err != nil {
		return err
	}
	if sg := s.Signing; sg != nil {
		switch sg.Format {
		case "ssh", "openpgp":
		case "":
			return errors.New("spec.signing.format is missing: use ssh or openpgp")
		default:
			return fmt.Errorf("spec.signing.format %q is unknown: use ssh or openpgp", sg.Format)
		}
		if sg.SecretRef == nil && s.SecretRef == nil {
			return errors.New("spec.signing needs a secretRef (or the store's spec.secretRef) holding signingKey")
		}
	}
	return checkPullRequest(s)
}

// openGit builds a GitStateStore's client: its auth and CA from the
// secret (a repository on this machine needs neither), and its signer.
func openGit(gs *GitStateStore, v env) (statestore.Store, string, error) {
	cfg := gitstore.Config{
		Name: v.name, URL: gs.URL, Branch: gs.Branch, Path: gs.Path,
		AuthorName: gs.GitAuthor.Name, AuthorEmail: gs.GitAuthor.Email,
		InsecureSkipTLS: gs.InsecureSkipTLSVerify,
		RetryDeadline:   v.opts.RetryDeadline,
		Warn:            v.log(slog.LevelWarn), Debug: v.log(slog.LevelDebug),
	}
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
			return nil, "", v.bad(msg)
		}
	} else {
		secret, err := v.secret(gs.SecretRef, gs.AuthMethod != "")
		if err != nil {
			return nil, "", err
		}
		if cfg.Auth, err = gitAuth(gs, secret, v.where); err != nil {
			return nil, "", err
		}
		if ca, ok := secret["ca.crt"]; ok {
			cfg.CABundle = ca
		}
	}
	if gs.AllowInsecureHTTP && sendsPasswordInClear(gs) {
		v.opts.Log.Warn("basic auth goes over plain http:// (allowInsecureHTTP: true): the password crosses the network unencrypted", "store", v.name)
	}
	if gs.InsecureSkipTLSVerify {
		v.opts.Log.Warn("TLS verification is off for this store (insecureSkipTLSVerify: true)", "store", v.name)
	}
	signer, signKey, err := gitSigner(v, gs)
	if err != nil {
		return nil, "", err
	}
	cfg.Signer = signer
	s, err := gitstore.New(cfg)
	if err != nil {
		return nil, "", v.bad(err.Error())
	}
	return s, gitKey(gs) + secretDigest(v.secretOrNil(gs.SecretRef)) + signKey, nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func gitAuth(gs *GitStateStore, secret map[string][]byte, where string) (transport.AuthMethod, error) {
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
func plainHTTP(gs *GitStateStore, where string) error {
	if !sendsPasswordInClear(gs) || gs.AllowInsecureHTTP {
		return nil
	}
	return &renderer.InputError{File: gs.File, Where: where, Msg: "spec.url is plain http:// and authMethod basicAuth would send the password unencrypted: use https://, or set spec.allowInsecureHTTP: true to accept that"}
}

// sendsPasswordInClear reports whether the store's basic auth goes over
// plain http:// to another machine.
func sendsPasswordInClear(gs *GitStateStore) bool {
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
func gitKey(gs *GitStateStore) string {
	return fmt.Sprintf("git|%s|%s|%s|%s|%t", gs.URL, gs.Branch, gs.Path, gs.AuthMethod, gs.InsecureSkipTLSVerify)
}
