package faulttest

import (
	"context"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/fluxcheck"
	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/statestore/ocistore"
)

// ociStore is an OCIStateStore document and its Secret.
func ociStore(name, registry, repository, user, password string, spec ...string) string {
	s := fmt.Sprintf(`apiVersion: render.dev/v1alpha1
kind: OCIStateStore
metadata: {name: %s}
spec:
  registry: %q
  repository: %s
  insecure: true
  create: true
  secretRef: {name: %s-credentials, namespace: default}
`, name, registry, repository, name)
	for _, l := range spec {
		s += "  " + l + "\n"
	}
	return s + fmt.Sprintf(`---
apiVersion: v1
kind: Secret
metadata: {name: %s-credentials, namespace: default}
stringData:
  username: %q
  password: %q
`, name, user, password)
}

// ociWorld is a platform with an OCIStateStore, reached through a proxy
// that counts render's requests, and two destinations, dev-a and dev-b.
type ociWorld struct {
	r       *testenv.RegistryServer
	proxy   *testenv.RegistryProxy
	repo    string // the store's base repository
	promise *workflow
	res     *workflow
}

var ociDests = []string{"dev-a", "dev-b"}

func newOCIWorld(t *testing.T) *ociWorld {
	t.Helper()
	o := &ociWorld{r: testenv.Registry(t), repo: "render-e2e/" + testenv.UniqueName(t.Name())}
	o.proxy = o.r.Proxy(t)
	o.promise = newWorkflow(t, "db")
	o.promise.docs(t, 0, 3, "v1")
	o.res = newWorkflow(t, "db")
	o.res.typ, o.res.ns, o.res.name = "resource", "team", "orders"
	o.res.writeFile(t, "input/object.yaml", "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: orders\n  namespace: team\n")
	o.res.writeFile(t, "output/orders.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: orders\n  namespace: team\ndata:\n  size: small\n")
	o.setPlatform(t, o.r.Password())
	return o
}

// setPlatform writes both workflows' platform: the store with password,
// and the two destinations; cordoned ones are unschedulable.
func (o *ociWorld) setPlatform(t *testing.T, password string, cordoned ...string) {
	t.Helper()
	docs := []string{ociStore("reg", o.proxy.Addr(), o.repo, o.r.User(), password)}
	for _, d := range ociDests {
		var spec []string
		if slices.Contains(cordoned, d) {
			spec = append(spec, "unschedulable: true")
		}
		docs = append(docs, destination(d, "OCIStateStore", "reg", spec...))
	}
	o.promise.setPlatform(t, docs...)
	o.res.setPlatform(t, docs...)
}

// ref is the artifact reference of repository (relative to the store's
// base repository, "" for the base) at tag, on the registry itself.
func (o *ociWorld) ref(sub, tag string) string {
	repo := o.r.Addr() + "/" + o.repo
	if sub != "" {
		repo += "/" + sub
	}
	if tag == "" {
		return repo
	}
	return repo + ":" + tag
}

// registryState is every tag of every repository of the store, with the
// digest each names.
func (o *ociWorld) registryState(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, repo := range o.r.Repositories(t, o.ref("", "")) {
		for _, tag := range o.r.Tags(t, o.r.Addr()+"/"+repo) {
			ref := o.r.Addr() + "/" + repo + ":" + tag
			out[repo+":"+tag] = strings.TrimSpace(string(o.r.RunORAS(t, "resolve", ref)))
		}
	}
	return out
}

// storeFolder returns the files of destination folder d as render's own
// store client reads them from the state manifest (relative to d).
func (o *ociWorld) storeFolder(t *testing.T, d string) map[string]string {
	t.Helper()
	s, err := ocistore.Open(ocistore.Config{Registry: o.r.Addr(), Repository: o.repo, Insecure: true, Username: o.r.User(), Password: o.r.Password()})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	paths, err := snap.List(d)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range paths {
		b, err := snap.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(p, d+"/")] = string(b)
	}
	return out
}

// checkArtifacts pulls every destination's artifact with the oras CLI at
// its moving tag and at the immutable tag of the same digest, checks that
// it is one Flux artifact both Flux and Argo CD read, that its files are
// exactly what the store holds for the destination, and that they build as
// Flux builds a folder. It returns each destination's objects.
func (o *ociWorld) checkArtifacts(t *testing.T) map[string][]fluxcheck.Object {
	t.Helper()
	state := o.registryState(t)
	out := map[string][]fluxcheck.Object{}
	for _, d := range ociDests {
		a := o.r.Pull(t, o.ref(d, "latest"))
		if a.ConfigMediaType != ocistore.FluxConfigMediaType || !reflect.DeepEqual(a.LayerMediaTypes, []string{ocistore.LayerMediaType}) {
			t.Fatalf("%s: config %s, layers %v: want Flux's config and one %s layer", d, a.ConfigMediaType, a.LayerMediaTypes, ocistore.LayerMediaType)
		}
		for _, k := range []string{"org.opencontainers.image.source", "org.opencontainers.image.revision", "org.opencontainers.image.created"} {
			if a.Annotations[k] == "" {
				t.Errorf("%s: no %s annotation (Flux reads it): %v", d, k, a.Annotations)
			}
		}
		// The immutable tag of this render names the same manifest.
		var immutable []string
		for tag, digest := range state {
			repo, name, _ := strings.Cut(tag, ":")
			if repo == o.repo+"/"+d && strings.HasPrefix(name, "render-") && digest == a.Digest {
				immutable = append(immutable, name)
			}
		}
		if len(immutable) == 0 {
			t.Errorf("%s: no render-<generation> tag names %s; tags: %v", d, a.Digest, state)
		}
		if want := o.storeFolder(t, d); !reflect.DeepEqual(a.Files, want) {
			t.Fatalf("%s: oras pulled %v\nthe store holds %v", d, slices.Sorted(maps.Keys(a.Files)), slices.Sorted(maps.Keys(want)))
		}
		files := map[string][]byte{}
		for p, c := range a.Files {
			files[p] = []byte(c)
		}
		objs, err := fluxcheck.CheckDestination(files)
		if err != nil {
			t.Fatalf("%s: the pulled artifact does not build as Flux builds it: %v", d, err)
		}
		out[d] = objs
	}
	return out
}

// pullObjects pulls destination d's artifact and builds it as Flux does.
func (o *ociWorld) pullObjects(t *testing.T, d string) []fluxcheck.Object {
	t.Helper()
	files := map[string][]byte{}
	for p, c := range o.r.Pull(t, o.ref(d, "latest")).Files {
		files[p] = []byte(c)
	}
	objs, err := fluxcheck.CheckDestination(files)
	if err != nil {
		t.Fatalf("%s: the pulled artifact does not build as Flux builds it: %v", d, err)
	}
	return objs
}

// names lists "section/namespace/name" of objs of one kind.
func names(objs []fluxcheck.Object, kind string) []string {
	var out []string
	for _, o := range objs {
		if o.Kind == kind {
			out = append(out, o.Section+"/"+o.Namespace+"/"+o.Name)
		}
	}
	slices.Sort(out)
	return out
}

// A promise workflow and a resource workflow rendered by the render binary
// into an OCI registry: every artifact pulled with the oras CLI holds what
// the store holds and builds as Flux builds it; unchanged re-renders send
// the registry no write at all; a delete removes the resource's files from
// its artifact; a drain moves a resource from one artifact to the other.
func TestOCIEndToEnd(t *testing.T) {
	o := newOCIWorld(t)
	mustRender(t, o.promise, 0)
	r := mustRender(t, o.res, 0)
	if !strings.Contains(r.stdout, "OCIStateStore/reg: wrote") {
		t.Errorf("report: %s", r)
	}
	deps := []string{"dependencies/db/db-00000", "dependencies/db/db-00001", "dependencies/db/db-00002"}
	objs := o.checkArtifacts(t)
	placed := ""
	for _, d := range ociDests {
		if got := names(objs[d], "ConfigMap"); !slices.Equal(got[:min(3, len(got))], deps) {
			t.Errorf("%s: ConfigMaps %v, want the promise's %v on every destination", d, got, deps)
		}
		if slices.Contains(names(objs[d], "ConfigMap"), "resources/team/orders") {
			if placed != "" {
				t.Fatalf("the resource is on %s and %s", placed, d)
			}
			placed = d
		}
	}
	if placed == "" {
		t.Fatalf("the resource is on no destination: %v", objs)
	}
	other := ociDests[0]
	if other == placed {
		other = ociDests[1]
	}

	// The placement index lives in the registry too: a second resource
	// goes to the destination with fewer (spread), and a promise writing
	// an object another workload holds is refused with nothing sent.
	inv := newWorkflow(t, "db")
	inv.typ, inv.ns, inv.name = "resource", "team", "invoices"
	inv.writeFile(t, "input/object.yaml", "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: invoices\n  namespace: team\n")
	inv.writeFile(t, "output/invoices.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: invoices\n  namespace: team\n")
	inv.writeFile(t, "platform/platform.yaml", readFile(t, o.res.path("platform/platform.yaml")))
	mustRender(t, inv, 0)
	if got := names(o.pullObjects(t, other), "ConfigMap"); !slices.Contains(got, "resources/team/invoices") {
		t.Errorf("the second resource is not on %s, the destination with fewer: %v", other, got)
	}
	inv.extra = []string{"--action", "delete"}
	mustRender(t, inv, 0)
	dup := newWorkflow(t, "cache")
	dup.writeFile(t, "output/cm.yaml", configMap("db", 0, "v1"))
	dup.writeFile(t, "platform/platform.yaml", readFile(t, o.res.path("platform/platform.yaml")))
	o.proxy.Reset()
	r = mustRender(t, dup, 2)
	if !strings.Contains(r.stderr, "promise/db/configure") || !strings.Contains(r.stderr, "db-00000") {
		t.Errorf("duplicate object: the message does not name the object and the workload holding it:\n%s", r)
	}
	if writes := o.proxy.Writes(); len(writes) > 0 {
		t.Errorf("a refused render sent writes: %v", writes)
	}

	// Unchanged re-renders: not one write request, no tag added or moved.
	before := o.registryState(t)
	o.proxy.Reset()
	for _, w := range []*workflow{o.promise, o.res} {
		if r := mustRender(t, w, 0); !strings.Contains(r.stdout, "OCIStateStore/reg: up to date") {
			t.Errorf("unchanged re-render: %s", r)
		}
	}
	if writes := o.proxy.Writes(); len(writes) > 0 {
		t.Errorf("unchanged re-renders sent writes: %v", writes)
	}
	t.Logf("two unchanged re-renders: %d requests (%v)", len(o.proxy.Requests()), o.proxy.Requests())
	if after := o.registryState(t); !reflect.DeepEqual(after, before) {
		t.Errorf("unchanged re-renders changed the tags:\nbefore %v\nafter  %v", before, after)
	}

	// A one-document change moves only the destinations it touches.
	o.res.writeFile(t, "output/orders.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: orders\n  namespace: team\ndata:\n  size: large\n")
	mustRender(t, o.res, 0)
	after := o.registryState(t)
	for _, d := range ociDests {
		key := o.repo + "/" + d + ":latest"
		if moved := after[key] != before[key]; moved != (d == placed) {
			t.Errorf("%s:latest moved=%v after a change on %s only", d, moved, placed)
		}
	}
	if got := o.r.Pull(t, o.ref(placed, "latest")).Files; !containsValue(got, "size: large") {
		t.Errorf("%s after the change: %v", placed, got)
	}

	// Drain: the resource moves to the other destination's artifact.
	o.setPlatform(t, o.r.Password(), placed)
	dr := runBin(t, o.res.dir, "drain", placed, "--platform", o.res.path("platform"))
	if dr.code != 0 {
		t.Fatalf("drain %s: %s", placed, dr)
	}
	objs = o.checkArtifacts(t)
	if slices.Contains(names(objs[placed], "ConfigMap"), "resources/team/orders") || !slices.Contains(names(objs[other], "ConfigMap"), "resources/team/orders") {
		t.Fatalf("after draining %s: %s holds %v, %s holds %v", placed, placed, names(objs[placed], "ConfigMap"), other, names(objs[other], "ConfigMap"))
	}
	o.setPlatform(t, o.r.Password())

	// Delete: the resource's files leave its artifact; the promise's stay.
	o.res.extra = []string{"--action", "delete"}
	mustRender(t, o.res, 0)
	o.res.extra = nil
	objs = o.checkArtifacts(t)
	want := append(slices.Clone(deps), "resources/kratix-worker-system/kratix-info") // Kratix's canary
	for _, d := range ociDests {
		if got := names(objs[d], "ConfigMap"); !slices.Equal(got, want) {
			t.Errorf("%s after the delete: ConfigMaps %v, want only the promise's and the canary %v", d, got, want)
		}
		for p := range o.r.Pull(t, o.ref(d, "latest")).Files {
			if strings.Contains(p, "orders") {
				t.Errorf("%s after the delete still holds %s", d, p)
			}
		}
	}
}

func containsValue(m map[string]string, s string) bool {
	for _, v := range m {
		if strings.Contains(v, s) {
			return true
		}
	}
	return false
}

// Bad input for an OCIStateStore through the render binary: a repository
// name the OCI spec forbids and a tag over 128 characters are exit 2, one
// line naming the file, the store and the field, and the registry is not
// even asked; wrong credentials are exit 1, one line naming the store and
// its secret, no password shown, and nothing published.
func TestOCIBadInput(t *testing.T) {
	o := newOCIWorld(t)
	oneLine := func(t *testing.T, r result, want ...string) {
		t.Helper()
		line := strings.TrimSpace(r.stderr)
		t.Logf("exit %d: %s", r.code, line)
		if strings.Contains(line, "\n") {
			t.Errorf("want one line, got:\n%s", r.stderr)
		}
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Errorf("the message does not name %q: %s", w, line)
			}
		}
		for _, secret := range []string{o.r.Password(), "wrong-registry-password-7"} {
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("output shows a password:\n%s", r)
			}
		}
	}
	for _, tc := range []struct {
		name, spec string
		want       []string
	}{
		{"uppercase repository", "", []string{"platform.yaml", "OCIStateStore reg", "spec.repository", "Render-E2E/State", "not a valid OCI repository name"}},
		{"tag over 128 characters", "tag: " + strings.Repeat("t", 129), []string{"platform.yaml", "OCIStateStore reg", "spec.tag", "longer than 128 characters"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := o.repo
			if tc.spec == "" {
				repo = o.repo + "/Render-E2E/State"
			}
			var spec []string
			if tc.spec != "" {
				spec = append(spec, tc.spec)
			}
			docs := []string{ociStore("reg", o.proxy.Addr(), repo, o.r.User(), o.r.Password(), spec...)}
			for _, d := range ociDests {
				docs = append(docs, destination(d, "OCIStateStore", "reg"))
			}
			o.promise.setPlatform(t, docs...)
			o.proxy.Reset()
			r := mustRender(t, o.promise, 2)
			oneLine(t, r, tc.want...)
			if reqs := o.proxy.Requests(); len(reqs) > 0 {
				t.Errorf("the registry was asked %v", reqs)
			}
			if repos := o.r.Repositories(t, o.ref("", "")); len(repos) > 0 {
				t.Errorf("repositories were created: %v", repos)
			}
		})
	}

	// Wrong credentials, on a store that holds a render: nothing moves.
	o.setPlatform(t, o.r.Password())
	mustRender(t, o.promise, 0)
	before := o.registryState(t)
	o.promise.docs(t, 0, 3, "v2")
	o.setPlatform(t, "wrong-registry-password-7")
	o.proxy.Reset()
	r := mustRender(t, o.promise, 1, "--retry-deadline", "3s")
	oneLine(t, r, "OCIStateStore/reg", "reg-credentials", "401 Unauthorized: unauthorized: authentication required (credentials")
	if writes := o.proxy.Writes(); len(writes) > 0 {
		t.Errorf("with wrong credentials render sent writes: %v", writes)
	}
	if after := o.registryState(t); !reflect.DeepEqual(after, before) {
		t.Errorf("with wrong credentials the tags changed:\nbefore %v\nafter  %v", before, after)
	}
	// With the right ones the same render goes through.
	o.setPlatform(t, o.r.Password())
	mustRender(t, o.promise, 0)
	if got := o.r.Pull(t, o.ref("dev-a", "latest")).Files; !containsValue(got, `version: "v2"`) {
		t.Errorf("dev-a after the render with the right password: %v", got)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// render drain of a destination holding two resources moves both in one
// batch: one new state, so each destination gets exactly one new
// render-<generation> tag, and the pulled artifacts show the move.
func TestOCIDrainBatch(t *testing.T) {
	o := newOCIWorld(t)
	o.setPlatform(t, o.r.Password(), "dev-b") // both resources go to dev-a
	mustRender(t, o.promise, 0)               // dev-a keeps the promise's files (the breaker)
	mustRender(t, o.res, 0)
	inv := newWorkflow(t, "db")
	inv.typ, inv.ns, inv.name = "resource", "team", "invoices"
	inv.writeFile(t, "input/object.yaml", "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: invoices\n  namespace: team\n")
	inv.writeFile(t, "output/invoices.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: invoices\n  namespace: team\n")
	inv.writeFile(t, "platform/platform.yaml", readFile(t, o.res.path("platform/platform.yaml")))
	mustRender(t, inv, 0)
	both := []string{"resources/team/invoices", "resources/team/orders"}
	if got := names(o.pullObjects(t, "dev-a"), "ConfigMap"); !slices.Equal(filter(got, "resources/team/"), both) {
		t.Fatalf("dev-a before the drain: %v", got)
	}
	before := map[string][]string{}
	for _, d := range ociDests {
		before[d] = o.r.Tags(t, o.ref(d, ""))
	}
	o.setPlatform(t, o.r.Password(), "dev-a")
	if dr := runBin(t, o.res.dir, "drain", "dev-a", "--platform", o.res.path("platform")); dr.code != 0 {
		t.Fatalf("drain dev-a: %s", dr)
	}
	objs := o.checkArtifacts(t)
	if got := filter(names(objs["dev-b"], "ConfigMap"), "resources/team/"); !slices.Equal(got, both) {
		t.Errorf("dev-b after the drain: %v, want %v", got, both)
	}
	if got := filter(names(objs["dev-a"], "ConfigMap"), "resources/team/"); len(got) > 0 {
		t.Errorf("dev-a after the drain still holds %v", got)
	}
	for _, d := range ociDests {
		var added []string
		for _, tag := range o.r.Tags(t, o.ref(d, "")) {
			if !slices.Contains(before[d], tag) {
				added = append(added, tag)
			}
		}
		if len(added) != 1 {
			t.Errorf("%s: the drain added tags %v, want one render-<generation>", d, added)
		}
	}
}

// filter keeps the entries of list with prefix.
func filter(list []string, prefix string) []string {
	var out []string
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	return out
}
