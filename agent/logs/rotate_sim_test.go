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
// system calls come: the steps of shiftRotated, then log.1 created, log
// copied into it in chunks, and log truncated. pause is called between
// the steps: the follower runs there.
func fastCopytruncate(log string, pause func()) error {
	if err := shiftRotated(log, pause); err != nil {
		return err
	}
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

// fastCreate does, in process, what logrotate (create, compress,
// delaycompress, a large rotate) does to log, in the order its system
// calls come: the steps of shiftRotated, then log renamed to log.1 and a
// new log created. The service goes on writing to log.1 until it is told
// (reopen: logrotate's postrotate) to open the path again.
func fastCreate(log string, pause, reopen func()) error {
	if err := shiftRotated(log, pause); err != nil {
		return err
	}
	if err := os.Rename(log, log+".1"); err != nil {
		return err
	}
	pause()
	f, err := os.OpenFile(log, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		// The service opened the path again since the rename (told late
		// by the rotation before): logrotate moves its file aside, to
		// NAME-DATE.backup (unique here: rotations come milliseconds
		// apart), and creates the path again.
		if err := os.Rename(log, log+time.Now().Format("-20060102150405.000000000.backup")); err != nil {
			return err
		}
		f, err = os.OpenFile(log, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	}
	if err != nil {
		return err
	}
	f.Close()
	pause()
	reopen()
	return nil
}

// shiftRotated does logrotate's first steps (with compress,
// delaycompress): log.1 compressed to log.1.gz (created, written in two
// steps, given log.1's mtime, log.1 removed), then every log.N.gz renamed
// to log.N+1.gz, the oldest first.
func shiftRotated(log string, pause func()) error {
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
	return nil
}

// The follower reads while the service writes and logrotate's
// copytruncate steps (fastCopytruncate, in process) rotate the file every
// few milliseconds, between the follower's looks as well as during them,
// and the follower now and then stays away for several rotations: every
// line on disk is read, once and in order. The seeds choose the pauses;
// the interleavings differ at every run (the follower's log is shown on a
// failure).
func TestFollowUnderFastCopytruncate(t *testing.T) {
	followUnderFastRotation(t, "copytruncate")
}

// As TestFollowUnderFastCopytruncate, with logrotate's create steps
// (fastCreate): the service writes to the renamed file until it opens
// the path again.
func TestFollowUnderFastCreate(t *testing.T) {
	followUnderFastRotation(t, "create")
}

// followUnderFastRotation runs followSeedUnderFastRotation with 8 seeds in
// parallel (2 with -short).
func followUnderFastRotation(t *testing.T, mode string) {
	seeds := 8
	if testing.Short() {
		seeds = 2
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			followSeedUnderFastRotation(t, mode, uint64(seed))
		})
	}
}

func followSeedUnderFastRotation(t *testing.T, mode string, seed uint64) {
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
	var reopen atomic.Bool
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() { // the service
		defer close(done)
		defer func() { w.Close() }() // the one open last
		rng := rand.New(rand.NewPCG(seed, 1))
		for i := range total {
			if reopen.Swap(false) {
				w.Close()
				var err error
				if w, err = os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err != nil {
					t.Error(err)
					return
				}
			}
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
			rotate := func() error { return fastCopytruncate(log, pause) }
			if mode == "create" {
				rotate = func() error { return fastCreate(log, pause, func() { reopen.Store(true) }) }
			}
			if err := rotate(); err != nil {
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
		case 0: // away for several rotations, now and then for tens
			away := 20 + rng.IntN(60)
			if rng.IntN(5) == 0 {
				away = 100 + rng.IntN(400)
			}
			time.Sleep(time.Duration(away) * time.Millisecond)
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
