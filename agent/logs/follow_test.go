package logs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readAll reads what the follower has now, as strings, checking that each
// line's End is where it ends in its file.
func readAll(t *testing.T, fl *follower) []string {
	t.Helper()
	var got []string
	for {
		ls, err := fl.Read(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == 0 {
			return got
		}
		for _, l := range ls {
			got = append(got, string(l.Data))
		}
	}
}

func want(t *testing.T, got []string, from, to int) {
	t.Helper()
	var w []string
	for i := from; i < to; i++ {
		w = append(w, strings.TrimSuffix(lines(i, i+1), "\n"))
	}
	if strings.Join(got, "\n") != strings.Join(w, "\n") {
		t.Fatalf("got %d lines %.200q..., want lines %d..%d", len(got), got, from, to)
	}
}

func writer(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestFollowAppendsAndPartialLines(t *testing.T) {
	log := filepath.Join(t.TempDir(), "app.log")
	fl := newFollower(log, 1024, nil)
	defer fl.Close()
	if got := readAll(t, fl); len(got) != 0 {
		t.Fatalf("no file yet: %q", got)
	}
	w := writer(t, log)
	w.WriteString("first\nsec")
	if got := readAll(t, fl); strings.Join(got, "|") != "first" {
		t.Fatalf("got %q", got)
	}
	w.WriteString("ond\n\xff\xfe not UTF-8\n")
	if got := readAll(t, fl); strings.Join(got, "|") != "second|\xff\xfe not UTF-8" {
		t.Fatalf("got %q", got)
	}
	if p := fl.Positions(); len(p) != 1 || p[0].Offset != int64(len("first\nsecond\n\xff\xfe not UTF-8\n")) {
		t.Errorf("positions %+v", p)
	}
}

// A line longer than the limit (10 MB, limit 256 KiB) is shipped in pieces,
// never skipped: every byte arrives, the last piece ends the line.
func TestFollowLongLine(t *testing.T) {
	log := filepath.Join(t.TempDir(), "app.log")
	big := bytes.Repeat([]byte("0123456789"), 1<<20)
	os.WriteFile(log, append(append(big, '\n'), "after\n"...), 0o644)
	fl := newFollower(log, 256<<10, nil)
	defer fl.Close()
	var got []byte
	var pieces int
	for {
		ls, err := fl.Read(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == 0 {
			break
		}
		for _, l := range ls {
			if string(l.Data) == "after" {
				if l.Cont {
					t.Error("after: Cont")
				}
				continue
			}
			got = append(got, l.Data...)
			pieces++
			if len(l.Data) > 256<<10 {
				t.Fatalf("a piece of %d bytes", len(l.Data))
			}
		}
	}
	if !bytes.Equal(got, big) || pieces != (len(big)+256<<10-1)/(256<<10) {
		t.Errorf("%d bytes in %d pieces, want %d", len(got), pieces, len(big))
	}
}

// Rename rotation with the writer still on the old file for a while: the
// old file's last lines come first, then the new file's, nothing lost.
func TestFollowRenameRotation(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "app.log")
	old := writer(t, log)
	old.WriteString(lines(0, 100))
	fl := newFollower(log, 1024, nil)
	defer fl.Close()
	want(t, readAll(t, fl), 0, 100)
	os.Rename(log, log+".1")
	old.WriteString(lines(100, 110)) // before the service reopens
	if got := readAll(t, fl); len(got) != 10 {
		t.Fatalf("the old file's end: %q", got)
	}
	old.WriteString(lines(110, 115))
	writer(t, log).WriteString(lines(115, 130)) // reopened
	want(t, readAll(t, fl), 110, 130)
}

// copytruncate: the unread end is read from the copy, then the live file
// from its start, whether the new bytes are fewer or more than the old.
func TestFollowCopyTruncate(t *testing.T) {
	for _, after := range []int{10, 500} {
		t.Run(fmt.Sprint(after), func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "app.log")
			w := writer(t, log)
			w.WriteString(lines(0, 100))
			fl := newFollower(log, 1024, nil)
			defer fl.Close()
			want(t, readAll(t, fl), 0, 100)
			w.WriteString(lines(100, 110))
			b, _ := os.ReadFile(log)
			os.WriteFile(log+".1", b, 0o644)
			os.Truncate(log, 0)
			w.WriteString(lines(1000, 1000+after))
			got := readAll(t, fl)
			want(t, got[:10], 100, 110)
			want(t, got[10:], 1000, 1000+after)
		})
	}
}

// Truncated to zero with no copy, and deleted then created again: the new
// bytes are read from the start.
func TestFollowTruncatedAndRecreated(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "app.log")
	w := writer(t, log)
	w.WriteString(lines(0, 50))
	fl := newFollower(log, 1024, nil)
	defer fl.Close()
	want(t, readAll(t, fl), 0, 50)
	os.Truncate(log, 0)
	w.WriteString(lines(2000, 2010))
	want(t, readAll(t, fl), 2000, 2010)
	os.Remove(log)
	writer(t, log).WriteString(lines(3000, 3005))
	want(t, readAll(t, fl), 3000, 3005)
}

// The agent stops (its positions saved) and starts again after a rotation:
// the old file's unshipped end first, then the new file, exactly once.
func TestFollowResume(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "app.log")
	w := writer(t, log)
	w.WriteString(lines(0, 100))
	fl := newFollower(log, 1024, nil)
	want(t, readAll(t, fl), 0, 100)
	saved := fl.Positions()
	fl.Close()
	w.WriteString(lines(100, 120))
	os.Rename(log, log+".1")
	writer(t, log).WriteString(lines(120, 130))

	again := newFollower(log, 1024, nil)
	defer again.Close()
	for _, p := range saved {
		if err := again.resume(p); err != nil {
			t.Fatal(err)
		}
	}
	want(t, readAll(t, again), 100, 130)

	// Stopped with the live file unchanged: it goes on where it was.
	saved = again.Positions()
	again.Close()
	writer(t, log).WriteString(lines(130, 135))
	third := newFollower(log, 1024, nil)
	defer third.Close()
	for _, p := range saved {
		third.resume(p)
	}
	want(t, readAll(t, third), 130, 135)
}
