package secrets

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"

	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/config"
	sopsjson "github.com/getsops/sops/v3/stores/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// TestDecryptsAsKustomizeControllerDoes: what Seal writes survives what
// kustomize-controller (v1.9.5, internal/decryptor) does with it on the
// worker, without the Flux stack: kustomize builds the folder (here an
// aggregated file of a ConfigMap and two Secrets, listed by a
// kustomization), then each built object that carries a sops block with
// a mac is marshalled to JSON and decrypted with SOPS's JSON store and the
// worker's age key, and unmarshalled back. (internal/testinfra/fluxe2e runs the real
// controller.)
func TestDecryptsAsKustomizeControllerDoes(t *testing.T) {
	id := identity(t)
	contribution := secretDoc("kc-pass-1", "kc-user-1") + "\n---\n" + configMap + "\n---\n" +
		"apiVersion: v1\nkind: Secret\nmetadata: {name: other, namespace: team}\nstringData: {token: kc-token-2}\n"
	p, _ := plan(nil, contribution)
	s, err := Seal(context.Background(), p, "k", dests(Encrypt, id.Recipient().String()), nil)
	if err != nil {
		t.Fatal(err)
	}
	fs := filesys.MakeFsInMemory()
	if err := fs.WriteFile("/dest/aggregated.yaml", s.Plan.Writes[0].Aggregates[0].Contribution); err != nil {
		t.Fatal(err)
	}
	if err := fs.WriteFile("/dest/kustomization.yaml", []byte("resources: [aggregated.yaml]\n")); err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/dest")
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	got := map[string]map[string]string{}
	for _, res := range m.Resources() {
		if f := res.Field("sops"); f == nil || f.Value.Field("mac").IsNilOrEmpty() {
			if res.GetKind() == "Secret" {
				t.Errorf("Secret %s has no sops block with a mac: kustomize-controller would apply it as it is", res.GetName())
			}
			continue
		}
		out, err := res.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		store := sopsjson.NewStore(&config.JSONStoreConfig{})
		tree, err := store.LoadEncryptedFile(out)
		if err != nil {
			t.Fatalf("%s: %v", res.GetName(), err)
		}
		var ids sopsage.ParsedIdentities
		if err := ids.Import(id.String()); err != nil {
			t.Fatal(err)
		}
		var key []byte
		for _, k := range tree.Metadata.KeyGroups[0] {
			ak := k.(*sopsage.MasterKey)
			ids.ApplyToMasterKey(ak)
			if key, err = ak.Decrypt(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tree.Decrypt(key, aes.NewCipher()); err != nil {
			t.Fatalf("%s: %v", res.GetName(), err)
		}
		plain, err := store.EmitPlainFile(tree.Branches)
		if err != nil {
			t.Fatal(err)
		}
		if err := res.UnmarshalJSON(plain); err != nil {
			t.Fatal(err)
		}
		if res.Field("sops") != nil {
			t.Errorf("%s still has its sops block after decryption", res.GetName())
		}
		got[res.GetName()] = res.GetDataMap()
		if sd, err := res.Pipe(yaml.Lookup("stringData")); err == nil && sd != nil {
			sm, _ := sd.Map()
			for k, v := range sm {
				got[res.GetName()]["stringData."+k] = fmt.Sprint(v)
			}
		}
	}
	if got["db"]["password"] != base64.StdEncoding.EncodeToString([]byte("kc-pass-1")) || got["db"]["stringData.user"] != "kc-user-1" || got["other"]["stringData.token"] != "kc-token-2" {
		t.Errorf("decrypted = %v", got)
	}
}
