package logs

import (
	"compress/gzip"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// logrotate is the real logrotate (Debian's, installed by
// hack/install-tools.sh) with kolla's settings for one log file, rotating
// by mode: create (rename, then a new file) or copytruncate. It keeps
// every file it rotates (rotate 10000), so that the lines on disk can be
// counted.
type logrotate struct{ bin, conf, state string }

func newLogrotate(t *testing.T, dir, log, mode string) *logrotate {
	t.Helper()
	bin, err := exec.LookPath("logrotate")
	if err != nil {
		bin = "/usr/sbin/logrotate"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("logrotate is not installed (hack/install-tools.sh services): %v", err)
	}
	lr := &logrotate{bin: bin, conf: filepath.Join(dir, "logrotate.conf"), state: filepath.Join(dir, "logrotate.state")}
	err = os.WriteFile(lr.conf, []byte(fmt.Sprintf(`%s {
    %s
    rotate 10000
    compress
    delaycompress
    missingok
    notifempty
}
`, log, mode)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return lr
}

// rotate rotates the file now.
func (lr *logrotate) rotate() error {
	if out, err := exec.Command(lr.bin, "-f", "-s", lr.state, lr.conf).CombinedOutput(); err != nil {
		return fmt.Errorf("logrotate: %v: %s", err, out)
	}
	return nil
}

// underLogrotate starts a service that writes total numbered lines to
// log (serviceLine), about perMs a millisecond, and logrotate rotating it
// every rotateEvery once the reader calls read (it has read from the
// file); wait waits for both and returns the number of rotations.
// In create mode the service reopens the path when it is another file, as
// a service does on its postrotate signal. However slow logrotate starts
// on a loaded machine, there is a rotation at least every perRotation
// lines. Both stop when the test ends.
func underLogrotate(t *testing.T, lr *logrotate, log, mode string, total, perMs, perRotation int) (wait func() int64, read func()) {
	ready := make(chan struct{})
	read = sync.OnceFunc(func() { close(ready) })
	var rotations atomic.Int64
	done, stop := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
	})
	wg.Go(func() { // the service
		defer close(done)
		f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Error(err)
			return
		}
		defer func() { f.Close() }()
		for i := range total {
			if i%200 == 0 && mode == "create" {
				if a, err1 := f.Stat(); err1 == nil {
					if b, err2 := os.Stat(log); err2 == nil && !os.SameFile(a, b) {
						f.Close()
						f, _ = os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
					}
				}
			}
			f.WriteString(serviceLine(i) + "\n") // one write, as a logging library does
			if i%perMs == perMs-1 {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
			}
			for wait := time.Now(); i%perRotation == perRotation-1 && rotations.Load() < int64(i/perRotation) && time.Since(wait) < 10*time.Second; {
				time.Sleep(5 * time.Millisecond)
			}
		}
	})
	wg.Go(func() { // logrotate, every rotateEvery
		// Not before the reader has read from the file (read): one that
		// comes to it rotated starts afresh at the live file, after lines
		// a loaded machine let logrotate move away first.
		select {
		case <-ready:
		case <-done:
			return
		case <-stop:
			return
		}
		for {
			select {
			case <-done:
				return
			case <-stop:
				return
			case <-time.After(rotateEvery):
			}
			if err := lr.rotate(); err != nil {
				t.Error(err)
				return
			}
			rotations.Add(1)
		}
	})
	return func() int64 {
		wg.Wait()
		return rotations.Load()
	}, read
}

// rotateEvery is how often the logrotate tests rotate: the race build's
// shipper, several times slower, falls behind by rotations, and reads the
// unread ends from compressed copies.
const rotateEvery = 100 * time.Millisecond

const serviceStamp = "2026-11-23 17:40:00."

// serviceLine is line n of the service, numbered in its timestamp too.
func serviceLine(n int) string {
	return fmt.Sprintf("%s%06d 4242 INFO keystone.server [-] line %d", serviceStamp, n, n)
}

// lineNumber says which of the service's lines s is (whole), or starts
// (torn: n is -1 when its timestamp is cut too), and false when it is not
// one. copytruncate copies while the service writes, and a write that
// crosses a page is seen in two steps: the copy can end inside a line.
func lineNumber(s string) (n int, whole, ok bool) {
	if s == "" {
		return -1, false, false
	}
	if n, err := strconv.Atoi(s[strings.LastIndexByte(s, ' ')+1:]); err == nil && s == serviceLine(n) {
		return n, true, true
	}
	const stampLen = len(serviceStamp) + 6
	if len(s) < stampLen {
		digits := strings.Trim(s[min(len(s), len(serviceStamp)):], "0123456789") == ""
		return -1, false, strings.HasPrefix(serviceStamp, s[:min(len(s), len(serviceStamp))]) && digits
	}
	n, err := strconv.Atoi(s[len(serviceStamp):stampLen])
	return n, false, err == nil && strings.HasPrefix(serviceLine(n), s)
}

// The follower reads while the service writes 100,000 lines and logrotate
// rotates the file every 100 ms: with rename + create every line arrives
// once and in order; with copytruncate every line arrives in order, except
// those logrotate itself loses between its copy and its truncate (counted
// and logged: that window is logrotate's, no tailer can close it).
func TestFollowUnderLogrotate(t *testing.T) {
	for _, mode := range []string{"create", "copytruncate"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "keystone.log")
			const total = 100_000
			wait, read := underLogrotate(t, newLogrotate(t, dir, log, mode), log, mode, total, 100, 10_000)
			finished := make(chan int64, 1)
			go func() { finished <- wait() }()
			fl := newFollower(log, 256<<10, nil)
			defer fl.Close()
			a := newArrivals(total)
			var rotations int64 = -1
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
				ls, err := readLines(fl, 1<<20)
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range ls {
					if !a.add("", string(l.Data)) {
						t.Fatalf("not a line of the service: %q", l.Data)
					}
				}
				if len(ls) > 0 {
					read()
					continue
				}
				if rotations >= 0 {
					break // nothing more after the end
				}
				select {
				case rotations = <-finished:
				case <-time.After(2 * time.Millisecond):
				}
			}
			if rotations < 0 {
				t.Fatal("the service did not finish in time")
			}
			d := linesOnDisk(t, dir, total)
			notRead, lost := a.missing(d)
			t.Logf("%s: %d lines, %d rotations, %d not read (lost by logrotate: %d), %d duplicates, %d torn by logrotate's copy", mode, total, rotations, lost, d.window, a.dups, a.torn)
			if notRead != 0 || a.late != 0 || a.dups != 0 {
				t.Errorf("%d lines that are on disk were not read, %d out of order, %d duplicates", notRead, a.late, a.dups)
			}
			if a.torn > d.torn || a.tornOnDisk(d) {
				t.Errorf("%d torn lines read, %d torn files on disk; a torn line's whole on disk: %v", a.torn, d.torn, a.tornOnDisk(d))
			}
			if rotations < 5 {
				t.Fatalf("only %d rotations: the test did not test rotation", rotations)
			}
			if mode == "create" && lost != 0 {
				t.Errorf("%d lines lost with rename rotation", lost)
			}
		})
	}
}

// The whole shipper, to a forward receiver that acks (forward_test.go's),
// while the service writes 1,000,000 lines and logrotate rotates the file
// every 100 ms: every line arrives, in order within its file (and across
// them), except, with copytruncate, lines of logrotate's own window
// (counted by the lines on disk); no duplicates, as no Send failed (a
// failure may repeat what was not acknowledged: a batch).
func TestShipUnderLogrotate(t *testing.T) {
	for _, mode := range []string{"create", "copytruncate"} {
		t.Run(mode, func(t *testing.T) {
			start := time.Now()
			dir := filepath.Join(t.TempDir(), "keystone")
			mkdir(t, dir)
			log := filepath.Join(dir, "keystone.log")
			const total = 1_000_000
			r := newReceiver(t, nil)
			var failures atomic.Int64
			fw := newForward(t, ForwardConfig{Address: r.addr(), Logger: slog.New(slog.DiscardHandler), OnHealth: func(err error) {
				if err != nil {
					failures.Add(1)
				}
			}})
			obs := &countObserver{}
			cfg := ShipperConfig{Logger: forwardTestLogger(t), Files: []FileSpec{{Glob: filepath.Join(dir, "*.log")}}, Sink: &ForwardSink{F: fw}, StateDir: filepath.Join(t.TempDir(), "state"), Idle: 50 * time.Millisecond, BatchBytes: 512 << 10, Observer: obs}
			var once sync.Once
			stop := runShipper(t, cfg)
			t.Cleanup(func() { once.Do(stop) }) // before the receiver and the client go
			wait, read := underLogrotate(t, newLogrotate(t, dir, log, mode), log, mode, total, 200, 20_000)
			finished := make(chan int64, 1)
			go func() { finished <- wait() }()

			// The receiver's records are taken as they come: it keeps
			// every one until then.
			a := newArrivals(total)
			foreign := 0
			collect := func() {
				r.mu.Lock()
				recs := r.recs
				r.recs = nil
				r.mu.Unlock()
				if len(recs) > 0 {
					read()
				}
				for _, e := range recs {
					msg, _ := e.fields["message"].([]byte)
					id, _ := e.fields["id"].(string)
					for _, l := range strings.Split(string(msg), "\n") {
						if !a.add(id, l) {
							if foreign++; foreign <= 3 {
								t.Errorf("not a line of the service: %q", l)
							}
						}
					}
				}
			}
			var rotations int64
			for done := false; !done; {
				select {
				case rotations = <-finished:
					done = true
				case <-time.After(100 * time.Millisecond):
					collect()
				}
			}
			wrote := time.Since(start)
			d := linesOnDisk(t, dir, total)
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if collect(); func() bool { n, _ := a.missing(d); return n == 0 }() {
					break
				}
			}
			once.Do(stop)
			collect()
			onDisk, lost := a.missing(d)
			fails := failures.Load() + obs.failed.Load()
			t.Logf("%s: %d lines, %d rotations, written in %v, %v in all; %d lost (logrotate's window: %d lines not on disk), %d duplicates, %d out of order in their file, %d out of order across files, %d torn by logrotate's copy, %d Send failures",
				mode, total, rotations, wrote.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), lost, d.window, a.dups, a.lateInFile, a.late, a.torn, fails)
			if onDisk != 0 {
				t.Errorf("%d lines that are on disk did not arrive", onDisk)
				a.lostByFile(t, dir, total)
			}
			if mode == "create" && lost != 0 {
				t.Errorf("%d lines lost with rename rotation", lost)
			}
			if a.lateInFile != 0 || a.late != 0 {
				t.Errorf("%d lines out of order in their file, %d across files", a.lateInFile, a.late)
			}
			if a.torn > d.torn || a.tornOnDisk(d) {
				t.Errorf("%d torn lines arrived, %d torn files on disk; a torn line's whole on disk: %v", a.torn, d.torn, a.tornOnDisk(d))
			}
			// A failure repeats at most the batch not acknowledged.
			if batch := int64(cfg.BatchBytes / 60); int64(a.dups) > fails*batch {
				t.Errorf("%d duplicates for %d failures: lines %v", a.dups, fails, a.dupRuns)
			}
			if rotations < 20 {
				t.Fatalf("only %d rotations: the test did not test rotation", rotations)
			}
		})
	}
}

// arrivals tallies the service's lines as they arrive, with the ids of
// the files they come from.
type arrivals struct {
	count      []uint8
	last       map[string]int // by file: the highest line number
	max        int
	dups       int
	dupRuns    [][2]int // the duplicates' line numbers, as runs
	lateInFile int      // a line that comes after a later one of its file
	late       int      // after a later one of any file
	torn       int      // the start of a line
	tornAt     []int    // their numbers, when known
}

func newArrivals(total int) *arrivals {
	return &arrivals{count: make([]uint8, total), last: map[string]int{}, max: -1}
}

// add counts line l of file id; false: it is not the service's.
func (a *arrivals) add(id, l string) bool {
	n, whole, ok := lineNumber(l)
	switch {
	case !ok || n >= len(a.count):
		return false
	case !whole:
		a.torn++
		if n >= 0 {
			a.tornAt = append(a.tornAt, n)
		}
		return true
	case a.count[n] > 0:
		a.dups++
		if k := len(a.dupRuns); k > 0 && a.dupRuns[k-1][1] == n-1 {
			a.dupRuns[k-1][1] = n
		} else if k < 20 {
			a.dupRuns = append(a.dupRuns, [2]int{n, n})
		}
	default:
		if l, ok := a.last[id]; ok && n < l {
			a.lateInFile++
		}
		if n < a.max {
			a.late++
		}
	}
	if a.count[n] < 255 {
		a.count[n]++
	}
	if l, ok := a.last[id]; !ok || n > l {
		a.last[id] = n
	}
	a.max = max(a.max, n)
	return true
}

// missing counts the lines that did not arrive: those on disk, and all.
func (a *arrivals) missing(d onDisk) (fromDisk, all int) {
	for n, c := range a.count {
		if c == 0 {
			all++
			if d.present[n] {
				fromDisk++
			}
		}
	}
	return fromDisk, all
}

// lostByFile logs, for each file of dir holding lines that did not
// arrive, which: whole files or their ends tell a file skipped from the
// end of a file not read.
func (a *arrivals) lostByFile(t *testing.T, dir string, total int) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, err := readMaybeGz(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Logf("%s: %v", e.Name(), err)
			continue
		}
		n, got, first, last := 0, 0, -1, -1
		for _, l := range strings.Split(string(b), "\n") {
			if k, whole, _ := lineNumber(l); whole && k < total {
				n++
				if a.count[k] > 0 {
					got++
					continue
				}
				if first < 0 {
					first = k
				}
				last = k
			}
		}
		if got < n {
			t.Logf("%s: %d of its %d lines arrived; lines %d to %d did not", e.Name(), got, n, first, last)
		}
	}
}

// readMaybeGz reads a file, decompressed when its name ends in .gz.
func readMaybeGz(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		if r, err = gzip.NewReader(f); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(r)
}

// tornOnDisk: a line that arrived torn is whole on disk (not a line
// logrotate lost).
func (a *arrivals) tornOnDisk(d onDisk) bool {
	return slices.ContainsFunc(a.tornAt, func(n int) bool { return d.present[n] })
}

// onDisk is what the files of a directory hold of the service's lines.
type onDisk struct {
	present []bool
	window  int // lines on no file: lost by logrotate
	torn    int // files that end inside a line
}

// linesOnDisk reads the service's lines in the files of dir,
// gzip-compressed ones included.
func linesOnDisk(t *testing.T, dir string, total int) onDisk {
	t.Helper()
	d := onDisk{present: make([]bool, total)}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "keystone.log") {
			continue
		}
		b, err := readMaybeGz(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			d.torn++
		}
		for _, l := range strings.Split(string(b), "\n") {
			if n, whole, _ := lineNumber(l); whole && n < total {
				d.present[n] = true
			}
		}
	}
	for _, ok := range d.present {
		if !ok {
			d.window++
		}
	}
	return d
}

// The sink is down while logrotate (compress, delaycompress) rotates the
// file three times: the shipper, its batch full, reads nothing meanwhile.
// Back up, it ships every line once, in order: the rest of the first file
// (create: through its descriptor, compressed on disk and deleted;
// copytruncate: from its compressed copy, keystone.log.3.gz), the files
// rotated in between, never opened (keystone.log.2.gz, keystone.log.1),
// then the live one.
func TestShipperRotatedWhileSinkDown(t *testing.T) {
	for _, mode := range []string{"create", "copytruncate"} {
		t.Run(mode, func(t *testing.T) {
			dir, log, state := shipperDir(t)
			lr := newLogrotate(t, dir, log, mode)
			appendTo(t, log, lines(0, 100))
			m := &memSink{}
			obs := &countObserver{}
			cfg := ShipperConfig{Files: []FileSpec{{Glob: filepath.Join(dir, "*.log")}}, Sink: m, StateDir: state, Idle: 50 * time.Millisecond, BatchBytes: 1 << 10, Observer: obs}
			stop := runShipper(t, cfg)
			defer stop()
			waitLines(t, m, 100)
			m.setDown(true)
			appendTo(t, log, lines(100, 200))
			waitFor(t, "a Send to fail", func() bool { return obs.failed.Load() > 0 })
			for _, next := range [][2]int{{200, 300}, {300, 400}, {400, 410}} {
				if err := lr.rotate(); err != nil {
					t.Fatal(err)
				}
				appendTo(t, log, lines(next[0], next[1]))
			}
			for _, f := range []string{".3.gz", ".2.gz", ".1"} {
				if _, err := os.Stat(log + f); err != nil {
					t.Fatalf("logrotate did not leave %s: %v", f, err)
				}
			}
			m.setDown(false)
			waitFor(t, "the live file's lines", func() bool { n := numbers(m.lines()); return len(n) > 0 && n[len(n)-1] == 409 })
			got := numbers(m.lines())
			want := make([]int, 410)
			for i := range want {
				want[i] = i
			}
			if !slices.Equal(got, want) {
				t.Fatalf("got lines %v, want %v", got, want)
			}
		})
	}
}
