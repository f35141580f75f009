package logs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// memSink keeps what it is sent; while down it fails every Send.
type memSink struct {
	mu     sync.Mutex
	down   bool
	failed int // Sends failed while down
	got    []string
	tags   map[string]bool
}

func (m *memSink) Send(_ context.Context, tag string, _ map[string]string, recs []Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		m.failed++
		return errors.New("receiver down")
	}
	if m.tags == nil {
		m.tags = map[string]bool{}
	}
	m.tags[tag] = true
	for _, r := range recs {
		m.got = append(m.got, string(r.Data))
	}
	return nil
}

func (m *memSink) lines() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.got...)
}

func (m *memSink) setDown(d bool) {
	m.mu.Lock()
	m.down = d
	m.mu.Unlock()
}

// numbers are the line numbers a sink received (lines() of lines(a, b)).
func numbers(got []string) []int {
	var out []int
	for _, s := range got {
		for _, l := range strings.Split(s, "\n") {
			f := strings.Fields(l)
			if len(f) > 6 {
				if n, err := strconv.Atoi(f[6]); err == nil {
					out = append(out, n)
				}
			}
		}
	}
	return out
}

func runShipper(t testing.TB, cfg ShipperConfig) (stop func()) {
	t.Helper()
	sh, err := NewShipper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sh.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

func waitLines(t *testing.T, m *memSink, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(numbers(m.lines())) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d lines shipped, want %d", len(numbers(m.lines())), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Lines are shipped in order, with the default tag; the sink down means
// nothing is committed and the file keeps it; back up, everything arrives;
// the shipper stopped and started again goes on from the acknowledged
// offsets, across a rotation made while it was stopped.
func TestShipper(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keystone")
	log := filepath.Join(dir, "keystone.log")
	state := filepath.Join(t.TempDir(), "state")
	mkdir(t, dir)
	w := writer(t, log)
	w.WriteString(lines(0, 100))
	m := &memSink{}
	cfg := ShipperConfig{Files: []FileSpec{{Glob: filepath.Join(dir, "*.log"), Exclude: []string{"*.gz"}}}, Sink: m, StateDir: state, Idle: 50 * time.Millisecond, Rescan: 100 * time.Millisecond}
	stop := runShipper(t, cfg)
	waitLines(t, m, 100)
	if !m.tags["kolla.keystone.keystone"] {
		t.Errorf("tags %v", m.tags)
	}

	m.setDown(true)
	w.WriteString(lines(100, 200))
	waitFor(t, "a Send failed while the sink was down", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.failed > 0
	})
	m.setDown(false)
	waitLines(t, m, 200)
	stop()

	// Stopped; meanwhile more lines, a rotation, a new file.
	w.WriteString(lines(200, 220))
	renameFile(t, log, log+".1")
	writer(t, log).WriteString(lines(220, 240))
	stop = runShipper(t, cfg)
	waitLines(t, m, 240)
	stop()
	got := numbers(m.lines())
	for i, n := range got {
		if n != i {
			t.Fatalf("line %d is %d: %v", i, n, got[max(0, i-3):min(len(got), i+3)])
		}
	}
	if len(got) != 240 {
		t.Errorf("%d lines, want 240 (no duplicates: every batch was acknowledged)", len(got))
	}
}

func mkdir(t *testing.T, d string) {
	t.Helper()
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
}

func renameFile(t *testing.T, a, b string) {
	t.Helper()
	if err := os.Rename(a, b); err != nil {
		t.Fatal(err)
	}
}

// cutSink passes Sends to m until m has n lines, then fails every Send:
// the receiver gone in the middle of a file.
type cutSink struct {
	m      *memSink
	n      int
	failed atomic.Int64
}

func (c *cutSink) Send(ctx context.Context, tag string, fields map[string]string, recs []Record) error {
	if len(numbers(c.m.lines())) >= c.n {
		c.failed.Add(1)
		return errors.New("receiver gone")
	}
	return c.m.Send(ctx, tag, fields, recs)
}

// The path is rotated twice while the shipper is stopped: app.log (A,
// whose position was saved) becomes app.log.2, the file after it (B,
// never seen) app.log.1, and a third is live. B is shipped whole, between
// A's end and the live file. Stopped in the middle of B (its offset
// committed as any file's), the next start goes on from there: every
// line once, in order.
func TestShipperRotatedTwiceWhileStopped(t *testing.T) {
	dir, log, state := shipperDir(t)
	w := writer(t, log)
	w.WriteString(lines(0, 100))
	m := &memSink{}
	cfg := ShipperConfig{Files: []FileSpec{{Glob: filepath.Join(dir, "*.log")}}, Sink: m, StateDir: state, Idle: 50 * time.Millisecond, Rescan: 100 * time.Millisecond, BatchBytes: 1 << 10, Drain: -1}
	stop := runShipper(t, cfg)
	waitLines(t, m, 100)
	stop()

	w.WriteString(lines(100, 110))
	renameFile(t, log, log+".1")
	writer(t, log).WriteString(lines(110, 150))
	renameFile(t, log+".1", log+".2")
	renameFile(t, log, log+".1")
	writer(t, log).WriteString(lines(150, 160))

	cut := &cutSink{m: m, n: 130}
	cfg.Sink = cut
	stop = runShipper(t, cfg)
	waitFor(t, "the sink to fail in the middle of app.log.1", func() bool { return cut.failed.Load() > 0 })
	stop()
	// Saved: B's offset, inside it, and A's (done, kept open for a late
	// line) at its end, if any.
	b, _ := os.Stat(log + ".1")
	ps, _ := loadState(state)
	inB := 0
	for _, p := range ps {
		switch fi := statPos(t, p); {
		case os.SameFile(b, fi) && p.Offset > 0 && p.Offset < b.Size():
			inB++
		case os.SameFile(b, fi) || p.Offset != fi.Size():
			t.Fatalf("offsets %+v: %+v is neither inside app.log.1 (%d bytes) nor at the end of a file read", ps, p, b.Size())
		}
	}
	if inB != 1 {
		t.Fatalf("offsets %+v: want one in app.log.1 (%d bytes)", ps, b.Size())
	}

	cfg.Sink = m
	stop = runShipper(t, cfg)
	waitLines(t, m, 160)
	stop()
	got := numbers(m.lines())
	for i, n := range got {
		if n != i {
			t.Fatalf("line %d is %d: %v", i, n, got[max(0, i-3):min(len(got), i+3)])
		}
	}
	if len(got) != 160 {
		t.Errorf("%d lines, want 160", len(got))
	}
}

// statPos is the file a position names, found in its directory by inode.
func statPos(t *testing.T, p Position) os.FileInfo {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Dir(p.Path))
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Sys().(*syscall.Stat_t).Ino == p.Ino {
			return fi
		}
	}
	t.Fatalf("no file with the inode of %+v", p)
	return nil
}
