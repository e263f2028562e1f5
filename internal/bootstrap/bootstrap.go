// Package bootstrap writes what a worker cluster applies so that its Flux
// (or Argo CD) reconciles one destination's folder: a source for the state
// store, and two reconcilers, dependencies first, then resources.
//
// Flux: a GitRepository for a GitStateStore (url, ref.branch, secretRef by
// name), or a Bucket for a BucketStateStore (provider generic, bucketName,
// endpoint, insecure, secretRef by name, and spec.prefix
// "<store path>/<destination path>/" so only this destination's objects are
// listed, and writes elsewhere in the bucket do not change its revision);
// then Kustomizations <destination>-dependencies on
// ./<store path>/<destination path>/dependencies and <destination>-resources
// on .../resources, which dependsOn the first, both with prune. A Bucket
// artifact keeps the objects' full keys (source-controller downloads each
// object to <artifact>/<key>), so the Kustomization paths are the same for a
// Bucket as for a GitRepository: they include the prefix.
//
// For an OCIStateStore, Flux gets an OCIRepository on the destination's
// artifact, oci://<registry>/<repository>/<destination path> at the store's
// moving tag, and the Kustomizations' paths are ./dependencies and
// ./resources: the artifact holds the destination folder only.
//
// Argo CD: two Applications with directory.recurse and automated sync with
// prune, the resources one a sync wave after the dependencies one, on the
// git repository or, for an OCIStateStore, on the destination's artifact
// (an oci:// repoURL). Argo CD cannot read a bucket.
//
// An aggregatedYAML or none destination is flat (no dependencies/ or
// resources/): it gets one Kustomization or Application on its folder.
//
// What a worker reads a store from is the store's kind's to say
// (storekind.WorkerSource: a git repository, a bucket or an OCI
// registry's artifacts); this package knows those three sources, not the
// kinds. Credentials are referenced by Secret name and never printed; the worker's
// Secret is the worker's own (read-only) credential, with the keys its
// reconciler expects, which the comments at the top of the output list.
package bootstrap

import (
	"bytes"
	"fmt"
	"net/url"
	"path"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/storekind"
	"github.com/render-dev/render/renderer"
)

// API versions written.
const (
	SourceAPIVersion        = "source.toolkit.fluxcd.io/v1"
	KustomizationAPIVersion = "kustomize.toolkit.fluxcd.io/v1"
	ApplicationAPIVersion   = "argoproj.io/v1alpha1"
)

// FluxOptions tune the Flux objects.
type FluxOptions struct {
	Namespace string        // default "flux-system"
	Interval  time.Duration // default 1m
	// Kinds are the store kinds, which say what a worker reads each
	// store from (storekind.WorkerSource); default storekind.Default.
	Kinds *storekind.Registry
}

// ArgoCDOptions tune the Argo CD Applications.
type ArgoCDOptions struct {
	Namespace string // where Argo CD runs; default "argocd"
	Project   string // default "default"
	Server    string // the cluster to deploy to; default https://kubernetes.default.svc
	// SOPSPlugin names the config management plugin that decrypts the
	// SOPS-encrypted Secrets of a destination that encrypts them (see
	// argoSOPS); without it such a destination is refused.
	SOPSPlugin string
	// Kinds are the store kinds, which say what a worker reads each
	// store from (storekind.WorkerSource); default storekind.Default.
	Kinds    *storekind.Registry
	sopsNote string // set by ArgoCD: what the plugin must do
}

// sops makes Application d read through the SOPS plugin, when the
// destination needs one.
func (o ArgoCDOptions) sops(d *doc) {
	if o.sopsNote != "" {
		usePlugin(d, o.SOPSPlugin)
	}
}

// withSOPS adds the SOPS plugin's note to a header.
func (o ArgoCDOptions) withSOPS(header []string) []string {
	if o.sopsNote != "" {
		return append(header, o.sopsNote)
	}
	return header
}

// Output is what to print: YAML documents, and warnings for the user.
type Output struct {
	YAML     []byte
	Warnings []string
}

// target is a destination resolved against its store: what a worker reads
// it from, as the store's kind says (one of git, bucket, oci is set).
type target struct {
	dest   renderer.Destination
	git    *storekind.GitStateStore
	bucket *storekind.BucketStateStore
	oci    *storekind.OCIStateStore
	// folder is <store path>/<destination path>, without a leading "./".
	folder string
	// store names the store in messages: its kind and name.
	store string
}

func resolve(kinds *storekind.Registry, p *inputs.Platform, name string) (*target, error) {
	if kinds == nil {
		kinds = storekind.Default
	}
	var known []string
	for _, d := range p.Destinations {
		if d.Name == name {
			t := &target{dest: d, store: d.Store.Kind + " " + d.Store.Name}
			src, _ := kinds.WorkerSource(p, d.Store)
			t.git, t.bucket, t.oci = src.Git, src.Bucket, src.OCI
			if t.git == nil && t.bucket == nil && t.oci == nil {
				return nil, &renderer.InputError{File: p.DestinationFile(name), Where: "Destination " + name, Msg: fmt.Sprintf("its state store %s is not defined", d.Store)}
			}
			storePath := ""
			if s := p.Store(d.Store); s != nil {
				storePath = s.Meta().Path
			}
			t.folder = strings.Trim(path.Join(strings.Trim(storePath, "/"), d.Path), "/")
			if t.oci != nil {
				t.folder = "" // the artifact is the destination folder
			}
			return t, nil
		}
		known = append(known, d.Name)
	}
	sort.Strings(known)
	list := "none are defined"
	if len(known) > 0 {
		list = "known destinations: " + strings.Join(known, ", ")
	}
	return nil, &renderer.InputError{Where: "destination " + name, Msg: fmt.Sprintf("no Destination named %q in the platform configuration (%s)", name, list)}
}

// Flux returns the GitRepository or Bucket and the two Kustomizations for
// destination.
func Flux(p *inputs.Platform, destination string, o FluxOptions) (*Output, error) {
	if o.Namespace == "" {
		o.Namespace = "flux-system"
	}
	if o.Interval <= 0 {
		o.Interval = time.Minute
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	t, err := resolve(o.Kinds, p, destination)
	if err != nil {
		return nil, err
	}
	if err := checkTarget(p, t); err != nil {
		return nil, err
	}
	out := &Output{}
	dec, decNote := fluxDecryption(p, t, o.Namespace)
	interval := duration(o.Interval)
	var source doc
	var sourceKind, srcName string
	var notes []string
	if t.oci != nil {
		s := t.oci
		sourceKind = "OCIRepository"
		srcName = fluxSourceName(sourceKind, o.Namespace, s.Name+"-"+t.dest.Name)
		spec := mapping{
			{"interval", interval},
			{"url", ociURL(s, t.dest)},
			{"ref", mapping{{"tag", ociTag(s)}}},
		}
		if s.Insecure {
			spec = append(spec, kv{"insecure", true})
		}
		if s.SecretRef != nil && s.SecretRef.Name != "" {
			spec = append(spec, kv{"secretRef", mapping{{"name", s.SecretRef.Name}}})
			notes = append(notes, fmt.Sprintf("Create Secret %s in namespace %s on the worker first, of type kubernetes.io/dockerconfigjson (a read-only credential for %s).", s.SecretRef.Name, o.Namespace, s.Registry))
		}
		source = object(SourceAPIVersion, "OCIRepository", srcName, o.Namespace, spec)
	} else if t.git != nil {
		s := t.git
		sourceKind = "GitRepository"
		srcName = fluxSourceName(sourceKind, o.Namespace, s.Name)
		clean, err := withoutCredentials(s, t.store, out)
		if err != nil {
			return nil, err
		}
		url, warn := fluxGitURL(clean)
		if warn != "" {
			out.Warnings = append(out.Warnings, warn)
		}
		if s.InsecureSkipTLSVerify {
			out.Warnings = append(out.Warnings, fmt.Sprintf("%s skips TLS verification; Flux's GitRepository cannot: give it the server's CA with spec.certSecretRef", t.store))
		}
		spec := mapping{
			{"interval", interval},
			{"url", url},
			{"ref", mapping{{"branch", s.Branch}}},
		}
		if s.SecretRef != nil && s.SecretRef.Name != "" {
			spec = append(spec, kv{"secretRef", mapping{{"name", s.SecretRef.Name}}})
			keys := "username and password"
			if s.AuthMethod == "ssh" || strings.HasPrefix(url, "ssh://") {
				keys = "identity and known_hosts"
			}
			notes = append(notes, fmt.Sprintf("Create Secret %s in namespace %s on the worker first, with keys %s (a read-only credential).", s.SecretRef.Name, o.Namespace, keys))
		}
		source = object(SourceAPIVersion, "GitRepository", srcName, o.Namespace, spec)
	} else {
		s := t.bucket
		sourceKind = "Bucket"
		srcName = fluxSourceName(sourceKind, o.Namespace, s.Name+"-"+t.dest.Name)
		if s.AuthMethod == "IAM" {
			out.Warnings = append(out.Warnings, fmt.Sprintf("%s uses IAM; the generic provider printed here authenticates with a Secret only: on AWS, set spec.provider: aws so Flux uses the worker's IAM role", t.store))
		}
		endpoint, insecure := bucketEndpoint(s.Endpoint, s.Insecure)
		spec := mapping{
			{"interval", interval},
			{"provider", "generic"},
			{"bucketName", s.BucketName},
			{"endpoint", endpoint},
			{"insecure", insecure},
		}
		if s.Region != "" {
			spec = append(spec, kv{"region", s.Region})
		}
		// The trailing slash keeps destination "dev" from listing "dev-eu/".
		spec = append(spec, kv{"prefix", t.folder + "/"})
		if s.SecretRef != nil && s.SecretRef.Name != "" {
			spec = append(spec, kv{"secretRef", mapping{{"name", s.SecretRef.Name}}})
			notes = append(notes, fmt.Sprintf("Create Secret %s in namespace %s on the worker first, with keys accesskey and secretkey (a read-only credential).", s.SecretRef.Name, o.Namespace))
		}
		source = object(SourceAPIVersion, "Bucket", srcName, o.Namespace, spec)
	}
	if decNote != "" {
		notes = append(notes, decNote)
	}
	ref := mapping{{"kind", sourceKind}, {"name", srcName}}
	deps, res, flat := kustomizationName(t.dest.Name, "dependencies"), kustomizationName(t.dest.Name, "resources"), kustomizationName(t.dest.Name, "")
	kust := func(name, section string, dependsOn string) doc {
		spec := mapping{{"interval", interval}}
		if dependsOn != "" {
			spec = append(spec, kv{"dependsOn", []mapping{{{"name", dependsOn}}}})
		}
		spec = append(spec,
			kv{"sourceRef", ref},
			kv{"path", "./" + path.Join(t.folder, section)},
			kv{"prune", true},
		)
		if dec != nil {
			spec = append(spec, *dec)
		}
		return object(KustomizationAPIVersion, "Kustomization", name, o.Namespace, spec)
	}
	if t.dest.Mode == renderer.AggregatedYAML || t.dest.Mode == renderer.NoNesting {
		// Kratix writes these destinations flat: everything, canaries
		// included, is at the folder's root, and there is no
		// dependencies/ or resources/ to read.
		header := []string{
			fmt.Sprintf("Flux on the worker of destination %s (filepath mode %s: everything is at the folder's root): %s, then %s.", t.dest.Name, t.dest.Mode, sourceKind+" "+srcName, flat),
		}
		out.YAML, err = encode(append(header, notes...), source, kust(flat, "", ""))
		return out, err
	}
	header := []string{
		fmt.Sprintf("Flux on the worker of destination %s: %s, then %s, then %s.", t.dest.Name, sourceKind+" "+srcName, deps, res),
	}
	out.YAML, err = encode(append(header, notes...), source, kust(deps, "dependencies", ""), kust(res, "resources", deps))
	return out, err
}

// ArgoCD returns two Applications for destination, whose store must be git.
func ArgoCD(p *inputs.Platform, destination string, o ArgoCDOptions) (*Output, error) {
	if o.Namespace == "" {
		o.Namespace = "argocd"
	}
	if o.Project == "" {
		o.Project = "default"
	}
	if o.Server == "" {
		o.Server = "https://kubernetes.default.svc"
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	t, err := resolve(o.Kinds, p, destination)
	if err != nil {
		return nil, err
	}
	if err := checkTarget(p, t); err != nil {
		return nil, err
	}
	if o.sopsNote, err = argoSOPS(p, t, o.SOPSPlugin); err != nil {
		return nil, err
	}
	if t.oci != nil {
		return argoOCI(t, o)
	}
	if t.git == nil {
		return nil, &renderer.InputError{File: p.DestinationFile(destination), Where: "Destination " + destination,
			Msg: fmt.Sprintf("it is in %s; Argo CD reads git repositories and OCI registries only (use render bootstrap flux, whose Bucket source reads it)", t.dest.Store)}
	}
	s := t.git
	out := &Output{}
	warnLabelTracking(out, applicationName(t.dest.Name, "dependencies", o.Namespace))
	repoURL, err := withoutCredentials(s, t.store, out)
	if err != nil {
		return nil, err
	}
	if warn := localURLWarning(repoURL); warn != "" {
		out.Warnings = append(out.Warnings, warn)
	}
	app := func(section, wave string) doc {
		d := object(ApplicationAPIVersion, "Application", applicationName(t.dest.Name, section, o.Namespace), o.Namespace, mapping{
			{"project", o.Project},
			{"source", mapping{
				{"repoURL", repoURL},
				{"targetRevision", s.Branch},
				{"path", path.Join(t.folder, section)},
				{"directory", mapping{{"recurse", true}}},
			}},
			{"destination", mapping{{"server", o.Server}}},
			{"syncPolicy", mapping{
				{"automated", mapping{{"prune", true}, {"selfHeal", true}}},
			}},
		})
		d.annotations = mapping{{"argocd.argoproj.io/sync-wave", wave}}
		o.sops(&d)
		return d
	}
	if t.dest.Mode == renderer.AggregatedYAML || t.dest.Mode == renderer.NoNesting {
		header := []string{fmt.Sprintf("Argo CD on the worker of destination %s (filepath mode %s: everything is at the folder's root): one Application.", t.dest.Name, t.dest.Mode)}
		d := app("", "0")
		d.name, d.annotations = applicationName(t.dest.Name, "", o.Namespace), nil
		out.YAML, err = encode(o.withSOPS(header), d)
		return out, err
	}
	header := []string{
		fmt.Sprintf("Argo CD on the worker of destination %s: %s (sync wave 0), then %s (sync wave 1).", t.dest.Name, applicationName(t.dest.Name, "dependencies", o.Namespace), applicationName(t.dest.Name, "resources", o.Namespace)),
		argoOrderNote,
	}
	if s.SecretRef != nil && s.SecretRef.Name != "" {
		header = append(header, fmt.Sprintf("Argo CD takes credentials for %s from a repository Secret (label argocd.argoproj.io/secret-type: repository) in namespace %s; give it the worker's read-only counterpart of Secret %s.", s.URL, o.Namespace, s.SecretRef.Name))
	}
	out.YAML, err = encode(o.withSOPS(header), app("dependencies", "0"), app("resources", "1"))
	return out, err
}

// argoOrderNote says what makes the resources Application wait for the
// dependencies one (seen with Argo CD 3.2 in internal/testinfra/argocde2e).
const argoOrderNote = "Applied together, the resources one waits by retrying: its sync fails until the dependencies' CRDs exist, and automated sync retries it (5 times by default, 5s apart and doubling). " +
	"The sync waves order the two only in an app of apps whose Argo CD has a health check for Applications (resource.customizations.health.argoproj.io_Application in argocd-cm)."

// withoutCredentials is the store's URL with no credentials in it: no
// password, and for http(s) no user name either (git sends it as one).
// The platform loader refuses such URLs already; this keeps a Platform
// built any other way from copying credentials into printed manifests.
func withoutCredentials(s *storekind.GitStateStore, store string, out *Output) (string, error) {
	raw := s.URL
	if !strings.Contains(raw, "://") {
		// scp-like user[:password]@host:path
		at := strings.LastIndex(raw, "@")
		if at < 0 || !strings.Contains(raw[:at], ":") {
			return raw, nil
		}
		user, _, _ := strings.Cut(raw[:at], ":")
		out.Warnings = append(out.Warnings, fmt.Sprintf("%s: its url holds a password, which is left out: use spec.secretRef", store))
		return user + raw[at:], nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", &renderer.InputError{File: s.File, Where: store, Msg: "spec.url is not a valid URL"}
	}
	if u.User == nil {
		return raw, nil
	}
	_, hasPassword := u.User.Password()
	switch {
	case u.Scheme == "http" || u.Scheme == "https":
		u.User = nil
	case hasPassword:
		u.User = url.User(u.User.Username())
	default:
		return raw, nil
	}
	out.Warnings = append(out.Warnings, fmt.Sprintf("%s: its url holds credentials, which are left out: use spec.secretRef", store))
	return u.String(), nil
}

// fluxGitURL turns Kratix's URL forms into one Flux accepts: scp-like
// git@host:org/repo becomes ssh://git@host/org/repo.
func fluxGitURL(u string) (string, string) {
	if warn := localURLWarning(u); warn != "" {
		return u, warn
	}
	if !strings.Contains(u, "://") {
		if at := strings.Index(u, "@"); at >= 0 {
			if colon := strings.Index(u[at:], ":"); colon > 0 {
				host := u[:at+colon]
				rest := strings.TrimPrefix(u[at+colon+1:], "/")
				return "ssh://" + host + "/" + rest, ""
			}
		}
	}
	return u, ""
}

func localURLWarning(u string) string {
	if strings.HasPrefix(u, "file://") || strings.HasPrefix(u, "/") {
		return fmt.Sprintf("the store's url %s is a repository on this machine; a worker cluster cannot read it: serve it over http(s) or ssh", u)
	}
	return ""
}

// bucketEndpoint drops a scheme from the endpoint, as Flux wants host[:port];
// http:// means insecure.
func bucketEndpoint(e string, insecure bool) (string, bool) {
	switch {
	case strings.HasPrefix(e, "http://"):
		return strings.TrimSuffix(strings.TrimPrefix(e, "http://"), "/"), true
	case strings.HasPrefix(e, "https://"):
		return strings.TrimSuffix(strings.TrimPrefix(e, "https://"), "/"), insecure
	}
	return e, insecure
}

// duration prints a Go duration the short way: 1m, 30s, 1h30m.
func duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// kv and mapping keep keys in the order Kubernetes users read them.
type kv struct {
	key   string
	value any
}

type mapping []kv

func (m mapping) node() *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for _, e := range m {
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: e.key}, valueNode(e.value))
	}
	return n
}

func valueNode(v any) *yaml.Node {
	switch v := v.(type) {
	case mapping:
		return v.node()
	case []mapping:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		for _, m := range v {
			n.Content = append(n.Content, m.node())
		}
		return n
	case string:
		n := &yaml.Node{}
		_ = n.Encode(v) // quotes strings that would read as another type
		return n
	default:
		n := &yaml.Node{}
		_ = n.Encode(v)
		return n
	}
}

type doc struct {
	apiVersion, kind, name, namespace string
	annotations                       mapping
	spec                              mapping
}

func object(apiVersion, kind, name, namespace string, spec mapping) doc {
	return doc{apiVersion: apiVersion, kind: kind, name: name, namespace: namespace, spec: spec}
}

func (d doc) node() *yaml.Node {
	md := mapping{{"name", d.name}, {"namespace", d.namespace}}
	if len(d.annotations) > 0 {
		md = append(md, kv{"annotations", d.annotations})
	}
	return mapping{
		{"apiVersion", d.apiVersion},
		{"kind", d.kind},
		{"metadata", md},
		{"spec", d.spec},
	}.node()
}

// encode writes comment lines, then the documents, each starting with ---.
func encode(comments []string, docs ...doc) ([]byte, error) {
	var b bytes.Buffer
	for _, c := range comments {
		b.WriteString("# " + c + "\n")
	}
	for _, d := range docs {
		b.WriteString("---\n")
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(d.node()); err != nil {
			return nil, err
		}
		if err := enc.Close(); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// ociURL is the oci:// URL of a destination's artifact.
func ociURL(s *storekind.OCIStateStore, d renderer.Destination) string {
	return "oci://" + s.Registry + "/" + s.Repository + "/" + d.Path
}

func ociTag(s *storekind.OCIStateStore) string {
	if s.Tag == "" {
		return "latest"
	}
	return s.Tag
}

// argoOCI returns the two Applications on a destination's OCI artifact, or
// for an aggregatedYAML or none destination one Application on the
// artifact's root.
func argoOCI(t *target, o ArgoCDOptions) (*Output, error) {
	s := t.oci
	out := &Output{}
	warnLabelTracking(out, applicationName(t.dest.Name, "dependencies", o.Namespace))
	app := func(section, wave string) doc {
		d := object(ApplicationAPIVersion, "Application", applicationName(t.dest.Name, section, o.Namespace), o.Namespace, mapping{
			{"project", o.Project},
			{"source", mapping{
				{"repoURL", ociURL(s, t.dest)},
				{"targetRevision", ociTag(s)},
				{"path", section},
				{"directory", mapping{{"recurse", true}}},
			}},
			{"destination", mapping{{"server", o.Server}}},
			{"syncPolicy", mapping{
				{"automated", mapping{{"prune", true}, {"selfHeal", true}}},
			}},
		})
		d.annotations = mapping{{"argocd.argoproj.io/sync-wave", wave}}
		o.sops(&d)
		return d
	}
	flat := t.dest.Mode == renderer.AggregatedYAML || t.dest.Mode == renderer.NoNesting
	header := []string{
		fmt.Sprintf("Argo CD (3.1 or later, for OCI sources) on the worker of destination %s: %s (sync wave 0), then %s (sync wave 1).", t.dest.Name, applicationName(t.dest.Name, "dependencies", o.Namespace), applicationName(t.dest.Name, "resources", o.Namespace)),
		argoOrderNote,
	}
	if flat {
		header = []string{fmt.Sprintf("Argo CD (3.1 or later, for OCI sources) on the worker of destination %s (filepath mode %s: everything is at the artifact's root): one Application.", t.dest.Name, t.dest.Mode)}
	}
	header = append(header,
		"The artifact has one layer, application/vnd.oci.image.layer.v1.tar+gzip, which Argo CD's repo server accepts by default (no ARGOCD_REPO_SERVER_OCI_LAYER_MEDIA_TYPES needed).")
	if s.SecretRef != nil && s.SecretRef.Name != "" || s.Insecure {
		note := fmt.Sprintf("Argo CD takes credentials for %s from a repository Secret (label argocd.argoproj.io/secret-type: repository, type: oci, url: %s, the Applications' repoURL) in namespace %s", s.Registry, ociURL(s, t.dest), o.Namespace)
		if s.SecretRef != nil && s.SecretRef.Name != "" {
			note += fmt.Sprintf(", with the worker's read-only counterpart of Secret %s (username, password)", s.SecretRef.Name)
		}
		if s.Insecure {
			note += "; the registry speaks plain HTTP: set insecureOCIForceHttp: \"true\" in that Secret"
		}
		header = append(header, note+".")
	}
	header = o.withSOPS(header)
	var err error
	if flat {
		// Kratix writes these destinations flat: there is no
		// dependencies/ or resources/ in the artifact.
		d := app(".", "0")
		d.name, d.annotations = applicationName(t.dest.Name, "", o.Namespace), nil
		out.YAML, err = encode(header, d)
		return out, err
	}
	out.YAML, err = encode(header, app("dependencies", "0"), app("resources", "1"))
	return out, err
}
