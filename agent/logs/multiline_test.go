package logs

import (
	"regexp"
	"strings"
	"testing"
)

// group runs text through a follower-like split and the grouper.
func group(g *grouper, text string) []string {
	var out []string
	var off int64
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		off += int64(len(l)) + 1
		if r := g.add(Line{Data: []byte(l), End: off}); r != nil {
			out = append(out, string(r.Data))
		}
	}
	if r := g.flush(); r != nil {
		out = append(out, string(r.Data))
	}
	return out
}

// What oslo.log writes for LOG.exception: the message line, then every
// traceback line with the exception prefix (same time, pid, ERROR,
// logger, no request context); a multi-line message's continuation lines
// have no header at all.
const osloLog = `2026-11-23 17:40:00.120 4242 INFO keystone.server [-] Starting
2026-11-23 17:40:00.123 4242 ERROR keystone.server.flask.application [req-9a1b - - - - -] Unexpected error: boom
2026-11-23 17:40:00.123 4242 ERROR keystone.server.flask.application Traceback (most recent call last):
2026-11-23 17:40:00.123 4242 ERROR keystone.server.flask.application   File "/usr/lib/python3/dist-packages/keystone/server/flask/application.py", line 74, in f
2026-11-23 17:40:00.123 4242 ERROR keystone.server.flask.application     raise ValueError("boom")
2026-11-23 17:40:00.123 4242 ERROR keystone.server.flask.application ValueError: boom
2026-11-23 17:40:00.123 4242 ERROR keystone.server.flask.application 
2026-11-23 17:40:00.123 4242 ERROR keystone.server.flask.application [req-9a1c - - - - -] another call, same millisecond
2026-11-23 17:40:00.200 4242 WARNING keystone.common.rbac [-] a message
that goes on
  over lines
2026-11-23 17:40:00.300 4242 INFO keystone.server [-] done
`

func TestGroupOsloLog(t *testing.T) {
	got := group(&grouper{}, osloLog)
	if len(got) != 5 {
		t.Fatalf("%d records, want 5:\n%s", len(got), strings.Join(got, "\n----\n"))
	}
	if !strings.HasPrefix(got[1], "2026-11-23 17:40:00.123 4242 ERROR keystone.server.flask.application [req-9a1b") || !strings.HasSuffix(got[1], "ValueError: boom\n2026-11-23 17:40:00.123 4242 ERROR keystone.server.flask.application ") || strings.Count(got[1], "\n") != 5 {
		t.Errorf("the traceback record:\n%s", got[1])
	}
	if !strings.Contains(got[2], "another call") || strings.Contains(got[2], "\n") {
		t.Errorf("a new call in the same millisecond:\n%s", got[2])
	}
	if got[3] != "2026-11-23 17:40:00.200 4242 WARNING keystone.common.rbac [-] a message\nthat goes on\n  over lines" {
		t.Errorf("continuation lines:\n%s", got[3])
	}
}

func TestGroupFirstLine(t *testing.T) {
	got := group(&grouper{firstLine: regexp.MustCompile(`^\[`)}, "[1] a\n b\n[2] c\n")
	if strings.Join(got, "|") != "[1] a\n b|[2] c" {
		t.Errorf("got %q", got)
	}
	// Lines before any header are records of their own; pieces of an
	// over-long line too.
	g := &grouper{}
	if got := group(g, "no header\nnor here\n"); len(got) != 2 {
		t.Errorf("got %q", got)
	}
	g = &grouper{}
	var out []*Record
	for _, l := range []Line{{Data: []byte("2026-11-23 17:40:00.120 1 INFO a [-] x"), End: 40}, {Data: []byte("piece"), End: 45, Cont: true}, {Data: []byte("end"), End: 49}} {
		if r := g.add(l); r != nil {
			out = append(out, r)
		}
	}
	if r := g.flush(); r != nil {
		out = append(out, r)
	}
	if len(out) != 3 || !out[1].Partial || out[1].Start != 40 || out[2].Start != 45 {
		t.Errorf("records %+v", out)
	}
}

// Grouping never loses or reorders a byte: the records, joined, are the
// lines; every record ends where its last line does.
func FuzzGroup(f *testing.F) {
	f.Add(osloLog)
	f.Add("x\n\n2026-11-23 17:40:00.123 1 ERROR a b\n2026-11-23 17:40:00.123 1 ERROR a [c\n")
	f.Fuzz(func(t *testing.T, text string) {
		if strings.ContainsRune(text, '\r') {
			return
		}
		got := group(&grouper{}, text)
		if want := strings.TrimSuffix(text, "\n"); strings.Join(got, "\n") != want && text != "" {
			t.Fatalf("records %q from %q", got, text)
		}
	})
}
