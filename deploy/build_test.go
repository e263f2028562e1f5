// Package deploy_test checks what ships render without a Docker engine: the
// binary the Dockerfile builds is static, the Dockerfile has the expected
// stages, and the example sidecar pod is wired as deploy/README.md says.
package deploy_test

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const repoRoot = ".."

// TestStaticBinary builds render as the Dockerfile does and checks that it
// needs no dynamic loader and no shared library, so it runs on an empty (scratch) image
// static.
func TestStaticBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "render")
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", bin, "./cmd/render")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a PT_INTERP program header: it is dynamically linked")
		}
		if p.Type == elf.PT_DYNAMIC {
			t.Error("the binary has a PT_DYNAMIC program header")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v (err %v)", libs, err)
	}
	// -trimpath: no path of this machine's checkout inside.
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(root+"/")) {
		t.Errorf("the binary contains the build folder %s: -trimpath missing?", root)
	}
}

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd, args string
}

type stage struct {
	from, name string
	ins        []instruction
}

func parseDockerfile(t *testing.T, text string) []stage {
	t.Helper()
	var stages []stage
	var cur strings.Builder
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		if s := strings.TrimSpace(cur.String()); s != "" {
			lines = append(lines, s)
		}
		cur.Reset()
	}
	for _, l := range lines {
		cmd, args, _ := strings.Cut(l, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			st := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("Dockerfile: %s before the first FROM", in.cmd)
			}
			continue
		}
		stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
	}
	return stages
}

func (s stage) find(cmd string) []string {
	var out []string
	for _, in := range s.ins {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages := parseDockerfile(t, string(data))
	if len(stages) != 2 {
		t.Fatalf("%d stages, want 2 (build, runtime)", len(stages))
	}
	build, run := stages[0], stages[1]

	// The builder is golang pinned to the go.mod's Go version.
	mod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)(\.\d+)?$`).FindSubmatch(mod)
	if goVersion == nil {
		t.Fatal("no go directive in go.mod")
	}
	tag := regexp.MustCompile(`^golang:(\d+\.\d+)(\.\d+)?(-[a-z0-9]+)?(@sha256:[0-9a-f]{64})?$`).FindStringSubmatch(build.from)
	switch {
	case tag == nil:
		t.Errorf("builder %q: want golang:<version> pinned", build.from)
	case tag[1] != string(goVersion[1]):
		t.Errorf("builder %q is Go %s, go.mod says %s", build.from, tag[1], goVersion[1])
	case tag[2] == "":
		t.Errorf("builder %q: pin the patch version too", build.from)
	}
	if build.name == "" {
		t.Error("the build stage has no name")
	}
	var buildText strings.Builder
	for _, in := range build.ins {
		buildText.WriteString(in.cmd + " " + in.args + "\n")
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/render"} {
		if !strings.Contains(buildText.String(), want) {
			t.Errorf("the build stage lacks %s", want)
		}
	}

	// The runtime is scratch (nothing to pin), or distroless pinned by digest.
	if !regexp.MustCompile(`^scratch$|^gcr\.io/distroless/static-debian\d+(:nonroot)?@sha256:[0-9a-f]{64}$`).MatchString(run.from) {
		t.Errorf("runtime %q: want scratch, or distroless pinned by digest", run.from)
	}
	if u := run.find("USER"); len(u) != 1 || !slices.Contains([]string{"nonroot", "nonroot:nonroot", "65532", "65532:65532"}, u[0]) {
		t.Errorf("USER %v: want nonroot", u)
	}
	// Everything the runtime holds comes from the build stage; the binary
	// lands at /render.
	copies := run.find("COPY")
	binary := false
	for _, c := range copies {
		if !strings.HasPrefix(c, "--from="+build.name+" ") {
			t.Errorf("COPY %q: the runtime takes files only from the build stage", c)
		}
		binary = binary || strings.HasSuffix(c, " /render")
	}
	if !binary {
		t.Errorf("COPY %v: want the binary from the build stage to /render", copies)
	}
	ep := run.find("ENTRYPOINT")
	var argv []string
	if len(ep) != 1 || json.Unmarshal([]byte(ep[0]), &argv) != nil || !slices.Equal(argv, []string{"/render"}) {
		t.Errorf("ENTRYPOINT %v: want [\"/render\"] (exec form)", ep)
	}
	if run.find("RUN") != nil {
		t.Error("the runtime stage has RUN: the runtime image has no shell")
	}
}

// TestSidecarPod checks the example pod: a native sidecar running
// render --watch, sharing the /kratix volumes, with the platform from a
// ConfigMap (read-only) and the credentials from a Secret.
func TestSidecarPod(t *testing.T) {
	data, err := os.ReadFile("sidecar-pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type mount struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	}
	type container struct {
		Name          string   `yaml:"name"`
		Image         string   `yaml:"image"`
		RestartPolicy string   `yaml:"restartPolicy"`
		Args          []string `yaml:"args"`
		VolumeMounts  []mount  `yaml:"volumeMounts"`
	}
	var pod struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Spec       struct {
			InitContainers []container `yaml:"initContainers"`
			Containers     []container `yaml:"containers"`
			Volumes        []struct {
				Name      string         `yaml:"name"`
				ConfigMap map[string]any `yaml:"configMap"`
				Secret    map[string]any `yaml:"secret"`
				EmptyDir  map[string]any `yaml:"emptyDir"`
			} `yaml:"volumes"`
		} `yaml:"spec"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(false)
	if err := dec.Decode(&pod); err != nil {
		t.Fatal(err)
	}
	if pod.APIVersion != "v1" || pod.Kind != "Pod" {
		t.Fatalf("%s %s, want a v1 Pod", pod.APIVersion, pod.Kind)
	}
	var sidecar *container
	for i, c := range pod.Spec.InitContainers {
		if c.RestartPolicy == "Always" {
			sidecar = &pod.Spec.InitContainers[i]
			break
		}
	}
	if sidecar == nil {
		t.Fatal("no init container with restartPolicy: Always (native sidecar)")
	}
	if !slices.Contains(sidecar.Args, "--watch") {
		t.Errorf("the sidecar's args %v lack --watch", sidecar.Args)
	}
	arg := func(flag string) string {
		for _, a := range sidecar.Args {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				return v
			}
		}
		return ""
	}
	volumes := map[string]int{}
	for i, v := range pod.Spec.Volumes {
		volumes[v.Name] = i
	}
	mountAt := func(c container, path string) (mount, bool) {
		for _, m := range c.VolumeMounts {
			if m.MountPath == path {
				return m, true
			}
		}
		return mount{}, false
	}
	// The /kratix volumes are shared with a workflow container.
	for _, dir := range []string{"/kratix/output", "/kratix/metadata", "/kratix/input"} {
		m, ok := mountAt(*sidecar, dir)
		if !ok {
			t.Errorf("the sidecar does not mount %s", dir)
			continue
		}
		shared := false
		for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
			if c.Name == sidecar.Name {
				continue
			}
			if o, ok := mountAt(c, dir); ok && o.Name == m.Name {
				shared = true
			}
		}
		if !shared {
			t.Errorf("%s (volume %s) is not shared with a workflow container", dir, m.Name)
		}
	}
	// The platform, read-only from a ConfigMap.
	if p := arg("--platform"); p == "" {
		t.Error("the sidecar has no --platform")
	} else if m, ok := mountAt(*sidecar, p); !ok || !m.ReadOnly || pod.Spec.Volumes[volumes[m.Name]].ConfigMap == nil {
		t.Errorf("--platform=%s is not a read-only ConfigMap mount", p)
	}
	// The secrets from a Secret, below --secrets-dir as <dir>/<secret name>.
	dir := arg("--secrets-dir")
	found := false
	for _, m := range sidecar.VolumeMounts {
		if dir != "" && filepath.Dir(m.MountPath) == dir && m.ReadOnly && pod.Spec.Volumes[volumes[m.Name]].Secret != nil {
			found = true
		}
	}
	if !found {
		t.Errorf("no Secret mounted read-only as %s/<secret name>", dir)
	}
	if arg("--metrics-addr") == "" {
		t.Error("the sidecar serves no metrics (--metrics-addr)")
	}
}
