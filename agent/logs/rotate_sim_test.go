package logs

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fastCopytruncate does, in process, what logrotate (copytruncate,
// compress, delaycompress, a large rotate) does to log, in the order its
// system calls come: log.1 compressed to log.1.gz (created, written in two
// steps, given log.1's mtime, log.1 removed), every log.N.gz renamed to log.N+1.gz from the
// oldest, then log.1 created, log copied into it in chunks, and log
// truncated. pause is called between the steps: the follower runs there.
func fastCopytruncate(log string, pause func()) error {
	if b, err := os.ReadFile(log + ".1"); err == nil {
		gz, err := os.OpenFile(log+".1.gz", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		zw := gzip.NewWriter(gz)
		half := len(b) / 2
		zw.Write(b[:half])
		zw.Flush()
		pause()
		zw.Write(b[half:])
		zw.Close()
		if fi, err := os.Stat(log + ".1"); err == nil { // logrotate keeps the mtime
			os.Chtimes(gz.Name(), fi.ModTime(), fi.ModTime())
		}
		gz.Close()
		pause()
		if err := os.Remove(log + ".1"); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	n := 1
	for ; ; n++ {
		if _, err := os.Lstat(fmt.Sprintf("%s.%d.gz", log, n+1)); err != nil {
			break
		}
	}
	for ; n >= 1; n-- {
		if err := os.Rename(fmt.Sprintf("%s.%d.gz", log, n), fmt.Sprintf("%s.%d.gz", log, n+1)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if n%8 == 0 {
			pause()
		}
	}
	pause()
	src, err := os.OpenFile(log, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(log+".1", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	buf := make([]byte, 16<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			dst.Write(buf[:k])
			pause()
		}
		if err == io.EOF || k == 0 {
			break
		}
		if err != nil {
			dst.Close()
			return err
		}
	}
	dst.Close()
	pause()
	return src.Truncate(0)
}

// The follower reads while the service writes and logrotate's
// copytruncate steps (fastCopytruncate, in process) rotate the file every
// few milliseconds, between the follower's looks as well as during them,
// and the follower now and then stays away for several rotations: every
// line on disk is read, once and in order. The seeds choose the pauses;
// the interleavings differ at every run (the follower's log is shown on a
// failure).
func TestFollowUnderFastCopytruncate(t *testing.T) {
	seeds := 8
	if testing.Short() {
		seeds = 2
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			followUnderFastCopytruncate(t, uint64(seed))
		})
	}
}

func followUnderFastCopytruncate(t *testing.T, seed uint64) {
	dir := filepath.Join(t.TempDir(), "keystone")
	mkdir(t, dir)
	log := filepath.Join(dir, "keystone.log")
	const total = 60_000
	w := writer(t, log)
	fl := newFollower(log, 256<<10, func(msg string, args ...any) { t.Log(append([]any{msg}, args...)...) })
	defer fl.Close()
	if _, err := readLines(fl, 1); err != nil { // open before the first line: every line is the follower's
		t.Fatal(err)
	}
	var rotations atomic.Int64
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() { // the service
		defer close(done)
		rng := rand.New(rand.NewPCG(seed, 1))
		for i := range total {
			w.WriteString(serviceLine(i) + "\n")
			if rng.IntN(50) == 0 {
				time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
			}
		}
	})
	wg.Go(func() { // logrotate
		rng := rand.New(rand.NewPCG(seed, 2))
		pause := func() {
			if rng.IntN(3) == 0 {
				time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
			}
		}
		for {
			// A new tick of the file clock for each rotation: logrotate
			// runs are processes, milliseconds apart at least.
			select {
			case <-done:
				return
			case <-time.After(5*time.Millisecond + time.Duration(rng.IntN(15_000))*time.Microsecond):
			}
			if err := fastCopytruncate(log, pause); err != nil {
				t.Error(err)
				return
			}
			rotations.Add(1)
		}
	})
	a := newArrivals(total)
	rng := rand.New(rand.NewPCG(seed, 3))
	finished := false
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		select {
		case <-done:
			if !finished {
				wg.Wait()
				finished = true
			}
		default:
		}
		ls, err := readLines(fl, 1+rng.IntN(256<<10))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			late := a.late
			if !a.add("", string(l.Data)) {
				t.Fatalf("not a line of the service: %q", l.Data)
			}
			if a.late > late && late == 0 {
				t.Logf("the first line out of order: %q, after line %d", l.Data, a.max)
			}
		}
		if len(ls) == 0 && finished {
			break
		}
		switch rng.IntN(40) {
		case 0: // away for several rotations
			time.Sleep(time.Duration(20+rng.IntN(60)) * time.Millisecond)
		case 1, 2, 3:
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		}
	}
	if !finished {
		t.Fatal("the service did not finish in time")
	}
	d := linesOnDisk(t, dir, total)
	notRead, lost := a.missing(d)
	t.Logf("seed %d: %d lines, %d rotations, %d not read (lost by logrotate: %d), %d duplicates, %d torn", seed, total, rotations.Load(), lost, d.window, a.dups, a.torn)
	if notRead != 0 || a.late != 0 || a.dups != 0 {
		t.Errorf("seed %d: %d lines that are on disk were not read, %d out of order, %d duplicates (lines %v)", seed, notRead, a.late, a.dups, a.dupRuns)
		a.lostByFile(t, dir, total)
	}
	if a.torn > d.torn || a.tornOnDisk(d) {
		t.Errorf("%d torn lines read, %d torn files on disk; a torn line's whole on disk: %v", a.torn, d.torn, a.tornOnDisk(d))
	}
	if rotations.Load() < 20 {
		t.Fatalf("only %d rotations: the test did not test rotation", rotations.Load())
	}
}
