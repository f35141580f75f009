package main

import (
	"encoding/json"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kolla-agent/kolla-agent/internal/image"
)

// dockerStage is one FROM ... AS name stage of a Dockerfile: what it is
// built from (ARGs expanded), where it works, what it runs and what it copies.
type dockerStage struct {
	from, name, workdir, user string
	runs                      []string
	copies                    []dockerCopy
	entrypoint                string
	labels                    string
}

type dockerCopy struct {
	from       string // "" = the build context
	srcs       []string
	dest       string
	line       int
	dockerfile string
}

// parseDockerfile reads a Dockerfile with internal/image's parser, the one
// `make images` builds from, into the fields these tests look at.
func parseDockerfile(t *testing.T, p string) []*dockerStage {
	t.Helper()
	stages, err := image.ParseDockerfile(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []*dockerStage
	for _, st := range stages {
		ds := &dockerStage{from: st.From, name: st.Name, workdir: st.Workdir, user: st.User, runs: st.Runs}
		if st.Entrypoint != nil {
			b, _ := json.Marshal(st.Entrypoint)
			ds.entrypoint = string(b)
		}
		for k, v := range st.Labels {
			ds.labels += " " + k + "=" + v
		}
		for _, c := range st.Copies {
			ds.copies = append(ds.copies, dockerCopy{from: c.From, srcs: c.Srcs, dest: c.Dest, line: c.Line, dockerfile: p})
		}
		out = append(out, ds)
	}
	return out
}

// placed is every path the stage's COPY instructions put into the image.
func (s *dockerStage) placed() []string {
	var out []string
	for _, c := range s.copies {
		for _, src := range c.srcs {
			if strings.HasSuffix(c.dest, "/") || len(c.srcs) > 1 {
				out = append(out, path.Join(c.dest, path.Base(src)))
			} else {
				out = append(out, c.dest)
			}
		}
	}
	return out
}

// makeBuildOutputs is what `make build` writes, from the Makefile itself
// (make -n prints the commands without running them).
func makeBuildOutputs(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("make", "-n", "build", "VERSION=test")
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, out)
	}
	var outputs []string
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.Contains(l, " build ") {
			continue
		}
		if !strings.HasPrefix(l, "CGO_ENABLED=0 ") {
			t.Errorf("make build does not build statically: %s", l)
		}
		if m := regexp.MustCompile(`-o (\S+)`).FindStringSubmatch(l); m != nil {
			outputs = append(outputs, m[1])
		}
	}
	if len(outputs) == 0 {
		t.Fatalf("make -n build shows no go build -o:\n%s", out)
	}
	return outputs
}

// The Dockerfiles of images/ build from the paths that exist in the
// repository, copy the binaries `make build` produces (static, as
// TestStrippedBinarySize checks) and nothing else, and the images that bake
// the agent in take it from where the agent image puts it. No container is
// built: CI has no container runtime.
func TestDockerfiles(t *testing.T) {
	outputs := makeBuildOutputs(t)
	files, err := filepath.Glob("../../images/*/Dockerfile")
	if err != nil || len(files) < 3 {
		t.Fatalf("want images/agent, images/kolla and images/openstack-helm Dockerfiles, have %v (%v)", files, err)
	}
	stages := map[string][]*dockerStage{}
	for _, f := range files {
		stages[filepath.Base(filepath.Dir(f))] = parseDockerfile(t, f)
	}
	agent := stages["agent"]
	if agent == nil {
		t.Fatal("no images/agent/Dockerfile")
	}
	final := agent[len(agent)-1]
	agentPaths := final.placed()

	t.Run("agent", func(t *testing.T) {
		if final.from != "scratch" && !strings.Contains(final.from, "distroless/static") {
			t.Errorf("final stage FROM %s: want scratch or distroless static", final.from)
		}
		if final.user == "" || strings.HasPrefix(final.user, "0") || strings.HasPrefix(final.user, "root") {
			t.Errorf("final stage runs as %q: want a non-root USER", final.user)
		}
		for _, l := range []string{"org.opencontainers.image.title", "org.opencontainers.image.source", "org.opencontainers.image.version"} {
			if !strings.Contains(final.labels, l) {
				t.Errorf("no OCI label %s", l)
			}
		}
		var build *dockerStage
		for _, st := range agent[:len(agent)-1] {
			if slices.ContainsFunc(st.runs, func(r string) bool { return strings.HasPrefix(r, "make build") }) {
				build = st
			}
		}
		if build == nil {
			t.Fatal("no stage runs make build")
		}
		// Besides the binaries, empty directories the build stage makes
		// (`RUN mkdir -p`) for the agent's default paths.
		var made []string
		for _, r := range build.runs {
			if rest, ok := strings.CutPrefix(r, "mkdir -p "); ok {
				made = append(made, strings.Fields(rest)...)
			}
		}
		var copied []string
		for _, c := range final.copies {
			if c.from != build.name {
				t.Errorf("%s:%d: the final stage copies from %q, not from the make build stage %q", c.dockerfile, c.line, c.from, build.name)
			}
			for _, src := range c.srcs {
				if !slices.Contains(made, src) {
					copied = append(copied, src)
				}
			}
		}
		var want []string
		for _, o := range outputs {
			want = append(want, path.Join(build.workdir, o))
		}
		slices.Sort(copied)
		slices.Sort(want)
		if !slices.Equal(copied, want) {
			t.Errorf("the final stage copies %v; make build produces %v", copied, want)
		}
		checkEntrypoint(t, final, agentPaths)
	})

	for name, st := range stages {
		t.Run(name+"/context", func(t *testing.T) {
			names := map[string]bool{}
			for _, s := range st {
				if s.name != "" {
					names[s.name] = true
				}
			}
			for _, s := range st {
				for _, c := range s.copies {
					switch {
					case c.from == "":
						for _, src := range c.srcs {
							if m, _ := filepath.Glob(filepath.Join("../..", src)); len(m) == 0 {
								t.Errorf("%s:%d: COPY %s: no such path in the repository (the build context)", c.dockerfile, c.line, src)
							}
						}
					case !names[c.from]:
						t.Errorf("%s:%d: COPY --from=%s: no such stage", c.dockerfile, c.line, c.from)
					}
				}
			}
		})
	}

	for _, name := range []string{"kolla", "openstack-helm"} {
		t.Run(name, func(t *testing.T) {
			st := stages[name]
			if st == nil {
				t.Fatalf("no images/%s/Dockerfile", name)
			}
			// The stage that stands for the agent image, FROM ${AGENT}
			// (its default, kolla-agent, as the parser expands it).
			from := map[string]bool{}
			for _, s := range st {
				if s.from == "kolla-agent" {
					from[s.name] = true
				}
			}
			last := st[len(st)-1]
			if len(from) == 0 {
				t.Fatal("no stage FROM ${AGENT} (the agent image)")
			}
			for _, c := range last.copies {
				if !from[c.from] {
					continue
				}
				for _, src := range c.srcs {
					if !slices.Contains(agentPaths, src) {
						t.Errorf("%s:%d: COPY --from=%s %s: the agent image has %v", c.dockerfile, c.line, c.from, src, agentPaths)
					}
				}
			}
			checkEntrypoint(t, last, last.placed())
		})
	}
	if ep := stages["kolla"][len(stages["kolla"])-1].entrypoint; !strings.Contains(ep, `"run"`) {
		t.Errorf("images/kolla: ENTRYPOINT %s: want kolla-agent run (kolla's config.json contract)", ep)
	}
	if ep := stages["openstack-helm"][len(stages["openstack-helm"])-1].entrypoint; !strings.Contains(ep, "kubernetes-entrypoint") {
		t.Errorf("images/openstack-helm: ENTRYPOINT %s: want the binary under helm-toolkit's name kubernetes-entrypoint", ep)
	}
}

// checkEntrypoint: the ENTRYPOINT's program is a file the stage put there.
func checkEntrypoint(t *testing.T, s *dockerStage, placed []string) {
	t.Helper()
	m := regexp.MustCompile(`^\["([^"]+)"`).FindStringSubmatch(s.entrypoint)
	if m == nil {
		t.Errorf("ENTRYPOINT %q: want the JSON form (no shell in the image)", s.entrypoint)
		return
	}
	if !slices.Contains(placed, m[1]) {
		t.Errorf("ENTRYPOINT %s: not among the files the stage copies %v", m[1], placed)
	}
}
