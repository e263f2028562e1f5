package fluxcheck

import (
	"context"

	"strings"
	"testing"

	"github.com/render-dev/render/renderer"
)

var (
	gitStore    = renderer.StoreRef{Kind: "GitStateStore", Name: "default"}
	bucketStore = renderer.StoreRef{Kind: "BucketStateStore", Name: "minio"}
	// sources is what the store kinds declare of these two stores.
	sources = func(ref renderer.StoreRef) Source {
		if ref == bucketStore {
			return Bucket
		}
		return GitRepository
	}
)

func render(t *testing.T, wf renderer.Workflow, out map[string]string, dests ...renderer.Destination) *renderer.Plan {
	t.Helper()
	in := renderer.Input{Workflow: wf, Destinations: dests, Strategy: renderer.Spread}
	for p, s := range out {
		in.Output = append(in.Output, renderer.File{Path: p, Data: []byte(s)})
	}
	plan, err := renderer.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

func promise() renderer.Workflow {
	return renderer.Workflow{Type: renderer.PromiseWorkflow, Action: renderer.Configure, Promise: "postgres", Pipeline: "install"}
}

func resourceWF(name string) renderer.Workflow {
	return renderer.Workflow{Type: renderer.ResourceWorkflow, Action: renderer.Configure, Promise: "postgres", Pipeline: "instance", Name: name, Namespace: "team-a"}
}

func nested(name string, store renderer.StoreRef) renderer.Destination {
	return renderer.Destination{Name: name, Path: name, Store: store, Mode: renderer.NestedByMetadata}
}

func TestCheckPlanObjects(t *testing.T) {
	plan := render(t, promise(), map[string]string{
		"operator.yaml": cm("op", "pg"),
		"crds/crd.yaml": "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: pgs.example.com\n",
		"notes.txt":     "not yaml",
	}, nested("dev", gitStore), nested("backup", bucketStore))
	objs, err := CheckPlan(context.Background(), plan, sources)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.Store+" "+o.Destination+" "+o.Section+" "+o.String()+" <- "+o.Source+" at "+o.File)
	}
	want := []string{
		"BucketStateStore/minio backup dependencies CustomResourceDefinition.apiextensions.k8s.io pgs.example.com <- crds/crd.yaml at dependencies/postgres/install/5058f/crds/crd.yaml",
		"BucketStateStore/minio backup dependencies ConfigMap pg/op <- operator.yaml at dependencies/postgres/install/5058f/operator.yaml",
		"GitStateStore/default dev dependencies CustomResourceDefinition.apiextensions.k8s.io pgs.example.com <- crds/crd.yaml at dependencies/postgres/install/5058f/crds/crd.yaml",
		"GitStateStore/default dev dependencies ConfigMap pg/op <- operator.yaml at dependencies/postgres/install/5058f/operator.yaml",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("objects (canaries left out):\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCheckPlanErrorNamesTheOutputFile(t *testing.T) {
	plan := render(t, resourceWF("db"), map[string]string{
		"db.yaml":     cm("db", "team-a") + "---\napiVersion: v1\nkind: Secret\nmetadata:\n  namespace: team-a\n",
		"backup.yaml": cm("b", "team-a"),
	}, nested("dev", gitStore))
	_, err := CheckPlan(context.Background(), plan, sources)
	ie := inputError(t, err)
	if ie.File != "db.yaml" || !strings.HasPrefix(ie.Where, "document 2, written to dev/resources/team-a/postgres/db/instance/5058f/db.yaml in GitStateStore/default") || !strings.Contains(ie.Msg, "missing metadata.name") {
		t.Errorf("got %q", ie)
	}

	plan = render(t, resourceWF("db"), map[string]string{
		"a.yaml": cm("same", "team-a"), "b.yaml": cm("same", "team-a"),
	}, nested("dev", gitStore))
	_, err = CheckPlan(context.Background(), plan, sources)
	ie = inputError(t, err)
	if ie.File != "b.yaml" || !strings.Contains(ie.Msg, "also defined in a.yaml") || !strings.Contains(ie.Where, "dev/resources") {
		t.Errorf("duplicate: got %q", ie)
	}
}

func TestCheckPlanModes(t *testing.T) {
	flat := renderer.Destination{Name: "flat", Path: "flat", Store: gitStore, Mode: renderer.NoNesting}
	agg := renderer.Destination{Name: "agg", Path: "agg", Store: bucketStore, Mode: renderer.AggregatedYAML, Filename: "all.yaml"}
	// A promise goes to every destination: both modes at once.
	plan := render(t, promise(), map[string]string{"db.yaml": cm("db", "team-a"), "svc.yaml": cm("svc", "team-a")}, flat, agg)
	objs, err := CheckPlan(context.Background(), plan, sources)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.Destination+" "+o.Section+" "+o.File+" "+o.Source)
	}
	want := "agg . all.yaml \nagg . all.yaml \nflat . db.yaml db.yaml\nflat . svc.yaml svc.yaml"
	if strings.Join(got, "\n") != want {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), want)
	}

	plan = render(t, promise(), map[string]string{"db.yaml": cm("db", "team-a"), "x.yaml": "a: b\n"}, agg)
	_, err = CheckPlan(context.Background(), plan, sources)
	if ie := inputError(t, err); ie.File != "agg/all.yaml" || ie.Where != "document 2, in agg of BucketStateStore/minio" {
		t.Errorf("aggregated: got File=%q Where=%q", ie.File, ie.Where)
	}
}

func TestCheckDuplicatesAcrossWorkloads(t *testing.T) {
	dev := nested("dev", gitStore)
	prod := nested("prod", gitStore)
	a, err := CheckPlan(context.Background(), render(t, resourceWF("a"), map[string]string{"shared.yaml": cm("shared", "team-a")}, dev), sources)
	if err != nil {
		t.Fatal(err)
	}
	b, err := CheckPlan(context.Background(), render(t, resourceWF("b"), map[string]string{"x/cm.yaml": cm("shared", "team-a")}, dev), sources)
	if err != nil {
		t.Fatal(err)
	}
	err = Duplicates(b, map[string][]Object{"resource/team-a/postgres/a/instance": a})
	ie := inputError(t, err)
	if ie.File != "x/cm.yaml" || !strings.Contains(ie.Msg, "resource/team-a/postgres/a/instance") || !strings.Contains(ie.Msg, "shared.yaml") || !strings.Contains(ie.Msg, "dev/resources of GitStateStore/default") {
		t.Errorf("got %q", ie)
	}

	// Another destination, or another section: different Kustomizations.
	c, _ := CheckPlan(context.Background(), render(t, resourceWF("c"), map[string]string{"cm.yaml": cm("shared", "team-a")}, prod), sources)
	d, _ := CheckPlan(context.Background(), render(t, promise(), map[string]string{"cm.yaml": cm("shared", "team-a")}, dev), sources)
	if err := Duplicates(a, map[string][]Object{"c": c, "d": d}); err != nil {
		t.Errorf("different destination or section: %v", err)
	}
	if err := Duplicates(a, nil); err != nil {
		t.Error(err)
	}
}
