package logs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Line is one line read from a log file, without its newline, or a piece
// of a line longer than the limit (Cont: the line goes on in the next).
type Line struct {
	Data []byte
	// File is the identity of the file it was read from (its Offset is not
	// meaningful); End is the offset just after it, newline included:
	// committing End for File means the line is shipped.
	File Position
	End  int64
	Cont bool
}

// source is one open file being read: the live file at the path, or one
// that left it (renamed by rotation, or the copy copytruncate made) and is
// read to its end first.
type source struct {
	f    *os.File
	id   Position // identity; Offset: bytes consumed into lines
	part []byte   // the start of a line not yet ended
	tail []byte   // the last bytes consumed, up to markLen
	// For a file that left the path: its size when last looked at, and
	// whether its writer can still add to it (renamed: the service may
	// write until it reopens; a copy: never).
	size    int64
	written bool
}

func (s *source) readAt() int64 { return s.id.Offset + int64(len(s.part)) }

// follower reads one log path and follows it across rotation, losing
// nothing a tailer can keep: a renamed file is read until its writer has
// moved to the new one, a truncated file's unread end is read from its
// copytruncate copy, and both come before the new bytes at the path.
// Read never waits: it returns what there is.
type follower struct {
	path    string
	maxLine int
	log     func(msg string, args ...any)

	live *source
	left []*source // files that left the path, oldest first
}

func newFollower(path string, maxLine int, log func(string, ...any)) *follower {
	if log == nil {
		log = func(string, ...any) {}
	}
	return &follower{path: path, maxLine: maxLine, log: log}
}

// resume starts from a saved position: the file it leads to (locate) is
// read from the saved offset, as the live file when it is still the one at
// the path, else as a file that left it.
func (fl *follower) resume(p Position) error {
	found, err := locate(p)
	if err != nil {
		return err
	}
	switch {
	case found.Tail == nil:
		if found.How != "same" && p.Offset > 0 {
			fl.log("log file changed while the agent was away; its unshipped end is gone", "path", p.Path, "what", found.How)
		}
		return nil
	case found.How == "same":
		fl.live, err = openSource(found.Tail, found.TailFrom, true)
	default:
		fl.log("log file rotated while the agent was away; shipping its unshipped end first", "path", p.Path, "what", found.How)
		var s *source
		if s, err = openSource(found.Tail, found.TailFrom, found.How[:7] == "renamed"); err == nil {
			fl.left = append(fl.left, s)
		}
	}
	return err
}

func openSource(f *os.File, off int64, written bool) (*source, error) {
	id, err := identify(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	id.Offset = off
	s := &source{f: f, id: id, written: written}
	start := max(0, off-markLen)
	s.tail = make([]byte, off-start)
	n, _ := f.ReadAt(s.tail, start)
	s.tail = s.tail[:n]
	if fi, err := f.Stat(); err == nil {
		s.size = fi.Size()
	}
	return s, nil
}

// Positions are where reading stands in each open file, oldest first:
// identity, the offset consumed into lines, and its marker.
func (fl *follower) Positions() []Position {
	var out []Position
	for _, s := range append(fl.left[:len(fl.left):len(fl.left)], fl.live) {
		if s != nil {
			p := s.id
			p.Path, p.Mark = fl.path, digest(s.tail)
			out = append(out, p)
		}
	}
	return out
}

// Close closes the open files.
func (fl *follower) Close() {
	for _, s := range append(fl.left, fl.live) {
		if s != nil {
			s.f.Close()
		}
	}
	fl.left, fl.live = nil, nil
}

// Read returns the lines available now, reading at most max bytes: first
// the ends of files that left the path, then the live file.
func (fl *follower) Read(max int) ([]Line, error) {
	var out []Line
	var err error
	buf := make([]byte, min(max, 256<<10))
	for {
		for len(fl.left) > 0 {
			s := fl.left[0]
			if out, max, err = fl.drain(out, s, buf, max); err != nil || max <= 0 {
				return out, err
			}
			if !fl.done(s) {
				// Its writer may add more: nothing of the new file
				// before the old one is done.
				return out, nil
			}
			if len(s.part) > 0 {
				fl.log("a rotated log file ends with a line not ended; shipping it as it is", "path", fl.path, "bytes", len(s.part))
				out = fl.emit(out, s, s.part, len(s.part), false)
				s.part = nil
			}
			s.f.Close()
			fl.left = fl.left[1:]
		}
		if fl.live == nil {
			f, err := os.Open(fl.path)
			if errors.Is(err, fs.ErrNotExist) {
				return out, nil
			}
			if err != nil {
				return out, err
			}
			if fl.live, err = openSource(f, 0, true); err != nil {
				return out, err
			}
		}
		// Truncated since the last look? Before any new byte is read: a
		// file truncated and written past the offset again would
		// otherwise be read from the middle.
		if moved, err := fl.truncation(); err != nil {
			return out, err
		} else if moved {
			continue
		}
		if out, max, err = fl.drain(out, fl.live, buf, max); err != nil || max <= 0 {
			return out, err
		}
		moved, err := fl.rotation()
		if err != nil || !moved {
			return out, err
		}
	}
}

// drain reads s from where it stands to its end (or max bytes).
func (fl *follower) drain(out []Line, s *source, buf []byte, max int) ([]Line, int, error) {
	for max > 0 {
		n, err := s.f.ReadAt(buf[:min(len(buf), max)], s.readAt())
		if n > 0 {
			max -= n
			out = fl.split(out, s, buf[:n])
		}
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return out, max, nil
		}
		if err != nil {
			return out, max, err
		}
	}
	return out, max, nil
}

// done: a file that left the path has nothing more to give. A copy is done
// at its end; a renamed file once the writer has moved on: the new file at
// the path has bytes, and the old one did not grow since the last look.
func (fl *follower) done(s *source) bool {
	fi, err := s.f.Stat()
	if err != nil {
		return true
	}
	grew := fi.Size() != s.size
	s.size = fi.Size()
	if s.readAt() < s.size {
		return false
	}
	if !s.written {
		return true
	}
	if grew {
		return false
	}
	pfi, err := os.Stat(fl.path)
	return err == nil && pfi.Size() > 0 && !os.SameFile(fi, pfi)
}

// truncation: the live file is shorter than what was read, or the bytes
// before the offset read are not the ones read (copytruncate, then written
// past the offset again). Its unread end is read from the copy logrotate
// made, found in the same directory by its head and the marker of the
// offset, and the live file again from 0. It reports whether it was.
func (fl *follower) truncation() (bool, error) {
	s := fl.live
	fi, err := s.f.Stat()
	if err != nil {
		return false, err
	}
	truncated := fi.Size() < s.readAt()
	if !truncated && s.id.Offset > 0 {
		m, err := markAt(s.f, s.id.Offset)
		if err != nil {
			return false, err
		}
		truncated = m != digest(s.tail)
	}
	if !truncated {
		return false, nil
	}
	p := s.id
	p.Path, p.Mark = fl.path, digest(s.tail)
	if c := findCopy(filepath.Dir(fl.path), p, false); c != nil {
		fl.log("log file truncated (copytruncate); reading its unread end from the copy first", "path", fl.path, "copy", c.Name())
		cs, err := openSource(c, s.id.Offset, false)
		if err != nil {
			return false, err
		}
		cs.part, cs.tail = s.part, s.tail
		fl.left = append(fl.left, cs)
	} else {
		fl.log("log file truncated and no copy of its end found; reading it again from its start", "path", fl.path)
	}
	f, err := os.Open(fl.path)
	if err != nil {
		return false, err
	}
	s.f.Close()
	fl.live, err = openSource(f, 0, true)
	return true, err
}

// rotation looks at the path at the live file's end: a new file there
// (rename rotation, or the file removed and created again) makes the live
// file one that left the path, read to its end first. It reports whether
// it did.
func (fl *follower) rotation() (bool, error) {
	if moved, err := fl.truncation(); moved || err != nil {
		return moved, err
	}
	s := fl.live
	fi, err := s.f.Stat()
	if err != nil {
		return false, err
	}
	pfi, err := os.Stat(fl.path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // removed: a writer may still hold it; a new one may come
	}
	if err != nil {
		return false, err
	}
	if os.SameFile(fi, pfi) {
		return false, nil
	}
	fl.log("log file rotated; reading the old file to its end, then the new one", "path", fl.path)
	s.size = fi.Size()
	fl.left = append(fl.left, s)
	fl.live = nil
	return true, nil
}

// split cuts b, read after the part s holds, into lines and pieces of at
// most maxLine bytes.
func (fl *follower) split(out []Line, s *source, b []byte) []Line {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		end := i
		if i < 0 {
			end = len(b)
		}
		s.part = append(s.part, b[:end]...)
		for len(s.part) > fl.maxLine {
			out = fl.emit(out, s, s.part[:fl.maxLine], fl.maxLine, true)
			s.part = s.part[fl.maxLine:]
		}
		if i < 0 {
			s.part = bytes.Clone(s.part)
			return out
		}
		out = fl.emit(out, s, s.part, len(s.part)+1, false)
		s.part = nil
		b = b[i+1:]
	}
	return out
}

// emit appends a line of consumed bytes of s.
func (fl *follower) emit(out []Line, s *source, data []byte, consumed int, cont bool) []Line {
	s.id.Offset += int64(consumed)
	raw := data
	if consumed > len(data) {
		raw = append(bytes.Clone(data[max(0, len(data)-markLen):]), '\n')
	}
	s.tail = append(s.tail, raw[max(0, len(raw)-markLen):]...)
	if len(s.tail) > markLen {
		s.tail = bytes.Clone(s.tail[len(s.tail)-markLen:])
	}
	id := s.id
	id.Path, id.Mark = fl.path, digest(s.tail)
	return append(out, Line{Data: bytes.Clone(data), File: id, End: s.id.Offset, Cont: cont})
}
