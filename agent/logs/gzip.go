package logs

import (
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"strings"
	"syscall"
)

// logFile is what a source reads: an open log file, or a gzip-compressed
// copy of one (gzFile).
type logFile interface {
	io.ReaderAt
	io.Closer
	Name() string
	Stat() (fs.FileInfo, error)
	SyscallConn() (syscall.RawConn, error)
}

// gzExt is the ending of the copies logrotate compresses with its default
// compresscmd (gzip; kolla's setting). They are read through their
// decompressed bytes: a shipper that fell more than one rotation behind
// (the sink down across two rotations, or a loaded node) finds the end it
// had not read there, with delaycompress in the second copy. Files other
// compressors made are not read.
const gzExt = ".gz"

// openCopy opens a file rotated from a log path, decompressed when its
// name ends in gzExt.
func openCopy(path string) (logFile, error) {
	f, err := openLog(path)
	if err != nil {
		return nil, err
	}
	return asCopy(f)
}

// asCopy is f, opened, as it is read: decompressed when its name ends in
// gzExt (closed if it cannot be).
func asCopy(f *os.File) (logFile, error) {
	if !strings.HasSuffix(f.Name(), gzExt) {
		return f, nil
	}
	g, err := newGzFile(f)
	if err != nil {
		f.Close()
		return nil, &fs.PathError{Op: "gunzip", Path: f.Name(), Err: err}
	}
	return g, nil
}

// gzFile reads a gzip file as the file it was compressed from. It is read
// forward, as a source is: ReadAt decompresses from where the last read
// ended, or from the start again for an earlier offset (its head is kept,
// as identifying the file and its first line reads it). Its identity is
// the compressed file's (device, inode), its head fingerprint the
// decompressed one's.
type gzFile struct {
	*os.File
	zr   *gzip.Reader
	at   int64  // the decompressed offset zr stands at
	head []byte // the first headLen decompressed bytes
	size int64  // the decompressed size once a read reached the end; -1 before
	// err is why the stream ended before its trailer (a copy cut short, or
	// corrupt): what it held before that is read, and the end is logged.
	err error
}

func newGzFile(f *os.File) (*gzFile, error) {
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	g := &gzFile{File: f, zr: zr, size: -1, head: make([]byte, headLen)}
	n, err := g.read(g.head)
	g.head = g.head[:n]
	if err != nil {
		g.end(err)
	}
	return g, nil
}

// end notes the end of the stream: its size, and why, if not at its
// trailer.
func (g *gzFile) end(err error) {
	if g.size < 0 {
		g.size = g.at
	}
	if !errors.Is(err, io.EOF) && g.err == nil {
		g.err = err
	}
}

// ReadAt reads the decompressed bytes at off. A stream that ends early
// ends the file there (io.EOF): g.err says why.
func (g *gzFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, &fs.PathError{Op: "read", Path: g.Name(), Err: fs.ErrInvalid}
	}
	if end := off + int64(len(p)); end <= int64(len(g.head)) {
		return copy(p, g.head[off:end]), nil
	}
	if off < g.at {
		if _, err := g.File.Seek(0, io.SeekStart); err != nil {
			return 0, err
		}
		if err := g.zr.Reset(g.File); err != nil {
			return 0, err
		}
		g.at = 0
	}
	if g.size >= 0 && off >= g.size {
		return 0, io.EOF
	}
	if skip := off - g.at; skip > 0 {
		n, err := io.CopyN(io.Discard, g.zr, skip)
		g.at += n
		if err != nil {
			g.end(err)
			return 0, io.EOF
		}
	}
	n, err := g.read(p)
	if err != nil {
		g.end(err)
		if n < len(p) {
			return n, io.EOF
		}
	}
	return n, nil
}

// read fills p from the stream, short only at its end: io.EOF at its
// trailer, another error where it ends early (io.ReadFull would make a
// short read at the trailer io.ErrUnexpectedEOF too).
func (g *gzFile) read(p []byte) (int, error) {
	n := 0
	var err error
	for n < len(p) && err == nil {
		var k int
		k, err = g.zr.Read(p[n:])
		n += k
	}
	g.at += int64(n)
	return n, err
}

// Stat is the compressed file's, with the decompressed size: unknown
// (math.MaxInt64) until a read reaches the end. A copy is done at its end,
// so the follower reads it there before it takes it as done.
func (g *gzFile) Stat() (fs.FileInfo, error) {
	fi, err := g.File.Stat()
	if err != nil {
		return nil, err
	}
	size := g.size
	if size < 0 {
		size = math.MaxInt64
	}
	return gzInfo{fi, size}, nil
}

type gzInfo struct {
	fs.FileInfo
	size int64
}

func (i gzInfo) Size() int64 { return i.size }

func (g *gzFile) Close() error {
	g.zr.Close()
	return g.File.Close()
}
