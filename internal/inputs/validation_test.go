package inputs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/render-dev/render/internal/inputs"
)

func gitStore(name, spec string) string {
	return fmt.Sprintf("%skind: GitStateStore\nmetadata: {name: %s}\nspec:\n%s", kratix, name, spec)
}

func bucketStore(name, spec string) string {
	return fmt.Sprintf("%skind: BucketStateStore\nmetadata: {name: %s}\nspec:\n%s", kratix, name, spec)
}

// dest is a Destination on store (kind/name) with a spec.
func dest(name, store, spec string) string {
	kind, sname, _ := strings.Cut(store, "/")
	return fmt.Sprintf("%skind: Destination\nmetadata: {name: %s}\nspec:\n  stateStoreRef: {kind: %s, name: %s}\n%s", kratix, name, kind, sname, spec)
}

func promise(name, selectors string) string {
	return fmt.Sprintf("%skind: Promise\nmetadata: {name: %s}\nspec:\n  destinationSelectors: %s\n", kratix, name, selectors)
}

func docs(d ...string) string { return strings.Join(d, "---\n") }

// loadOne writes content as platform.yaml in a fresh folder and loads it;
// the error must name that file.
func loadOne(t *testing.T, content string) (string, error) {
	t.Helper()
	file := write(t, filepath.Join(t.TempDir(), "platform.yaml"), content)
	_, err := inputs.LoadPlatform(kinds, []string{file}, "")
	return file, err
}

// A typo in a field render reads is exit 2 naming the file, the document
// and the field, with the field meant when one is close. Before, each of
// these rendered with exit 0 and the field's zero value.
func TestUnknownFieldsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		want          []string
	}{
		{"strictMatchLabel", docs(storeDoc, dest("d", "GitStateStore/default", "  strictMatchLabel: true\n")),
			[]string{"document 2 (Destination d): line 13: unknown field spec.strictMatchLabel (did you mean spec.strictMatchLabels?)"}},
		{"filepth", docs(storeDoc, dest("d", "GitStateStore/default", "  filepth: {mode: none}\n")),
			[]string{"(Destination d): line 13: unknown field spec.filepth (did you mean spec.filepath?)"}},
		{"filepath.mod", docs(storeDoc, dest("d", "GitStateStore/default", "  filepath: {mod: none}\n")),
			[]string{"unknown field spec.filepath.mod (did you mean spec.filepath.mode?)"}},
		{"stateStoreRef.nmae", docs(storeDoc, kratix+"kind: Destination\nmetadata: {name: d}\nspec:\n  stateStoreRef: {kind: GitStateStore, nmae: default}\n"),
			[]string{"unknown field spec.stateStoreRef.nmae (did you mean spec.stateStoreRef.name?)"}},
		{"a field at the top", docs(storeDoc, dest("d", "GitStateStore/default", "")+"sepc: {}\n"),
			[]string{"(Destination d): line 13: unknown field sepc (did you mean spec?)"}},
		{"metadata.label", kratix + "kind: Destination\nmetadata:\n  name: d\n  label: {env: dev}\n",
			[]string{"(Destination d): line 5: unknown field metadata.label (did you mean metadata.labels?)"}},
		{"branchh", gitStore("s", "  url: https://git.example.com/x.git\n  branchh: dev\n"),
			[]string{"document 1 (GitStateStore s): line 6: unknown field spec.branchh (did you mean spec.branch?)"}},
		{"Branch in another case", gitStore("s", "  url: https://git.example.com/x.git\n  Branch: dev\n"),
			[]string{"unknown field spec.Branch (did you mean spec.branch?)"}},
		{"secretRef.namespce", gitStore("s", "  url: https://git.example.com/x.git\n  secretRef: {name: s, namespce: x}\n"),
			[]string{"unknown field spec.secretRef.namespce (did you mean spec.secretRef.namespace?)"}},
		{"gitAuthor.mail", gitStore("s", "  url: https://git.example.com/x.git\n  gitAuthor: {name: r, mail: r@x}\n"),
			[]string{"unknown field spec.gitAuthor.mail (did you mean spec.gitAuthor.email?)"}},
		{"nothing close", gitStore("s", "  url: https://git.example.com/x.git\n  colour: blue\n"),
			[]string{"unknown field spec.colour"}},
		{"bucket", bucketStore("b", "  endpoint: s3.example.com\n  bucketname: k\n"),
			[]string{"(BucketStateStore b): line 6: unknown field spec.bucketname (did you mean spec.bucketName?)"}},
		{"promise destinationSelector", promise("p", "[]") + "  destinationSelector: [{matchLabels: {a: b}}]\n",
			[]string{"(Promise p): line 6: unknown field spec.destinationSelector (did you mean spec.destinationSelectors?)"}},
		{"promise matchLabel", promise("p", "[{matchLabel: {a: b}}]"),
			[]string{"unknown field spec.destinationSelectors[0].matchLabel (did you mean spec.destinationSelectors[0].matchLabels?)"}},
		{"promise matchExpressions operater", promise("p", "[{matchExpressions: [{key: a, operater: In, values: [b]}]}]"),
			[]string{"unknown field spec.destinationSelectors[0].matchExpressions[0].operater (did you mean spec.destinationSelectors[0].matchExpressions[0].operator?)"}},
		{"secret stringdata", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringdata: {password: hunter2}\n",
			[]string{"(Secret s): line 4: unknown field stringdata (did you mean stringData?)"}},
		{"through a merge key", docs(storeDoc, kratix+"kind: Destination\nmetadata: {name: d}\nspec:\n  stateStoreRef: {kind: GitStateStore, name: default}\n  <<: {strictMatchLabel: true}\n"),
			[]string{"unknown field spec.strictMatchLabel"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file, err := loadOne(t, tc.content)
			ie := inputErr(t, err, append([]string{file + ": "}, tc.want...)...)
			if strings.Contains(ie.Error(), "hunter2") {
				t.Errorf("a secret value was printed: %s", ie)
			}
		})
	}
}

// What is not a typo is accepted: documents exported from a cluster
// (status, uid, annotations, managedFields), Kratix's own fields render
// does not use (a Promise's api and workflows, a Destination's cleanup),
// merge keys, and kinds render does not read, whatever their fields.
func TestKnownAndForeignFieldsAreAccepted(t *testing.T) {
	content := docs(
		storeDoc,
		kratix+`kind: Destination
metadata:
  name: exported
  uid: 0b7c2a5e-1111-2222-3333-444455556666
  resourceVersion: "42"
  generation: 3
  creationTimestamp: "2024-01-01T00:00:00Z"
  annotations: {note: x}
  labels: {env: dev}
  finalizers: [kratix.io/x]
  managedFields:
  - manager: kubectl
    operation: Apply
    fieldsType: FieldsV1
    fieldsV1: {f:spec: {}}
spec:
  stateStoreRef: {kind: GitStateStore, name: default}
  cleanup: all
  filepath: {mode: nestedByMetadata}
status:
  conditions: [{type: Ready, status: "True"}]
`,
		kratix+`kind: Destination
metadata: {name: merged}
spec:
  <<: &common {strictMatchLabels: true, stateStoreRef: {kind: GitStateStore, name: default}}
`,
		kratix+`kind: Promise
metadata: {name: pg}
spec:
  api: {apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, anything: [goes]}
  workflows: {resource: {configure: [{kind: Pipeline, whatever: 1}]}}
  dependencies: [{apiVersion: v1, kind: Namespace, metadata: {name: x}}]
  requirements: [{name: other, version: v1}]
  destinationSelectors: [{matchLabels: {env: dev}}]
`,
		"apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: kratix}\ntype: Opaque\nimmutable: true\nstringData: {a: b}\n",
		"apiVersion: example.com/v1\nkind: Unrelated\nmetadata: {name: u}\nspec: {strictMatchLabel: true, anything: [1]}\n",
	)
	_, err := loadOne(t, content)
	if err != nil {
		t.Fatal(err)
	}
}

// Before, each of these was accepted without a word, and the render went
// on with something else than the user meant. Each is exit 2 naming the
// file and the field.
func TestFormerlySilentlyAccepted(t *testing.T) {
	twoStores := func(url1, path1, url2, path2, d1, d2 string) string {
		return docs(
			gitStore("a", "  url: "+url1+"\n  path: "+path1+"\n"),
			gitStore("b", "  url: "+url2+"\n  path: "+path2+"\n"),
			dest("d1", "GitStateStore/a", "  path: "+d1+"\n"),
			dest("d2", "GitStateStore/b", "  path: "+d2+"\n"),
		)
	}
	for _, tc := range []struct {
		name, content string
		want          []string
	}{
		{"no kind or apiVersion", docs(storeDoc, "metadata: {name: x}\nspec: {path: y}\n"),
			[]string{"document 2: apiVersion and kind are missing"}},
		{"no kind", docs(storeDoc, kratix+"metadata: {name: x}\n"), []string{"document 2: kind is missing"}},
		{"no apiVersion", "kind: Destination\nmetadata: {name: d}\n", []string{"document 1 (Destination d): apiVersion is missing"}},
		{"a list, not an object", "- kind: Destination\n", []string{"document 1: line 1: not a Kubernetes object"}},
		{"our kind, another apiVersion", "apiVersion: platform.kratix.io/v1\nkind: Destination\nmetadata: {name: d}\n",
			[]string{"document 1 (Destination d): apiVersion \"platform.kratix.io/v1\": a Destination is platform.kratix.io/v1alpha1"}},
		{"the same Promise twice, different selectors", docs(promise("pg", "[{matchLabels: {env: dev}}]"), promise("pg", "[{matchLabels: {env: prod}}]")),
			[]string{"document 2 (Promise pg): Promise pg is defined twice with different spec.destinationSelectors (also in "}},
		{"label value", docs(storeDoc, kratix+"kind: Destination\nmetadata:\n  name: d\n  labels: {env: \"dev eu\"}\nspec:\n  stateStoreRef: {kind: GitStateStore, name: default}\n"),
			[]string{"(Destination d): metadata.labels: Invalid value: \"dev eu\""}},
		{"label value too long", docs(storeDoc, kratix+"kind: Destination\nmetadata:\n  name: d\n  labels: {env: "+strings.Repeat("x", 64)+"}\n"),
			[]string{"(Destination d): metadata.labels: Invalid value: ", "must be no more than 63"}},
		{"label key", docs(storeDoc, kratix+"kind: Destination\nmetadata:\n  name: d\n  labels: {\"a/b/c\": x}\n"),
			[]string{"(Destination d): metadata.labels: Invalid value: \"a/b/c\""}},
		{"destination name", docs(storeDoc, dest("Dev_EU", "GitStateStore/default", "")),
			[]string{"(Destination Dev_EU): metadata.name \"Dev_EU\" is not a valid Kubernetes name"}},
		{"destination name with dots", docs(storeDoc, dest("a..b", "GitStateStore/default", "")),
			[]string{"metadata.name \"a..b\" is not a valid Kubernetes name"}},
		{"store name", gitStore("My Store", "  url: https://x/y.git\n"), []string{"metadata.name \"My Store\" is not a valid Kubernetes name"}},
		{"secret namespace", "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: a.b}\n", []string{"metadata.namespace \"a.b\" is not a valid Kubernetes namespace"}},
		{"branch a..b", gitStore("s", "  url: https://x/y.git\n  branch: a..b\n"),
			[]string{"(GitStateStore s): spec.branch \"a..b\" is not a branch name git accepts"}},
		{"branch main.lock", gitStore("s", "  url: https://x/y.git\n  branch: main.lock\n"), []string{"spec.branch \"main.lock\" is not a branch name git accepts"}},
		{"branch ending in /", gitStore("s", "  url: https://x/y.git\n  branch: feature/\n"), []string{"spec.branch \"feature/\""}},
		{"branch with a space", gitStore("s", "  url: https://x/y.git\n  branch: my branch\n"), []string{"spec.branch \"my branch\""}},
		{"branch @{", gitStore("s", "  url: https://x/y.git\n  branch: a@{1}\n"), []string{"spec.branch \"a@{1}\""}},
		{"branch HEAD", gitStore("s", "  url: https://x/y.git\n  branch: HEAD\n"), []string{"spec.branch \"HEAD\""}},
		{"branch starting with -", gitStore("s", "  url: https://x/y.git\n  branch: -f\n"), []string{"spec.branch \"-f\""}},
		{"store path", gitStore("s", "  url: https://x/y.git\n  path: ../x\n"), []string{"(GitStateStore s): spec.path: "}},
		{"cleanup", docs(storeDoc, dest("d", "GitStateStore/default", "  cleanup: everything\n")), []string{"spec.cleanup \"everything\" is unknown"}},
		{"two stores, one repository and path, one folder", twoStores("https://git.example.com/org/state.git", "clusters", "https://git.example.com/org/state.git", "clusters", "dev", "dev"),
			[]string{"Destination d2: spec.path \"dev\" puts it in folder \"clusters/dev\" of GitStateStore/b, which overlaps folder \"clusters/dev\" of Destination d1 through GitStateStore/a: both stores are repository git.example.com/org/state, branch main"}},
		{"the same repository spelled three ways", twoStores("git@Git.Example.com:org/state.git", "/clusters/", "ssh://git@git.example.com/org/state", "clusters", "dev", "dev"),
			[]string{"overlaps folder \"clusters/dev\" of Destination d1"}},
		{"one folder through different store paths", twoStores("https://git.example.com/org/state", "", "https://git.example.com/org/state", "clusters", "clusters/dev", "dev"),
			[]string{"Destination d2: spec.path \"dev\" puts it in folder \"clusters/dev\" of GitStateStore/b, which overlaps folder \"clusters/dev\""}},
		{"nested folders through two stores", twoStores("file:///srv/state.git", "", "/srv/state.git", "", "clusters", "clusters/dev"),
			[]string{"overlaps folder \"clusters\" of Destination d1"}},
		{"one store inside another's destination", twoStores("https://git.example.com/s", "", "https://git.example.com/s", "clusters", "clusters", "dev"),
			[]string{"overlaps folder \"clusters\" of Destination d1"}},
		{"two stores, one repository and path, different folders", twoStores("https://git.example.com/s", "c", "https://git.example.com/s.git", "c/", "dev", "prod"),
			[]string{"spec.stateStoreRef GitStateStore/b is repository git.example.com/s, branch main, path \"c\", as GitStateStore/a of Destination d1 is"}},
		{"two buckets, one bucket", docs(
			bucketStore("a", "  endpoint: S3.example.com\n  bucketName: k\n"),
			bucketStore("b", "  endpoint: https://s3.example.com/\n  bucketName: k\n"),
			dest("d1", "BucketStateStore/a", "  path: x\n"), dest("d2", "BucketStateStore/b", "  path: x\n")),
			[]string{"overlaps folder \"x\" of Destination d1 through BucketStateStore/a: both stores are bucket k at s3.example.com"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file, err := loadOne(t, tc.content)
			inputErr(t, err, append([]string{file + ": "}, tc.want...)...)
		})
	}

	t.Run("accepted: the same Promise twice alike, stores on other branches or repositories", func(t *testing.T) {
		_, err := loadOne(t, docs(
			promise("pg", "[{matchLabels: {env: dev}}]"), promise("pg", "[{matchLabels: {env: dev}}]"),
			gitStore("a", "  url: https://git.example.com/s\n"),
			gitStore("b", "  url: https://git.example.com/s\n  branch: other\n"),
			gitStore("c", "  url: https://git.example.com/t\n"),
			dest("d1", "GitStateStore/a", "  path: dev\n"), dest("d2", "GitStateStore/b", "  path: dev\n"), dest("d3", "GitStateStore/c", "  path: dev\n"),
			kratix+"kind: Destination\nmetadata:\n  name: d4.example.com\n  labels: {example.com/tier: gold, env: \"\"}\nspec:\n  stateStoreRef: {kind: GitStateStore, name: a}\n",
		))
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a missing metadata folder", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "metadata")
		_, _, err := inputs.LoadSelectors(missing)
		inputErr(t, err, missing+": the metadata folder does not exist")
	})
	t.Run("object.yaml with two documents", func(t *testing.T) {
		in := t.TempDir()
		f := write(t, filepath.Join(in, "object.yaml"), "apiVersion: x/v1\nkind: P\nmetadata: {name: a}\n---\napiVersion: x/v1\nkind: P\nmetadata: {name: b}\n")
		_, err := inputs.LoadObject(in)
		inputErr(t, err, f+": holds 2 documents: it must hold one")
		// Comments and a leading separator are one document.
		write(t, f, "# the request\n---\napiVersion: x/v1\nkind: P\nmetadata: {name: a}\n")
		if o, err := inputs.LoadObject(in); err != nil || o.Name != "a" {
			t.Fatalf("%+v %v", o, err)
		}
	})
	t.Run("a missing input folder is still no object", func(t *testing.T) {
		if o, err := inputs.LoadObject(filepath.Join(t.TempDir(), "nope")); o != nil || err != nil {
			t.Fatalf("%+v %v", o, err)
		}
	})
	t.Run("an empty metadata folder is no selectors", func(t *testing.T) {
		md := t.TempDir()
		if e, _, err := inputs.LoadSelectors(md); e != nil || err != nil {
			t.Fatalf("%v %v", e, err)
		}
		if err := os.Mkdir(filepath.Join(md, inputs.SelectorsFileName), 0o755); err != nil {
			t.Fatal(err)
		}
		_, _, err := inputs.LoadSelectors(md)
		inputErr(t, err, filepath.Join(md, inputs.SelectorsFileName)+": is a folder")
	})
}

// A Secret of the wrong shape is refused without its value: yaml.v3 quotes
// the value it could not decode.
func TestSecretOfTheWrongShapeNeverEchoesTheValue(t *testing.T) {
	for _, content := range []string{
		"apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\nstringData: hunter2-password\n",
		"apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\ndata: hunter2-password\n",
		"apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\nstringData: {password: [hunter2-password]}\n",
	} {
		file, err := loadOne(t, content)
		ie := inputErr(t, err, file+": document 1 (Secret creds): invalid YAML: line ")
		if strings.Contains(ie.Error(), "hunter2") {
			t.Errorf("the value was printed: %s", ie)
		}
	}
}
