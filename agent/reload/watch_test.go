package reload

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kolla-agent/kolla-agent/internal/atomicwriter"
	"github.com/kolla-agent/kolla-agent/internal/poll"
)

// watching runs a Watcher on cfg, its quiet period, maxWait and rescan on
// clk (nil: the real clock), and returns the channel of its bursts once
// its inotify watches are in place: a change made before that would be
// missed.
func watching(t *testing.T, cfg WatchConfig, clk clock.WithTicker) (<-chan Burst, []Volume) {
	t.Helper()
	w, vols, err := NewWatcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if clk != nil {
		w.clock = clk
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

// stepClock is the watcher's clock where the quiet period or maxWait is
// what a test tests: time moves only when the test steps it, so a write
// that takes long on a loaded machine neither opens the window nor closes
// it. It counts the timers armed by duration: the watcher restarts its
// quiet period at each change it sees, so the test knows the watcher has
// seen a change before it moves the time on.
type stepClock struct {
	*clocktesting.FakeClock
	mu    sync.Mutex
	armed map[time.Duration]int
}

func newStepClock() *stepClock {
	return &stepClock{FakeClock: clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), armed: map[time.Duration]int{}}
}

func (c *stepClock) NewTimer(d time.Duration) clock.Timer {
	t := &countedTimer{c.FakeClock.NewTimer(d), c}
	c.count(d)
	return t
}

func (c *stepClock) count(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed[d]++
}

func (c *stepClock) timers(d time.Duration) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.armed[d]
}

// seen waits until the watcher has armed n quiet periods of length quiet:
// it has seen n changes. A watcher that does not restart the quiet period
// at each change fails here.
func (c *stepClock) seen(t *testing.T, quiet time.Duration, n int) {
	t.Helper()
	poll.Until(t, 10*time.Second, fmt.Sprintf("the watcher to see change %d and restart its quiet period (%v)", n, quiet),
		func() bool { return c.timers(quiet) >= n })
}

// stepDue steps the clock by d and says whether a timer was due: one that
// fires leaves the clock's waiters at once, in Step.
func (c *stepClock) stepDue(d time.Duration) bool {
	before := c.Waiters()
	c.Step(d)
	return c.Waiters() < before
}

type countedTimer struct {
	clock.Timer
	c *stepClock
}

func (t *countedTimer) Reset(d time.Duration) bool {
	active := t.Timer.Reset(d)
	t.c.count(d)
	return active
}

// collect receives the bursts as they are delivered, as the duty does,
// until the test ends.
func collect(t *testing.T, in <-chan Burst) <-chan Burst {
	out := make(chan Burst, 100)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case b := <-in:
				out <- b
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return out
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
	bursts, vols := watching(t, WatchConfig{Dirs: []string{dir, marker}, Quiet: 50 * time.Millisecond, MaxWait: time.Second}, nil)
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

// 100 swaps 10 ms apart, a second in all, more than the quiet period, less
// between two: one burst, delivered once the quiet period has passed after
// the last swap, and the files then are the last data written. The window
// is the behaviour under test, so it is on a stepped clock (stepClock): a
// write that takes longer than the quiet period on a loaded machine must
// not split the burst, and the quiet period must not pass unseen.
func TestWatcherBurstIsOneAction(t *testing.T) {
	const quiet, gap = 300 * time.Millisecond, 10 * time.Millisecond
	kw := atomicwriter.Start(t)
	dir := filepath.Join(t.TempDir(), "vol")
	if err := kw.Write(dir, map[string]string{"a.conf": "0"}); err != nil {
		t.Fatal(err)
	}
	clk := newStepClock()
	out, _ := watching(t, WatchConfig{Dirs: []string{dir}, Quiet: quiet, MaxWait: 10 * time.Second}, clk)
	bursts := collect(t, out)
	for i := 1; i <= 100; i++ {
		if err := kw.Write(dir, map[string]string{"a.conf": fmt.Sprint(i), "b.conf": fmt.Sprint(i % 7)}); err != nil {
			t.Fatal(err)
		}
		clk.seen(t, quiet, i)
		if clk.stepDue(gap) {
			t.Fatalf("a timer due %v after swap %d (quiet %v): the quiet period does not restart at each change", gap, i, quiet)
		}
	}
	// The last swap was seen gap ago: the quiet period ends at quiet.
	if clk.stepDue(quiet - gap - time.Millisecond) {
		t.Fatalf("a timer due %v after the last swap, before the quiet period (%v)", quiet-time.Millisecond, quiet)
	}
	if !clk.stepDue(time.Millisecond) {
		t.Fatalf("no timer due when the quiet period (%v) after the last swap had passed", quiet)
	}
	b := nextBurst(t, bursts, 10*time.Second)
	if n := clk.timers(quiet); len(b.Reasons) != n || n < 100 {
		t.Errorf("one burst of %d swaps, of %d seen; want the 100, all", len(b.Reasons), n)
	}
	if got, want := b.Last.Sub(b.First), 99*gap; got != want {
		t.Errorf("the burst spans %v of the watcher's clock, want %v", got, want)
	}
	for name, want := range map[string]string{"a.conf": "100", "b.conf": "2"} {
		if got, _ := os.ReadFile(filepath.Join(dir, name)); string(got) != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if n := clk.timers(quiet); len(b.Reasons) != n {
		t.Errorf("%d swaps seen, %d in the burst: a second burst", n, len(b.Reasons))
	}
}

// A burst that never goes quiet is delivered once maxWait has passed, and
// again for what follows: changes are never held back indefinitely. A
// change every 100 ms on a stepped clock (stepClock), never quiet for the
// 400 ms quiet period: each burst is due 600 ms (maxWait) after its first
// change, whatever a loaded machine does to the writes.
func TestWatcherMaxWait(t *testing.T) {
	const quiet, maxWait, gap = 400 * time.Millisecond, 600 * time.Millisecond, 100 * time.Millisecond
	kw := atomicwriter.Start(t)
	dir := filepath.Join(t.TempDir(), "vol")
	if err := kw.Write(dir, map[string]string{"a.conf": "0"}); err != nil {
		t.Fatal(err)
	}
	clk := newStepClock()
	out, _ := watching(t, WatchConfig{Dirs: []string{dir}, Quiet: quiet, MaxWait: maxWait}, clk)
	bursts := collect(t, out)
	seen := 0
	for burst := 1; burst <= 2; burst++ {
		for i := 1; ; i++ { // the burst's changes
			seen++
			if err := kw.Write(dir, map[string]string{"a.conf": fmt.Sprint(seen)}); err != nil {
				t.Fatal(err)
			}
			clk.seen(t, quiet, seen)
			due := clk.stepDue(gap)
			if elapsed := time.Duration(i) * gap; due != (elapsed == maxWait) {
				t.Fatalf("burst %d: timer due %v at %v after its first change, changes %v apart; want due at maxWait (%v) only", burst, due, elapsed, gap, maxWait)
			}
			if due {
				break
			}
		}
		b := nextBurst(t, bursts, 10*time.Second)
		if want := int(maxWait / gap); len(b.Reasons) != want || b.Last.Sub(b.First) != maxWait-gap {
			t.Errorf("burst %d: %d changes over %v, want %d over %v", burst, len(b.Reasons), b.Last.Sub(b.First), want, maxWait-gap)
		}
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
	bursts, vols := watching(t, WatchConfig{Dirs: []string{vol, plain, file, filepath.Join(base, "nope")}, Quiet: 20 * time.Millisecond}, nil)
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
