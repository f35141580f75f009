package logs

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func gzipped(b []byte) []byte {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(b)
	zw.Close()
	return z.Bytes()
}

// writeGz writes b compressed to dir/name and opens it as a copy.
func writeGz(t *testing.T, dir, name string, z []byte) *gzFile {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, z, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := openCopy(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f.(*gzFile)
}

// checkReadAt reads g at each offset, as much as n asks, and compares with
// the bytes it was compressed from; its size is known once a read reached
// the end, and not before.
func checkReadAt(t *testing.T, g *gzFile, want []byte, offs []int64, ns []int) {
	t.Helper()
	r := bytes.NewReader(want)
	for i, off := range offs {
		n := ns[i]
		got, exp := make([]byte, n), make([]byte, n)
		gn, gerr := g.ReadAt(got, off)
		en, eerr := r.ReadAt(exp, off)
		if gn != en || !bytes.Equal(got[:gn], exp[:en]) || (gerr == nil) != (eerr == nil) {
			t.Fatalf("ReadAt(%d bytes, %d): %d %v %q, want %d %v %q", n, off, gn, gerr, got[:gn], en, eerr, exp[:en])
		}
		fi, err := g.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if size := fi.Size(); size != int64(len(want)) && (size != math.MaxInt64 || g.size >= 0) {
			t.Fatalf("size %d after ReadAt(%d bytes, %d), want %d or unknown", size, n, off, len(want))
		}
	}
	if g.err != nil {
		t.Fatalf("a whole stream ended early: %v", g.err)
	}
}

// A compressed copy reads as the file it was: forward, backward, within
// and across its head, past its end; it is identified by the compressed
// file's inode and the decompressed head.
func TestGzFileReadsAsTheFile(t *testing.T) {
	dir := t.TempDir()
	want := []byte(lines(0, 500))
	g := writeGz(t, dir, "app.log.2.gz", gzipped(want))
	n := int64(len(want))
	checkReadAt(t, g,
		want,
		[]int64{0, 10, 1000, 1020, 5000, 200, n - 10, n, n + 5, 0, n - 100, 3},
		[]int{100, 1000, 24, 100, 4096, 64, 100, 10, 10, 2048, 100, 1})
	if fi, _ := g.Stat(); fi.Size() != n {
		t.Fatalf("size %d after reading to the end, want %d", fi.Size(), n)
	}
	id, err := identify(g)
	if err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, want, 0o644)
	pf, _ := os.Open(plain)
	defer pf.Close()
	pid, _ := identify(pf)
	var st, gst os.FileInfo
	st, _ = os.Stat(filepath.Join(dir, "app.log.2.gz"))
	gst, _ = g.File.Stat()
	if id.Head != pid.Head || id.HeadLen != headLen || !os.SameFile(st, gst) || firstLine(g) != firstLine(pf) {
		t.Fatalf("identity %+v, want the plain file's head %+v and the compressed file's inode", id, pid)
	}
	if !birth(g).IsZero() {
		t.Fatal("a compressed copy has a birth time: it would order it after newer files")
	}
}

// A copy cut short (logrotate killed while it compressed, a full disk)
// reads what it holds, then ends; err says why. Bytes that are not gzip
// do not open.
func TestGzFileCutShort(t *testing.T) {
	dir := t.TempDir()
	want := []byte(lines(0, 2000))
	z := gzipped(want)
	g := writeGz(t, dir, "app.log.2.gz", z[:len(z)/2])
	got, err := io.ReadAll(io.NewSectionReader(g, 0, math.MaxInt64))
	if err != nil || len(got) == 0 || len(got) >= len(want) || !bytes.HasPrefix(want, got) {
		t.Fatalf("read %d bytes (%v) of a copy cut short; want a prefix of %d", len(got), err, len(want))
	}
	if !errors.Is(g.err, io.ErrUnexpectedEOF) || g.size != int64(len(got)) {
		t.Fatalf("err %v, size %d; want io.ErrUnexpectedEOF, %d", g.err, g.size, len(got))
	}
	if _, err := openCopy(filepath.Join(dir, "x.gz")); err == nil {
		t.Fatal("a missing file opened")
	}
	os.WriteFile(filepath.Join(dir, "bad.gz"), []byte("\x1f\x8b not gzip"), 0o644)
	if _, err := openCopy(filepath.Join(dir, "bad.gz")); err == nil || !strings.Contains(err.Error(), "bad.gz") {
		t.Fatalf("bytes that are not gzip: %v, want an error naming the file", err)
	}
}

// The follower, a rotation behind, finds the unread end of its file in a
// compressed copy cut short: it ships what the copy holds, says so, and
// goes on with the newer files.
func TestFollowCompressedCopyCutShort(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "app.log")
	w := writer(t, log)
	w.WriteString(lines(0, 100))
	var logged []string
	fl := newFollower(log, 1024, func(msg string, _ ...any) { logged = append(logged, msg) })
	defer fl.Close()
	want(t, readAll(t, fl), 0, 100)
	w.WriteString(lines(100, 2000))
	b, _ := os.ReadFile(log)
	z := gzipped(b)
	// 100 lines are about 7 KB: the cut keeps them and some of the rest.
	os.WriteFile(log+".2.gz", z[:len(z)*2/3], 0o644)
	os.Truncate(log, 0)
	w.WriteString(lines(2000, 2010))
	os.WriteFile(log+".1", []byte(lines(2000, 2010)), 0o644)
	os.Truncate(log, 0)
	w.WriteString(lines(2010, 2020))
	got := numbers(readAll(t, fl))
	cut := 0
	for cut < len(got) && got[cut] == 100+cut {
		cut++
	}
	// The copy may end inside a line: that piece comes as it is.
	rest := got[cut:]
	if len(rest) == 21 {
		rest = rest[1:]
	}
	if cut < 100 || cut >= 1900 || len(rest) != 20 || rest[0] != 2000 || rest[19] != 2019 {
		t.Fatalf("got %d lines, %d from 100 on, then %v; want 100.. to where the copy ends, then 2000..2019", len(got), cut, rest)
	}
	if !strings.Contains(strings.Join(logged, "\n"), "compressed log file ends early") {
		t.Fatalf("the loss was not said: %q", logged)
	}
}

// FuzzGzFileReadAt: whatever the bytes, a compressed copy opens or fails
// without a panic; opened, every read gives the bytes a plain reader of
// the whole stream gives, up to where the stream ends.
func FuzzGzFileReadAt(f *testing.F) {
	f.Add(gzipped([]byte(lines(0, 50))), int64(3), int64(2000), int64(40))
	f.Add(gzipped(nil), int64(0), int64(1), int64(0))
	f.Add([]byte("\x1f\x8b\x08\x00 not gzip"), int64(0), int64(0), int64(0))
	z := gzipped([]byte(lines(0, 50)))
	f.Add(z[:len(z)/2], int64(1024), int64(10), int64(1023))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, z []byte, a, b, c int64) {
		path := filepath.Join(dir, "app.log.1.gz")
		if err := os.WriteFile(path, z, 0o644); err != nil {
			t.Fatal(err)
		}
		lf, err := openCopy(path)
		if err != nil {
			return
		}
		defer lf.Close()
		g := lf.(*gzFile)
		zr, err := gzip.NewReader(bytes.NewReader(z))
		if err != nil {
			t.Fatalf("openCopy opened what gzip.NewReader refuses: %v", err)
		}
		whole, _ := io.ReadAll(zr) // up to where it ends, as g reads
		r := bytes.NewReader(whole)
		for _, off := range []int64{a, b, c, 0} {
			off = max(0, off%(int64(len(whole))+2048))
			got, exp := make([]byte, 700), make([]byte, 700)
			gn, _ := g.ReadAt(got, off)
			en, _ := r.ReadAt(exp, off)
			if gn != en || !bytes.Equal(got[:gn], exp[:en]) {
				t.Fatalf("ReadAt(700, %d) gave %d bytes, a plain reader %d", off, gn, en)
			}
		}
	})
}
