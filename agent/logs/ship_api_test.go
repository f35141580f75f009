package logs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/poll"
)

// sendRec is what one Send was given.
type sendRec struct {
	tag    string
	fields map[string]string
	recs   []Record // Data copied
}

// recSink keeps every Send; block makes a Send wait for its context's end,
// fail makes it fail.
type recSink struct {
	mu          sync.Mutex
	sends       []sendRec
	block, fail bool
	calls       int // Sends begun, whatever came of them
}

func (s *recSink) Send(ctx context.Context, tag string, fields map[string]string, recs []Record) error {
	s.mu.Lock()
	s.calls++
	rec := sendRec{tag: tag, fields: maps.Clone(fields)}
	for _, r := range recs {
		r.Data = append([]byte(nil), r.Data...)
		rec.recs = append(rec.recs, r)
	}
	block, fail := s.block, s.fail
	if !block && !fail {
		s.sends = append(s.sends, rec)
	}
	s.mu.Unlock()
	if block {
		<-ctx.Done()
		return ctx.Err()
	}
	if fail {
		return errors.New("receiver down")
	}
	return nil
}

func (s *recSink) set(block, fail bool) {
	s.mu.Lock()
	s.block, s.fail = block, fail
	s.mu.Unlock()
}

// data is every record's Data, in the order shipped.
func (s *recSink) data() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, snd := range s.sends {
		for _, r := range snd.recs {
			out = append(out, string(r.Data))
		}
	}
	return out
}

// events records an Observer's calls.
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	e.got = append(e.got, s)
	e.mu.Unlock()
}

func (e *events) Shipped(tag string, records, bytes int) {
	e.add(fmt.Sprintf("shipped %s %d %d", tag, records, bytes))
}
func (e *events) Failed(err error)       { e.add("failed " + err.Error()) }
func (e *events) Recovered()             { e.add("recovered") }
func (e *events) Skipped(p, what string) { e.add("skipped " + what + " " + filepath.Base(p)) }

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.got...)
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	poll.Until(t, 20*time.Second, what, ok)
}

func shipperDir(t *testing.T) (dir, log, state string) {
	dir = filepath.Join(t.TempDir(), "keystone")
	mkdir(t, dir)
	return dir, filepath.Join(dir, "keystone.log"), filepath.Join(t.TempDir(), "state")
}

const traceback = `2026-11-23 17:40:00.123 4242 ERROR keystone.server [req-1 - - - - -] boom
2026-11-23 17:40:00.123 4242 ERROR keystone.server Traceback (most recent call last):
2026-11-23 17:40:00.123 4242 ERROR keystone.server   File "x.py", line 1, in f
2026-11-23 17:40:00.123 4242 ERROR keystone.server ValueError: boom
`

// The fields reach every Send as they were configured (a copy: the
// caller's map may change after); keys no sink could carry are refused.
func TestShipperFields(t *testing.T) {
	dir, log, state := shipperDir(t)
	appendTo(t, log, lines(0, 10))
	s := &recSink{}
	fields := map[string]string{"pod": "keystone-api-0", "namespace": "openstack", "container": "keystone"}
	stop := runShipper(t, ShipperConfig{Files: []FileSpec{{Glob: filepath.Join(dir, "*.log")}}, Sink: s, StateDir: state, Idle: 20 * time.Millisecond, Fields: fields})
	fields["pod"] = "changed"
	waitFor(t, "10 records", func() bool { return len(s.data()) == 10 })
	stop()
	for _, snd := range s.sends {
		if !maps.Equal(snd.fields, map[string]string{"pod": "keystone-api-0", "namespace": "openstack", "container": "keystone"}) {
			t.Errorf("fields %v", snd.fields)
		}
	}
	for _, bad := range []string{"", "message", "offset", "tag", "a b", "a=b", `a"b`, "a]b", "é", strings.Repeat("k", 33)} {
		_, err := NewShipper(ShipperConfig{Files: []FileSpec{{Glob: "/x/*.log"}}, Sink: s, StateDir: state, Fields: map[string]string{bad: "v"}})
		if err == nil {
			t.Errorf("key %q accepted", bad)
		}
	}
	if _, err := NewShipper(ShipperConfig{Files: []FileSpec{{Glob: "/x/*.log"}}, Sink: s, StateDir: state, Fields: map[string]string{"k8s.pod-name_1": "v"}}); err != nil {
		t.Error(err)
	}
}

// Lines written just before the end, and a traceback still being grouped
// (Idle is an hour: only the drain flushes it), are shipped and committed
// before Run returns.
func TestShipperDrain(t *testing.T) {
	dir, log, state := shipperDir(t)
	w := writer(t, log)
	w.WriteString(lines(0, 100) + traceback)
	s := &recSink{}
	cfg := ShipperConfig{Files: []FileSpec{{Glob: filepath.Join(dir, "*.log")}}, Sink: s, StateDir: state, Idle: time.Hour, Rescan: time.Hour}
	stop := runShipper(t, cfg)
	waitFor(t, "100 records", func() bool { return len(s.data()) == 100 })
	w.WriteString(lines(100, 150) + traceback)
	stop()
	got := s.data()
	want := strings.Split(strings.TrimSuffix(lines(0, 100), "\n"), "\n")
	want = append(want, strings.TrimSuffix(traceback, "\n"))
	want = append(want, strings.Split(strings.TrimSuffix(lines(100, 150), "\n"), "\n")...)
	want = append(want, strings.TrimSuffix(traceback, "\n"))
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("%d records, want %d; the last: %q", len(got), len(want), got[max(0, len(got)-2):])
	}
	size, _ := w.Seek(0, 1)
	if ps, err := loadState(state); err != nil || len(ps) != 1 || ps[0].Offset != size {
		t.Errorf("offsets %+v %v, want %d", ps, err, size)
	}
}

// A sink that blocks (or fails) when Run's context ends: Run gives up at
// the drain's deadline, its batch not committed; the next start ships it.
func TestShipperDrainSinkDown(t *testing.T) {
	for _, mode := range []string{"blocks", "fails"} {
		t.Run(mode, func(t *testing.T) {
			dir, log, state := shipperDir(t)
			appendTo(t, log, lines(0, 10))
			s := &recSink{}
			s.set(mode == "blocks", mode == "fails")
			ev := &events{}
			cfg := ShipperConfig{Files: []FileSpec{{Glob: filepath.Join(dir, "*.log")}}, Sink: s, StateDir: state, Idle: 20 * time.Millisecond, Drain: 300 * time.Millisecond, Observer: ev}
			sh, err := NewShipper(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- sh.Run(ctx) }()
			waitFor(t, "a Send before the end", func() bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				return s.calls > 0
			})
			start := time.Now()
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return 10s after its context ended, with a drain of 300ms")
			}
			t.Logf("Run returned %v after the cancel", time.Since(start).Round(time.Millisecond))
			if ps, _ := loadState(state); len(ps) != 0 {
				t.Errorf("offsets committed with nothing acknowledged: %+v", ps)
			}
			if mode == "fails" && !strings.HasPrefix(strings.Join(ev.list(), "|"), "failed ") {
				t.Errorf("observer: %q", ev.list())
			}

			// Up again, the next start ships all of it.
			s.set(false, false)
			stop := runShipper(t, cfg)
			waitFor(t, "10 records", func() bool { return len(s.data()) == 10 })
			stop()
		})
	}
}

// The drain is a pass of its own, with a deadline, after Run's context
// ended (already, here); with Drain negative there is none.
func TestShipperDrainOrNot(t *testing.T) {
	for _, drain := range []time.Duration{time.Second, -1} {
		dir, log, state := shipperDir(t)
		appendTo(t, log, lines(0, 10))
		s := &ctxSink{}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		sh, err := NewShipper(ShipperConfig{Files: []FileSpec{{Glob: filepath.Join(dir, "*.log")}}, Sink: s, StateDir: state, Drain: drain})
		if err != nil {
			t.Fatal(err)
		}
		if err := sh.Run(ctx); err != nil {
			t.Fatal(err)
		}
		ps, _ := loadState(state)
		shipped := len(ps) == 1 && ps[0].Offset == int64(len(lines(0, 10)))
		if drain > 0 && (!shipped || s.live != 1) || drain < 0 && (len(ps) != 0 || s.live != 0) {
			t.Errorf("drain %v: %d Sends with a live context, offsets %+v", drain, s.live, ps)
		}
	}
}

// ctxSink takes a batch only while its context is live, and counts those
// (all with a deadline: the drain's).
type ctxSink struct{ live int }

func (s *ctxSink) Send(ctx context.Context, _ string, _ map[string]string, _ []Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); ok {
		s.live++
	}
	return nil
}

// The observer hears of each failure, of the recovery once, before the
// batch that recovered, and of each batch shipped with its tag, records
// and bytes.
func TestShipperObserver(t *testing.T) {
	dir, log, state := shipperDir(t)
	appendTo(t, log, lines(0, 10))
	s := &recSink{}
	s.set(false, true)
	ev := &events{}
	stop := runShipper(t, ShipperConfig{Files: []FileSpec{{Glob: filepath.Join(dir, "*.log")}}, Sink: s, StateDir: state, Idle: 20 * time.Millisecond, Observer: ev})
	waitFor(t, "two failures", func() bool { return len(ev.list()) >= 2 })
	s.set(false, false)
	waitFor(t, "10 records", func() bool { return len(s.data()) == 10 })
	appendTo(t, log, lines(10, 15))
	waitFor(t, "15 records", func() bool { return len(s.data()) == 15 })
	stop()
	got := ev.list()
	i := 0
	for i < len(got) && got[i] == "failed receiver down" {
		i++
	}
	bytes := 0
	for _, l := range strings.Split(strings.TrimSuffix(lines(0, 10), "\n"), "\n") {
		bytes += len(l)
	}
	if i < 2 || len(got) < i+3 || got[i] != "recovered" || got[i+1] != fmt.Sprintf("shipped kolla.keystone.keystone 10 %d", bytes) {
		t.Fatalf("events %q", got)
	}
	for _, e := range got[i+2:] {
		if !strings.HasPrefix(e, "shipped kolla.keystone.keystone ") {
			t.Errorf("events after the recovery %q", got[i+1:])
		}
	}
}

// After every commit, each offset's marker is the one the file has there:
// lines shorter and longer than the marker, tracebacks, pieces of
// over-long lines, batches of a few records (a marker from bytes of the
// batch before), across a rotation, and from a saved offset.
func TestShipperMarks(t *testing.T) {
	dir, log, state := shipperDir(t)
	var content strings.Builder
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 300 {
		switch n := r.IntN(20); {
		case n == 0:
			content.WriteString(traceback)
		case n == 1:
			content.WriteString(strings.Repeat("long", 70) + "\n") // 280 bytes: pieces of 100
		case n < 12:
			content.WriteString(strings.Repeat("s", r.IntN(70)) + "\n")
		default:
			content.WriteString(lines(i, i+1))
		}
	}
	w := writer(t, log)
	w.WriteString(content.String())
	var mu sync.Mutex
	var checked int
	obs := &markChecker{t: t, dir: dir, state: state, mu: &mu, checked: &checked}
	cfg := ShipperConfig{Files: []FileSpec{{Glob: filepath.Join(dir, "*.log")}}, Sink: &recSink{}, StateDir: state, Idle: 20 * time.Millisecond, MaxLine: 100, BatchBytes: 200, Observer: obs}
	stop := runShipper(t, cfg)
	size := int64(content.Len())
	waitFor(t, "the file shipped", func() bool {
		ps, _ := loadState(state)
		return len(ps) == 1 && ps[0].Offset == size
	})
	renameFile(t, log, log+".1")
	w.WriteString(content.String()) // the old file's writer, before it reopens
	writer(t, log).WriteString(content.String())
	waitFor(t, "both files shipped", func() bool { return shippedTo(t, state, log, size) })
	stop()
	// Started again: the first record after the saved offset is short,
	// its marker made of bytes read before the stop.
	appendTo(t, log, "y\n")
	stop = runShipper(t, cfg)
	waitFor(t, "y shipped", func() bool { return shippedTo(t, state, log, size+2) })
	appendTo(t, log, content.String())
	waitFor(t, "the rest shipped", func() bool { return shippedTo(t, state, log, 2*size+2) })
	stop()
	got := strings.Join(cfg.Sink.(*recSink).data(), "\n") + "\n"
	if want := strings.Repeat(content.String(), 3) + "y\n" + content.String(); strings.ReplaceAll(got, "\n", "") != strings.ReplaceAll(want, "\n", "") {
		t.Errorf("shipped %d bytes, want %d", len(got), len(want))
	}
	mu.Lock()
	defer mu.Unlock()
	if checked < 20 {
		t.Errorf("%d commits checked", checked)
	}
}

// markChecker checks, after each commit, that every offset's marker is
// the file's there.
type markChecker struct {
	t          *testing.T
	dir, state string
	mu         *sync.Mutex
	checked    *int
}

func (c *markChecker) Shipped(string, int, int) {
	ps, err := loadState(c.state)
	if err != nil {
		c.t.Error(err)
		return
	}
	for _, p := range ps {
		f := findByInode(c.dir, p)
		if f == nil {
			c.t.Errorf("no file for %+v", p)
			continue
		}
		m, err := markAt(f, p.Offset)
		f.Close()
		if err != nil || m != p.Mark {
			c.t.Errorf("offset %d: mark %q, the file's %q (%v)", p.Offset, p.Mark, m, err)
		}
	}
	c.mu.Lock()
	*c.checked++
	c.mu.Unlock()
}
func (c *markChecker) Failed(err error)       { c.t.Error(err) }
func (c *markChecker) Recovered()             {}
func (c *markChecker) Skipped(string, string) {}

func findByInode(dir string, p Position) *os.File {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if f, err := os.Open(filepath.Join(dir, e.Name())); err == nil {
			if ok, _ := sameFile(f, p); ok {
				return f
			}
			f.Close()
		}
	}
	return nil
}

// A message that never ends (a header line, then lines without one) is
// cut into records of about a batch, nothing lost; a batch of empty lines
// holds one record per 64 bytes of BatchBytes.
func TestShipperBounds(t *testing.T) {
	dir, log, state := shipperDir(t)
	var msg strings.Builder
	msg.WriteString("2026-11-23 17:40:00.123 4242 INFO keystone.server [-] a long message\n")
	for i := range 300 {
		fmt.Fprintf(&msg, "  continued %d\n", i)
	}
	empty := strings.Repeat("\n", 1000)
	appendTo(t, log, msg.String()+lines(0, 1)+empty)
	s := &recSink{}
	stop := runShipper(t, ShipperConfig{Files: []FileSpec{{Glob: filepath.Join(dir, "*.log")}}, Sink: s, StateDir: state, Idle: 20 * time.Millisecond, BatchBytes: 1024})
	waitFor(t, "the file shipped", func() bool {
		ps, _ := loadState(state)
		return len(ps) == 1 && ps[0].Offset == int64(msg.Len()+len(lines(0, 1))+len(empty))
	})
	stop()
	got := s.data()
	var rebuilt []string
	cuts := 0
	for _, d := range got {
		if len(d) > 1024+20 {
			t.Errorf("a record of %d bytes", len(d))
		}
		if strings.HasPrefix(d, "  continued") {
			cuts++
		}
		rebuilt = append(rebuilt, d)
	}
	if want := strings.TrimSuffix(msg.String()+lines(0, 1)+empty, "\n"); strings.Join(rebuilt, "\n") != want {
		t.Errorf("the records are not the file")
	}
	if cuts < 3 {
		t.Errorf("the message was cut %d times", cuts)
	}
	for _, snd := range s.sends {
		if len(snd.recs) > 1024/64+1 {
			t.Errorf("a Send of %d records", len(snd.recs))
		}
	}
}

// The service can write its log directory. A symlink to a secret, a FIFO
// and a socket under the glob are skipped unopened, each reported once;
// the real file beside them ships, and the shipper stops at once when
// asked (a FIFO opened for reading would block it, and the agent, until
// SIGKILL). A file later replaced by a symlink stops shipping, and one
// that becomes a file again ships.
func TestShipperSkipsWhatIsNotAFile(t *testing.T) {
	dir, log, state := shipperDir(t)
	secret := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(secret, []byte("S3CRET-NOT-A-LOG\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "evil.log")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "a.log"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "s.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	appendTo(t, log, lines(0, 10))
	s := &recSink{}
	ev := &events{}
	sh, err := NewShipper(ShipperConfig{Files: []FileSpec{{Glob: filepath.Join(dir, "*.log")}}, Sink: s, StateDir: state,
		Idle: 20 * time.Millisecond, Rescan: 50 * time.Millisecond, Observer: ev})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sh.Run(ctx) }()
	waitFor(t, "10 records", func() bool { return len(s.data()) >= 10 })
	waitFor(t, "three skips", func() bool { return len(skips(ev)) >= 3 })

	// A followed file swapped for a link to the secret: not read through.
	other := filepath.Join(dir, "other.log")
	appendTo(t, other, lines(100, 105))
	waitFor(t, "15 records", func() bool { return len(s.data()) >= 15 })
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, other); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the swap skipped", func() bool { return slices.Contains(skips(ev), "skipped symlink other.log") })
	// And a file again: shipped.
	os.Remove(other)
	appendTo(t, other, lines(200, 203))
	waitFor(t, "18 records", func() bool { return len(s.data()) >= 18 })

	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the shipper did not stop: blocked on the FIFO?")
	}
	t.Logf("stopped in %v", time.Since(start))
	for _, d := range s.data() {
		if strings.Contains(d, "S3CRET") {
			t.Fatalf("the secret behind a symlink was shipped: %q", d)
		}
	}
	got := skips(ev)
	slices.Sort(got)
	want := []string{"skipped FIFO a.log", "skipped socket s.log", "skipped symlink evil.log", "skipped symlink other.log"}
	if !slices.Equal(got, want) {
		t.Errorf("skips %q, want each once: %q", got, want)
	}
}

func skips(ev *events) []string {
	var out []string
	for _, e := range ev.list() {
		if strings.HasPrefix(e, "skipped ") {
			out = append(out, e)
		}
	}
	return out
}

// shippedTo: the saved offsets have the file at log at off, and any other
// file (one done, kept for a late line) at its end.
func shippedTo(t *testing.T, state, log string, off int64) bool {
	t.Helper()
	live, err := os.Stat(log)
	if err != nil {
		return false
	}
	ps, _ := loadState(state)
	found := false
	for _, p := range ps {
		fi := statPos(t, p)
		if os.SameFile(fi, live) {
			found = p.Offset == off
		} else if p.Offset != fi.Size() {
			return false
		}
	}
	return found
}
