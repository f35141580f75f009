package logs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Line is one line read from a log file, without its newline, or a piece
// of a line longer than the limit (Cont: the line goes on in the next).
// It is valid only during the call it is given to: its Data is the
// follower's buffer.
type Line struct {
	Data []byte
	// File is the identity of the file it was read from (its Offset and
	// Mark are not meaningful); End is the offset just after it, newline
	// included: committing End for File means the line is shipped.
	File Position
	End  int64
	Cont bool

	// unended: the last line of a file that left the path, which never
	// got its newline (End is just after its last byte).
	unended bool
	// tail is the last markLen bytes of the file before End (fewer at its
	// start): the input of End's marker.
	tail []byte
}

// readChunk is how much one read asks the kernel for.
const readChunk = 128 << 10

// source is one open file being read: the live file at the path, or one
// that left it (renamed by rotation, or the copy copytruncate made) and is
// read to its end first.
type source struct {
	f    logFile
	id   Position // identity, Path the followed path; Offset: bytes consumed into lines
	part []byte   // the start of a line not yet ended
	tail tailBuf  // the last bytes consumed
	// For a file that left the path: its size when last looked at, and
	// whether its writer can still add to it (renamed: the service may
	// write until it reopens; a copy: never).
	size    int64
	written bool
	grew    bool      // between the last two looks
	closeAt time.Time // done: kept open until then for a late write
	// mtime is the file's when last looked at (the live file's: while it
	// was not truncated).
	mtime time.Time
	born  time.Time // creation time; zero where the filesystem keeps none
}

func (s *source) readAt() int64 { return s.id.Offset + int64(len(s.part)) }

// tailBuf holds the last markLen bytes consumed, without allocating: it
// moves with every line.
type tailBuf struct {
	b [markLen]byte
	n int
}

func (t *tailBuf) bytes() []byte { return t.b[:t.n] }

// push adds p, and a newline after it when nl.
func (t *tailBuf) push(p []byte, nl bool) {
	room := markLen // for p
	if nl {
		room--
	}
	if len(p) >= room {
		t.n = copy(t.b[:], p[len(p)-room:])
	} else {
		keep := min(t.n, room-len(p))
		copy(t.b[:keep], t.b[t.n-keep:t.n])
		t.n = keep + copy(t.b[keep:], p)
	}
	if nl {
		t.b[t.n] = '\n'
		t.n++
	}
}

// follower reads one log path and follows it across rotation, losing
// nothing a tailer can keep: a renamed file is read until its writer has
// moved to the new one, a truncated file's unread end is read from its
// copytruncate copy, the files rotated from the path while nothing read
// it are read whole, and all come before the new bytes at the path.
// Read never waits: it returns what there is.
type follower struct {
	path    string
	maxLine int
	log     func(msg string, args ...any)

	live    *source
	left    []*source // files that left the path, oldest first
	closing []*source // done, open for writerGrace more
	buf     []byte    // what a read reads into; reused

	// scan: the live file left the path. Once the files that left it are
	// read, the files rotated from the path after last (the last of them
	// read) are, before the new live file: the path may have been rotated
	// again while nothing read it (the agent down, the sink down).
	scan bool
	last rotRef
	// copied is the newest copy the last truncation led to (copytruncate),
	// zero before one: a live file opened empty gets its first bytes, and
	// copies made after it hold bytes written before them (tookFirst).
	copied rotRef
	// opened: a live file was opened in this run. fresh is where
	// copiesSince starts while no copy was read (copied zero), for the
	// first live file, opened empty, until its first bytes are seen (zero
	// otherwise): after the newest file rotated from the path then.
	// Copied and truncated before its first bytes were seen, its copies
	// hold lines nothing read.
	opened bool
	fresh  rotRef
	// finished are the last files read to their end, which a scan must
	// not read again.
	finished [8]doneFile
	nfin     int

	// testOpened runs, when set, once a new live file is open, before the
	// scan: a test rotates the path there.
	testOpened func()
}

// rotRef is where a scan for rotated files starts: after the file with
// this inode (before), or, with none or when it is gone, at its creation
// time, or its mtime where there is none (files as new as it count: the
// clock's grain).
type rotRef struct {
	mtime, born time.Time
	dev, ino    uint64
}

// is: r is the file ref was taken from. An inode is reused once its file
// is gone (a copy compressed, then removed, and the next copy, or the next
// compressed copy, made), so the creation time must match too where both
// are kept. A compressed copy keeps none (birth): one with the inode of a
// file that has one is another file (a zero time equals no other).
func (ref rotRef) is(r rotatedFile) bool {
	return ref.ino != 0 && r.dev == ref.dev && r.ino == ref.ino && ref.born.Equal(r.born)
}

// zero: r refers to no file.
func (r rotRef) zero() bool { return r.ino == 0 && r.mtime.IsZero() }

func (s *source) ref() rotRef {
	return rotRef{mtime: s.mtime, born: s.born, dev: s.id.Dev, ino: s.id.Ino}
}

// olderThan: r came to the path before ref. Creation order is the order
// in which files held the path; mtime only says when each was last
// written, and a late line in an older file makes it look newer than one
// rotated after it.
func (r rotatedFile) olderThan(ref rotRef) bool {
	if !r.born.IsZero() && !ref.born.IsZero() && !r.born.Equal(ref.born) {
		return r.born.Before(ref.born)
	}
	return r.mtime.Before(ref.mtime)
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
		if fl.live, err = fl.open(found.Tail, found.TailFrom, true); err == nil {
			fl.opened = true // resumed: not a fresh start (startAfter)
		}
	default:
		fl.log("log file rotated while the agent was away; shipping its unshipped end first", "path", p.Path, "what", found.How)
		var s *source
		if s, err = fl.open(found.Tail, found.TailFrom, found.How[:7] == "renamed"); err == nil {
			// Resumed: the scan below reads what rotated meanwhile; a
			// fresh start's reference would make it skip the newest.
			fl.opened = true
			fl.left = append(fl.left, s)
			// Saved positions come in no order of age.
			slices.SortStableFunc(fl.left, func(a, b *source) int { return olderFirst(a.rotated(), b.rotated()) })
			fl.scan = true
			// What rotated before it was read: the scan starts after it.
			fl.passed(s)
		}
	}
	return err
}

// rotated describes s as a file rotated from the path, as it is now.
func (s *source) rotated() rotatedFile {
	name := s.f.Name()
	base, _ := strings.CutSuffix(filepath.Base(name), gzExt) // as rotatedFrom: app.log.3.gz is 3
	return rotatedFile{path: name, n: rotationNumber(filepath.Base(s.id.Path), base), mtime: s.mtime, born: s.born, dev: s.id.Dev, ino: s.id.Ino}
}

// open makes f a source read from off. A compressed copy is never
// written.
func (fl *follower) open(f logFile, off int64, written bool) (*source, error) {
	if _, gz := f.(*gzFile); gz {
		written = false
	}
	id, err := identify(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	id.Path, id.Offset = fl.path, off
	s := &source{f: f, id: id, written: written}
	start := max(0, off-markLen)
	n, _ := f.ReadAt(s.tail.b[:off-start], start)
	s.tail.n = n
	if fi, err := f.Stat(); err == nil {
		s.size, s.mtime = fi.Size(), fi.ModTime()
	}
	s.born = birth(f)
	return s, nil
}

// Positions are where reading stands in each open file, oldest first:
// identity, the offset consumed into lines, and its marker. Done files
// kept open for a late line count: saved, an agent killed meanwhile reads
// that line after its restart.
func (fl *follower) Positions() []Position {
	var out []Position
	for _, s := range slices.Concat(fl.closing, fl.left, []*source{fl.live}) {
		if s != nil {
			p := s.id
			p.Mark = digest(s.tail.bytes())
			out = append(out, p)
		}
	}
	return out
}

// Close closes the open files.
func (fl *follower) Close() {
	for _, s := range slices.Concat(fl.left, fl.closing, []*source{fl.live}) {
		if s != nil {
			s.f.Close()
		}
	}
	fl.left, fl.closing, fl.live = nil, nil, nil
}

// Read reads the lines available now, at most max bytes, and gives them
// to fn one by one: first the ends of files that left the path, then the
// live file. fn returning false stops it after that line (the bytes after
// it are read again next time). It returns how many bytes it read: 0 when
// there was nothing.
func (fl *follower) Read(max int, fn func(Line) bool) (int, error) {
	if fl.buf == nil {
		fl.buf = make([]byte, readChunk)
	}
	want := max
	var err error
	var more bool
	end := fl.liveEnd()
	// Done files still open for writerGrace: a late line is read now.
	for i := 0; i < len(fl.closing); {
		s := fl.closing[i]
		if max, more, err = fl.drain(s, max, fn); err != nil || max <= 0 || !more {
			return want - max, err
		}
		if time.Now().Before(s.closeAt) {
			i++
			continue
		}
		if len(s.part) > 0 {
			fl.emit(s, s.part, len(s.part), false, fn)
			s.part = nil
		}
		fl.closed(s)
		s.f.Close()
		fl.closing = slices.Delete(fl.closing, i, i+1)
	}
	for first := true; ; first = false {
		if !first {
			end = fl.liveEnd()
		}
		// Files that left the path, oldest first, each to its end. One
		// whose writer may still add to it (not done) stays open and is
		// read again at the next look, but does not hold the newer files
		// back: a service that went quiet after a rotation leaves the
		// path empty, and nothing newer would ever be read.
		for i := 0; i < len(fl.left); {
			s := fl.left[i]
			if max, more, err = fl.drain(s, max, fn); err != nil || max <= 0 || !more {
				return want - max, err
			}
			if !fl.done(s) {
				if len(fl.left) <= maxLeft || s.grew {
					i++
					continue
				}
				// A quiet service rotated again and again (logrotate's
				// ifempty): the oldest quiet file goes, or they pile up.
				fl.log("too many rotated log files kept open for their writers: done with the oldest quiet one", "path", fl.path, "files", len(fl.left))
			}
			stop := false
			// A line begun in the live file before its truncation goes
			// on in the copy only as far as the copy holds it: bytes read
			// after logrotate's copy are in no file (its window), not the
			// copy's end.
			if held := s.size - s.id.Offset; held < int64(len(s.part)) {
				s.part = s.part[:0]
				if held > 0 {
					s.part = s.part[:held]
				}
			}
			if len(s.part) > 0 {
				fl.log("a rotated log file ends with a line not ended; shipping it as it is", "path", fl.path, "bytes", len(s.part))
				stop = !fl.emit(s, s.part, len(s.part), false, fn)
				s.part = nil
			}
			fl.finish(s)
			fl.left = slices.Delete(fl.left, i, i+1)
			if stop {
				return want - max, nil
			}
		}
		if fl.live == nil {
			f, err := openLog(fl.path)
			if errors.Is(err, fs.ErrNotExist) {
				return want - max, nil
			}
			if err != nil {
				return want - max, err
			}
			if fl.live, err = fl.open(f, 0, true); err != nil {
				return want - max, err
			}
			if !fl.opened {
				fl.opened = true
				fl.startAfter(fl.live)
			}
			if fl.testOpened != nil {
				fl.testOpened()
			}
			// Looked for once the new file is open: one rotated after
			// the look is the live file, read as such. The look stops at
			// the live file's copy (copyOfOpened): rotated, compressed and
			// followed by newer files before the look (a slow scan), its
			// copy would be read as well as the file, and the newer files
			// before the file.
			if fl.scan {
				fl.scan = false
				if more := fl.rotatedAfter(fl.last, nil, nil, fl.live, true); len(more) > 0 {
					fl.left = append(fl.left, more...)
					slices.SortStableFunc(fl.left, func(a, b *source) int { return olderFirst(a.rotated(), b.rotated()) })
					continue
				}
			}
			// The old files again, after the new one's size is taken.
			if len(fl.left) > 0 {
				continue
			}
		}
		// Truncated since the last look? Before any new byte is read: a
		// file truncated and written past the offset again would
		// otherwise be read from the middle.
		if moved, err := fl.truncation(); err != nil {
			return want - max, err
		} else if moved {
			continue
		}
		limit := max
		if left := end - fl.live.readAt(); end >= 0 && left < int64(limit) {
			limit = int(left)
			if left < 0 { // truncated: the next look sees it
				limit = 0
			}
		}
		rest, more, err := fl.drain(fl.live, limit, fn)
		if max -= limit - rest; err != nil || max <= 0 || !more {
			return want - max, err
		}
		moved, err := fl.rotation()
		if err != nil || !moved {
			return want - max, err
		}
	}
}

// liveEnd is the live file's size now while files that left the path
// are still read, -1 otherwise. Their writer wrote to them before it moved
// on to the live file, so all they hold when read after this look comes
// before the live file's bytes up to it: the live file is read that far,
// the rest at the next look, after the old files again. Read without the
// bound, a writer's last lines in the old file, written between the look
// at the old file and the look at the new one, came after the new file's
// first lines.
func (fl *follower) liveEnd() int64 {
	if fl.live == nil || len(fl.left)+len(fl.closing) == 0 {
		return -1
	}
	fi, err := fl.live.f.Stat()
	if err != nil {
		return -1
	}
	return fi.Size()
}

// drain reads s from where it stands to its end (or max bytes, or until
// fn says no more: more false).
func (fl *follower) drain(s *source, max int, fn func(Line) bool) (int, bool, error) {
	for max > 0 {
		if s == fl.live && s.id.HeadLen == 0 {
			return max, true, nil // opened empty: identified at the next look first (tookFirst)
		}
		n, err := s.f.ReadAt(fl.buf[:min(len(fl.buf), max)], s.readAt())
		if n > 0 && s == fl.live && !fl.unchanged(s) {
			// Truncated and written again before this read: its bytes
			// are another file's. The next look reads the copy first.
			return max, true, nil
		}
		if n > 0 {
			max -= n
			if !fl.split(s, fl.buf[:n], fn) {
				return max, false, nil
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return max, true, nil
		}
		if err != nil {
			return max, true, err
		}
	}
	return max, true, nil
}

// unchanged: the live file holds, before its offset, the bytes consumed
// there (at 0, the head it was opened with). Looked at after a read, it
// says the bytes read are the file's the offset is in: a truncation and
// the service's new lines past the offset, between the look before the
// read and the read, would otherwise join two files' bytes in one line
// and skip the first's end.
func (fl *follower) unchanged(s *source) bool {
	if s.id.Offset > 0 {
		m, err := markAt(s.f, s.id.Offset)
		return err == nil && m == digest(s.tail.bytes())
	}
	same, _ := headMatches(s.f, s.id)
	return same
}

// done: a file that left the path has nothing more to give. A copy is done
// at its end; a renamed file once the writer has moved on: the new file at
// the path has bytes, and the old one did not grow since the last look.
// The path is looked at first: a writer that has moved on wrote all it
// will to the old file by then, and the old file's size taken after holds
// it. Taken before, the writer's last lines in the old file, written
// between the two looks, were read after the new file's first ones.
func (fl *follower) done(s *source) bool {
	var pfi fs.FileInfo
	perr := fs.ErrNotExist
	if s.written {
		pfi, perr = os.Lstat(fl.path)
	}
	fi, err := s.f.Stat()
	if err != nil {
		return true
	}
	grew := fi.Size() != s.size
	s.grew = grew
	s.size, s.mtime = fi.Size(), fi.ModTime()
	if s.readAt() < s.size {
		return false
	}
	if !s.written {
		return true
	}
	if grew {
		return false
	}
	return perr == nil && pfi.Size() > 0 && !os.SameFile(fi, pfi)
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
	switch {
	case truncated:
	case s.id.Offset > 0:
		m, err := markAt(s.f, s.id.Offset)
		if err != nil {
			return false, err
		}
		truncated = m != digest(s.tail.bytes())
	case s.id.HeadLen > 0:
		// Nothing consumed yet, so no marker: the head it was opened
		// with tells. Truncated and written again before a line of it
		// was read (the next rotation came first), the bytes it was
		// opened with are in a copy, to be read whole.
		same, err := headMatches(s.f, s.id)
		if err != nil {
			return false, err
		}
		truncated = !same
	case fi.Size() > 0:
		if more, err := fl.tookFirst(s); more || err != nil {
			return more, err
		}
	case !fi.ModTime().Equal(s.mtime):
		// Opened empty and empty now, but written and truncated since
		// the last look: its bytes are in copies, read now, not when
		// the service next writes (hours later, or never: the pod ends).
		s.mtime = fi.ModTime()
		return fl.copiesSince(s), nil
	}
	if !truncated {
		s.mtime = fi.ModTime()
		return false, nil
	}
	p := s.id
	p.Mark = digest(s.tail.bytes())
	// The new file first: if it cannot be opened (gone, or now a symlink),
	// nothing has changed and the next look sees the same truncation, so
	// the copy must not be queued twice.
	f, err := openLog(fl.path)
	if err != nil {
		return false, err
	}
	// Copies made since the last look are at least as new as the file
	// was then, and newer than the copy found.
	ref := rotRef{mtime: s.mtime}
	defer func() { fl.copied = ref }()
	if c := findCopy(filepath.Dir(fl.path), p, false); c != nil {
		fl.log("log file truncated (copytruncate); reading its unread end from the copy first", "path", fl.path, "copy", c.Name())
		cs, err := fl.open(c, s.id.Offset, false)
		if err != nil {
			f.Close()
			return false, err
		}
		cs.part, cs.tail = s.part, s.tail
		fl.left = append(fl.left, cs)
		ref = cs.ref()
	} else {
		fl.log("log file truncated and no copy of its end found; reading it again from its start", "path", fl.path)
	}
	s.f.Close()
	if fl.live, err = fl.open(f, 0, true); err != nil {
		return true, err
	}
	// Truncated more than once since the last look: the later copies
	// follow, whole; this file's copies not found above are shorter than
	// what was read of it (logrotate's own window), and left out.
	later := fl.rotatedAfter(ref, &p, fl.live, nil, false)
	if len(later) > 0 {
		ref = later[len(later)-1].ref()
	}
	fl.left = append(fl.left, later...)
	return true, nil
}

// tookFirst: the live file, opened empty, has bytes. It is identified by
// them now. Opened after a truncation, it may have been written, copied
// and truncated again before these bytes (nothing told it apart then):
// the copies made after the last one read hold those bytes, and are read
// first, whole. It reports whether there were any.
func (fl *follower) tookFirst(s *source) (bool, error) {
	id, err := identify(s.f)
	if err != nil {
		return false, err
	}
	s.id.Head, s.id.HeadLen = id.Head, id.HeadLen
	more := fl.copiesSince(s)
	fl.fresh = rotRef{} // the first file's first bytes: seen
	return more, nil
}

// copiesSince queues the copies made after the last one read (or, before
// one, after fresh), whole: of s, the live file opened empty. It reports
// whether there were any.
func (fl *follower) copiesSince(s *source) bool {
	ref := fl.copied
	if ref.zero() {
		if ref = fl.fresh; ref.zero() {
			return false // no copy read in this run: nothing to start after
		}
	}
	later := fl.rotatedAfter(ref, nil, s, nil, false)
	if len(later) == 0 {
		return false
	}
	fl.copied = later[len(later)-1].ref()
	fl.left = append(fl.left, later...)
	return true
}

// startAfter sets fresh for s, the first live file of a fresh start,
// opened empty: the newest file rotated from the path before s was opened
// (remembered: compressed later, it is known by its first line and head),
// or, with none, s's mtime (any file rotated after is newer). One made
// since (the listing can take a second while logrotate renames) holds s's
// lines.
func (fl *follower) startAfter(s *source) {
	if s.id.HeadLen > 0 {
		return
	}
	fl.fresh = rotRef{mtime: s.mtime}
	all := rotatedFrom(fl.path)
	k := len(all) - 1
	for ; k >= 0; k-- {
		made := all[k].born // a compressed copy: its file's mtime, kept
		if made.IsZero() {
			made = all[k].mtime
		}
		if !made.After(s.mtime) {
			break
		}
	}
	if k < 0 {
		return
	}
	r := all[k]
	f, err := r.sib.open(filepath.Dir(fl.path))
	if err != nil {
		return // gone meanwhile: the mtime bounds it
	}
	defer f.Close()
	if id, err := identify(f); err == nil {
		id.First = firstLine(f)
		fl.remember(id, f)
	}
	fl.fresh = rotRef{mtime: r.mtime, born: r.born, dev: r.dev, ino: r.ino}
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
	pfi, err := os.Lstat(fl.path) // a symlink put there is not the file
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
	fl.live, fl.scan = nil, true
	return true, nil
}

// writerGrace is how long a written file that left the path stays open
// after it is done. A writer that reopens by path (WatchedFileHandler)
// checks the path, then writes: one that checked just before logrotate's
// rename writes one more line into the renamed file after the others moved
// on and the file looked done. That line is read then, after newer ones.
const writerGrace = 5 * time.Second

// maxLeft bounds the files that left the path and are kept open while
// their writer might add to them; past it the oldest that did not grow
// since the last look is done.
const maxLeft = 16

// finish closes s, read to its end, and remembers it: a scan starts after
// it, and does not read it again.
func (fl *follower) finish(s *source) {
	if s.id.First == "" {
		// No line read from it (a copy whose unread end was empty): its
		// first line is still what knows it once compressed (known).
		s.id.First = firstLine(s.f)
	}
	if g, ok := s.f.(*gzFile); ok && g.err != nil {
		fl.log("compressed log file ends early; shipped what it holds", "path", fl.path, "file", g.Name(), "bytes", g.size, "error", g.err)
	}
	fl.remember(s.id, s.f) // while open: its head is read
	if s.written {
		s.closeAt = time.Now().Add(writerGrace)
		fl.closing = append(fl.closing, s)
	} else {
		s.f.Close()
	}
	fl.passed(s)
}

// passed makes s the scan's reference if it came to the path after the
// one there: files finish out of order (a quiet one is left open), and the
// reference only moves forward.
func (fl *follower) passed(s *source) {
	if fl.last.ino == 0 || !s.rotated().olderThan(fl.last) {
		fl.last = s.ref()
	}
}

// doneFile is a finished file as known remembers it: its id, and its head
// (at most headLen bytes) when last seen (heldHead).
type doneFile struct {
	id   Position
	head []byte
}

// remember adds the file p identifies, open as f, to the finished ring.
// f must still be open: its head is read now.
func (fl *follower) remember(p Position, f io.ReaderAt) {
	fl.finished[fl.nfin%len(fl.finished)] = doneFile{p, heldHead(f, p)}
	fl.nfin++
}

// closed updates the finished ring's head of s, closed now after its
// writer's grace: a late line may have made it longer.
func (fl *follower) closed(s *source) {
	for i := range fl.finished[:min(fl.nfin, len(fl.finished))] {
		if d := &fl.finished[i]; d.id.Dev == s.id.Dev && d.id.Ino == s.id.Ino && d.id.Head == s.id.Head {
			d.head = heldHead(s.f, s.id)
		}
	}
}

// rotatedAfter opens the files rotated from the path after ref, oldest
// first, to be read whole: the ones the path held while nothing read it.
// Files open already or finished are left out (by identity), and, with
// copyOf, the copies of that file (its head): copies made after its last
// byte read, whose bytes were read from it (logrotate's own window). The
// bytes read from a file are its head's, checked after each read
// (unchanged). So are the copies of the live file (ofLive), and the files
// after them: it is seen truncated at a later look, which reads its copy
// and those then; read now too, its copy would be read twice, and the
// later files before it. Each file is the one listed, under its new name
// if renamed since (sibling.open): opened by name, one file could be read
// twice and another never. One gone since (a plain copy compressed) makes
// it look again.
func (fl *follower) rotatedAfter(ref rotRef, copyOf *Position, live, opened *source, written bool) []*source {
	for try := 0; ; try++ {
		out, names, moved := fl.rotatedAfterOnce(ref, copyOf, live, opened, written)
		if moved && try < listTries {
			for _, s := range out {
				s.f.Close()
			}
			continue
		}
		if moved {
			fl.log("log files kept being renamed while the files rotated in between were looked for; the ones after the last shipped here may be missed", "path", fl.path, "tries", try+1)
		}
		if len(out) > 0 {
			fl.log("log file rotated again while not read; shipping the files rotated in between first", "path", fl.path, "files", names)
		}
		return out
	}
}

func (fl *follower) rotatedAfterOnce(ref rotRef, copyOf *Position, live, opened *source, written bool) (out []*source, names []string, moved bool) {
	all := rotatedFrom(fl.path)
	at := slices.IndexFunc(all, ref.is)
	for _, r := range all {
		if at >= 0 && fl.before(r, all[at]) || at < 0 && r.olderThan(ref) {
			continue
		}
		f, err := r.sib.open(filepath.Dir(fl.path))
		if errors.Is(err, errMoved) {
			return out, names, true // removed since the listing (a plain copy, compressed)
		}
		if err != nil {
			fl.log("a rotated log file cannot be read; skipped", "path", fl.path, "file", filepath.Base(r.path), "error", err)
			continue
		}
		if fl.known(f) {
			f.Close()
			continue
		}
		if copyOf != nil && copyOf.HeadLen > 0 {
			if same, _ := headMatches(f, *copyOf); same {
				if id, err := identify(f); err == nil {
					id.First = firstLine(f)
					fl.remember(id, f)
				}
				f.Close()
				continue
			}
		}
		if live != nil {
			if of, byHead := ofLive(f, live); of {
				// Its truncation, seen at a later look, reads it, then
				// the files after it: taken now, they would come before
				// it. Only a copy of the bytes the live file was
				// identified by is sure to be its copy; one matched by
				// its bytes so far (logrotate's copy in progress) is the
				// newest file anyway, and a short file that happens to
				// begin as the live file does (empty, or a banner) must
				// not hide the files after it.
				f.Close()
				if byHead {
					break
				}
				continue
			}
		}
		if opened != nil && copyOfOpened(f, r, opened) {
			f.Close()
			break
		}
		s, err := fl.open(f, 0, written)
		if err != nil {
			fl.log("a rotated log file cannot be read; skipped", "path", fl.path, "file", filepath.Base(r.path), "error", err)
			continue
		}
		out = append(out, s)
		names = append(names, filepath.Base(f.Name()))
	}
	return out, names, false
}

// ofLive: f is a copy of the live file: of the bytes it was identified by
// (copied and truncated already: copytruncate while it was identified), or
// of the bytes it holds now. The latter includes logrotate's copy in
// progress, whose bytes so far (none at first) are the live file's first:
// taken as a copy made meanwhile, it would be read once filled, and again
// when the live file's truncation leads to it. byHead: of the bytes it
// was identified by.
func ofLive(f logFile, live *source) (of, byHead bool) {
	if live.id.HeadLen > 0 {
		if same, _ := headMatches(f, live.id); same {
			return true, true
		}
	}
	a, b := make([]byte, headLen), make([]byte, headLen)
	n, err := f.ReadAt(a, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, false
	}
	m, err := live.f.ReadAt(b[:n], 0)
	return m == n && (err == nil || errors.Is(err, io.EOF)) && bytes.Equal(a[:n], b[:n]), false
}

// copyOfOpened: f, listed as r, is a copy of s, the live file opened just
// before the scan (rotated and compressed since): it holds the bytes s
// holds now, as far as a head goes (as many of them, when fewer), and was
// last written no earlier than s was when opened. The bytes alone would
// also match an older file that only begins as s does (a header line, and
// s opened with no more), whose files after it the scan would then never
// read; such a file was last written before s got its bytes.
func copyOfOpened(f logFile, r rotatedFile, s *source) bool {
	if r.mtime.Before(s.mtime) {
		return false
	}
	a, b := make([]byte, headLen), make([]byte, headLen)
	n, err := f.ReadAt(a, 0)
	if err != nil && !errors.Is(err, io.EOF) || n == 0 {
		return false
	}
	m, err := s.f.ReadAt(b, 0)
	return m == n && (err == nil || errors.Is(err, io.EOF)) && bytes.Equal(a[:n], b[:m])
}

// before: r was rotated before ref (or is ref): created before it, or,
// where creation times are not kept or equal, last written before it.
// Within one tick of the clock only rotation numbers order two files: a
// file without one (logrotate's create race renames a writer's new file
// to NAME-DATE.backup within the tick of the rename before it) is not
// taken as older; if it was read already, it is known, and skipped.
func (fl *follower) before(r, ref rotatedFile) bool {
	switch {
	case r.dev == ref.dev && r.ino == ref.ino:
		return true
	case !r.born.IsZero() && !ref.born.IsZero() && !r.born.Equal(ref.born):
		return r.born.Before(ref.born)
	case !r.mtime.Equal(ref.mtime):
		return r.mtime.Before(ref.mtime)
	case r.n >= 0 && ref.n >= 0:
		return olderFirst(r, ref) <= 0
	}
	return false
}

// known: f is a file open already (closing ones too: done, but once more
// files finished than the ring holds, only being open remembers them), or
// finished. A compressed copy has an inode of its own: it is known by its
// first line, of a file a line was read from, and its head (at most
// headLen bytes), which must be the head that file holds now (open) or
// held when last seen (finished), or a part of it from the start: a copy
// holds no more than its file, and may hold less (made before its last
// lines). Files that all begin with one header line differ after it, and
// one longer than a file that holds the header alone is not its copy. A
// file truncated since it was identified (copytruncate) holds its copies'
// bytes no more: a copy then begins with the headLen bytes it was
// identified by (not fewer: no more than a header, maybe).
func (fl *follower) known(f logFile) bool {
	_, gz := f.(*gzFile)
	var first string
	var head []byte
	if gz {
		if first, head = firstLine(f), headOf(f); len(head) == 0 {
			return false // nothing to read twice
		}
	}
	// copyOf: f is a copy of the file p identifies, which holds (or held
	// when last seen) held, nil when no longer what p was identified by.
	copyOf := func(p Position, held []byte) bool {
		if !gz || p.First == "" || p.First != first {
			return false
		}
		if held == nil {
			// A short head (the header line alone) would match a file
			// that only begins as this one did.
			same, _ := headMatches(f, p)
			return p.HeadLen == headLen && same
		}
		return len(head) <= len(held) && bytes.Equal(head, held[:len(head)])
	}
	for _, s := range slices.Concat(fl.left, fl.closing, []*source{fl.live}) {
		if s == nil {
			continue
		}
		if same, _ := sameFile(f, s.id); same || gz && copyOf(s.id, heldHead(s.f, s.id)) {
			return true
		}
	}
	return slices.ContainsFunc(fl.finished[:min(fl.nfin, len(fl.finished))], func(d doneFile) bool {
		same, _ := sameFile(f, d.id)
		return same || copyOf(d.id, d.head)
	})
}

// heldHead is f's head now, or nil when f no longer begins with the bytes
// p identified it by (truncated since, copytruncate: its copies begin with
// those).
func heldHead(f io.ReaderAt, p Position) []byte {
	if holds, _ := headMatches(f, p); !holds {
		return nil
	}
	return headOf(f)
}

// headOf is f's head: its first headLen bytes, or as many as it holds, or
// as can be read (a compressed file still being written ends early).
func headOf(f io.ReaderAt) []byte {
	b := make([]byte, headLen)
	n, _ := f.ReadAt(b, 0)
	return b[:n]
}

// split cuts b, read after the part s holds, into lines and pieces of at
// most maxLine bytes. A line wholly in b is given as a piece of b; only
// one that spans reads is copied (into s.part). It says whether fn wants
// more; when not, the bytes of b after the last line given are left
// unconsumed.
func (fl *follower) split(s *source, b []byte, fn func(Line) bool) bool {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		seg := b
		if i >= 0 {
			seg = b[:i]
		}
		for len(s.part)+len(seg) > fl.maxLine {
			k := fl.maxLine - len(s.part)
			more := true
			if len(s.part) == 0 {
				more = fl.emit(s, seg[:k], k, true, fn)
			} else {
				s.part = append(s.part, seg[:k]...)
				more = fl.emit(s, s.part, len(s.part), true, fn)
				s.part = s.part[:0]
			}
			if !more {
				return false
			}
			seg = seg[k:]
		}
		if i < 0 {
			s.part = append(s.part, seg...)
			return true
		}
		more := true
		if len(s.part) == 0 {
			more = fl.emit(s, seg, len(seg)+1, false, fn)
		} else {
			s.part = append(s.part, seg...)
			more = fl.emit(s, s.part, len(s.part)+1, false, fn)
			s.part = s.part[:0]
		}
		if !more {
			return false
		}
		b = b[i+1:]
	}
	return true
}

// emit gives fn a line of s that consumes the next consumed bytes (its
// newline included, or the part s held before it), and returns what fn
// does.
func (fl *follower) emit(s *source, data []byte, consumed int, cont bool, fn func(Line) bool) bool {
	if s.id.First == "" {
		s.id.First = firstLine(s.f) // the first line is on disk by now
	}
	s.id.Offset += int64(consumed)
	nl := consumed > len(data)
	s.tail.push(data, nl)
	return fn(Line{Data: data, File: s.id, End: s.id.Offset, Cont: cont, unended: !cont && !nl, tail: s.tail.bytes()})
}
