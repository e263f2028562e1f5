package fluxe2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	gitobject "github.com/go-git/go-git/v5/plumbing/object"
	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/internal/secrets"
	"github.com/render-dev/render/internal/testinfra/testenv"
)

// sopsWorld is a scenario whose destination encrypts its Secrets for an
// age identity the worker holds (Secret sops-age, key age.agekey, in the
// Flux namespace), and whose resource workflow writes a Secret.
type sopsWorld struct {
	*scenario
	id   *age.X25519Identity
	dest string
	// store reads back everything the store holds (git: its whole
	// history), and the current content of each file, by path.
	store func() (all string, files map[string]string)
}

func newSOPSWorld(t *testing.T, mode string, store func(sc *scenario) func() (string, map[string]string)) *sopsWorld {
	t.Helper()
	sc := newScenario(t)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	sw := &sopsWorld{scenario: sc, id: id, dest: "sops-" + sc.Suffix}
	sw.store = store(sc)
	sc.secret("sops-age", "", map[string]string{"age.agekey": id.String()})
	sc.Write("platform/digest.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: render-digest}\nstringData:\n  digestKey: 9c1f0b7e3a5d4c2b8e6f0a1d3c5b7e9f2a4c6e8b0d1f3a5c\n")
	sc.Platform(testenv.Destination{Name: sw.dest, Mode: mode, Spec: fmt.Sprintf(
		"secrets:\n  policy: encrypt\n  sops:\n    age:\n      recipients: [%s]\n    digestKeyRef: {name: render-digest}", id.Recipient())})
	return sw
}

// secretObject is the resource's Secret.
func (sw *sopsWorld) secretObject() object {
	return object{APIVersion: "v1", Kind: "Secret", Namespace: sw.Namespace, Name: sw.Request + "-creds"}
}

// writeSecret puts the Secret in the resource workflow's output: password
// in data (base64), token in stringData.
func (sw *sopsWorld) writeSecret(password, token string) {
	sw.Write("resource-configure/output/secret.yaml", fmt.Sprintf(
		"apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s-creds\n  namespace: %s\n  labels: {app: widgets}\ntype: Opaque\ndata:\n  password: %s\nstringData:\n  token: %s\n",
		sw.Request, sw.Namespace, base64.StdEncoding.EncodeToString([]byte(password)), token))
}

// renderResource runs the resource's configure workflow again (its
// folders are ResourceWorkflow's) and returns what render printed.
func (sw *sopsWorld) renderResource() testenv.Result {
	sw.t.Helper()
	f := filepath.Join(sw.Dir, "resource-configure")
	return sw.MustRun([]string{
		"KRATIX_WORKFLOW_TYPE=resource", "KRATIX_WORKFLOW_ACTION=configure",
		"KRATIX_PROMISE_NAME=" + sw.Promise, "KRATIX_PIPELINE_NAME=instance-configure",
	}, "--output", filepath.Join(f, "output"), "--metadata", filepath.Join(f, "metadata"),
		"--input", filepath.Join(f, "input"), "--platform", sw.PlatformDir())
}

// waitSecret waits until the API server holds the Secret with the
// workflow's values, as kustomize-controller decrypted and applied it.
func (sw *sopsWorld) waitSecret(kustomization, password, token string) {
	sw.t.Helper()
	o := sw.secretObject()
	sw.waitApplied(kustomization, o)
	sw.waitFor(fmt.Sprintf("%s with the workflow's values", o), func() (bool, string) {
		obj := sw.get(o)
		data, _ := testenv.Field(obj, "data").(map[string]any)
		pw, _ := base64.StdEncoding.DecodeString(fmt.Sprint(data["password"]))
		tk, _ := base64.StdEncoding.DecodeString(fmt.Sprint(data["token"]))
		if string(pw) == password && string(tk) == token {
			return true, ""
		}
		return false, fmt.Sprintf("data has %d keys (values not shown)", len(data))
	})
}

// run is the test: the Secret is applied decrypted, a re-render of the
// same value writes nothing, a new value is applied, and the store holds
// no value anywhere while each stored Secret decrypts with the worker's
// identity.
func (sw *sopsWorld) run(kustomization string) {
	t := sw.t
	values := []string{"flux-pass-" + sw.Suffix, "flux-token-" + sw.Suffix, "flux-pass-2-" + sw.Suffix}
	sw.PromiseWorkflow("configure")
	sw.writeSecret(values[0], values[1])
	// The first render writes the request and the rest of the output
	// beside the Secret.
	sw.ResourceWorkflow("configure")
	var printed strings.Builder
	out := sw.bootstrap(sw.dest)
	for _, want := range []string{"decryption:\n    provider: sops\n    secretRef:\n      name: sops-age\n", "key age.agekey"} {
		if !strings.Contains(out, want) {
			t.Fatalf("render bootstrap flux printed no %q:\n%s", want, out)
		}
	}
	sw.waitSecret(kustomization, values[0], values[1])

	again := sw.renderResource()
	printed.WriteString(again.String())
	if !strings.Contains(again.Stdout, ": up to date") || !strings.Contains(again.Stdout, "unchanged: the stored ciphertext is kept") {
		t.Errorf("a render of the same Secret wrote to the store:\n%s", again)
	}

	sw.writeSecret(values[2], values[1])
	printed.WriteString(sw.renderResource().String())
	sw.reconcileSources()
	sw.waitSecret(kustomization, values[2], values[1])

	all, files := sw.store()
	for _, v := range values {
		for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
			if strings.Contains(all, form) {
				t.Errorf("the store holds %q", form)
			}
			if strings.Contains(printed.String(), form) {
				t.Errorf("render printed %q", form)
			}
		}
	}
	n := 0
	for p, f := range files {
		if !strings.Contains(f, "\nsops:\n") {
			continue
		}
		n++
		plain, err := secrets.Decrypt([]byte(f), sw.id.String())
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if !strings.HasPrefix(p, ".render/") && !strings.Contains(p, "/.render/") && !strings.Contains(string(plain), base64.StdEncoding.EncodeToString([]byte(values[2]))) {
			t.Errorf("%s decrypts to the old value", p)
		}
	}
	if n == 0 {
		t.Errorf("no encrypted Secret in the store")
	}
}

// TestSOPSSecrets: a destination whose spec.secrets.policy is encrypt, in
// a Gitea repository (nestedByMetadata) and in a MinIO bucket
// (aggregatedYAML: the Secret a document of its own in the one file). The
// Kustomizations `render bootstrap flux` prints, with their decryption
// block, have kustomize-controller decrypt the Secret with the worker's
// age key and apply it: the API server holds the workflow's values; a new
// value is applied; a render of the same value changes nothing in the
// store. The repository's whole history (or every object of the bucket)
// holds no value, and every stored Secret decrypts with the identity.
func TestSOPSSecrets(t *testing.T) {
	t.Parallel()
	t.Run("nestedByMetadata in git", func(t *testing.T) {
		t.Parallel()
		sw := newSOPSWorld(t, "nestedByMetadata", func(sc *scenario) func() (string, map[string]string) {
			g := testenv.Gitea(t)
			repo := g.CreateRepoInfo(t, "flux-sops")
			sc.GitStore(g, repo)
			sc.secret("gitea-"+sc.Suffix, "", map[string]string{"username": g.AdminUser(), "password": g.AdminToken()})
			return func() (string, map[string]string) { return gitContents(t, g.AdminAuthURL(repo.CloneURL)) }
		})
		sw.run(sw.dest + "-resources")
	})
	t.Run("aggregatedYAML in a bucket", func(t *testing.T) {
		t.Parallel()
		sw := newSOPSWorld(t, "aggregatedYAML", func(sc *scenario) func() (string, map[string]string) {
			m := testenv.MinIO(t)
			bucket := m.CreateBucket(t, "flux-sops")
			sc.BucketStore(m, bucket)
			sc.secret("minio-"+sc.Suffix, "", map[string]string{"accesskey": m.AccessKey(), "secretkey": m.SecretKey()})
			return func() (string, map[string]string) { return bucketContents(t, m.Client(t), bucket) }
		})
		sw.run(sw.dest)
	})
}

// gitContents clones the repository and returns every file of every
// commit of main, concatenated (what `git log -p` would show), and main's
// files.
func gitContents(t *testing.T, url string) (string, map[string]string) {
	t.Helper()
	r, err := git.PlainClone(t.TempDir(), true, &git.CloneOptions{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := r.Reference(plumbing.NewBranchReferenceName("main"), true)
	if err != nil {
		t.Fatal(err)
	}
	it, err := r.Log(&git.LogOptions{From: ref.Hash()})
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	files := map[string]string{}
	tip := true
	err = it.ForEach(func(c *gitobject.Commit) error {
		all.WriteString(c.Message)
		tree, err := c.Tree()
		if err != nil {
			return err
		}
		err = tree.Files().ForEach(func(f *gitobject.File) error {
			s, err := f.Contents()
			all.WriteString(f.Name + "\n" + s)
			if tip {
				files[f.Name] = s
			}
			return err
		})
		tip = false
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return all.String(), files
}

// bucketContents reads every object of the bucket.
func bucketContents(t *testing.T, c *minio.Client, bucket string) (string, map[string]string) {
	t.Helper()
	var all strings.Builder
	files := map[string]string{}
	for o := range c.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		obj, err := c.GetObject(context.Background(), bucket, o.Key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(obj)
		if err != nil {
			t.Fatal(err)
		}
		all.WriteString(o.Key + "\n" + string(b))
		files[o.Key] = string(b)
	}
	return all.String(), files
}
