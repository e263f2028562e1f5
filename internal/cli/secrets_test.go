package cli_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/minio/minio-go/v7"

	"github.com/render-dev/render/internal/secrets"
	"github.com/render-dev/render/internal/testinfra/testenv"
	"github.com/render-dev/render/renderer"
)

// digestKeySecret is the platform Secret holding render's digest key.
const digestKeySecret = "apiVersion: v1\nkind: Secret\nmetadata: {name: render-digest}\nstringData:\n  digestKey: 5b8d2c0e7f1a4c3e9d6b8a7f0e1d2c3b4a5f6e7d8c9b0a1f\n"

// encryptSpec is a Destination's spec.secrets encrypting for recipients.
func encryptSpec(recipients ...string) string {
	var b strings.Builder
	b.WriteString("secrets:\n  policy: encrypt\n  sops:\n    age:\n      recipients:\n")
	for _, r := range recipients {
		fmt.Fprintf(&b, "        - %s\n", r)
	}
	b.WriteString("    digestKeyRef: {name: render-digest}")
	return b.String()
}

func newIdentity(t *testing.T) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// secretOutput is a workflow's Secret with one value in data and one in
// stringData.
func secretOutput(name, password, token string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  namespace: team\n  labels: {app: db}\ndata:\n  password: %s\nstringData:\n  token: %s\n",
		name, base64.StdEncoding.EncodeToString([]byte(password)), token)
}

// history is every blob of every commit of the repository's main, as
// `git log -p` would show them, concatenated.
func history(t *testing.T, repo string) string {
	t.Helper()
	r, err := git.PlainOpen(repo)
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
	var b strings.Builder
	err = it.ForEach(func(c *object.Commit) error {
		b.WriteString(c.Message)
		tree, err := c.Tree()
		if err != nil {
			return err
		}
		return tree.Files().ForEach(func(f *object.File) error {
			s, err := f.Contents()
			b.WriteString(f.Name + "\n" + s)
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestSecretsEncryptedInGit: a destination whose policy is encrypt gets
// the workflow's Secret encrypted with SOPS (each value ciphertext, the
// name and labels readable), which the recipient's identity decrypts to
// the workflow's values; an aggregatedYAML destination gets it as a
// document of its own in its one file. A second render of the same
// Secret makes no commit; a changed value is encrypted anew. No commit of
// the repository's history holds a value, in plaintext or base64, in any
// file (records and aggregate parts included), and no report printed it.
func TestSecretsEncryptedInGit(t *testing.T) {
	w := newWorld(t)
	id := newIdentity(t)
	w.file("platform/destinations.yaml", docs(
		dest("enc", map[string]string{"env": "dev"}, encryptSpec(id.Recipient().String())),
		dest("agg", map[string]string{"env": "dev"}, encryptSpec(id.Recipient().String()), "filepath: {mode: aggregatedYAML}"),
		digestKeySecret))
	env := promiseEnv("pg", "configure")
	values := []string{"first-pass-9f3a", "first-token-77c1", "second-pass-2b8e"}
	wf := w.workflow("wf").setOutput(map[string]string{
		"db.yaml": secretOutput("db", values[0], values[1]), "cm.yaml": obj("ConfigMap"),
	})
	var printed strings.Builder
	r := wf.mustRun(0, env)
	printed.WriteString(r.String())
	for _, want := range []string{"destination enc: Secret team/db in dependencies/pg/configure/5058f/db.yaml: encrypted with SOPS for 1 age recipient",
		"destination agg: Secret team/db in aggregated.yaml: encrypted with SOPS"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("the report lacks %q:\n%s", want, r)
		}
	}
	tree := repoTree(t, w.repo)
	nested := tree["clusters/enc/dependencies/pg/configure/5058f/db.yaml"]
	aggregated := tree["clusters/agg/aggregated.yaml"]
	for _, f := range []string{nested, aggregated} {
		if !strings.Contains(f, "sops:") || !strings.Contains(f, "name: db") || !strings.Contains(f, "app: db") || !strings.Contains(f, "ENC[AES256_GCM") {
			t.Fatalf("not a SOPS-encrypted Secret with its metadata readable:\n%s", f)
		}
		plain, err := secrets.Decrypt([]byte(f), id.String())
		if err != nil {
			t.Fatalf("decrypting with the recipient's identity: %v\n%s", err, f)
		}
		if !strings.Contains(string(plain), "password: "+base64.StdEncoding.EncodeToString([]byte(values[0]))) || !strings.Contains(string(plain), "token: "+values[1]) {
			t.Errorf("decrypted: %s", plain)
		}
	}
	if !strings.Contains(aggregated, "kind: ConfigMap") || strings.Count(aggregated, "\nsops:\n") != 1 {
		t.Errorf("the aggregated file holds the ConfigMap and one encrypted Secret of its own:\n%s", aggregated)
	}
	if rec := tree["clusters/.render/workloads/promise/pg/configure.json"]; !strings.Contains(rec, `"sealed"`) || !strings.Contains(rec, "hmac-sha256:v1:") {
		t.Errorf("the record keeps no keyed digest:\n%s", rec)
	}

	// The same Secret again: nothing to commit.
	commits := commitCount(t, w.repo)
	r = wf.mustRun(0, env)
	printed.WriteString(r.String())
	if n := commitCount(t, w.repo); n != commits {
		t.Errorf("a render of the same Secret made %d commit(s)", n-commits)
	}
	if !strings.Contains(r.out, "(unchanged: the stored ciphertext is kept)") || !strings.Contains(r.out, "up to date") {
		t.Errorf("second render:\n%s", r)
	}

	// A changed value: a dry run says it will be encrypted (never the
	// value), in text and JSON, then the render does it.
	wf.setOutput(map[string]string{"db.yaml": secretOutput("db", values[2], values[1]), "cm.yaml": obj("ConfigMap")})
	r = wf.mustRun(0, env, "--dry-run")
	printed.WriteString(r.String())
	if !strings.Contains(r.out, "Secret team/db in dependencies/pg/configure/5058f/db.yaml: encrypted with SOPS") || !strings.Contains(r.out, "~ dependencies/pg/configure/5058f/db.yaml") {
		t.Errorf("dry run:\n%s", r)
	}
	r = wf.mustRun(0, env, "--dry-run", "-o", "json")
	printed.WriteString(r.String())
	var rep struct {
		Secrets []struct {
			Store, Destination, File, Secret, Action string
			Encrypted                                bool
			Recipients                               int
		} `json:"secrets"`
	}
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Secrets) != 2 || rep.Secrets[0].Action != "encrypted" || !rep.Secrets[0].Encrypted || rep.Secrets[0].Secret != "team/db" || rep.Secrets[0].Recipients != 1 {
		t.Errorf("JSON secrets: %+v", rep.Secrets)
	}
	r = wf.mustRun(0, env)
	printed.WriteString(r.String())
	if n := commitCount(t, w.repo); n != commits+1 {
		t.Errorf("a changed value made %d commits, want 1", n-commits)
	}
	tree = repoTree(t, w.repo)
	plain, err := secrets.Decrypt([]byte(tree["clusters/enc/dependencies/pg/configure/5058f/db.yaml"]), id.String())
	if err != nil || !strings.Contains(string(plain), base64.StdEncoding.EncodeToString([]byte(values[2]))) {
		t.Errorf("after the change, decrypted %s (%v)", plain, err)
	}

	all := history(t, w.repo)
	for _, v := range values {
		for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
			if strings.Contains(all, form) {
				t.Errorf("the repository's history holds %q", form)
			}
			if strings.Contains(printed.String(), form) {
				t.Errorf("render printed %q", form)
			}
		}
	}
}

// TestSecretsRefusedByDefault: a Destination with no spec.secrets refuses
// a plaintext Secret: exit 2, one line naming the file, the document and
// the policy, and nothing written. policy: allow writes it as it is, and
// says so.
func TestSecretsRefusedByDefault(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", dest("dev", nil))
	env := resourceEnv("pg", "team", "db", "configure")
	wf := w.workflow("wf").setOutput(map[string]string{"cm.yaml": obj("ConfigMap"), "creds/secret.yaml": secretOutput("db", "refused-pass-1", "refused-token-2")})
	r := wf.mustRun(2, env)
	want := "creds/secret.yaml: document 1 (Secret team/db): a plaintext Secret goes to destination dev, whose spec.secrets.policy is refuse (the default when a Destination has no spec.secrets)"
	if !strings.Contains(r.errout, want) || strings.Count(strings.TrimSpace(r.errout), "\n") != 0 {
		t.Errorf("stderr:\n%s\nwant one line with %q", r.errout, want)
	}
	if strings.Contains(r.String(), "refused-pass-1") || strings.Contains(r.String(), "refused-token-2") {
		t.Errorf("render printed a value:\n%s", r)
	}
	if tip := branchTip(t, w.repo); tip != "" {
		t.Fatalf("a refused render wrote %s", tip)
	}
	w.file("platform/destinations.yaml", dest("dev", nil, "secrets: {policy: allow}"))
	r = wf.mustRun(0, env)
	if !strings.Contains(r.out, "destination dev: Secret team/db in resources/team/pg/db/configure/5058f/creds/secret.yaml: PLAINTEXT (spec.secrets.policy allow)") {
		t.Errorf("allow:\n%s", r)
	}
}

// TestSecretsBadInput: bad policies and Secrets that cannot be encrypted
// are refused with exit 2, one line naming the file and the field, before
// anything is written; a private key given as a recipient is never
// printed.
func TestSecretsBadInput(t *testing.T) {
	id := newIdentity(t)
	rcpt := id.Recipient().String()
	huge := strings.Repeat("A", 1<<20+8)
	cases := []struct {
		name, spec, output string
		want               []string
	}{
		{"malformed recipient", encryptSpec("age1notakey"), secretOutput("db", "p", "t"),
			[]string{"destinations.yaml", "Destination dev", "spec.secrets.sops.age.recipients[0]: is not an age public key"}},
		{"private key as recipient", encryptSpec(id.String()), secretOutput("db", "p", "t"),
			[]string{"spec.secrets.sops.age.recipients[0]: is an age private key"}},
		{"empty recipient list", "secrets:\n  policy: encrypt\n  sops:\n    age: {recipients: []}\n    digestKeyRef: {name: render-digest}", secretOutput("db", "p", "t"),
			[]string{"spec.secrets.sops.age.recipients is empty"}},
		{"unknown policy", "secrets: {policy: encrypted}", secretOutput("db", "p", "t"),
			[]string{`spec.secrets.policy "encrypted" is unknown`}},
		{"no digest key secret", strings.Replace(encryptSpec(rcpt), "render-digest", "missing-digest", 1), secretOutput("db", "p", "t"),
			[]string{"Destination dev", `spec.secrets.sops.digestKeyRef: secret "missing-digest" was not found`}},
		{"no data", encryptSpec(rcpt), "apiVersion: v1\nkind: Secret\nmetadata: {name: empty}\ntype: Opaque\n",
			[]string{"out.yaml: document 1 (Secret empty): data: the Secret has no data or stringData"}},
		{"other apiVersion", encryptSpec(rcpt), "apiVersion: secrets.example.com/v1\nkind: Secret\nmetadata: {name: odd}\ndata: {k: dg==}\n",
			[]string{"out.yaml: document 1 (Secret odd): apiVersion \"secrets.example.com/v1\" with kind Secret"}},
		{"huge", encryptSpec(rcpt), "apiVersion: v1\nkind: Secret\nmetadata: {name: big}\nstringData:\n  blob: " + huge + "\n",
			[]string{"out.yaml: document 1 (Secret big): data: its data and stringData hold 1048584 bytes"}},
		{"not base64", encryptSpec(rcpt), "apiVersion: v1\nkind: Secret\nmetadata: {name: b}\ndata:\n  password: not-base64-value!\n",
			[]string{"out.yaml: document 1 (Secret b): data.password is not valid base64"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			w.file("platform/destinations.yaml", docs(dest("dev", nil, c.spec), digestKeySecret))
			wf := w.workflow("wf").setOutput(map[string]string{"out.yaml": c.output})
			r := wf.mustRun(2, resourceEnv("pg", "team", "db", "configure"))
			for _, s := range c.want {
				if !strings.Contains(r.errout, s) {
					t.Errorf("stderr lacks %q:\n%s", s, r.errout)
				}
			}
			if lines := strings.Count(strings.TrimSpace(r.errout), "\n") + 1; lines != 1 {
				t.Errorf("stderr has %d lines:\n%s", lines, r.errout)
			}
			for _, v := range []string{id.String(), huge[:64], "not-base64-value!"} {
				if strings.Contains(r.String(), v) {
					t.Errorf("render printed %.40q...", v)
				}
			}
			if tip := branchTip(t, w.repo); tip != "" {
				t.Errorf("a refused render wrote %s", tip)
			}
		})
	}
}

// TestBootstrapSecrets: for a destination that encrypts, render bootstrap
// flux adds kustomize-controller's decryption block to each Kustomization
// and says which Secret (with key age.agekey) the worker must hold, with no
// key material; render bootstrap argocd refuses (exit 2) unless
// --sops-plugin names the plugin that decrypts, which the Applications
// then use.
func TestBootstrapSecrets(t *testing.T) {
	w := newWorld(t)
	id := newIdentity(t)
	spec := encryptSpec(id.Recipient().String()) + "\n    decryptionSecretRef: {name: worker-age}"
	w.file("platform/destinations.yaml", docs(dest("enc", nil, spec), dest("plain", nil), digestKeySecret))
	w.file("platform/store.yaml", gitStore("default", "https://git.example.com/state.git"))
	r := run(t, nil, "bootstrap", "flux", "enc", "--platform", w.platform)
	if r.code != 0 {
		t.Fatal(r)
	}
	block := "  prune: true\n  decryption:\n    provider: sops\n    secretRef:\n      name: worker-age\n"
	if strings.Count(r.out, block) != 2 {
		t.Errorf("want the decryption block in both Kustomizations:\n%s", r.out)
	}
	if !strings.Contains(r.out, "create Secret worker-age in namespace flux-system on the worker first, with key age.agekey") {
		t.Errorf("no note naming the Secret and its key:\n%s", r.out)
	}
	if strings.Contains(r.String(), "AGE-SECRET-KEY") || strings.Contains(r.String(), "5b8d2c0e7f1a") {
		t.Errorf("bootstrap printed key material:\n%s", r)
	}
	if r := run(t, nil, "bootstrap", "flux", "plain", "--platform", w.platform); r.code != 0 || strings.Contains(r.out, "decryption") {
		t.Errorf("a destination that does not encrypt got a decryption block:\n%s", r)
	}

	r = run(t, nil, "bootstrap", "argocd", "enc", "--platform", w.platform)
	if r.code != 2 || r.out != "" || !strings.Contains(r.errout, "Argo CD cannot decrypt them by itself") || !strings.Contains(r.errout, "--sops-plugin") {
		t.Errorf("argocd without a plugin:\n%s", r)
	}
	r = run(t, nil, "bootstrap", "argocd", "enc", "--platform", w.platform, "--sops-plugin", "sops-age")
	if r.code != 0 || strings.Count(r.out, "    plugin:\n      name: sops-age\n") != 2 || strings.Contains(r.out, "directory:") || !strings.Contains(r.out, "config management plugin sops-age") {
		t.Errorf("argocd with a plugin:\n%s", r)
	}
	if r := run(t, nil, "bootstrap", "argocd", "plain", "--platform", w.platform); r.code != 0 || !strings.Contains(r.out, "recurse: true") {
		t.Errorf("argocd for a destination that does not encrypt:\n%s", r)
	}
}

// TestDrainKeepsSecretsWherePoliciesDiffer: render drain copies files as
// they are, so a group holding a Secret stays (blocked, exit 3) rather than
// move from a destination that allows plaintext to one that encrypts; a
// group without one moves.
func TestDrainKeepsSecretsWherePoliciesDiffer(t *testing.T) {
	w := newWorld(t)
	id := newIdentity(t)
	labels := map[string]string{"env": "dev"}
	w.file("platform/destinations.yaml", docs(dest("a", labels, "secrets: {policy: allow}"), digestKeySecret))
	env := resourceEnv("pg", "team", "db", "configure")
	wf := w.workflow("wf").setOutput(map[string]string{"cm.yaml": obj("ConfigMap"), "creds/secret.yaml": secretOutput("db", "drain-pass-4", "drain-token-5")})
	wf.setSelectors("- directory: creds\n  matchLabels: {env: dev}\n")
	wf.mustRun(0, env)
	w.file("platform/destinations.yaml", docs(dest("a", labels, "secrets: {policy: allow}", "unschedulable: true"),
		dest("b", labels, encryptSpec(id.Recipient().String())), digestKeySecret))
	r := run(t, nil, "drain", "a", "--platform", w.platform)
	if r.code != 3 || !strings.Contains(r.errout, "group creds could not move: its file creds/secret.yaml holds a Secret, and destinations a and b have different spec.secrets (allow, encrypt)") {
		t.Errorf("drain:\n%s", r)
	}
	if !strings.Contains(r.out, "group .: a -> b") {
		t.Errorf("the group without a Secret did not move:\n%s", r)
	}
	for p := range repoTree(t, w.repo) {
		if strings.HasPrefix(p, "clusters/b/") && strings.Contains(p, "secret.yaml") {
			t.Errorf("the drain copied %s", p)
		}
	}
	if strings.Contains(history(t, w.repo), "clusters/b/resources/team/pg/db/configure/"+renderer.GroupID("creds")) {
		t.Errorf("the drain wrote the Secret's group into b")
	}
}

// TestSecretsNeverPlaintextInAnyStore: one promise workflow's Secret goes
// to an encrypting destination in each kind of store, Gitea, MinIO and the
// OCI registry, is rendered again unchanged (no store writes) and then
// with a new value. Every commit of the repository, every object of the
// bucket and every file of every tagged artifact is read back: none holds
// a value, in plaintext or base64, and each destination's Secret decrypts
// with the recipient's identity to the latest value.
func TestSecretsNeverPlaintextInAnyStore(t *testing.T) {
	t.Parallel()
	g, m, reg := testenv.Gitea(t), testenv.MinIO(t), testenv.Registry(t)
	repo := g.CreateRepoInfo(t, "render-sops")
	bucket := m.CreateBucket(t, "render-sops")
	ociRepo := "render-sops/" + testenv.UniqueName("s")
	w := newWorld(t)
	id := newIdentity(t)
	w.file("platform/store.yaml", docs(
		gitStore("git", repo.CloneURL)+"  authMethod: basicAuth\n  secretRef: {name: gitea}\n",
		fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: gitea}\nstringData: {username: %q, password: %q}\n", g.AdminUser(), g.AdminToken()),
		bucketStore("minio", m.Endpoint(), bucket, "minio-creds"),
		s3Secret("minio-creds", m.AccessKey(), m.SecretKey()),
		fmt.Sprintf("apiVersion: render.dev/v1alpha1\nkind: OCIStateStore\nmetadata: {name: oci}\nspec:\n  registry: %q\n  repository: %s\n  insecure: true\n  create: true\n  secretRef: {name: registry-creds}\n", reg.Addr(), ociRepo),
		fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: registry-creds}\nstringData: {username: %q, password: %q}\n", reg.User(), reg.Password()),
		digestKeySecret))
	spec := encryptSpec(id.Recipient().String())
	w.file("platform/destinations.yaml", docs(
		dest("in-git", nil, spec, "store=git"),
		strings.Replace(dest("in-s3", nil, spec, "store=minio"), "kind: GitStateStore", "kind: BucketStateStore", 1),
		strings.Replace(dest("in-oci", nil, spec, "store=oci", "filepath: {mode: aggregatedYAML}"), "kind: GitStateStore", "kind: OCIStateStore", 1)))
	env := promiseEnv("pg", "configure")
	values := []string{"store-pass-a1", "store-token-b2", "store-pass-c3"}
	wf := w.workflow("wf").setOutput(map[string]string{"db.yaml": secretOutput("db", values[0], values[1])})
	var printed strings.Builder
	printed.WriteString(wf.mustRun(0, env).String())
	r := wf.mustRun(0, env)
	printed.WriteString(r.String())
	for _, s := range []string{"GitStateStore/git: up to date", "BucketStateStore/minio: up to date", "OCIStateStore/oci: up to date"} {
		if !strings.Contains(r.out, s) {
			t.Errorf("an unchanged Secret was written again: no %q in\n%s", s, r.out)
		}
	}
	wf.setOutput(map[string]string{"db.yaml": secretOutput("db", values[2], values[1])})
	printed.WriteString(wf.mustRun(0, env).String())

	// Everything each store holds (git: its whole history).
	clone := t.TempDir()
	if _, err := git.PlainClone(clone, true, &git.CloneOptions{URL: g.AdminAuthURL(repo.CloneURL)}); err != nil {
		t.Fatal(err)
	}
	stores := map[string]string{"git": history(t, clone)}
	var s3 strings.Builder
	c := m.Client(t)
	for _, k := range bucketKeys(t, c, bucket) {
		o, err := c.GetObject(context.Background(), bucket, k, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(o)
		if err != nil {
			t.Fatal(err)
		}
		s3.WriteString(k + "\n" + string(b))
	}
	stores["s3"] = s3.String()
	var oci strings.Builder
	for _, rp := range reg.Repositories(t, reg.Addr()+"/"+strings.Split(ociRepo, "/")[0]) {
		if !strings.HasPrefix(rp, ociRepo) {
			continue
		}
		for _, tag := range reg.Tags(t, reg.Addr()+"/"+rp) {
			if strings.HasPrefix(tag, "lock-") {
				continue
			}
			for p, f := range reg.Pull(t, reg.Addr()+"/"+rp+":"+tag).Files {
				oci.WriteString(p + "\n" + f)
			}
		}
	}
	stores["oci"] = oci.String()
	for name, all := range stores {
		if !strings.Contains(all, "sops:") {
			t.Errorf("%s: no encrypted Secret read back (%d bytes)", name, len(all))
		}
		for _, v := range values {
			for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
				if strings.Contains(all, form) {
					t.Errorf("%s holds %q", name, form)
				}
			}
		}
	}
	for _, v := range values {
		if strings.Contains(printed.String(), v) {
			t.Errorf("render printed %q", v)
		}
	}
	// Each destination's Secret decrypts to the latest value.
	files := map[string]string{
		"git": repoFileAt(t, clone, "clusters/in-git/dependencies/pg/configure/5058f/db.yaml"),
	}
	for _, k := range bucketKeys(t, c, bucket) {
		if strings.HasSuffix(k, "/db.yaml") && strings.HasPrefix(k, "clusters/in-s3/") {
			o, err := c.GetObject(context.Background(), bucket, k, minio.GetObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(o)
			files["s3"] = string(b)
		}
	}
	files["oci"] = reg.Pull(t, reg.Addr()+"/"+ociRepo+"/in-oci:latest").Files["aggregated.yaml"]
	for name, f := range files {
		plain, err := secrets.Decrypt([]byte(f), id.String())
		if err != nil || !strings.Contains(string(plain), base64.StdEncoding.EncodeToString([]byte(values[2]))) {
			t.Errorf("%s: decrypted %q (%v) from\n%s", name, plain, err, f)
		}
	}
}

// repoFileAt is a file on main of a bare repository.
func repoFileAt(t *testing.T, repo, p string) string {
	t.Helper()
	return repoTree(t, repo)[p]
}
