package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: example/x
cpu: Some CPU @ 2.00GHz
BenchmarkA-2   	       1	         0 ns/op	        12.5 agent-ms/median	      1000 poller-ms/median
BenchmarkA-2   	       1	         0 ns/op	        10.0 agent-ms/median	      3000 poller-ms/median
BenchmarkA-2   	       1	         0 ns/op	        11.0 agent-ms/median	      2000 poller-ms/median
BenchmarkB/sub_name=1-2	1	         0 ns/op	         7 x
`

func TestParseMedians(t *testing.T) {
	r, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := r.median("BenchmarkA", "agent-ms/median"); !ok || v != 11 {
		t.Errorf("median of 12.5, 10, 11 = %v %v, want 11", v, ok)
	}
	if v, ok := r.median("BenchmarkB/sub_name=1", "x"); !ok || v != 7 {
		t.Errorf("a sub-benchmark's metric = %v %v (the -2 suffix is not part of the name)", v, ok)
	}
	if _, ok := r.median("BenchmarkA", "nothing"); ok {
		t.Error("a metric the run lacks has a median")
	}
	if r.config["cpu"] != "Some CPU @ 2.00GHz" {
		t.Errorf("cpu %q", r.config["cpu"])
	}
}

func TestParseBadLines(t *testing.T) {
	for _, bad := range []string{
		"BenchmarkA-2 1 12 ns/op 5\n",       // a value without unit
		"BenchmarkA-2 1 twelve ns/op\n",     // not a number
		"BenchmarkA-2 1 12 ns/op 3 x 4 y z", // odd fields
	} {
		if _, err := parse(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: error %v, want one naming line 1", bad, err)
		}
	}
}

// The table has every figure or none: a figure the run lacks and a metric
// no figure shows are both errors, named.
func TestRenderEveryFigureOrNone(t *testing.T) {
	useFigures(t, figure{Area: "a", What: "latency", Bench: "BenchmarkA", Ours: "agent-ms/median", Base: "poller-ms/median", BaseIs: "a poller", Unit: "ms", Headline: "the latency"})
	r, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = render(r)
	if err == nil || !strings.Contains(err.Error(), "BenchmarkB/sub_name=1 reports x, which no figure shows") {
		t.Errorf("an unshown metric: %v", err)
	}
	figures = append(figures, figure{Area: "b", What: "x", Bench: "BenchmarkB/sub_name=1", Ours: "x"}, figure{Area: "c", What: "gone", Bench: "BenchmarkC", Ours: "y"})
	_, _, err = render(r)
	if err == nil || !strings.Contains(err.Error(), `figure "gone": BenchmarkC: no y in this run`) {
		t.Errorf("a missing figure: %v", err)
	}
	figures = figures[:2]
	table, headlines, err := render(r)
	if err != nil {
		t.Fatal(err)
	}
	if want := "| what | kolla-agent | baseline, same run | ratio | quoted, not measured here |\n|---|---|---|---|---|\n| the latency | **11 ms** | 2,000 ms: a poller | 1/182 |  |\n"; headlines != want {
		t.Errorf("headlines:\n%s\nwant:\n%s", headlines, want)
	}
	for _, want := range []string{
		"| a | latency | **11 ms** | 2,000 ms: a poller | 1/182 |  |  | 3: 10 ms - 12.5 ms |",
		"| b | x | **7** |  |  |  |  | 1 sample |",
		"Machine: Some CPU @ 2.00GHz,",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("no %q in\n%s", want, table)
		}
	}
}

// A benchmark run once that takes its own samples has their count and
// range shown; a quoted figure stands in its own column, out of the ratio.
func TestRenderSpreadInOneRunAndQuoted(t *testing.T) {
	useFigures(t, figure{Area: "p", What: "pod ready", Bench: "BenchmarkP", Ours: "agent-ms/median", Base: "other-ms/median", BaseIs: "the other", Unit: "ms", Quoted: "tool: 44 MB (its docs)", Headline: "pod"})
	const one = "BenchmarkP-2 1 0 ns/op 120 agent-ms/median 9 agent-ms/samples 100 agent-ms/min 900 agent-ms/max 300 other-ms/median 9 other-ms/samples 200 other-ms/min 400 other-ms/max\n"
	r, err := parse(strings.NewReader(one))
	if err != nil {
		t.Fatal(err)
	}
	table, headlines, err := render(r)
	if err != nil {
		t.Fatalf("the samples' count and range are no figures of their own: %v", err)
	}
	if want := "| p | pod ready | **120 ms** | 300 ms: the other | 0.4x |  | tool: 44 MB (its docs) | 9 in one run: 100 ms - 900 ms |"; !strings.Contains(table, want) {
		t.Errorf("no %q in\n%s", want, table)
	}
	if want := "| pod | **120 ms** | 300 ms: the other | 0.4x | tool: 44 MB (its docs) |"; !strings.Contains(headlines, want) {
		t.Errorf("no %q in\n%s", want, headlines)
	}
	// A /min without its /median is a metric no figure shows.
	r, _ = parse(strings.NewReader("BenchmarkP-2 1 0 ns/op 120 agent-ms/median 5 stray/min\n"))
	if _, _, err := render(r); err == nil || !strings.Contains(err.Error(), "stray/min") {
		t.Errorf("a stray /min: %v", err)
	}
}

// A level above idle is each run's level less that same run's idle, not
// the median level less the median idle: runs whose idle moves by more
// than the gap would otherwise give a figure no run measured.
func TestRenderMinusPairsEachRun(t *testing.T) {
	useFigures(t, figure{Area: "s", What: "rss", Bench: "BenchmarkS", Ours: "agent-MiB", Minus: "idle-MiB", Base: "poller-MiB", BaseIs: "the pollers", Unit: "MiB"})
	// Paired: agent 100, 130, 90 (median 100); pollers 60, 70, 50 (60).
	// Unpaired, medians less the median idle, it would read 90 against 70.
	const runs = `BenchmarkS-2 1 0 ns/op 200 agent-MiB 100 idle-MiB 160 poller-MiB
BenchmarkS-2 1 0 ns/op 150 agent-MiB 20 idle-MiB 90 poller-MiB
BenchmarkS-2 1 0 ns/op 180 agent-MiB 90 idle-MiB 140 poller-MiB
`
	renderHas(t, runs, "| s | rss | **100 MiB** | 60 MiB: the pollers | 1.67x |  |  | 3: 90 MiB - 130 MiB |")
	// A run that reports a level without its idle cannot be paired.
	r, _ := parse(strings.NewReader(runs + "BenchmarkS-2 1 0 ns/op 170 agent-MiB 150 poller-MiB\n"))
	if _, _, err := render(r); err == nil || !strings.Contains(err.Error(), "4 samples of agent-MiB but 3 of idle-MiB") {
		t.Errorf("an unpaired sample: %v", err)
	}
}

// A baseline measured on its own fresh server is less its own idle level,
// run by run, and the agent's less the agent's.
func TestRenderBaseMinusPairsEachSide(t *testing.T) {
	useFigures(t, figure{Area: "s", What: "rss", Bench: "BenchmarkS", Ours: "agent-MiB", Minus: "idle-MiB", Base: "poller-MiB", BaseMinus: "poller-idle-MiB", BaseIs: "the pollers", Unit: "MiB"})
	// Agent 100, 130, 90 (median 100); pollers 160-120, 90-10, 140-70: 40,
	// 80, 70 (median 70). Less the agent's idle instead, they would read 60.
	const runs = `BenchmarkS-2 1 0 ns/op 200 agent-MiB 100 idle-MiB 160 poller-MiB 120 poller-idle-MiB
BenchmarkS-2 1 0 ns/op 150 agent-MiB 20 idle-MiB 90 poller-MiB 10 poller-idle-MiB
BenchmarkS-2 1 0 ns/op 180 agent-MiB 90 idle-MiB 140 poller-MiB 70 poller-idle-MiB
`
	renderHas(t, runs, "| s | rss | **100 MiB** | 70 MiB: the pollers | 1.43x |  |  | 3: 90 MiB - 130 MiB |")
	// The baseline's idle level is reported, so it is shown, not unused.
	r, _ := parse(strings.NewReader(strings.ReplaceAll(runs, " poller-idle-MiB", " other-MiB")))
	if _, _, err := render(r); err == nil || !strings.Contains(err.Error(), "no poller-idle-MiB in this run") {
		t.Errorf("a baseline without its idle level: %v", err)
	}
}

// useFigures sets the figures for one test.
func useFigures(t *testing.T, fs ...figure) {
	saved := figures
	t.Cleanup(func() { figures = saved })
	figures = fs
}

// renderHas renders runs and wants a row in the table.
func renderHas(t *testing.T, runs, want string) {
	t.Helper()
	r, err := parse(strings.NewReader(runs))
	if err != nil {
		t.Fatal(err)
	}
	table, _, err := render(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table, want) {
		t.Errorf("no %q in\n%s", want, table)
	}
}

func TestNumbers(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 0.0364: "0.0364", 1.94: "1.94", 22.8: "22.8", 447.4: "447", 1284.2: "1,284", 2_500_000: "2,500,000"} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
	for _, c := range []struct {
		ours, base float64
		want       string
	}{{22.8, 1.78, "12.8x"}, {0.28, 483, "1/1,725"}, {1284, 2117, "0.607x"}, {1, 0, ""}, {-0.06, 7.91, "~0"}} {
		if got := ratioOf(c.ours, c.base); got != c.want {
			t.Errorf("ratioOf(%v, %v) = %q, want %q", c.ours, c.base, got, c.want)
		}
	}
}

func TestBenchLinesKeepsWhatBenchstatReads(t *testing.T) {
	raw := sample + "    bench_test.go:12: a log line\n--- BENCH: BenchmarkA-2\nPASS\nok  \texample/x\t3.2s\ngoos: linux\npkg: example/y\nBenchmarkC-2 1 5 ns/op\n"
	got := string(benchLines(strings.NewReader(raw), []string{"go: go1.99", "cores: 2"}))
	for _, gone := range []string{"a log line", "PASS", "ok  "} {
		if strings.Contains(got, gone) {
			t.Errorf("%q kept:\n%s", gone, got)
		}
	}
	if strings.Count(got, "goos: linux") != 1 || !strings.Contains(got, "pkg: example/y\nBenchmarkC-2") || !strings.HasPrefix(got, "go: go1.99\ncores: 2\n") {
		t.Errorf("configuration lines:\n%s", got)
	}
}

// Every figure names a benchmark that exists, once.
func TestFiguresNameRealBenchmarks(t *testing.T) {
	var src strings.Builder
	filepath.WalkDir("../..", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, "_test.go") {
			b, _ := os.ReadFile(p)
			src.Write(b)
		}
		return nil
	})
	seen := map[string]bool{}
	for _, f := range figures {
		top, _, _ := strings.Cut(f.Bench, "/")
		for _, b := range []string{top, strings.Split(f.BaseIn, "/")[0]} {
			if b != "" && !regexp.MustCompile(`(?m)^func `+b+`\(b \*testing\.B\)`).MatchString(src.String()) {
				t.Errorf("figure %q: no func %s(b *testing.B) in the repository", f.What, b)
			}
		}
		key := f.Bench + " " + f.Ours + " " + f.Minus
		if seen[key] {
			t.Errorf("two figures show %s", key)
		}
		seen[key] = true
	}
}

// docs/benchmarks.md's table and the README's headlines are what
// docs/benchmarks.txt (the last `make bench`) gives.
func TestTablesInStep(t *testing.T) {
	txt, err := os.ReadFile("../../docs/benchmarks.txt")
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSeal(txt); err != nil {
		t.Fatalf("docs/benchmarks.txt: %v", err)
	}
	r, err := parse(strings.NewReader(string(txt)))
	if err != nil {
		t.Fatal(err)
	}
	table, headlines, err := render(r)
	if err != nil {
		t.Fatalf("docs/benchmarks.txt: %v", err)
	}
	for _, c := range []struct{ path, begin, end, text string }{
		{"../../docs/benchmarks.md", beginMark, endMark, table},
		{"../../README.md", headlineMark, headlineEnd, headlines},
	} {
		doc, err := os.ReadFile(c.path)
		if err != nil {
			t.Fatal(err)
		}
		want, err := between(doc, c.begin, c.end, c.text)
		if err != nil {
			t.Fatal(err)
		}
		if string(want) != string(doc) {
			t.Errorf("%s: the table is not what docs/benchmarks.txt gives: run `go run ./hack/bench` (or `make bench`)", c.path)
		}
	}
}

func TestSealRefusesHandEdits(t *testing.T) {
	body := []byte("go: go1.99\n" + commitLine + "0123abcd\n" + sample)
	txt := seal(body)
	if err := checkSeal(txt); err != nil {
		t.Fatalf("a sealed txt: %v", err)
	}
	if r, err := parse(strings.NewReader(string(txt))); err != nil || r.commit != "0123abcd" {
		t.Errorf("parse: commit %q, %v", r.commit, err)
	}
	for name, c := range map[string]struct {
		txt  string
		want string
	}{
		"a value edited":    {strings.Replace(string(txt), "12.5 agent-ms", "10.5 agent-ms", 1), "does not match"},
		"a line added":      {strings.Replace(string(txt), "BenchmarkB", "BenchmarkB-2 1 0 ns/op 3 x\nBenchmarkB", 1), "does not match"},
		"a line after it":   {string(txt) + "BenchmarkC-2 1 0 ns/op\n", "does not match"},
		"no seal":           {string(body), "no sha256 line"},
		"no commit, sealed": {string(seal([]byte(sample))), "no commit line"},
	} {
		if err := checkSeal([]byte(c.txt)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
}

// gitRepo is a repository with one commit of a file and a doc.
func gitRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git:", err)
	}
	dir := t.TempDir()
	for p, c := range map[string]string{"code.go": "package x\n", "docs/benchmarks.md": "# B\n" + beginMark + "\n" + endMark + "\n", "README.md": headlineMark + "\n" + headlineEnd + "\n"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitIn(t, dir, "init", "-q")
	gitIn(t, dir, "add", ".")
	gitIn(t, dir, "commit", "-qm", "one")
	return dir
}

func gitIn(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.org"}, args...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
}

// One run, one commit: a worktree with changes is refused at the start, a
// commit made during the run at the end, and a run missing a figure writes
// nothing, the txt neither.
func TestRunOneCommit(t *testing.T) {
	useFigures(t, figure{Area: "a", What: "latency", Bench: "BenchmarkA", Ours: "agent-ms/median", Base: "poller-ms/median", BaseIs: "a poller"},
		figure{Area: "b", What: "x", Bench: "BenchmarkB/sub_name=1", Ours: "x"})
	dir := gitRepo(t)
	raw := filepath.Join(t.TempDir(), "raw.txt")
	os.WriteFile(raw, []byte(sample), 0o644)
	commitFile := filepath.Join(t.TempDir(), "commit")
	txt, doc, readme := filepath.Join(dir, "docs/benchmarks.txt"), filepath.Join(dir, "docs/benchmarks.md"), filepath.Join(dir, "README.md")

	os.WriteFile(filepath.Join(dir, "code.go"), []byte("package y\n"), 0o644)
	if err := startRun(dir, commitFile); err == nil || !strings.Contains(err.Error(), "code.go") {
		t.Errorf("start with a changed file: %v", err)
	}
	gitIn(t, dir, "checkout", "-q", "code.go")
	if err := startRun(dir, commitFile); err != nil {
		t.Fatal(err)
	}

	figures = append(figures, figure{Area: "c", What: "gone", Bench: "BenchmarkC", Ours: "y"})
	if err := run(dir, txt, doc, readme, commitFile, []string{raw}); err == nil || !strings.Contains(err.Error(), "nothing written") {
		t.Errorf("a figure missing: %v", err)
	}
	if _, err := os.Stat(txt); !os.IsNotExist(err) {
		t.Errorf("the txt was written with a figure missing: %v", err)
	}
	figures = figures[:2]

	if err := run(dir, txt, doc, readme, commitFile, []string{raw}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(doc)
	head, _ := os.ReadFile(commitFile)
	if !strings.Contains(string(b), "Commit "+strings.TrimSpace(string(head))[:12]+". Machine") {
		t.Errorf("the table does not name the commit %s:\n%s", head, b)
	}
	gitIn(t, dir, "add", ".")
	gitIn(t, dir, "commit", "-qm", "bench: the table")

	// Re-rendering from the txt: docs may change, the code may not.
	if err := run(dir, txt, doc, readme, "", nil); err != nil {
		t.Errorf("re-render after a docs-only commit: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "code.go"), []byte("package z\n"), 0o644)
	gitIn(t, dir, "commit", "-qam", "two")
	if err := run(dir, txt, doc, readme, "", nil); err == nil || !strings.Contains(err.Error(), "code.go") {
		t.Errorf("re-render after the code changed: %v", err)
	}
	if err := run(dir, txt, doc, readme, commitFile, []string{raw}); err == nil || !strings.Contains(err.Error(), "more than one commit") {
		t.Errorf("a run that began at another commit: %v", err)
	}
}
