package logs

import (
	"bytes"
	"regexp"
	"slices"
)

// Record is one log record: one line, or the lines of one multi-line
// message or traceback, joined by "\n".
type Record struct {
	Data []byte
	// File and End: where its last line ends (committing End for File
	// ships it); Start is where its first line began.
	File       Position
	Start, End int64
	// Partial: a piece of a line longer than the limit.
	Partial bool

	// mark is the input of File's marker at End: the markLen bytes before
	// it (fewer at the file's start), kept with the record so that the
	// marker is computed once per batch, for the offset committed.
	mark []byte
}

// osloHead is where the parts of oslo.log's line header are in a line:
// "2026-11-23 17:40:00.123 4242 ERROR keystone.server " — timestamp with
// milliseconds, pid, level, logger, one space. Its logging_exception_prefix
// gives every traceback line the same header as the line that logged the
// exception, which is how they are grouped. It is what the regular
// expression
//
//	^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \d+ ([A-Z]+) \S+) ?
//
// matches (a test holds the two to the same answers), written by hand:
// it runs on every line, and the regexp was a quarter of the shipper's time.
type osloHead struct {
	pid, level, logger int // where each starts
	end                int // the header's end, before the space: line[:end] is the header
	text               int // where the text starts, after the space if any
}

// parseOslo finds oslo.log's header at the start of line.
func parseOslo(line []byte) (h osloHead, ok bool) {
	const stamp = "dddd-dd-dd dd:dd:dd."
	if len(line) < len(stamp) {
		return h, false
	}
	for i := range len(stamp) {
		if c := line[i]; stamp[i] == 'd' && !isDigit(c) || stamp[i] != 'd' && c != stamp[i] {
			return h, false
		}
	}
	i, ok := digits(line, len(stamp)) // milliseconds
	if !ok || i >= len(line) || line[i] != ' ' {
		return h, false
	}
	h.pid = i + 1
	if i, ok = digits(line, h.pid); !ok || i >= len(line) || line[i] != ' ' {
		return h, false
	}
	h.level = i + 1
	for i = h.level; i < len(line) && line[i] >= 'A' && line[i] <= 'Z'; i++ {
	}
	if i == h.level || i >= len(line) || line[i] != ' ' {
		return h, false
	}
	h.logger = i + 1
	for i = h.logger; i < len(line) && !isSpace(line[i]); i++ {
	}
	if i == h.logger {
		return h, false
	}
	h.end, h.text = i, i
	if i < len(line) && line[i] == ' ' {
		h.text++
	}
	return h, true
}

// digits skips one or more digits from i.
func digits(b []byte, i int) (int, bool) {
	j := i
	for j < len(b) && isDigit(b[j]) {
		j++
	}
	return j, j > i
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isSpace is RE2's \s: a byte of a multi-byte or invalid UTF-8 sequence
// is never one, so \S can be matched byte by byte.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
}

// levelName is the level of a header parseOslo found.
func (h osloHead) levelName(line []byte) []byte { return line[h.level : h.logger-1] }

// grouper groups a file's lines into records. Default rule (oslo.log): a
// line with a header starts a record, except an ERROR or CRITICAL line
// with the same header as the record's first line whose text does not
// start with a request context (callContext: a traceback line, whose
// exception prefix has none, while a new log call has one); a line without
// a header continues the record (a
// multi-line message). With firstLine set, a line matching it starts a
// record and any other continues it. A record never spans two files, nor
// a gap in one (a file truncated and read from its start).
//
// The records it returns share one buffer, which holds the bytes of one
// batch as they are in the file (newlines included): their Data is valid
// until reset.
type grouper struct {
	firstLine *regexp.Regexp

	// buf holds each run of consecutive bytes of one file preceded by up
	// to markLen bytes of that file before it, which the records' marks
	// are taken from; run is where the current run's starts. Past a
	// sixteenth of batch bytes, it grows to batch at once (0: doubling).
	buf   []byte
	run   int
	batch int
	// file: the current run's; end: where its last line ended.
	file Position
	end  int64
	seen bool

	// The record being grouped, its bytes buf[at:]; nl: its last line
	// ended with a newline (in buf, not in Data).
	cur  Record
	open bool
	at   int
	nl   bool
	// The grouping context: a record was started and neither flushed nor
	// ended by a gap since (a cut keeps it); header is that record's
	// header, when it has one (oslo's rule).
	ctx       bool
	header    []byte
	hasHeader bool
}

// add takes the next line and returns the record it completed, if any.
// l.Data is copied: it may be reused once add returns.
func (g *grouper) add(l Line) (Record, bool) {
	var done Record
	var ok bool
	consumed := len(l.Data)
	if !l.Cont && !l.unended {
		consumed++ // its newline
	}
	start := l.End - int64(consumed)
	if need := len(l.tail) + consumed; cap(g.buf)-len(g.buf) < need {
		g.grow(need)
	}
	if !g.seen || start != g.end || !sameIdentity(l.File, g.file) {
		done, ok = g.flush()
		// A new run: the bytes of the file before the line, from the
		// tail after it.
		g.file, g.run = l.File, len(g.buf)
		if n := len(l.tail) - consumed; n > 0 {
			g.buf = append(g.buf, l.tail[:n]...)
		}
	}
	g.seen, g.end = true, l.End
	h, isHead := osloHead{}, false
	if g.firstLine == nil && !l.Cont {
		h, isHead = parseOslo(l.Data)
	}
	continues := !l.Cont && g.continues(l.Data, h, isHead)
	if g.open && !continues {
		done, ok = g.complete()
	}
	if !g.open {
		g.cur = Record{File: l.File, Start: start, Partial: l.Cont}
		g.open, g.at = true, len(g.buf)
		if !continues {
			g.ctx = !l.Cont
			g.hasHeader = isHead
			if isHead {
				g.header = append(g.header[:0], l.Data[:h.end]...)
			}
		}
	}
	g.buf = append(g.buf, l.Data...)
	g.nl = consumed > len(l.Data)
	if g.nl {
		g.buf = append(g.buf, '\n')
	}
	g.cur.End = l.End // File is the same: a record never spans two
	if l.Cont {
		// A piece of an over-long line is a record of its own.
		if ok {
			// Two records done at once: the previous one first; the
			// piece waits as the open record until the next line.
			return done, true
		}
		done, ok = g.complete()
	}
	return done, ok
}

// grow makes room for n more bytes in buf.
func (g *grouper) grow(n int) {
	c := 2 * cap(g.buf)
	if cap(g.buf) < g.batch && c > g.batch/16 {
		c = g.batch
	}
	g.buf = slices.Grow(g.buf, max(c, len(g.buf)+n, 4<<10)-len(g.buf))
}

// continues says whether line goes on the record being grouped (or, after
// a cut, the record cut).
func (g *grouper) continues(line []byte, h osloHead, isHead bool) bool {
	if !g.ctx {
		return false
	}
	if g.firstLine != nil {
		return !g.firstLine.Match(line)
	}
	if !isHead {
		return g.hasHeader // text after a header line; before any: a record of its own
	}
	level := h.levelName(line)
	if !g.hasHeader || !bytes.Equal(line[:h.end], g.header) || (string(level) != "ERROR" && string(level) != "CRITICAL") {
		return false
	}
	return !callContext(line[h.text:])
}

// callContext says whether a line's text starts with oslo.log's request
// context, as a new log call's does: "[-]" without one, else a bracket
// holding the request ids ("[req-…", "[None req-…", "[<global> req-…").
// The exception prefix has none: a traceback line's text starts with the
// traceback, with nova's "[instance: UUID]", or with whatever the
// exception printed ("[SQL: …]" from SQLAlchemy).
func callContext(text []byte) bool {
	if len(text) == 0 || text[0] != '[' {
		return false
	}
	if bytes.HasPrefix(text, noContext) {
		return true
	}
	end := bytes.IndexByte(text, ']')
	if end < 0 {
		end = len(text)
	}
	return bytes.Contains(text[:end], reqID)
}

var noContext, reqID = []byte("[-]"), []byte("req-")

// complete ends the open record and returns it.
func (g *grouper) complete() (Record, bool) {
	if !g.open {
		return Record{}, false
	}
	r := g.cur
	end := len(g.buf)
	if g.nl {
		end--
	}
	r.Data = g.buf[g.at:end:end]
	r.mark = g.buf[max(g.run, len(g.buf)-markLen):len(g.buf):len(g.buf)]
	g.open = false
	return r, true
}

// flush returns the record being grouped (idle, rotation, stop), and
// forgets the grouping context.
func (g *grouper) flush() (Record, bool) {
	g.ctx, g.hasHeader = false, false
	return g.complete()
}

// cut returns the record being grouped but keeps the context: the lines
// that continue it go on in a new record (a record as large as a batch).
func (g *grouper) cut() (Record, bool) { return g.complete() }

// pending is how many bytes the record being grouped holds.
func (g *grouper) pending() int {
	if !g.open {
		return 0
	}
	return len(g.buf) - g.at
}

// reset lets the buffer be reused: the records returned so far are no
// longer needed (shipped). It keeps the record being grouped and the bytes
// before it its marker needs, or the last bytes of the run for the next
// line's.
func (g *grouper) reset() {
	keep := len(g.buf)
	if g.open {
		keep = g.at
	}
	from := max(g.run, keep-markLen)
	n := copy(g.buf, g.buf[from:])
	g.buf = g.buf[:n]
	g.run = 0
	g.at -= from
}

// shrink lets go of a buffer that a full batch grew and that holds little
// now.
func (g *grouper) shrink() {
	if cap(g.buf) > 64<<10 && len(g.buf) < cap(g.buf)/4 {
		g.buf = append([]byte(nil), g.buf...)
	}
}

// sameIdentity: a and b are the same file (their offsets aside).
func sameIdentity(a, b Position) bool {
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Head == b.Head && a.First == b.First
}
