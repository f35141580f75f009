package logs

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The real logrotate (Debian's, installed by hack/install-tools.sh) with
// kolla's settings rotates the file every 100 ms while a writer appends
// 100,000 numbered lines and the follower reads: with rename + create (the
// writer reopens, as a service does on its postrotate signal) every line
// arrives once and in order; with copytruncate every line arrives in order,
// except those logrotate itself loses between its copy and its truncate
// (counted and logged: that window is logrotate's, no tailer can close it).
func TestFollowUnderLogrotate(t *testing.T) {
	lr, err := exec.LookPath("logrotate")
	if err != nil {
		lr = "/usr/sbin/logrotate"
	}
	if _, err := os.Stat(lr); err != nil {
		t.Fatalf("logrotate is not installed (hack/install-tools.sh services): %v", err)
	}
	for _, mode := range []string{"create", "copytruncate"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "keystone.log")
			conf := filepath.Join(dir, "logrotate.conf")
			os.WriteFile(conf, []byte(fmt.Sprintf(`%s {
    %s
    rotate 10000
    compress
    delaycompress
    missingok
    notifempty
}
`, log, mode)), 0o644)
			const total = 100_000
			var written, rotations atomic.Int64
			done := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() { // the service
				defer close(done)
				f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
				if err != nil {
					t.Error(err)
					return
				}
				for i := range total {
					if i%200 == 0 && mode == "create" {
						// Reopen when the file at the path is another:
						// what a service does on its postrotate signal.
						if a, err1 := f.Stat(); err1 == nil {
							if b, err2 := os.Stat(log); err2 == nil && !os.SameFile(a, b) {
								f.Close()
								f, _ = os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
							}
						}
					}
					fmt.Fprintf(f, "2026-11-23 17:40:00.%06d 4242 INFO keystone.server [-] line %d\n", i, i)
					written.Add(1)
					if i%100 == 99 {
						time.Sleep(time.Millisecond) // ~50,000 lines/s
					}
					// At least one rotation per 10,000 lines, however slow
					// logrotate starts on a loaded machine.
					for wait := time.Now(); i%10_000 == 9_999 && rotations.Load() < int64(i/10_000) && time.Since(wait) < 10*time.Second; {
						time.Sleep(5 * time.Millisecond)
					}
				}
				f.Close()
			})
			wg.Go(func() { // logrotate, every 100 ms
				state := filepath.Join(dir, "logrotate.state")
				for {
					select {
					case <-done:
						return
					case <-time.After(100 * time.Millisecond):
					}
					if out, err := exec.Command(lr, "-f", "-s", state, conf).CombinedOutput(); err != nil {
						t.Errorf("logrotate: %v: %s", err, out)
						return
					}
					rotations.Add(1)
				}
			})
			fl := newFollower(log, 256<<10, nil)
			defer fl.Close()
			next, missing, dups := 0, 0, 0
			got := make([]bool, total)
			deadline := time.Now().Add(60 * time.Second)
			for next < total && time.Now().Before(deadline) {
				ls, err := fl.Read(1 << 20)
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range ls {
					s := string(l.Data)
					n, err := strconv.Atoi(s[strings.LastIndexByte(s, ' ')+1:])
					if err != nil {
						t.Fatalf("not a line of the writer: %q", s)
					}
					if n >= 0 && n < total {
						got[n] = true
					}
					switch {
					case n < next:
						dups++
					case n > next:
						missing += n - next
						next = n + 1
					default:
						next++
					}
				}
				if len(ls) == 0 {
					time.Sleep(2 * time.Millisecond)
				}
			}
			wg.Wait()
			// Every line that exists in some file (the live one, the copies,
			// the compressed ones: rotate keeps them all) was read.
			present := linesOnDisk(t, dir, total)
			notRead := 0
			for n, ok := range present {
				if ok && !got[n] {
					notRead++
				}
			}
			lost := 0
			for n := range total {
				if !present[n] {
					lost++
				}
			}
			t.Logf("%s: %d lines, %d rotations, %d not read (lost by logrotate: %d), %d duplicates", mode, total, rotations.Load(), missing, lost, dups)
			if notRead != 0 {
				t.Errorf("%d lines that are on disk were not read", notRead)
			}
			if next != total || dups != 0 {
				t.Fatalf("read up to line %d of %d, %d duplicates", next, total, dups)
			}
			if n := rotations.Load(); n < 5 {
				t.Fatalf("only %d rotations: the test did not test rotation", n)
			}
			if mode == "create" && missing != 0 {
				t.Errorf("%d lines lost with rename rotation", missing)
			}
		})
	}
}

// linesOnDisk marks the writer's line numbers found in the files of dir,
// gzip-compressed ones included.
func linesOnDisk(t *testing.T, dir string, total int) []bool {
	t.Helper()
	present := make([]bool, total)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "keystone.log") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = f
		if strings.HasSuffix(e.Name(), ".gz") {
			if r, err = gzip.NewReader(f); err != nil {
				t.Fatal(err)
			}
		}
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			s := sc.Text()
			if n, err := strconv.Atoi(s[strings.LastIndexByte(s, ' ')+1:]); err == nil && n >= 0 && n < total {
				present[n] = true
			}
		}
		f.Close()
	}
	return present
}
