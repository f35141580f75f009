package logs

import (
	"bytes"
	"regexp"
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
}

// osloHeader is oslo.log's line header: "2026-11-23 17:40:00.123 4242 ERROR
// keystone.server " — timestamp with milliseconds, pid, level, logger. Its
// logging_exception_prefix gives every traceback line the same header as
// the line that logged the exception, which is how they are grouped.
var osloHeader = regexp.MustCompile(`^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \d+ ([A-Z]+) \S+) ?`)

// grouper groups a file's lines into records. Default rule (oslo.log): a
// line with a header starts a record, except an ERROR or CRITICAL line
// with the same header as the record's first line whose text does not
// start with "[" (a traceback line: the exception prefix has no request
// context, a new log call has one); a line without a header continues the
// record (a multi-line message). With firstLine set, a line matching it
// starts a record and any other continues it.
type grouper struct {
	firstLine *regexp.Regexp
	cur       *Record
	header    []byte // the current record's header, for oslo's rule
}

// add takes the next line and returns the record it completed, if any.
func (g *grouper) add(l Line) *Record {
	start := l.End - int64(len(l.Data))
	if !l.Cont {
		start-- // its newline
	}
	if l.Cont {
		// A piece of an over-long line is a record of its own.
		done := g.flush()
		g.cur = &Record{Data: l.Data, File: l.File, Start: start, End: l.End, Partial: true}
		if done != nil {
			return done
		}
		return g.flush()
	}
	if g.cur != nil && g.continues(l.Data) {
		g.cur.Data = append(append(g.cur.Data, '\n'), l.Data...)
		g.cur.End, g.cur.File = l.End, l.File
		return nil
	}
	done := g.flush()
	g.cur = &Record{Data: l.Data, File: l.File, Start: start, End: l.End}
	g.header = nil
	if g.firstLine == nil {
		if m := osloHeader.FindSubmatch(l.Data); m != nil {
			g.header = m[1]
		}
	}
	return done
}

func (g *grouper) continues(line []byte) bool {
	if g.cur.Partial {
		return false
	}
	if g.firstLine != nil {
		return !g.firstLine.Match(line)
	}
	m := osloHeader.FindSubmatch(line)
	if m == nil {
		return g.header != nil // text after a header line; before any: a record of its own
	}
	level := string(m[2])
	if g.header == nil || !bytes.Equal(m[1], g.header) || (level != "ERROR" && level != "CRITICAL") {
		return false
	}
	return !bytes.HasPrefix(line[len(m[0]):], []byte("["))
}

// flush returns the record being grouped (idle, rotation, stop).
func (g *grouper) flush() *Record {
	r := g.cur
	g.cur, g.header = nil, nil
	return r
}
