package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// `make demo`, the README's first command, runs the agent's whole job and
// exits 0 on its own: each step's outcome shows in what it prints.
func TestMakeDemo(t *testing.T) {
	cmd := exec.Command("bash", "examples/local/demo.sh", s.bin)
	cmd.Dir = "../.."
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("make demo took %v", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{
		"config: (embedded default",                             // 1. the embedded default
		"config: examples/local/agent.yaml: valid",              // 2. config check
		`msg="dependency ready" dependency=tcp:127.0.0.1:18306`, // 4. the wait
		"greeting = hello from demo-0",                          // 5. rendered
		"[+]api pass",                                           // 5. probes
		`demoservice [-] serving http://127.0.0.1:18080/`,       // 5. its log, shipped to stdout
		"good day from demo-0",                                  // 6. reloaded
		`outcome=rejected`,                                      // 7. refused
		"stopping on terminated",                                // 8. drained at the stop
		"agent exit code (the service's): 0",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
	}
	// After the rejected change the service still answers with the last
	// good config.
	if i := strings.Index(string(out), "== 7."); i < 0 || !strings.Contains(string(out[i:]), "good day from demo-0") {
		t.Errorf("after the broken change the service's answer changed:\n%s", out)
	}
}

// The two longer demos run to the end with exit 0: the real Keystone on
// this machine (bootstrap, catalog, probes, reload, logs), and the keystone
// example on a second local control plane (init, bootstrap Job, readiness).
func TestDemoKeystone(t *testing.T) {
	out := runDemo(t, "examples/demo/keystone.sh")
	for _, want := range []string{
		"create public endpoint of keystone in RegionOne: http://keystone.demo.test:18500/v3",
		"the catalog is up to date",
		`"href": "http://keystone.demo.test:18500/v3/"`, // the reloaded public_endpoint
		"[-]stopping fail",
		"agent exit code (uWSGI's): 0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
	}
}

func runDemo(t *testing.T, script string, env ...string) string {
	t.Helper()
	cmd := exec.Command("bash", script, s.bin)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s took %v", script, time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return string(out)
}

// readmeBlock is a fenced block of README.md that a `<!-- runnable -->`
// comment marks; `<!-- runnable: exit=N -->` expects exit code N.
type readmeBlock struct {
	line int
	code int
	text string
}

func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	marker := regexp.MustCompile(`^<!-- runnable(?:: exit=(\d+))? -->$`)
	var blocks []readmeBlock
	sc := bufio.NewScanner(f)
	want, in := -1, false
	var cur readmeBlock
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case in && strings.HasPrefix(l, "```"):
			blocks = append(blocks, cur)
			in = false
		case in:
			cur.text += l + "\n"
		case want >= 0 && strings.HasPrefix(l, "```"):
			cur, in, want = readmeBlock{line: n + 1, code: want}, true, -1
		case marker.MatchString(l):
			want = 0
			if m := marker.FindStringSubmatch(l); m[1] != "" {
				want, _ = strconv.Atoi(m[1])
			}
		case want >= 0 && strings.TrimSpace(l) != "":
			t.Fatalf("README.md:%d: a runnable marker must be followed by a code block", n)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return blocks
}

// Every command block of the README marked runnable runs as it is, from the
// repository's root with the agent on PATH, and exits as it says.
func TestREADMERunnableBlocks(t *testing.T) {
	blocks := readmeBlocks(t)
	if len(blocks) < 3 {
		t.Fatalf("only %d runnable blocks in README.md", len(blocks))
	}
	bin := t.TempDir()
	for _, b := range []string{s.bin, s.probeBin} {
		if err := os.Symlink(b, filepath.Join(bin, filepath.Base(b))); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range blocks {
		t.Run("line"+strconv.Itoa(b.line), func(t *testing.T) {
			cmd := exec.Command("bash", "-euo", "pipefail", "-c", b.text)
			cmd.Dir = "../.."
			cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KOLLA_AGENT_CONFIG=")
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != b.code {
				t.Errorf("README.md:%d: exit %d, want %d:\n%s\n%s", b.line, code, b.code, b.text, out)
			}
		})
	}
}
