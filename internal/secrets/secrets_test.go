package secrets

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"filippo.io/age"
	"gopkg.in/yaml.v3"

	"github.com/render-dev/render/internal/redact"
	"github.com/render-dev/render/renderer"
	"github.com/render-dev/render/statestore"
)

var store = renderer.StoreRef{Kind: "GitStateStore", Name: "default"}

func identity(t *testing.T) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func dests(mode Mode, recipients ...string) Destinations {
	return Destinations{"dev": {Name: "dev", Path: "clusters/dev", Store: store,
		Policy: Policy{Mode: mode, Recipients: recipients, DigestKey: []byte("0123456789abcdef0123456789abcdef-test")}, Set: "test"}}
}

// plan is a plan writing files (output path -> content) to destination
// dev, as none mode lays them out, and an aggregated file's part.
func plan(files map[string]string, aggregate string) (*renderer.Plan, []renderer.File) {
	w := renderer.StoreWrite{Store: store, Files: map[string][]byte{}, Destinations: []string{"clusters/dev"}}
	g := renderer.Group{Directory: ".", ID: "5058f", Destinations: []string{"dev"}}
	var out []renderer.File
	for p, data := range files {
		w.Files["clusters/dev/"+p] = []byte(data)
		g.Files = append(g.Files, p)
		out = append(out, renderer.File{Path: p, Data: []byte(data)})
	}
	if aggregate != "" {
		w.Aggregates = []renderer.Aggregate{{Target: "clusters/dev/aggregated.yaml", Contribution: []byte(aggregate)}}
	}
	return &renderer.Plan{Groups: []renderer.Group{g}, Writes: []renderer.StoreWrite{w}}, out
}

// snap is a store's content, for Previous.
type snap map[string][]byte

func (s snap) Compare(p string, data []byte) (bool, bool, error) {
	b, ok := s[p]
	return ok, ok && bytes.Equal(b, data), nil
}
func (s snap) ReadFile(p string) ([]byte, error) {
	if b, ok := s[p]; ok {
		return b, nil
	}
	return nil, statestore.ErrNotFound
}
func (s snap) List(string) ([]string, error) { return nil, nil }
func (s snap) Capabilities() statestore.SnapshotCapabilities {
	return statestore.SnapshotCapabilities{}
}

const secretYAML = `# the database's credentials: hunter2-in-a-comment
apiVersion: v1
kind: Secret
metadata:
  name: db
  namespace: team
  labels: {app: db}
type: Opaque
data:
  password: %s
stringData:
  user: %s
`

func secretDoc(password, user string) string {
	return fmt.Sprintf(secretYAML, base64.StdEncoding.EncodeToString([]byte(password)), user)
}

const configMap = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: team\ndata:\n  size: small\n"

// TestSealEncryptsEachSecret: a file holding a ConfigMap and a Secret, to
// a destination that encrypts for two recipients: the stored file holds
// neither value (nor their base64, nor the comment quoting one), keeps the
// Secret's name, namespace and labels readable, leaves the ConfigMap as it
// was, and either recipient's identity decrypts it to the workflow's
// values.
func TestSealEncryptsEachSecret(t *testing.T) {
	a, b := identity(t), identity(t)
	file := configMap + "---\n" + secretDoc("s3cr3t-p@ss", "admin-user-x")
	p, out := plan(map[string]string{"db.yaml": file}, "")
	ds := dests(Encrypt, a.Recipient().String(), b.Recipient().String())
	if err := Check(context.Background(), p, out, ds, ""); err != nil {
		t.Fatal(err)
	}
	s, err := Seal(context.Background(), p, "resource/team/pg/db/configure", ds, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := s.Plan.Writes[0].Files["clusters/dev/db.yaml"]
	for _, leak := range []string{"s3cr3t-p@ss", base64.StdEncoding.EncodeToString([]byte("s3cr3t-p@ss")), "admin-user-x", "hunter2"} {
		if bytes.Contains(got, []byte(leak)) {
			t.Errorf("the sealed file holds %q:\n%s", leak, got)
		}
	}
	for _, want := range []string{"name: db", "namespace: team", "app: db", "kind: Secret", "encrypted_regex: ^(data|stringData)$", "recipient: " + a.Recipient().String(), "size: small", "mac: ENC["} {
		if !bytes.Contains(got, []byte(want)) {
			t.Errorf("the sealed file has no %q:\n%s", want, got)
		}
	}
	if p.Writes[0].Files["clusters/dev/db.yaml"] == nil || string(p.Writes[0].Files["clusters/dev/db.yaml"]) != file {
		t.Errorf("Seal changed the plan it was given")
	}
	for _, id := range []*age.X25519Identity{a, b} {
		plain, err := Decrypt(got, id.String())
		if err != nil {
			t.Fatalf("decrypting with %s: %v", id.Recipient(), err)
		}
		docs := decode(t, plain)
		if len(docs) != 2 {
			t.Fatalf("decrypted %d documents, want 2:\n%s", len(docs), plain)
		}
		sec := docs[1]
		if sec["data"].(map[string]any)["password"] != base64.StdEncoding.EncodeToString([]byte("s3cr3t-p@ss")) || sec["stringData"].(map[string]any)["user"] != "admin-user-x" {
			t.Errorf("decrypted Secret = %v", sec)
		}
	}
	if e := s.Files[store]["clusters/dev/db.yaml"]; !strings.HasPrefix(e.Plain, digestPrefix) || e.Stored != storedDigest(got) {
		t.Errorf("the record's entry = %+v", e)
	}
	if len(s.Notes) != 1 || s.Notes[0].Action != Encrypted || s.Notes[0].Secret != "team/db" || s.Notes[0].File != "db.yaml" || s.Notes[0].Recipients != 2 {
		t.Errorf("notes = %+v", s.Notes)
	}
	if other := identity(t); true {
		if _, err := Decrypt(got, other.String()); err == nil {
			t.Errorf("an identity that is not a recipient decrypted the file")
		}
	}
}

func decode(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var out []map[string]any
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			break
		}
		out = append(out, m)
	}
	return out
}

// TestSealKeepsUnchangedCiphertext: SOPS output is random, so a render
// whose Secret did not change keeps the bytes the store holds (and the
// record's entry), while a changed value, a changed recipient list, a
// digest key that changed and a stored file someone altered each get a
// fresh encryption.
func TestSealKeepsUnchangedCiphertext(t *testing.T) {
	a, b := identity(t), identity(t)
	const key = "resource/team/pg/db/configure"
	seal := func(file string, ds Destinations, prev Previous) (*Sealed, []byte) {
		t.Helper()
		p, _ := plan(map[string]string{"db.yaml": file}, "")
		s, err := Seal(context.Background(), p, key, ds, func(renderer.StoreRef) Previous { return prev })
		if err != nil {
			t.Fatal(err)
		}
		return s, s.Plan.Writes[0].Files["clusters/dev/db.yaml"]
	}
	ds := dests(Encrypt, a.Recipient().String())
	first, c1 := seal(secretDoc("v1-value", "u"), ds, Previous{})
	stored := snap{"clusters/dev/db.yaml": c1}
	rec := &statestore.Record{Workload: key, Sealed: first.Files[store]}
	prev := Previous{Record: rec, Snap: stored}

	again, c2 := seal(secretDoc("v1-value", "u"), ds, prev)
	if !bytes.Equal(c1, c2) || again.Notes[0].Action != Kept || again.Files[store]["clusters/dev/db.yaml"] != rec.Sealed["clusters/dev/db.yaml"] {
		t.Errorf("an unchanged Secret was encrypted again (notes %+v)", again.Notes)
	}
	// Encrypting twice gives different bytes: that is why keeping matters.
	if _, c := seal(secretDoc("v1-value", "u"), ds, Previous{}); bytes.Equal(c, c1) {
		t.Fatalf("SOPS gave the same bytes twice: the test proves nothing")
	}
	cases := map[string]struct {
		file string
		ds   Destinations
		prev Previous
	}{
		"changed value":   {secretDoc("v2-value", "u"), ds, prev},
		"added recipient": {secretDoc("v1-value", "u"), dests(Encrypt, a.Recipient().String(), b.Recipient().String()), prev},
		"other digest key": {secretDoc("v1-value", "u"), func() Destinations {
			d := dests(Encrypt, a.Recipient().String())
			x := d["dev"]
			x.Policy.DigestKey = []byte("another key of thirty-two bytes or more")
			d["dev"] = x
			return d
		}(), prev},
		"altered in store":   {secretDoc("v1-value", "u"), ds, Previous{Record: rec, Snap: snap{"clusters/dev/db.yaml": append([]byte("# edited\n"), c1...)}}},
		"missing from store": {secretDoc("v1-value", "u"), ds, Previous{Record: rec, Snap: snap{}}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s, got := seal(c.file, c.ds, c.prev)
			if bytes.Equal(got, c1) || s.Notes[0].Action != Encrypted {
				t.Errorf("kept the old ciphertext (notes %+v)", s.Notes)
			}
			if s.Files[store]["clusters/dev/db.yaml"].Stored != storedDigest(got) {
				t.Errorf("the record's entry does not describe the new bytes")
			}
		})
	}
}

// TestSealAggregatedPart: an aggregatedYAML destination's part holds the
// group's files joined; each Secret in it is encrypted as a document of
// its own (with its own sops metadata: Flux decrypts each object it builds
// on its own), and the part is kept while unchanged.
func TestSealAggregatedPart(t *testing.T) {
	a := identity(t)
	contribution := secretDoc("first-secret-value", "one") + "\n---\n" + configMap + "\n---\n" + strings.Replace(secretDoc("second-secret-value", "two"), "name: db", "name: db2", 1)
	p, _ := plan(nil, contribution)
	ds := dests(Encrypt, a.Recipient().String())
	const key = "promise/pg/configure"
	s, err := Seal(context.Background(), p, key, ds, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := s.Plan.Writes[0].Aggregates[0].Contribution
	if n := bytes.Count(got, []byte("\nsops:\n")); n != 2 {
		t.Errorf("%d documents with sops metadata, want 2 (one per Secret):\n%s", n, got)
	}
	for _, leak := range []string{"first-secret-value", "second-secret-value"} {
		if bytes.Contains(got, []byte(leak)) || bytes.Contains(got, []byte(base64.StdEncoding.EncodeToString([]byte(leak)))) {
			t.Errorf("the part holds %s", leak)
		}
	}
	plain, err := Decrypt(got, a.String())
	if err != nil {
		t.Fatal(err)
	}
	if docs := decode(t, plain); len(docs) != 3 || docs[2]["stringData"].(map[string]any)["user"] != "two" {
		t.Errorf("decrypted part = %s", plain)
	}
	part := statestore.AggregatePath("clusters/dev/aggregated.yaml", key)
	if _, ok := s.Files[store][part]; !ok {
		t.Fatalf("no record entry for the part %s: %v", part, s.Files)
	}
	again, err := Seal(context.Background(), p, key, ds, func(renderer.StoreRef) Previous {
		return Previous{Record: &statestore.Record{Sealed: s.Files[store]}, Snap: snap{part: got}}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Plan.Writes[0].Aggregates[0].Contribution, got) {
		t.Errorf("an unchanged part was encrypted again")
	}
}

// TestSealLeavesOthers: files without Secrets, destinations that allow
// them and Secrets the workflow encrypted itself are written as they are.
func TestSealLeavesOthers(t *testing.T) {
	a := identity(t)
	pre := "apiVersion: v1\nkind: Secret\nmetadata: {name: pre}\ndata:\n  k: ENC[AES256_GCM,data:abc,iv:x,tag:y,type:str]\nsops:\n  mac: ENC[AES256_GCM,data:m,iv:x,tag:y,type:str]\n"
	files := map[string]string{"cm.yaml": configMap, "pre.yaml": pre}
	p, out := plan(files, "")
	ds := dests(Encrypt, a.Recipient().String())
	if err := Check(context.Background(), p, out, ds, ""); err != nil {
		t.Fatal(err)
	}
	s, err := Seal(context.Background(), p, "k", ds, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Plan != p {
		t.Errorf("Seal made a new plan though nothing was to be encrypted")
	}
	if len(s.Notes) != 1 || s.Notes[0].Action != PreEncrypted {
		t.Errorf("notes = %+v", s.Notes)
	}
	p, _ = plan(map[string]string{"db.yaml": secretDoc("allowed-value", "u")}, "")
	s, err = Seal(context.Background(), p, "k", dests(Allow), nil)
	if err != nil || s.Plan != p || len(s.Notes) != 1 || s.Notes[0].Action != Plaintext || !strings.Contains(s.Notes[0].String(), "PLAINTEXT") {
		t.Errorf("allow: plan changed %v, notes %+v, err %v", s.Plan != p, s.Notes, err)
	}
}

// TestCheckRefuses: what each policy refuses, named by file, document and
// field, and what it lets through; a value is never quoted.
func TestCheckRefuses(t *testing.T) {
	a := identity(t).Recipient().String()
	huge := strings.Repeat("x", MaxSecretBytes+1)
	cases := []struct {
		name, file, data string
		mode             Mode
		want             string // "" for no error
	}{
		{"refuse plaintext", "db.yaml", configMap + "---\n" + secretDoc("refused-value", "u"), Refuse, "db.yaml: document 2 (Secret team/db): a plaintext Secret goes to destination dev, whose spec.secrets.policy is refuse"},
		{"refuse lets SOPS through", "pre.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: pre}\ndata:\n  k: ENC[AES256_GCM,data:abc,iv:x,tag:y,type:str]\nsops:\n  mac: ENC[x]\n", Refuse, ""},
		{"SOPS with a plaintext value", "pre.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: pre}\ndata:\n  k: cGxhaW4=\nsops:\n  mac: ENC[x]\n", Encrypt, "pre.yaml: document 1 (Secret pre): data.k is not encrypted although the Secret carries SOPS metadata"},
		{"allow", "db.yaml", secretDoc("allowed-value", "u"), Allow, ""},
		{"no data", "empty.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: empty}\ntype: Opaque\n", Encrypt, "empty.yaml: document 1 (Secret empty): data: the Secret has no data or stringData"},
		{"empty data", "empty.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: empty}\ndata: {}\n", Encrypt, "data: the Secret has no data or stringData"},
		{"not base64", "bad.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: bad}\ndata:\n  password: not*base64!\n", Encrypt, "bad.yaml: document 1 (Secret bad): data.password is not valid base64"},
		{"not a string", "bad.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: bad}\nstringData:\n  port: 5432\n", Encrypt, "stringData.port is not a string"},
		{"other apiVersion", "odd.yaml", "apiVersion: example.com/v1\nkind: Secret\nmetadata: {name: odd}\ndata:\n  k: dg==\n", Encrypt, "odd.yaml: document 1 (Secret odd): apiVersion \"example.com/v1\" with kind Secret"},
		{"other apiVersion, refuse", "odd.yaml", "apiVersion: v2\nkind: Secret\nmetadata: {name: odd}\n", Refuse, "apiVersion \"v2\" with kind Secret"},
		{"huge", "big.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: big}\nstringData:\n  blob: " + huge + "\n", Encrypt, "big.yaml: document 1 (Secret big): data: its data and stringData hold 1048577 bytes, more than"},
		{"in a List", "list.yaml", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Secret\n  metadata: {name: x}\n  data: {k: dg==}\n", Encrypt, "list.yaml: document 1: items[0] is a Secret inside a List"},
		{"secretGenerator", "app/kustomization.yaml", "resources: [cm.yaml]\nsecretGenerator:\n- name: gen\n  literals: [password=generated-value]\n", Encrypt, "app/kustomization.yaml: document 1: secretGenerator:"},
		{"not .yaml", "db.json", `{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "j"}, "data": {"k": "dg=="}}`, Encrypt, "db.json: document 1 (Secret j): a Secret in a file whose name does not end in .yaml or .yml"},
		{"last-applied", "db.yaml", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  annotations:\n    kubectl.kubernetes.io/last-applied-configuration: '{\"data\":{}}'\ndata:\n  k: dg==\n", Encrypt, "metadata.annotations.kubectl.kubernetes.io/last-applied-configuration holds a copy"},
		{"unknown field", "db.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\ndata:\n  k: dg==\nspec:\n  password: x\n", Encrypt, "spec is not a field of a Secret"},
		{"not a manifest", "notes.txt", "kind: Secret is a word in this text", Encrypt, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, out := plan(map[string]string{c.file: c.data}, "")
			err := Check(context.Background(), p, out, dests(c.mode, a), "")
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ie *renderer.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v, want an InputError", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v\nwant it to contain %q", err, c.want)
			}
			for _, v := range []string{"refused-value", "5432", "generated-value", huge[:50]} {
				if strings.Contains(err.Error(), v) {
					t.Errorf("the message quotes a value: %v", err)
				}
			}
		})
	}
}

// TestCheckRegistersValues: every Secret's values are masked in what
// render prints, whatever the destination's policy.
func TestCheckRegistersValues(t *testing.T) {
	p, out := plan(map[string]string{"db.yaml": secretDoc("masked-password-1", "masked-user-2")}, "")
	if err := Check(context.Background(), p, out, dests(Allow), ""); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"masked-password-1", "masked-user-2"} {
		if got := redact.String("say " + v); got != "say "+redact.Mask {
			t.Errorf("redact.String(%q) = %q", v, got)
		}
	}
}

// TestDigest: the digest changes with each thing it covers, and with the
// key; it is not the plaintext's unkeyed hash.
func TestDigest(t *testing.T) {
	k := []byte("0123456789abcdef0123456789abcdef")
	base := Digest(k, "p", []string{"r1"}, []byte("v"))
	for name, d := range map[string]string{
		"key":        Digest([]byte("another-key-0123456789abcdef0123"), "p", []string{"r1"}, []byte("v")),
		"path":       Digest(k, "q", []string{"r1"}, []byte("v")),
		"recipients": Digest(k, "p", []string{"r1", "r2"}, []byte("v")),
		"plaintext":  Digest(k, "p", []string{"r1"}, []byte("w")),
		"boundaries": Digest(k, "p", []string{"r1v"}, []byte("")),
	} {
		if d == base {
			t.Errorf("the digest does not change with the %s", name)
		}
	}
	if base != Digest(k, "p", []string{"r1"}, []byte("v")) {
		t.Errorf("the digest is not deterministic")
	}
}
