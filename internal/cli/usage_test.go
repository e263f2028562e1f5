package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The command line's own mistakes are exit code 2, decided by the error's
// type, and the mistyped ones point at the command's help.
func TestUsageErrorsExitTwo(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("a", nil)))
	plat := w.platform
	cases := []struct {
		name string
		args []string
		want []string // in stderr
	}{
		{"unknown command", []string{"frobnicate"}, []string{`unknown command "frobnicate"`, "Run 'render --help' for usage."}},
		{"mistyped flag", []string{"--outptu", "x"}, []string{"unknown flag: --outptu", "Run 'render --help' for usage."}},
		{"mistyped drain flag", []string{"drain", "a", "--platfrom", plat}, []string{"unknown flag: --platfrom", "Run 'render drain --help' for usage."}},
		{"flag without its value", []string{"drain", "a", "--platform"}, []string{"flag needs an argument", "Run 'render drain --help' for usage."}},
		{"drain without a destination", []string{"drain", "--platform", plat}, []string{"one argument", "Run 'render drain --help' for usage."}},
		{"bootstrap without a target", []string{"bootstrap"}, []string{"flux or argocd", "Run 'render bootstrap --help' for usage."}},
		{"bootstrap with an unknown target", []string{"bootstrap", "helm"}, []string{`unknown consumer "helm" for render bootstrap: use flux or argocd`}},
		// The sub-command's flags after a mistyped consumer are not the
		// mistake: the consumer is.
		{"bootstrap with a mistyped consumer", []string{"bootstrap", "fluxx", "dev", "--platform", plat}, []string{`unknown consumer "fluxx" for render bootstrap: use flux or argocd (did you mean flux?)`, "Run 'render bootstrap --help' for usage."}},
		{"bootstrap with a mistyped consumer and flags", []string{"bootstrap", "argo-cd", "dev", "--platform", plat, "--namespace", "argocd"}, []string{`unknown consumer "argo-cd"`}},
		{"bootstrap without a destination", []string{"bootstrap", "flux", "--platform", plat}, []string{"one argument"}},
		// Flag values are checked the same way for render and drain: the
		// flags are one set.
		{"drain with a bogus strategy", []string{"drain", "a", "--platform", plat, "--strategy", "bogus"}, []string{`--strategy "bogus": use spread or random`}},
		{"drain with a bogus format", []string{"drain", "a", "--platform", plat, "-o", "yaml"}, []string{`--format "yaml"`}},
		{"drain with a bogus log level", []string{"drain", "a", "--platform", plat, "--log-level", "loud"}, []string{`--log-level "loud": use debug, info, warn or error`}},
		{"render with a bogus log level", []string{"--platform", plat, "--log-level", "loud"}, []string{`--log-level "loud"`}},
		{"render with a bogus retry deadline", []string{"--platform", plat, "--retry-deadline", "0s"}, []string{"--retry-deadline must be positive"}},
		{"drain with a bogus retry deadline", []string{"drain", "a", "--platform", plat, "--retry-deadline", "-1s"}, []string{"--retry-deadline must be positive"}},
		// Every way cobra itself refuses a command line is exit 2 too.
		{"an argument render does not take", []string{"extra", "--platform", plat}, []string{`unknown command "extra"`, "Run 'render --help' for usage."}},
		{"a duration that does not parse", []string{"--platform", plat, "--retry-deadline", "soon"}, []string{`invalid argument "soon" for "--retry-deadline"`, "Run 'render --help' for usage."}},
		{"a boolean that does not parse", []string{"--platform", plat, "--allow-mass-deletion=maybe"}, []string{`invalid argument "maybe"`, "Run 'render --help' for usage."}},
		{"a mistyped shorthand", []string{"--platform", plat, "-x"}, []string{"unknown shorthand flag: 'x'", "Run 'render --help' for usage."}},
		{"drain with two destinations", []string{"drain", "a", "b", "--platform", plat}, []string{"one argument", "Run 'render drain --help' for usage."}},
		{"bootstrap with two destinations", []string{"bootstrap", "flux", "a", "b", "--platform", plat}, []string{"one argument", "Run 'render bootstrap flux --help' for usage."}},
		{"a mistyped bootstrap flag", []string{"bootstrap", "argocd", "a", "--platfrom", plat}, []string{"unknown flag: --platfrom", "Run 'render bootstrap argocd --help' for usage."}},
		{"a bootstrap interval that does not parse", []string{"bootstrap", "flux", "a", "--platform", plat, "--interval", "often"}, []string{`invalid argument "often" for "--interval"`}},
		{"a bootstrap interval that is not positive", []string{"bootstrap", "flux", "a", "--platform", plat, "--interval", "0s"}, []string{"--interval must be positive"}},
		// An unset variable must not widen a command: omitting the flag
		// is how every destination is asked for.
		{"prune-misscheduled with an empty destination", []string{"prune-misscheduled", "--platform", plat, "--destination", ""}, []string{"--destination is empty", "Run 'render prune-misscheduled --help' for usage."}},
		{"prune-misscheduled with a blank destination", []string{"prune-misscheduled", "--platform", plat, "--destination=  "}, []string{"--destination is empty"}},
		{"drain with an empty destination", []string{"drain", "", "--platform", plat}, []string{`destination ""`}},
		{"a mistyped completion flag", []string{"completion", "bash", "--bogus"}, []string{"unknown flag: --bogus"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := run(t, nil, c.args...)
			if r.code != 2 {
				t.Fatalf("want exit 2, got %s", r)
			}
			if !strings.HasPrefix(r.errout, "render: ") || strings.Contains(r.errout, "render: render") {
				t.Errorf("stderr does not start with one \"render: \":\n%s", r.errout)
			}
			for _, s := range c.want {
				if !strings.Contains(r.errout, s) {
					t.Errorf("stderr lacks %q:\n%s", s, r.errout)
				}
			}
			if r.out != "" {
				t.Errorf("stdout should be empty, got:\n%s", r.out)
			}
		})
	}
	if _, err := os.Stat(w.repo); !os.IsNotExist(err) {
		t.Error("a usage error created the repository")
	}
}

// An unknown destination given to drain is one line with one "render: ".
func TestDrainUnknownDestinationOnePrefix(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("a", nil), dest("b", nil)))
	r := run(t, nil, "drain", "nowhere", "--platform", w.platform)
	if r.code != 2 {
		t.Fatalf("want exit 2, got %s", r)
	}
	want := "render: destination \"nowhere\" is not defined in the platform configuration; known destinations: a, b (nothing was written)\n"
	if r.errout != want {
		t.Errorf("stderr = %q, want %q", r.errout, want)
	}
}

// Every command shows examples in its help.
func TestCommandsHaveExamples(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"drain", "--help"}, {"bootstrap", "--help"}, {"bootstrap", "flux", "--help"}, {"bootstrap", "argocd", "--help"}} {
		r := run(t, nil, args...)
		if r.code != 0 || !strings.Contains(r.out, "Examples:\n  ") {
			t.Errorf("render %s: no Examples section (exit %d):\n%s", strings.Join(args, " "), r.code, r.out)
		}
	}
}

// A local repository whose parent folder is missing is a mistyped URL: bad
// input (exit 2) naming the platform file, for a dry run and a render
// alike, and nothing is created.
func TestLocalStoreWithoutParentFolderIsBadInput(t *testing.T) {
	w := newWorld(t)
	missing := filepath.Join(w.root, "no-such-folder")
	store := w.file("platform/store.yaml", gitStore("default", "file://"+filepath.Join(missing, "state.git")))
	w.file("platform/destinations.yaml", docs(dest("a", nil)))
	wf := w.workflow("wf").setOutput(map[string]string{"cm.yaml": obj("ConfigMap")})
	for _, extra := range [][]string{{"--dry-run"}, nil} {
		r := wf.run(promiseEnv("p", "install"), extra...)
		if r.code != 2 {
			t.Fatalf("%v: want exit 2, got %s", extra, r)
		}
		want := store + ": GitStateStore default: spec.url file://" + filepath.Join(missing, "state.git") + ": folder " + missing + " does not exist"
		if !strings.HasPrefix(r.errout, "render: "+want) || strings.Count(r.errout, "\n") != 1 {
			t.Errorf("%v: stderr is not the one line %q:\n%s", extra, want, r.errout)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Error("the missing folder was created")
	}
}

// --explain lists every reason a destination was filtered out, and says
// when the stable hash broke a tie; -o json carries both.
func TestExplainEveryReasonAndTheTie(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(
		dest("cordoned", map[string]string{"env": "prod"}, "unschedulable: true"),
		dest("east", map[string]string{"env": "dev"}),
		dest("west", map[string]string{"env": "dev"}),
	))
	wf := w.workflow("wf").setOutput(map[string]string{"db.yaml": obj("ConfigMap")})
	wf.setSelectors("- matchLabels: {env: dev}\n")
	r := wf.mustRun(0, resourceEnv("p", "ns", "r", "pipe"), "--dry-run", "--explain")
	if want := "cordoned             filtered out: label env=dev: the destination has env=prod; cordoned (spec.unschedulable): takes no new placements"; !strings.Contains(r.out, want) {
		t.Errorf("explanation lacks %q:\n%s", want, r.out)
	}
	if !strings.Contains(r.out, "chosen (score 0, tied with ") || !strings.Contains(r.out, "broken by the stable hash") {
		t.Errorf("explanation does not say the hash broke the tie:\n%s", r.out)
	}

	r = wf.mustRun(0, resourceEnv("p", "ns", "r", "pipe"), "--dry-run", "-o", "json")
	var rep report
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Groups[0].Verdicts {
		switch {
		case v.Destination == "cordoned" && len(v.Reasons) != 2:
			t.Errorf("cordoned: reasons %q, want the label and the cordon", v.Reasons)
		case v.Chosen && len(v.TiedWith) != 1:
			t.Errorf("%s chosen: tiedWith %q, want the other dev destination", v.Destination, v.TiedWith)
		}
	}
}

// kustomize's own warnings (a deprecated field) go through the log, so a
// JSON log stays JSON.
func TestKustomizeWarningsAreLogged(t *testing.T) {
	w := newWorld(t)
	w.file("platform/destinations.yaml", docs(dest("a", nil)))
	wf := w.workflow("wf").setOutput(map[string]string{
		"app/kustomization.yaml": "resources: [cm.yaml]\ncommonLabels: {team: a}\n",
		"app/cm.yaml":            obj("ConfigMap"),
	})
	for _, extra := range [][]string{nil, {"--hydrate"}} {
		r := wf.mustRun(0, promiseEnv("p", "install"), append(extra, "--log-format", "json")...)
		found := false
		for _, line := range strings.Split(strings.TrimSpace(r.errout), "\n") {
			if line == "" {
				continue
			}
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("%v: stderr line is not JSON: %q", extra, line)
			}
			if rec["msg"] == "kustomize warning" && strings.Contains(rec["warning"].(string), "commonLabels") {
				found = true
			}
		}
		if !found {
			t.Errorf("%v: no kustomize warning about commonLabels in the log:\n%s", extra, r.errout)
		}
	}
}
