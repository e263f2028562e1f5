package bootstrap

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/renderer"
)

// What goes into the printed manifests is checked as the worker's API
// server (and its reconciler) would check it, before anything is printed:
// an option that would make a name no API server takes, or a value with a
// line break that would write lines of YAML of its own into the output,
// is refused. Names render makes up (a Kustomization per section, a
// source per destination) are kept within Kubernetes' limits by
// shortening them deterministically.

// Kubernetes' limits on the names render derives.
const (
	// MaxObjectName is the longest object name (a DNS-1123 subdomain).
	MaxObjectName = validation.DNS1123SubdomainMaxLength // 253
	// MaxKustomizationName is the longest Kustomization name: Flux's
	// kustomize-controller puts it in the label
	// kustomize.toolkit.fluxcd.io/name of every object it applies, and a
	// label value holds at most 63 characters.
	MaxKustomizationName = validation.LabelValueMaxLength // 63
	// maxFileName is the longest file name Linux file systems take: Flux's
	// source-controller makes a folder named after each source (see
	// fluxSourceName).
	maxFileName = 255
)

// OptionError is an option whose value the worker's API server (or its
// reconciler) would refuse. Option is the option's name as the command
// line spells it, without dashes.
type OptionError struct {
	Option, Value, Problem string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("%s %q: %s", e.Option, e.Value, e.Problem)
}

// Validate checks the options as the API server would take them: the
// namespace is a namespace name. Zero values are the defaults.
func (o FluxOptions) Validate() error {
	return checkNamespace(o.Namespace)
}

// Validate checks the options as the API server and Argo CD would take
// them: the namespace is a namespace name, the project an AppProject's
// name, the server an http(s) URL.
func (o ArgoCDOptions) Validate() error {
	if err := checkNamespace(o.Namespace); err != nil {
		return err
	}
	if o.Project != "" {
		if errs := validation.IsDNS1123Subdomain(o.Project); len(errs) > 0 {
			return &OptionError{"project", o.Project, "not a valid AppProject name: " + strings.Join(errs, "; ")}
		}
	}
	if o.Server != "" {
		if err := checkServer(o.Server); err != nil {
			return &OptionError{"server", o.Server, err.Error()}
		}
	}
	if i := strings.IndexFunc(o.SOPSPlugin, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return &OptionError{"sops-plugin", o.SOPSPlugin, fmt.Sprintf("holds a space or a control character at byte %d: a config management plugin's name is one word", i)}
	}
	return nil
}

func checkNamespace(ns string) error {
	if ns == "" {
		return nil
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return &OptionError{"namespace", ns, "not a valid Kubernetes namespace: " + strings.Join(errs, "; ")}
	}
	return nil
}

// checkServer accepts what Argo CD can reach a cluster by: an absolute
// http(s) URL with a host, written without spaces or control characters.
func checkServer(s string) error {
	if i := strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return fmt.Errorf("holds a space or a control character at byte %d", i)
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("not a cluster's URL: want https://host[:port][/path]")
	}
	return nil
}

// checkTarget checks what the platform gives the manifests for t: the
// Secret its source names is a Secret's name, and every value printed
// (in a field or in a comment) is on one line. The platform loader checks
// most of them already; a Platform built any other way is checked here.
func checkTarget(p *inputs.Platform, t *target) error {
	var store, file string
	var ref *inputs.SecretRef
	fields := map[string]string{}
	switch {
	case t.git != nil:
		store, file, ref = t.store, t.git.File, t.git.SecretRef
		fields["spec.url"], fields["spec.branch"] = t.git.URL, t.git.Branch
	case t.bucket != nil:
		store, file, ref = t.store, t.bucket.File, t.bucket.SecretRef
		fields["spec.endpoint"], fields["spec.bucketName"], fields["spec.region"] = t.bucket.Endpoint, t.bucket.BucketName, t.bucket.Region
	case t.oci != nil:
		store, file, ref = t.store, t.oci.File, t.oci.SecretRef
		fields["spec.registry"], fields["spec.repository"], fields["spec.tag"] = t.oci.Registry, t.oci.Repository, t.oci.Tag
	}
	fields["spec.path"] = t.folder
	bad := func(msg string) error { return &renderer.InputError{File: file, Where: store, Msg: msg} }
	if ref != nil && ref.Name != "" {
		if errs := validation.IsDNS1123Subdomain(ref.Name); len(errs) > 0 {
			return bad(fmt.Sprintf("spec.secretRef.name %q is not a valid Secret name, which the worker's source would reference: %s", ref.Name, strings.Join(errs, "; ")))
		}
	}
	for _, f := range []string{"spec.url", "spec.branch", "spec.endpoint", "spec.bucketName", "spec.region", "spec.registry", "spec.repository", "spec.tag", "spec.path"} {
		if v, ok := fields[f]; ok && strings.IndexFunc(v, unicode.IsControl) >= 0 {
			return bad(fmt.Sprintf("%s holds a control character (a line break?), which would break the printed manifests", f))
		}
	}
	if pol := p.SecretsPolicy(t.dest.Name); pol.Encrypts() {
		if errs := validation.IsDNS1123Subdomain(pol.DecryptionSecret); len(errs) > 0 {
			return &renderer.InputError{File: p.DestinationFile(t.dest.Name), Where: "Destination " + t.dest.Name,
				Msg: fmt.Sprintf("spec.secrets.sops.decryptionSecretRef.name %q is not a valid Secret name, which the worker's Kustomizations would reference: %s", pol.DecryptionSecret, strings.Join(errs, "; "))}
		}
	}
	if errs := validation.IsDNS1123Subdomain(t.dest.Name); len(errs) > 0 {
		return &renderer.InputError{File: p.DestinationFile(t.dest.Name), Where: "Destination " + t.dest.Name, Msg: "metadata.name is not a valid Kubernetes name: " + strings.Join(errs, "; ")}
	}
	return nil
}

// kubeName is base+suffix when that is at most max characters long;
// otherwise a name of at most limit characters: as much of base as fits, a
// dash, the first 10 hex digits of the SHA-256 of base+suffix, and suffix.
// The same base and suffix always give the same name, two different ones
// (practically) never, and the readable part is where base begins, so a
// person can still tell which destination it is. base is a DNS-1123
// subdomain (a destination's or store's name), so the result is one too,
// and a valid label value when limit is 63.
func kubeName(base, suffix string, limit int) string {
	full := base + suffix
	if len(full) <= limit {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	hash := hex.EncodeToString(sum[:])[:10]
	keep := min(max(limit-len(suffix)-1-len(hash), 0), len(base))
	if prefix := strings.TrimRight(base[:keep], "-."); prefix != "" {
		return prefix + "-" + hash + suffix
	}
	return hash + suffix
}

// kustomizationName is the name of a destination's Kustomization for
// section ("dependencies", "resources", or "" for a flat destination).
func kustomizationName(dest, section string) string {
	if section == "" {
		return kubeName(dest, "", MaxKustomizationName)
	}
	return kubeName(dest, "-"+section, MaxKustomizationName)
}

// applicationName is the name of a destination's Argo CD Application in
// namespace for section ("" for a flat destination). Argo CD's
// repo-server looks for a file ".argocd-source-<instance>.yaml" in the
// Application's path on every comparison, where <instance> is the name,
// or "<namespace>_<name>" for an Application outside Argo CD's own
// namespace: one file name, which Linux holds to 255 bytes. A longer
// Application is taken by the API server and then never syncs ("error
// while parsing source parameters: stat ...: file name too long", seen
// with the real repo-server), so its name is at most 234 bytes less the
// namespace's. Argo CD's default (annotation) tracking takes any such
// name; with label tracking (application.resourceTrackingMethod: label)
// it puts the name in a label, which holds 63 characters: a warning says
// so for a longer name.
func applicationName(dest, section, namespace string) string {
	limit := min(maxFileName-len(".argocd-source-")-len(namespace)-len("_")-len(".yaml"), MaxObjectName)
	if section == "" || section == "." {
		return kubeName(dest, "", limit)
	}
	return kubeName(dest, "-"+section, limit)
}

// fluxSourceName is the name of a Flux source of kind in namespace: base
// (a store's name, or <store>-<destination> for a Bucket or an
// OCIRepository made for one destination), shortened when too long. Each
// time source-controller reconciles a source it makes a temporary folder
// named "<kind>-<namespace>-<name>-" and up to 10 random digits
// (os.MkdirTemp): one file name, which Linux holds to 255 bytes. A longer
// name is taken by the API server and then fails on every reconcile
// ("failed to create temporary working directory: ... file name too
// long"), so a source's name is at most 242 bytes less the kind's and the
// namespace's, and never over the 253 of any object.
func fluxSourceName(kind, namespace, base string) string {
	limit := maxFileName - len(kind) - len(namespace) - len("---") - 10
	return kubeName(base, "", min(limit, MaxObjectName))
}

// warnLabelTracking warns about Application names longer than a label
// value: fine with Argo CD's default annotation tracking, refused by the
// API server in the label Argo CD's label tracking puts them in.
func warnLabelTracking(out *Output, names ...string) {
	for _, n := range names {
		if len(n) > MaxKustomizationName {
			out.Warnings = append(out.Warnings, fmt.Sprintf("Application %s is %d characters long: fine with Argo CD's default resource tracking (an annotation), but with application.resourceTrackingMethod: label Argo CD puts the name in a label, which holds at most %d", n, len(n), MaxKustomizationName))
			return
		}
	}
}
