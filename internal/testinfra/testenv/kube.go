package testenv

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// Environment variables written by `scripts/testservers.sh start DIR flux`
// (or `with --flux`): a real kube-apiserver with Flux's source- and
// kustomize-controllers running against it.
const (
	EnvKubeURL    = "RENDER_TEST_KUBE_URL"   // https://127.0.0.1:PORT
	EnvKubeToken  = "RENDER_TEST_KUBE_TOKEN" // static token, group system:masters
	EnvKubeCA     = "RENDER_TEST_KUBE_CA"    // PEM file of the CA that signed the serving certificate
	EnvKubeconfig = "RENDER_TEST_KUBECONFIG" // the kubeconfig the controllers use
	EnvFluxLogs   = "RENDER_TEST_FLUX_LOGS"  // folder holding the stack's logs
)

var kubeVars = []string{EnvKubeURL, EnvKubeToken, EnvKubeCA}

// KubeServer is the test API server, read and written with plain REST calls
// (no client-go): JSON in and out, server-side apply for writes, and the
// API's discovery documents to map a kind to its resource.
type KubeServer struct {
	url    string
	token  string
	client *http.Client

	mu        sync.Mutex
	resources map[string]apiResource // "apiVersion/Kind" -> resource
}

type apiResource struct {
	Name       string `json:"name"`
	Kind       string `json:"kind"`
	Namespaced bool   `json:"namespaced"`
}

// Kube returns the shared API server of the Flux stack; it skips the test
// (fails it when CI=true) when the stack is not running.
func Kube(t testing.TB) *KubeServer {
	t.Helper()
	vals := requireEnv(t, "Flux (kube-apiserver)", kubeVars...)
	ca, err := os.ReadFile(vals[2])
	if err != nil {
		t.Fatalf("testenv: reading %s: %v", EnvKubeCA, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("testenv: %s holds no PEM certificate", vals[2])
	}
	return &KubeServer{
		url:   strings.TrimRight(vals[0], "/"),
		token: vals[1],
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		}},
		resources: map[string]apiResource{},
	}
}

// FluxLogs is the folder holding the Flux stack's logs ("" if unknown), for
// failure messages.
func FluxLogs() string { return os.Getenv(EnvFluxLogs) }

// ErrNotFound is returned by Get for an object the server does not have.
var ErrNotFound = errors.New("not found")

// Do sends a request to the API server. body is sent as is with the content
// type given; it returns the status code and the response body.
func (k *KubeServer) Do(method, path, contentType string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, k.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+k.token)
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// resource finds the REST resource of apiVersion and kind in the server's
// discovery document (fetched again on a miss: a CRD may have just been
// established).
func (k *KubeServer) resource(apiVersion, kind string) (apiResource, error) {
	key := apiVersion + "/" + kind
	k.mu.Lock()
	r, ok := k.resources[key]
	k.mu.Unlock()
	if ok {
		return r, nil
	}
	path := "/apis/" + apiVersion
	if apiVersion == "v1" {
		path = "/api/v1"
	}
	code, data, err := k.Do(http.MethodGet, path, "", nil)
	if err != nil {
		return r, err
	}
	if code == http.StatusNotFound {
		return r, fmt.Errorf("%s %s: the server has no API %s: %w", apiVersion, kind, apiVersion, ErrNotFound)
	}
	if code != http.StatusOK {
		return r, fmt.Errorf("discovery of %s: HTTP %d: %s", apiVersion, code, bytes.TrimSpace(data))
	}
	var list struct {
		Resources []apiResource `json:"resources"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return r, fmt.Errorf("discovery of %s: %w", apiVersion, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, res := range list.Resources {
		if !strings.Contains(res.Name, "/") {
			k.resources[apiVersion+"/"+res.Kind] = res
		}
	}
	r, ok = k.resources[key]
	if !ok {
		return r, fmt.Errorf("%s %s: the server has no such kind: %w", apiVersion, kind, ErrNotFound)
	}
	return r, nil
}

// objectPath is the REST path of one object (name "" for the collection).
func (k *KubeServer) objectPath(apiVersion, kind, namespace, name string) (string, error) {
	r, err := k.resource(apiVersion, kind)
	if err != nil {
		return "", err
	}
	p := "/apis/" + apiVersion
	if apiVersion == "v1" {
		p = "/api/v1"
	}
	if r.Namespaced {
		if namespace == "" {
			return "", fmt.Errorf("%s %s is namespaced: give a namespace", kind, name)
		}
		p += "/namespaces/" + url.PathEscape(namespace)
	}
	p += "/" + r.Name
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p, nil
}

// Get reads one object; ErrNotFound (wrapped) when it does not exist.
func (k *KubeServer) Get(apiVersion, kind, namespace, name string) (map[string]any, error) {
	p, err := k.objectPath(apiVersion, kind, namespace, name)
	if err != nil {
		return nil, err
	}
	code, data, err := k.Do(http.MethodGet, p, "", nil)
	if err != nil {
		return nil, err
	}
	if code == http.StatusNotFound {
		return nil, fmt.Errorf("%s %s/%s: %w", kind, namespace, name, ErrNotFound)
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", p, code, bytes.TrimSpace(data))
	}
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("GET %s: %w", p, err)
	}
	return obj, nil
}

// Apply server-side applies every document of a YAML stream (as
// `kubectl apply --server-side --force-conflicts` does), in order.
func (k *KubeServer) Apply(t testing.TB, manifests []byte) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(manifests))
	for i := 1; ; i++ {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("testenv: apply: document %d: %v", i, err)
		}
		if doc == nil {
			continue
		}
		if err := k.applyObject(doc); err != nil {
			t.Fatalf("testenv: apply: document %d: %v", i, err)
		}
	}
}

func (k *KubeServer) applyObject(doc map[string]any) error {
	apiVersion, _ := doc["apiVersion"].(string)
	kind, _ := doc["kind"].(string)
	meta, _ := doc["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	namespace, _ := meta["namespace"].(string)
	p, err := k.objectPath(apiVersion, kind, namespace, name)
	if err != nil {
		return err
	}
	body, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	code, data, err := k.Do(http.MethodPatch, p+"?fieldManager=render-e2e&force=true", "application/apply-patch+yaml", body)
	if err != nil {
		return err
	}
	if code/100 != 2 {
		return fmt.Errorf("apply %s %s/%s: HTTP %d: %s", kind, namespace, name, code, bytes.TrimSpace(data))
	}
	return nil
}

// MergePatch applies a JSON merge patch to one object.
func (k *KubeServer) MergePatch(apiVersion, kind, namespace, name string, patch any) error {
	p, err := k.objectPath(apiVersion, kind, namespace, name)
	if err != nil {
		return err
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	code, data, err := k.Do(http.MethodPatch, p, "application/merge-patch+json", body)
	if err != nil {
		return err
	}
	if code/100 != 2 {
		return fmt.Errorf("patch %s %s/%s: HTTP %d: %s", kind, namespace, name, code, bytes.TrimSpace(data))
	}
	return nil
}

// Field returns the value at a dotted path of an object ("status.conditions"),
// or nil.
func Field(obj map[string]any, path string) any {
	var cur any = obj
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

// Condition returns the status and message of condition typ of an object
// ("" when it has none).
func Condition(obj map[string]any, typ string) (status, message string) {
	conds, _ := Field(obj, "status.conditions").([]any)
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			s, _ := m["status"].(string)
			msg, _ := m["message"].(string)
			return s, msg
		}
	}
	return "", ""
}
