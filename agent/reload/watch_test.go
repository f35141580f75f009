package reload

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kolla-agent/kolla-agent/internal/atomicwriter"
	"github.com/kolla-agent/kolla-agent/internal/poll"
)

// watching runs a Watcher on cfg and returns the channel of its bursts
// once its inotify watches are in place: a change made before that would
// be missed.
func watching(t *testing.T, cfg WatchConfig) (<-chan Burst, []Volume) {
	t.Helper()
	w, vols, err := NewWatcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan Burst)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watcher: %v", err)
		}
	})
	for _, v := range vols {
		target := v.Dir
		switch v.Kind {
		case "missing":
			continue
		case "file":
			target = filepath.Dir(v.Dir) // a file is watched through its directory
		}
		poll.Until(t, 10*time.Second, "the inotify watch on "+target, func() bool { return inotifyWatches(t, target) })
	}
	return out, vols
}

// inotifyWatches says whether an inotify instance of this process watches
// path's inode, as the kernel lists each watch in /proc/self/fdinfo
// (proc(5): "inotify wd:... ino:... sdev:..."). The watch is in place once
// inotify_add_watch has returned: a change from then on is an event.
func inotifyWatches(t *testing.T, path string) bool {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	sdev := uint64(unix.Major(st.Dev))<<20 | uint64(unix.Minor(st.Dev)) // the kernel's dev_t
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if l, _ := os.Readlink("/proc/self/fd/" + fd.Name()); l != "anon_inode:inotify" {
			continue
		}
		b, err := os.ReadFile("/proc/self/fdinfo/" + fd.Name())
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			var wd int
			var ino, dev uint64
			if n, _ := fmt.Sscanf(line, "inotify wd:%x ino:%x sdev:%x", &wd, &ino, &dev); n == 3 && ino == st.Ino && dev == sdev {
				return true
			}
		}
	}
	return false
}

func nextBurst(t *testing.T, ch <-chan Burst, within time.Duration) Burst {
	t.Helper()
	select {
	case b := <-ch:
		return b
	case <-time.After(within):
		t.Fatalf("no burst within %v", within)
	}
	return Burst{}
}

func noBurst(t *testing.T, ch <-chan Burst, during time.Duration) {
	t.Helper()
	select {
	case b := <-ch:
		t.Fatalf("unexpected burst: %v", b.Reasons)
	case <-time.After(during):
	}
}

// The kubelet's own AtomicWriter updates the volume: an added key, a
// removed key and a changed value are each one burst, reported as a ..data
// swap; a write of unchanged data swaps nothing and is no burst.
func TestWatcherKubeletVolume(t *testing.T) {
	kw := atomicwriter.Start(t)
	base := t.TempDir()
	dir := filepath.Join(base, "config_files")
	data := map[string]string{"keystone.conf": "[DEFAULT]\ndebug = false\n", "config.json": "{}"}
	if err := kw.Write(dir, data); err != nil {
		t.Fatal(err)
	}
	// A plain directory watched with it: a change there, made after the
	// unchanged write, is seen after anything that write did (one
	// inotify queue, read in order).
	marker := filepath.Join(base, "marker")
	if err := os.Mkdir(marker, 0o755); err != nil {
		t.Fatal(err)
	}
	bursts, vols := watching(t, WatchConfig{Dirs: []string{dir, marker}, Quiet: 50 * time.Millisecond, MaxWait: time.Second})
	if len(vols) != 2 || vols[0].Kind != "volume" || vols[1].Kind != "directory" {
		t.Fatalf("volumes %+v, want a kubelet volume and a directory", vols)
	}
	for _, step := range []struct {
		name string
		edit func()
	}{
		{"added key", func() { data["policy.yaml"] = "{}" }},
		{"removed key", func() { delete(data, "policy.yaml") }},
		{"changed value", func() { data["keystone.conf"] = "[DEFAULT]\ndebug = true\n" }},
	} {
		step.edit()
		if err := kw.Write(dir, data); err != nil {
			t.Fatal(err)
		}
		b := nextBurst(t, bursts, 5*time.Second)
		if len(b.Reasons) != 1 || !strings.Contains(b.Reasons[0], "..data swapped") {
			t.Errorf("%s: reasons %v", step.name, b.Reasons)
		}
	}
	if err := kw.Write(dir, data); err != nil {
		t.Fatal(err)
	}
	addFile(t, marker, "seen.conf")
	// Not a wait for a burst that might come late: the next burst is the
	// marker's, and the unchanged write is in no burst before it.
	if b := nextBurst(t, bursts, 5*time.Second); len(b.Reasons) != 1 || !strings.HasPrefix(b.Reasons[0], marker+": seen.conf") {
		t.Errorf("after the unchanged write and the marker: reasons %v, want the marker's only", b.Reasons)
	}
}

// addFile puts a file in dir in one step, renamed in from elsewhere: one
// inotify event, where a write is a create and then a write that a loaded
// machine can make two bursts.
func addFile(t *testing.T, dir, name string) {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(tmp, []byte("[DEFAULT]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// 100 swaps in one second are one burst, delivered after the quiet period,
// and the files then are the last data written.
func TestWatcherBurstIsOneAction(t *testing.T) {
	kw := atomicwriter.Start(t)
	dir := filepath.Join(t.TempDir(), "vol")
	if err := kw.Write(dir, map[string]string{"a.conf": "0"}); err != nil {
		t.Fatal(err)
	}
	bursts, _ := watching(t, WatchConfig{Dirs: []string{dir}, Quiet: 300 * time.Millisecond, MaxWait: 10 * time.Second})
	for i := 1; i <= 100; i++ {
		if err := kw.Write(dir, map[string]string{"a.conf": fmt.Sprint(i), "b.conf": fmt.Sprint(i % 7)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	b := nextBurst(t, bursts, 5*time.Second)
	if len(b.Reasons) < 50 {
		t.Errorf("one burst of %d swaps; want about 100 coalesced", len(b.Reasons))
	}
	noBurst(t, bursts, time.Second)
	for name, want := range map[string]string{"a.conf": "100", "b.conf": "2"} {
		if got, _ := os.ReadFile(filepath.Join(dir, name)); string(got) != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

// A burst that never goes quiet is delivered once maxWait has passed, and
// again for what follows: changes are never held back indefinitely.
func TestWatcherMaxWait(t *testing.T) {
	kw := atomicwriter.Start(t)
	dir := filepath.Join(t.TempDir(), "vol")
	kw.Write(dir, map[string]string{"a.conf": "0"})
	bursts, _ := watching(t, WatchConfig{Dirs: []string{dir}, Quiet: 400 * time.Millisecond, MaxWait: 600 * time.Millisecond})
	stop := time.Now().Add(2 * time.Second)
	got := 0
	for i := 1; time.Now().Before(stop); i++ {
		kw.Write(dir, map[string]string{"a.conf": fmt.Sprint(i)})
		select {
		case <-bursts:
			got++
		case <-time.After(100 * time.Millisecond): // less than the quiet period
		}
	}
	if got < 2 {
		t.Errorf("%d bursts in 2s of changes every 100ms with maxWait 600ms; want at least 2", got)
	}
}

// A change inotify did not report (made before the watch existed here) is
// found by the periodic rescan.
func TestWatcherRescanFindsMissedChange(t *testing.T) {
	kw := atomicwriter.Start(t)
	dir := filepath.Join(t.TempDir(), "vol")
	kw.Write(dir, map[string]string{"a.conf": "0"})
	w, _, err := NewWatcher(WatchConfig{Dirs: []string{dir}, Quiet: 10 * time.Millisecond, Rescan: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	kw.Write(dir, map[string]string{"a.conf": "1"}) // before Run: no inotify watch yet
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan Burst)
	go w.Run(ctx, out)
	b := nextBurst(t, out, 3*time.Second)
	if !strings.Contains(strings.Join(b.Reasons, " "), "periodic rescan found a change") {
		t.Errorf("reasons %v", b.Reasons)
	}
}

// What each watched path is, said at the start: a kubelet volume, a plain
// directory (any change of its entries counts), a single file (a subPath
// mount, which never updates), a path that does not exist.
func TestWatcherKinds(t *testing.T) {
	kw := atomicwriter.Start(t)
	base := t.TempDir()
	vol := filepath.Join(base, "vol")
	kw.Write(vol, map[string]string{"a": "1"})
	plain := filepath.Join(base, "plain")
	os.Mkdir(plain, 0o755)
	file := filepath.Join(base, "keystone.conf")
	os.WriteFile(file, []byte("x"), 0o644)
	bursts, vols := watching(t, WatchConfig{Dirs: []string{vol, plain, file, filepath.Join(base, "nope")}, Quiet: 20 * time.Millisecond})
	var kinds []string
	for _, v := range vols {
		kinds = append(kinds, v.Kind)
	}
	if got := strings.Join(kinds, ","); got != "volume,directory,file,missing" {
		t.Errorf("kinds %s", got)
	}
	addFile(t, plain, "glance.conf")
	if b := nextBurst(t, bursts, 3*time.Second); !strings.Contains(b.Reasons[0], "glance.conf") {
		t.Errorf("plain directory: reasons %v", b.Reasons)
	}
	os.WriteFile(file, []byte("y"), 0o644)
	if b := nextBurst(t, bursts, 3*time.Second); !strings.Contains(b.Reasons[0], file) {
		t.Errorf("single file: reasons %v", b.Reasons)
	}
}
