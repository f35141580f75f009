package atomicwriter

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The Writer keeps no goroutine of its own between requests, and none after
// its cleanup.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tsDirName is the AtomicWriter's timestamped directory name:
// ..2006_01_02_15_04_05. and a random suffix.
var tsDirName = regexp.MustCompile(`^\.\.\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}\.\d+$`)

// dataTarget returns the target of dir/..data and checks it is a timestamped
// directory in dir.
func dataTarget(t *testing.T, dir string) string {
	t.Helper()
	target, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil {
		t.Fatalf("..data is not a symlink: %v", err)
	}
	if !tsDirName.MatchString(target) {
		t.Fatalf("..data -> %q, want ..<timestamp> in the volume", target)
	}
	fi, err := os.Lstat(filepath.Join(dir, target))
	if err != nil || !fi.IsDir() {
		t.Fatalf("..data -> %s: not a directory (%v)", target, err)
	}
	return target
}

// checkLayout checks dir holds exactly ..data, its timestamped directory and
// one symlink key -> ..data/key per key, that each key reads as its content
// with mode, and returns ..data's target.
func checkLayout(t *testing.T, dir string, files map[string]string, mode os.FileMode) string {
	t.Helper()
	ts := dataTarget(t, dir)
	want := []string{"..data", ts}
	for key := range files {
		want = append(want, key)
	}
	slices.Sort(want)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s holds %q, want %q", dir, got, want)
	}
	for key, content := range files {
		link, err := os.Readlink(filepath.Join(dir, key))
		if err != nil {
			t.Fatalf("%s is not a symlink: %v", key, err)
		}
		if want := filepath.Join("..data", key); link != want {
			t.Errorf("%s -> %s, want %s", key, link, want)
		}
		data, err := os.ReadFile(filepath.Join(dir, key))
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != content {
			t.Errorf("%s reads %q, want %q", key, data, content)
		}
		fi, err := os.Lstat(filepath.Join(dir, ts, key))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != mode {
			t.Errorf("%s/%s has mode %v, want a regular file with %v", ts, key, fi.Mode(), mode)
		}
	}
	return ts
}

func TestKubeletLayout(t *testing.T) {
	w := Start(t)
	dir := filepath.Join(t.TempDir(), "volume") // missing: the tool creates it

	first := map[string]string{"agent.yaml": "a: 1\n", "keep.conf": "keep\n", "gone.conf": "gone\n"}
	if err := w.Write(dir, first); err != nil {
		t.Fatal(err)
	}
	ts1 := checkLayout(t, dir, first, DefaultMode)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o777 {
		t.Fatalf("created volume dir: %v, %v; want mode 0777 like the kubelet's emptyDir", fi, err)
	}

	// One key changed, one removed, one added: a new timestamped dir, the
	// removed key's symlink gone, the old timestamped dir deleted.
	second := map[string]string{"agent.yaml": "a: 2\n", "keep.conf": "keep\n", "new.conf": "new\n"}
	if err := w.Write(dir, second); err != nil {
		t.Fatal(err)
	}
	ts2 := checkLayout(t, dir, second, DefaultMode)
	if ts2 == ts1 {
		t.Fatalf("..data still -> %s after a change", ts1)
	}
	if _, err := os.Lstat(filepath.Join(dir, "gone.conf")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("removed key's symlink: Lstat = %v, want it gone", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, ts1)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("old timestamped dir %s: Lstat = %v, want it deleted", ts1, err)
	}

	// Unchanged data: nothing is rewritten, ..data keeps its target
	// (kubernetes#121472: the write is skipped, but missing top-level
	// symlinks are still recreated).
	if err := w.Write(dir, second); err != nil {
		t.Fatal(err)
	}
	if ts := checkLayout(t, dir, second, DefaultMode); ts != ts2 {
		t.Errorf("unchanged write moved ..data from %s to %s", ts2, ts)
	}
	if err := os.Remove(filepath.Join(dir, "new.conf")); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(dir, second); err != nil {
		t.Fatal(err)
	}
	if ts := checkLayout(t, dir, second, DefaultMode); ts != ts2 {
		t.Errorf("unchanged write restoring a symlink moved ..data from %s to %s", ts2, ts)
	}

	// Only the mode differs: the AtomicWriter compares contents alone, so
	// nothing is rewritten and the files keep their old mode.
	if err := w.WriteMode(dir, second, 0o600); err != nil {
		t.Fatal(err)
	}
	if ts := checkLayout(t, dir, second, DefaultMode); ts != ts2 {
		t.Errorf("mode-only write moved ..data from %s to %s", ts2, ts)
	}
	// With a content change the new mode applies.
	second["agent.yaml"] = "a: 3\n"
	if err := w.WriteMode(dir, second, 0o600); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, dir, second, 0o600)
}

func TestErrors(t *testing.T) {
	w := Start(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		dir   string
		files map[string]string
		want  string
	}{
		{dir, map[string]string{"..hidden": "x"}, "must not start with '..'"},
		{dir, map[string]string{"/abs": "x"}, "must be relative path"},
		{"relative", map[string]string{"a": "x"}, "not an absolute path"},
	} {
		err := w.Write(tc.dir, tc.files)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Write(%q, %v) = %v, want an error with %q", tc.dir, tc.files, err, tc.want)
		}
	}
	if err := w.WriteMode(dir, nil, os.ModeSticky|0o755); err == nil {
		t.Error("WriteMode with the sticky bit: no error")
	}
	// The Writer stays usable after the tool's errors.
	files := map[string]string{"a": "x"}
	if err := w.Write(dir, files); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, dir, files, DefaultMode)
	// An empty payload is valid: every key goes.
	if err := w.Write(dir, map[string]string{}); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, dir, nil, DefaultMode)
}

// One process serves many writes quickly: what swap tests need.
func TestManySwaps(t *testing.T) {
	w := Start(t)
	dir := t.TempDir()
	const n = 100
	began := time.Now()
	var files map[string]string
	for i := range n {
		files = map[string]string{"conf": fmt.Sprintf("generation %d\n", i)}
		if i%2 == 0 {
			files["extra"] = "x"
		}
		if err := w.Write(dir, files); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(began)
	t.Logf("%d writes in %v", n, elapsed)
	checkLayout(t, dir, files, DefaultMode) // the time is logged, not judged: a speed figure is a benchmark's
}

// Concurrent callers are served one at a time.
func TestConcurrentCallers(t *testing.T) {
	w := Start(t)
	base := t.TempDir()
	var wg sync.WaitGroup
	for g := range 4 {
		dir := filepath.Join(base, fmt.Sprint(g))
		wg.Go(func() {
			for i := range 10 {
				if err := w.Write(dir, map[string]string{"k": fmt.Sprint(i)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for g := range 4 {
		checkLayout(t, filepath.Join(base, fmt.Sprint(g)), map[string]string{"k": "9"}, DefaultMode)
	}
}

func TestMissingTool(t *testing.T) {
	_, err := start(filepath.Join(t.TempDir(), Tool))
	if err == nil || !strings.Contains(err.Error(), "run hack/install-tools.sh") {
		t.Fatalf("start of a missing tool: %v", err)
	}
}
