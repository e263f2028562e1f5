// Package compose_test checks docker-compose.yaml at the repository's root
// without Docker: every image pinned, every volume declared, every port valid,
// and every host file it mounts or names present in the repository, and the
// platform its render services load valid.
package compose_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/render-dev/render/internal/inputs"
	"github.com/render-dev/render/internal/storekind"
)

const repoRoot = "../../.."

type composeFile struct {
	Name     string             `yaml:"name"`
	Services map[string]service `yaml:"services"`
	Volumes  map[string]any     `yaml:"volumes"`
}

type service struct {
	Image       string         `yaml:"image"`
	Build       any            `yaml:"build"`
	Command     any            `yaml:"command"`
	Entrypoint  any            `yaml:"entrypoint"`
	Ports       []any          `yaml:"ports"`
	Volumes     []any          `yaml:"volumes"`
	DependsOn   any            `yaml:"depends_on"`
	EnvFile     any            `yaml:"env_file"`
	Environment map[string]any `yaml:"environment"`
	WorkingDir  string         `yaml:"working_dir"`
	Restart     string         `yaml:"restart"`
}

// mount is a volume entry, short or long form.
type mount struct {
	source, target string
	bind           bool
}

func load(t *testing.T) *composeFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("docker-compose.yaml: %v", err)
	}
	if len(c.Services) == 0 {
		t.Fatal("docker-compose.yaml: no services")
	}
	return &c
}

func sortedServices(c *composeFile) []string {
	var names []string
	for n := range c.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func TestComposeServices(t *testing.T) {
	c := load(t)
	for _, want := range []string{"gitea", "minio", "init"} {
		if _, ok := c.Services[want]; !ok {
			t.Errorf("no %s service", want)
		}
	}
	watchers := 0
	for _, name := range sortedServices(c) {
		s := c.Services[name]
		args := strings.Join(stringList(s.Command), " ")
		if strings.Contains(args, "--watch") {
			watchers++
			if s.Build == nil {
				t.Errorf("%s: runs render, so it builds it from the repository", name)
			}
		}
		if s.Restart != "" && !map[string]bool{"no": true, "always": true, "unless-stopped": true, "on-failure": true}[s.Restart] {
			t.Errorf("%s: restart %q", name, s.Restart)
		}
	}
	if watchers == 0 {
		t.Error("no service runs render --watch")
	}
}

// pinned: a tag that names a version (not latest, not absent) or a digest.
var versionTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*[0-9][A-Za-z0-9_.-]*$`)

func imagePinned(ref string) error {
	if strings.Contains(ref, "@sha256:") || ref == "scratch" {
		return nil // scratch is the empty image: there is nothing to pin
	}
	name := ref
	if i := strings.LastIndex(ref, "/"); i >= 0 {
		name = ref[i+1:]
	}
	_, tag, ok := strings.Cut(name, ":")
	switch {
	case !ok || tag == "":
		return fmt.Errorf("image %s has no tag (that is latest)", ref)
	case tag == "latest" || strings.Contains(tag, "latest"):
		return fmt.Errorf("image %s uses latest", ref)
	case !versionTag.MatchString(tag):
		return fmt.Errorf("image %s: tag %q names no version", ref, tag)
	}
	return nil
}

func TestComposeImagesPinned(t *testing.T) {
	c := load(t)
	for _, name := range sortedServices(c) {
		s := c.Services[name]
		if s.Image == "" && s.Build == nil {
			t.Errorf("%s: neither image nor build", name)
		}
		if s.Image != "" && s.Build == nil {
			if err := imagePinned(s.Image); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		if b, ok := s.Build.(map[string]any); ok {
			inline, _ := b["dockerfile_inline"].(string)
			if df, ok := b["dockerfile"].(string); ok {
				ctxDir, _ := b["context"].(string)
				data, err := os.ReadFile(filepath.Join(repoRoot, ctxDir, df))
				if err != nil {
					t.Errorf("%s: build.dockerfile %s: %v", name, df, err)
				}
				inline = string(data)
			}
			for _, line := range strings.Split(inline, "\n") {
				f := strings.Fields(line)
				if len(f) >= 2 && strings.EqualFold(f[0], "FROM") {
					if err := imagePinned(f[1]); err != nil {
						t.Errorf("%s: dockerfile_inline: %v", name, err)
					}
				}
			}
		}
	}
	for _, bad := range []string{"alpine", "alpine:latest", "minio/minio:edge"} {
		if imagePinned(bad) == nil {
			t.Errorf("imagePinned(%q) accepted it", bad)
		}
	}
}

func TestComposeVolumesDeclared(t *testing.T) {
	c := load(t)
	used := map[string]bool{}
	for _, name := range sortedServices(c) {
		for _, m := range mounts(t, name, c.Services[name]) {
			if m.bind {
				continue
			}
			used[m.source] = true
			if _, ok := c.Volumes[m.source]; !ok {
				t.Errorf("%s: named volume %q is not declared under volumes", name, m.source)
			}
		}
	}
	for v := range c.Volumes {
		if !used[v] {
			t.Errorf("volume %q is declared but no service uses it", v)
		}
	}
}

func TestComposePorts(t *testing.T) {
	c := load(t)
	hostPorts := map[string]string{}
	for _, name := range sortedServices(c) {
		for _, p := range c.Services[name].Ports {
			var spec string
			switch p := p.(type) {
			case string:
				spec = p
			case int:
				spec = strconv.Itoa(p)
			case map[string]any:
				spec = fmt.Sprintf("%v:%v", p["published"], p["target"])
			default:
				t.Errorf("%s: port %v: unknown form", name, p)
				continue
			}
			spec, proto, _ := strings.Cut(spec, "/")
			if proto != "" && proto != "tcp" && proto != "udp" {
				t.Errorf("%s: port %q: protocol %q", name, spec, proto)
			}
			parts := strings.Split(spec, ":")
			if len(parts) > 3 {
				t.Errorf("%s: port %q: too many colons", name, spec)
				continue
			}
			if len(parts) == 3 {
				parts = parts[1:] // host IP
			}
			for _, n := range parts {
				v, err := strconv.Atoi(n)
				if err != nil || v < 1 || v > 65535 {
					t.Errorf("%s: port %q: %q is not a port number", name, spec, n)
				}
			}
			if len(parts) == 2 {
				key := parts[0] + "/" + proto
				if other, dup := hostPorts[key]; dup {
					t.Errorf("%s: host port %s is also published by %s", name, parts[0], other)
				}
				hostPorts[key] = name
			}
		}
	}
}

func TestComposeDependsOn(t *testing.T) {
	c := load(t)
	for _, name := range sortedServices(c) {
		var deps []string
		switch d := c.Services[name].DependsOn.(type) {
		case []any:
			deps = stringList(d)
		case map[string]any:
			for k, v := range d {
				deps = append(deps, k)
				cond, _ := v.(map[string]any)["condition"].(string)
				switch cond {
				case "", "service_started", "service_healthy", "service_completed_successfully":
				default:
					t.Errorf("%s: depends_on %s: condition %q", name, k, cond)
				}
				if cond == "service_healthy" && !hasHealthcheck(t, k) {
					t.Errorf("%s: waits for %s to be healthy, which has no healthcheck", name, k)
				}
			}
		}
		for _, d := range deps {
			if _, ok := c.Services[d]; !ok {
				t.Errorf("%s: depends on unknown service %s", name, d)
			}
		}
	}
}

func hasHealthcheck(t *testing.T, svc string) bool {
	data, _ := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yaml"))
	var raw struct {
		Services map[string]map[string]any `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	_, ok := raw.Services[svc]["healthcheck"]
	return ok
}

// TestComposeHostPaths: every file or folder of the host that the compose file
// mounts, builds from, or names in a command (through a bind mount) exists.
func TestComposeHostPaths(t *testing.T) {
	c := load(t)
	exists := func(name, what, p string) {
		t.Helper()
		if _, err := os.Stat(filepath.Join(repoRoot, p)); err != nil {
			t.Errorf("%s: %s %s does not exist in the repository", name, what, p)
		}
	}
	for _, name := range sortedServices(c) {
		s := c.Services[name]
		switch b := s.Build.(type) {
		case string:
			exists(name, "build context", b)
		case map[string]any:
			ctx, _ := b["context"].(string)
			if ctx == "" {
				ctx = "."
			}
			exists(name, "build context", ctx)
			if df, ok := b["dockerfile"].(string); ok {
				exists(name, "dockerfile", filepath.Join(ctx, df))
			}
			if inline, ok := b["dockerfile_inline"].(string); ok {
				for _, line := range strings.Split(inline, "\n") {
					f := strings.Fields(line)
					if len(f) >= 3 && strings.EqualFold(f[0], "COPY") && !strings.HasPrefix(f[1], "--from") {
						for _, src := range f[1 : len(f)-1] {
							exists(name, "COPY source", filepath.Join(ctx, src))
						}
					}
				}
				// It builds ./cmd/render.
				if strings.Contains(inline, "./cmd/render") {
					exists(name, "package", "cmd/render")
				}
			}
		}
		for _, f := range stringList(s.EnvFile) {
			exists(name, "env_file", f)
		}
		ms := mounts(t, name, s)
		for _, m := range ms {
			if m.bind {
				exists(name, "bind mount source", m.source)
			}
		}
		// Container paths in command and entrypoint that lie under a bind
		// mount name host files.
		args := append(stringList(s.Entrypoint), stringList(s.Command)...)
		for _, a := range args {
			if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "--") {
				a = v
			}
			if host, ok := hostPath(ms, a, s.WorkingDir); ok {
				exists(name, "path "+a+" (through a bind mount)", host)
			}
		}
	}
}

// TestComposePlatform loads the platform the render services are given, the
// way render will, from the host files behind their bind mounts.
func TestComposePlatform(t *testing.T) {
	c := load(t)
	checked := 0
	for _, name := range sortedServices(c) {
		s := c.Services[name]
		var platform []string
		ms := mounts(t, name, s)
		for _, a := range stringList(s.Command) {
			v, ok := strings.CutPrefix(a, "--platform=")
			if !ok {
				continue
			}
			host, ok := hostPath(ms, v, s.WorkingDir)
			if !ok {
				t.Fatalf("%s: --platform %s is not under a bind mount", name, v)
			}
			platform = append(platform, filepath.Join(repoRoot, host))
		}
		if len(platform) == 0 {
			continue
		}
		checked++
		p, err := inputs.LoadPlatform(storekind.Default, platform, "")
		if err != nil {
			t.Fatalf("%s: the platform does not load: %v", name, err)
		}
		gits, buckets := inputs.StoresOf[*storekind.GitStateStore](p), inputs.StoresOf[*storekind.BucketStateStore](p)
		if len(gits) == 0 || len(buckets) == 0 {
			t.Errorf("%s: want a git and a bucket store, got %d and %d", name, len(gits), len(buckets))
		}
		for _, g := range gits {
			if !strings.HasPrefix(g.URL, "http://gitea:") {
				t.Errorf("%s: GitStateStore %s: url %s is not the gitea service", name, g.Name, g.URL)
			}
			if _, ok := p.Secret(g.SecretRef); !ok {
				t.Errorf("%s: GitStateStore %s: its secret is not defined", name, g.Name)
			}
		}
		for _, b := range buckets {
			if !strings.HasPrefix(b.Endpoint, "minio:") {
				t.Errorf("%s: BucketStateStore %s: endpoint %s is not the minio service", name, b.Name, b.Endpoint)
			}
			if _, ok := p.Secret(b.SecretRef); !ok {
				t.Errorf("%s: BucketStateStore %s: its secret is not defined", name, b.Name)
			}
		}
	}
	if checked == 0 {
		t.Error("no service passes --platform")
	}
}

// mounts reads a service's volumes in both forms.
func mounts(t *testing.T, svc string, s service) []mount {
	var out []mount
	for _, v := range s.Volumes {
		switch v := v.(type) {
		case string:
			parts := strings.Split(v, ":")
			if len(parts) < 2 {
				continue // an anonymous volume
			}
			src := parts[0]
			out = append(out, mount{source: src, target: parts[1], bind: isHostPath(src)})
		case map[string]any:
			src, _ := v["source"].(string)
			dst, _ := v["target"].(string)
			typ, _ := v["type"].(string)
			out = append(out, mount{source: src, target: dst, bind: typ == "bind" || (typ == "" && isHostPath(src))})
		default:
			t.Errorf("%s: volume %v: unknown form", svc, v)
		}
	}
	return out
}

func isHostPath(s string) bool {
	return strings.HasPrefix(s, ".") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~")
}

// hostPath maps a container path under a bind mount to the host path.
func hostPath(ms []mount, p, workdir string) (string, bool) {
	if p == "" || strings.HasPrefix(p, "-") || strings.Contains(p, "://") {
		return "", false
	}
	if !strings.HasPrefix(p, "/") {
		if workdir == "" || !strings.Contains(p, "/") {
			return "", false
		}
		p = filepath.Join(workdir, p)
	}
	for _, m := range ms {
		if !m.bind || !strings.HasPrefix(m.source, ".") {
			continue
		}
		if p == m.target || strings.HasPrefix(p, strings.TrimSuffix(m.target, "/")+"/") {
			return filepath.Join(m.source, strings.TrimPrefix(p, m.target)), true
		}
	}
	return "", false
}

func stringList(v any) []string {
	switch v := v.(type) {
	case string:
		return strings.Fields(v)
	case []any:
		var out []string
		for _, x := range v {
			out = append(out, fmt.Sprint(x))
		}
		return out
	}
	return nil
}
