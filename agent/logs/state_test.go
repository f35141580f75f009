package logs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// position is where shipping of path stands after its first n bytes.
func position(t *testing.T, path string, n int64) Position {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := identify(f)
	if err != nil {
		t.Fatal(err)
	}
	p.Path, p.Offset = path, n
	if p.Mark, err = markAt(f, n); err != nil {
		t.Fatal(err)
	}
	return p
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "2026-11-23 17:30:%02d.%03d 42 INFO keystone.server line %d %s\n", i/1000%60, i%1000, i, strings.Repeat("x", i%50))
	}
	return b.String()
}

// What the agent finds after an absence, for each thing that can happen
// to a log file meanwhile.
func TestLocate(t *testing.T) {
	for _, tc := range []struct {
		name string
		// change happens after the position is taken at the end of the
		// first 100 lines; rest is what the found file holds after the
		// offset.
		change func(t *testing.T, log string)
		how    string
		rest   string
	}{
		{"appended", func(t *testing.T, log string) { appendTo(t, log, lines(100, 120)) }, "same", lines(100, 120)},
		{"renamed, a new file", func(t *testing.T, log string) {
			appendTo(t, log, lines(100, 110))
			os.Rename(log, log+".1")
			appendTo(t, log, lines(0, 5))
		}, "renamed to app.log.1", lines(100, 110)},
		{"renamed twice", func(t *testing.T, log string) {
			appendTo(t, log, lines(100, 110))
			os.Rename(log, log+".1")
			appendTo(t, log, lines(1000, 1150))
			os.Rename(log+".1", log+".2")
			os.Rename(log, log+".1")
			appendTo(t, log, lines(0, 5))
		}, "renamed to app.log.2", lines(100, 110)},
		{"copytruncate", func(t *testing.T, log string) {
			appendTo(t, log, lines(100, 110))
			b, _ := os.ReadFile(log)
			os.WriteFile(log+".1", b, 0o644)
			os.Truncate(log, 0)
			appendTo(t, log, lines(1000, 1200)) // longer than before: only the head and the marker tell
		}, "truncated, copy app.log.1", lines(100, 110)},
		{"truncated, no copy", func(t *testing.T, log string) {
			os.Truncate(log, 0)
			appendTo(t, log, lines(0, 20)+lines(2000, 2200)) // the same head, other bytes at the offset
		}, "truncated", ""},
		{"rewritten from its start", func(t *testing.T, log string) {
			os.Truncate(log, 0)
			appendTo(t, log, lines(500, 700))
		}, "gone", ""},
		{"deleted", func(t *testing.T, log string) { os.Remove(log) }, "gone", ""},
		{"renamed, then compressed", func(t *testing.T, log string) {
			appendTo(t, log, lines(100, 110))
			os.Rename(log, log+".1")
			appendTo(t, log, lines(1000, 1150))
			compressTo(t, log+".1", log+".2.gz")
			os.Rename(log, log+".1")
			appendTo(t, log, lines(0, 5))
		}, "compressed copy app.log.2.gz", lines(100, 110)},
		{"copytruncate, then compressed", func(t *testing.T, log string) {
			appendTo(t, log, lines(100, 110))
			b, _ := os.ReadFile(log)
			os.WriteFile(log+".1", b, 0o644)
			os.Truncate(log, 0)
			appendTo(t, log, lines(1000, 1200))
			compressTo(t, log+".1", log+".2.gz")
		}, "compressed copy app.log.2.gz", lines(100, 110)},
		{"compressed, being compressed", func(t *testing.T, log string) {
			// logrotate removes the file once its compressed copy is
			// whole: while both are there, the file is read.
			appendTo(t, log, lines(100, 110))
			os.Rename(log, log+".1")
			b, _ := os.ReadFile(log + ".1")
			os.WriteFile(log+".1.gz", gzipped(b)[:20], 0o644)
		}, "renamed to app.log.1", lines(100, 110)},
		{"compressed, cut short before the offset", func(t *testing.T, log string) {
			appendTo(t, log, lines(100, 110))
			b, _ := os.ReadFile(log)
			z := gzipped(b)
			os.WriteFile(log+".1.gz", z[:len(z)/2], 0o644)
			os.Remove(log)
		}, "gone", ""},
		{"compressed away", func(t *testing.T, log string) {
			os.Rename(log, log+".1.gz")
			os.Truncate(log+".1.gz", 10)
		}, "gone", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "app.log")
			appendTo(t, log, lines(0, 100))
			p := position(t, log, int64(len(lines(0, 100))))
			tc.change(t, log)
			got, err := locate(p)
			if err != nil {
				t.Fatal(err)
			}
			if got.How != tc.how {
				t.Fatalf("found %q, want %q", got.How, tc.how)
			}
			if got.Tail == nil {
				if tc.rest != "" {
					t.Fatal("no file to read the rest from")
				}
				return
			}
			defer got.Tail.Close()
			b := make([]byte, 1<<20)
			n, _ := got.Tail.ReadAt(b, got.TailFrom)
			if string(b[:n]) != tc.rest {
				t.Errorf("the rest: %d bytes, want %d", n, len(tc.rest))
			}
		})
	}
}

// A file shorter than the fingerprint keeps matching as it grows; another
// file in the same inode (written from its start again) does not.
func TestIdentityShortFileAndReuse(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "app.log")
	appendTo(t, log, "short\n")
	p := position(t, log, 6)
	appendTo(t, log, lines(0, 100))
	got, _ := locate(p)
	if got.How != "same" {
		t.Errorf("a short file that grew: %q", got.How)
	}
	if got.Tail != nil {
		got.Tail.Close()
	}
	os.WriteFile(log, []byte("other\n"+lines(0, 3)), 0o644) // same inode, new content
	if got, _ := locate(p); got.How == "same" {
		t.Errorf("a rewritten file taken for the old one")
	}
}

func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if got, err := loadState(dir); err != nil || got != nil {
		t.Fatalf("no state yet: %v %v", got, err)
	}
	want := []Position{{Path: "/var/log/kolla/keystone/keystone.log", Dev: 1, Ino: 2, Head: "ab", HeadLen: 1024, Offset: 4096, Mark: "cd"}}
	if err := saveState(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := loadState(dir)
	if err != nil || len(got) != 1 || got[0] != want[0] {
		t.Fatalf("loaded %v %v", got, err)
	}
	for _, bad := range []struct{ body, want string }{
		{"{", "offsets.json: unexpected EOF"},
		{`{"version": 2, "files": []}`, "version 2, want 1"},
		{`{"version": 1, "files": [{"path": "/a", "offset": "x"}]}`, "offsets.json: json: cannot unmarshal"},
		{`{"version": 1, "extra": 1}`, `unknown field "extra"`},
		{`{"version": 1, "files": [{"path": "/a", "offset": -1}]}`, "files[0].offset: -1 is negative"},
		{`{"version": 1, "files": [{"path": "a.log"}]}`, `files[0].path: "a.log" is not an absolute path`},
		{`{"version": 1, "files": [{"path": "/a", "headLen": 4096}]}`, "files[0].headLen: 4096"},
	} {
		os.WriteFile(filepath.Join(dir, stateName), []byte(bad.body), 0o644)
		if _, err := loadState(dir); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: error %v, want %q", bad.body, err, bad.want)
		}
	}
}

// The offsets file is read back after any crash: whatever it holds, loading
// it never panics, and what loads saves and loads the same.
func FuzzLoadState(f *testing.F) {
	f.Add([]byte(`{"version": 1, "files": [{"path": "/var/log/kolla/keystone/keystone.log", "dev": 1, "ino": 2, "head": "ab", "headLen": 1024, "offset": 4096, "mark": "cd"}]}`))
	f.Add([]byte(`{"version": 1, "files": []}`))
	f.Add([]byte(`{"version": 1, "files": [{"offset": -1}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, stateName), b, 0o644)
		files, err := loadState(dir)
		if err != nil {
			return
		}
		for _, p := range files {
			if f, err := os.Open(os.Args[0]); err == nil {
				markAt(f, p.Offset) // never panics on what loads
				headMatches(f, p)
				f.Close()
			}
		}
		if err := saveState(dir, files); err != nil {
			t.Fatal(err)
		}
		again, err := loadState(dir)
		if err != nil || len(again) != len(files) {
			t.Fatalf("saved state does not load back: %v", err)
		}
		for i := range files {
			if again[i] != files[i] {
				t.Fatalf("%+v became %+v", files[i], again[i])
			}
		}
	})
}

// compressTo compresses from to to, as logrotate's compress does, and
// removes from.
func compressTo(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, gzipped(b), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(from)
}

// logrotate renames its files one by one (app.log.N to app.log.N+1, the
// oldest first) while the agent lists the directory: a listing holds each
// file once, under the name it has then, however the reads interleave.
func TestSiblingsWhileRenamed(t *testing.T) {
	dir := t.TempDir()
	const n = 300
	want := map[uint64]bool{}
	name := func(i int) string { return filepath.Join(dir, fmt.Sprintf("app.log.%d", i)) }
	for i := 1; i <= n; i++ {
		os.WriteFile(name(i), []byte(lines(i, i+1)), 0o644)
		fi, _ := os.Stat(name(i))
		want[fi.Sys().(*syscall.Stat_t).Ino] = true
	}
	stop, done := make(chan struct{}), make(chan struct{})
	var bursts atomic.Int64
	go func() { // logrotate: one rotation's renames, then a quiet moment
		defer close(done)
		for {
			for i := n; i >= 1; i-- {
				os.Rename(name(i), name(i+1))
			}
			os.Rename(name(n+1), name(1)) // the set of files stays the same
			bursts.Add(1)
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for k := 0; k < 200 || bursts.Load() < 20; k++ {
		got := map[uint64]int{}
		for _, e := range siblings(dir) {
			got[e.ino]++
		}
		for ino, c := range got {
			if c > 1 || !want[ino] {
				t.Fatalf("listing %d: inode %d %d times (a file of the directory: %v)", k, ino, c, want[ino])
			}
		}
		if len(got) != n {
			t.Fatalf("listing %d: %d files of %d", k, len(got), n)
		}
	}
}

// A listed file is the one opened by its name only if its creation time
// is the listing's too: logrotate removes log.1 once compressed and
// creates the next log.1 with the same inode, often, between a listing
// and the open.
func TestSiblingIsTheFileListed(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "app.log.1"), []byte(lines(0, 10)), 0o644)
	sibs := siblings(dir)
	if len(sibs) != 1 {
		t.Fatalf("siblings: %+v", sibs)
	}
	f, err := openCopy(filepath.Join(dir, "app.log.1"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e := sibs[0]
	if !e.is(f) {
		t.Fatalf("the file listed is not the one opened: %+v", e)
	}
	if e.born.IsZero() {
		t.Skip("the filesystem keeps no creation time: only the inode tells files apart")
	}
	e.born = e.born.Add(-time.Millisecond) // another file with that inode
	if e.is(f) {
		t.Fatal("a file created at another time was taken for the one listed")
	}
}

// A file renamed after the listing (logrotate's log.N.gz to log.N+1.gz,
// its name now another file's) is opened under its new name; one removed
// since is reported moved.
func TestSiblingOpenFollowsRename(t *testing.T) {
	dir := t.TempDir()
	name := func(n int) string { return filepath.Join(dir, fmt.Sprintf("app.log.%d.gz", n)) }
	os.WriteFile(name(3), gzipped([]byte(lines(0, 10))), 0o644)
	sibs := siblings(dir)
	if len(sibs) != 1 {
		t.Fatalf("siblings: %+v", sibs)
	}
	renameFile(t, name(3), name(4))
	os.WriteFile(name(3), gzipped([]byte(lines(10, 20))), 0o644) // the next one down, renamed in
	f, err := sibs[0].open(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := firstLine(f)
	f.Close()
	if f.Name() != name(4) || got != firstLine(strings.NewReader(lines(0, 10))) {
		t.Fatalf("opened %s (first line %s), want %s", f.Name(), got, name(4))
	}
	os.Remove(name(4))
	if f, err := sibs[0].open(dir); !errors.Is(err, errMoved) {
		if f != nil {
			f.Close()
		}
		t.Fatalf("a removed file: %v, want errMoved", err)
	}
}

// Renamed after the listing, and gzip has just created the next file
// under the old name (empty: no gzip header yet): the listed file is still
// followed to its new name.
func TestSiblingOpenPastABegunGzip(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "app.log.1.gz")
	os.WriteFile(a, gzipped([]byte(lines(0, 10))), 0o644)
	sibs := siblings(dir)
	renameFile(t, a, filepath.Join(dir, "app.log.2.gz"))
	os.WriteFile(a, nil, 0o600)
	f, err := sibs[0].open(dir)
	if err != nil {
		t.Fatalf("the renamed file was not followed: %v", err)
	}
	f.Close()
}
