package logs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
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
		if r, ok := g.add(Line{Data: []byte(l), End: off}); ok {
			out = append(out, string(r.Data))
		}
	}
	if r, ok := g.flush(); ok {
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

// nova-compute's LOG.exception: nova's logging_exception_prefix ends with
// %(instance)s, so every traceback line's text starts with the instance;
// a new call in the same millisecond has the request context before it.
const novaLog = `2026-11-23 17:41:07.498 7 INFO nova.compute.claims [req-3f1d2c4e-8b7a-4c1e-9f0d-2a6b5c4d3e21 9d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a 4b2f6e8d0c1a3b5d7f9e2c4a6b8d0f1e - default default] [instance: 6f7c2b1a-3d4e-4f5a-8b6c-7d8e9f0a1b2c] Claim successful on node compute-0
2026-11-23 17:41:07.512 7 ERROR nova.compute.manager [req-3f1d2c4e-8b7a-4c1e-9f0d-2a6b5c4d3e21 9d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a 4b2f6e8d0c1a3b5d7f9e2c4a6b8d0f1e - default default] [instance: 6f7c2b1a-3d4e-4f5a-8b6c-7d8e9f0a1b2c] Instance failed to spawn: libvirt.libvirtError: internal error: qemu unexpectedly closed the monitor
2026-11-23 17:41:07.512 7 ERROR nova.compute.manager [instance: 6f7c2b1a-3d4e-4f5a-8b6c-7d8e9f0a1b2c] Traceback (most recent call last):
2026-11-23 17:41:07.512 7 ERROR nova.compute.manager [instance: 6f7c2b1a-3d4e-4f5a-8b6c-7d8e9f0a1b2c]   File "/var/lib/kolla/venv/lib/python3.10/site-packages/nova/compute/manager.py", line 2743, in _build_resources
2026-11-23 17:41:07.512 7 ERROR nova.compute.manager [instance: 6f7c2b1a-3d4e-4f5a-8b6c-7d8e9f0a1b2c]     yield resources
2026-11-23 17:41:07.512 7 ERROR nova.compute.manager [instance: 6f7c2b1a-3d4e-4f5a-8b6c-7d8e9f0a1b2c]   File "/var/lib/kolla/venv/lib/python3.10/site-packages/nova/compute/manager.py", line 2503, in _build_and_run_instance
2026-11-23 17:41:07.512 7 ERROR nova.compute.manager [instance: 6f7c2b1a-3d4e-4f5a-8b6c-7d8e9f0a1b2c]     self.driver.spawn(context, instance, image_meta,
2026-11-23 17:41:07.512 7 ERROR nova.compute.manager [instance: 6f7c2b1a-3d4e-4f5a-8b6c-7d8e9f0a1b2c]   File "/var/lib/kolla/venv/lib/python3.10/site-packages/nova/virt/libvirt/driver.py", line 4405, in spawn
2026-11-23 17:41:07.512 7 ERROR nova.compute.manager [instance: 6f7c2b1a-3d4e-4f5a-8b6c-7d8e9f0a1b2c]     self._create_guest_with_network(
2026-11-23 17:41:07.512 7 ERROR nova.compute.manager [instance: 6f7c2b1a-3d4e-4f5a-8b6c-7d8e9f0a1b2c]   File "/usr/lib/python3/dist-packages/libvirt.py", line 1409, in createWithFlags
2026-11-23 17:41:07.512 7 ERROR nova.compute.manager [instance: 6f7c2b1a-3d4e-4f5a-8b6c-7d8e9f0a1b2c]     raise libvirtError('virDomainCreateWithFlags() failed')
2026-11-23 17:41:07.512 7 ERROR nova.compute.manager [instance: 6f7c2b1a-3d4e-4f5a-8b6c-7d8e9f0a1b2c] libvirt.libvirtError: internal error: qemu unexpectedly closed the monitor: 2026-11-23T17:41:07.401234Z qemu-kvm: -device vfio-pci,host=0000:3b:00.1: failed to open /dev/vfio/42
2026-11-23 17:41:07.512 7 ERROR nova.compute.manager [instance: 6f7c2b1a-3d4e-4f5a-8b6c-7d8e9f0a1b2c] 
2026-11-23 17:41:07.512 7 ERROR nova.compute.manager [req-3f1d2c4e-8b7a-4c1e-9f0d-2a6b5c4d3e21 9d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a 4b2f6e8d0c1a3b5d7f9e2c4a6b8d0f1e - default default] [instance: 6f7c2b1a-3d4e-4f5a-8b6c-7d8e9f0a1b2c] Build of instance aborted, same millisecond
2026-11-23 17:41:07.520 7 INFO nova.compute.manager [req-3f1d2c4e-8b7a-4c1e-9f0d-2a6b5c4d3e21 9d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a 4b2f6e8d0c1a3b5d7f9e2c4a6b8d0f1e - default default] [instance: 6f7c2b1a-3d4e-4f5a-8b6c-7d8e9f0a1b2c] Terminating instance
`

func TestGroupNovaInstanceTraceback(t *testing.T) {
	got := group(&grouper{}, novaLog)
	if len(got) != 4 {
		t.Fatalf("%d records, want 4:\n%s", len(got), strings.Join(got, "\n----\n"))
	}
	lines := strings.Split(novaLog, "\n")
	if want := strings.Join(lines[1:13], "\n"); got[1] != want {
		t.Errorf("the traceback record:\n%s\nwant\n%s", got[1], want)
	}
	if got[2] != lines[13] {
		t.Errorf("a new call in the same millisecond, with its instance:\n%s", got[2])
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
	var out []Record
	for _, l := range []Line{{Data: []byte("2026-11-23 17:40:00.120 1 INFO a [-] x"), End: 40}, {Data: []byte("piece"), End: 45, Cont: true}, {Data: []byte("end"), End: 49}} {
		if r, ok := g.add(l); ok {
			out = append(out, r)
		}
	}
	if r, ok := g.flush(); ok {
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
		if want := refGroup(text); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("records %q, the regexp's rule %q", got, want)
		}
	})
}

// refGroup is oslo's rule as it was written with the regexp, before the
// grouper kept its records in one buffer.
func refGroup(text string) []string {
	var out []string
	var cur, header []string
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		m := osloHeaderRE.FindStringSubmatch(l)
		continues := false
		if cur != nil {
			switch {
			case m == nil:
				continues = header != nil
			case header != nil && m[1] == header[0] && (m[2] == "ERROR" || m[2] == "CRITICAL"):
				text := l[len(m[0]):]
				ctx, _, _ := strings.Cut(text, "]")
				continues = !strings.HasPrefix(text, "[-]") && (!strings.HasPrefix(text, "[") || !strings.Contains(ctx, "req-"))
			}
		}
		if continues {
			cur = append(cur, l)
			continue
		}
		if cur != nil {
			out = append(out, strings.Join(cur, "\n"))
		}
		cur, header = []string{l}, nil
		if m != nil {
			header = m[1:2]
		}
	}
	if cur != nil {
		out = append(out, strings.Join(cur, "\n"))
	}
	return out
}

// On random oslo-like logs (same and other headers, levels, request
// contexts, lines without a header, empty lines) the grouper's records
// are the regexp rule's.
func TestGroupIsTheRegexpRule(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	heads := []string{"2026-11-23 17:40:00.123 4242 ERROR a.b", "2026-11-23 17:40:00.123 4242 CRITICAL a.b", "2026-11-23 17:40:00.123 4242 INFO a.b", "2026-11-23 17:40:00.124 4242 ERROR a.b", "2026-11-23 17:40:00.123 4243 ERROR a.b"}
	texts := []string{"[req-1] x", "Traceback", "[", "", " two", "ValueError: [x]", "[instance: 6f7c] Traceback", "[instance:x", "[req-1] [instance: 6f7c] x", "[-] y", "[None req-2 - - - - - -] z", "[SQL: SELECT 1]", "[parameters: ('req-x',)]"}
	for range 20_000 {
		var b strings.Builder
		for range 1 + r.IntN(12) {
			switch n := r.IntN(10); {
			case n < 6:
				b.WriteString(heads[r.IntN(len(heads))])
				if r.IntN(4) > 0 {
					b.WriteString(" " + texts[r.IntN(len(texts))])
				}
			case n < 9:
				b.WriteString(texts[r.IntN(len(texts))])
			}
			b.WriteString("\n")
		}
		text := b.String()
		if got, want := group(&grouper{}, text), refGroup(text); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("%q: records %q, want %q", text, got, want)
		}
	}
}

// osloHeaderRE is the specification of parseOslo.
var osloHeaderRE = regexp.MustCompile(`^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \d+ ([A-Z]+) \S+) ?`)

// sameAsRegexp says where parseOslo and the regexp disagree on line, ""
// when they do not.
func sameAsRegexp(line []byte) string {
	h, ok := parseOslo(line)
	m := osloHeaderRE.FindSubmatchIndex(line)
	switch {
	case ok != (m != nil):
		return fmt.Sprintf("parseOslo %v, regexp %v", ok, m != nil)
	case !ok:
		return ""
	case h.text != m[1] || h.end != m[3] || h.level != m[4] || h.logger-1 != m[5]:
		return fmt.Sprintf("parseOslo %+v, regexp %v", h, m)
	case h.pid != len("2026-11-23 17:40:00.")+bytes.IndexByte(line[len("2026-11-23 17:40:00."):], ' ')+1:
		return fmt.Sprintf("pid at %d", h.pid)
	}
	return ""
}

// The hand-written matcher answers as the regexp does: on real headers,
// on each of them cut short and with each byte changed to each of the
// bytes that matter to the pattern, and on random lines made of those
// bytes.
func TestParseOsloIsTheRegexp(t *testing.T) {
	heads := []string{
		"2026-11-23 17:40:00.123 4242 ERROR keystone.server.flask.application [req-9a1b - - - - -] boom",
		"2026-11-23 17:40:00.123 4242 ERROR keystone.server.flask.application Traceback (most recent call last):",
		"2026-11-23 17:40:00.123 4242 ERROR keystone.server.flask.application ",
		"2026-11-23 17:40:00.123 4242 ERROR keystone.server.flask.application",
		"2026-11-23 17:40:00.1 1 I x\ty",
		"2026-11-23 17:40:00.123456 4242 INFO nova.compute.manager  [-] two spaces",
		"2026-11-23 17:40:00.123 4242 INFO n\xffova\xe2\x80\xa8 x",
	}
	alphabet := []byte("0123456789-:. AZaz[]\t\n\f\r\v\xff\xe2\x80\xa8")
	check := func(line []byte) {
		t.Helper()
		if d := sameAsRegexp(line); d != "" {
			t.Fatalf("%q: %s", line, d)
		}
	}
	matched := 0
	for _, h := range heads {
		b := []byte(h)
		for i := range len(b) + 1 {
			check(b[:i])
		}
		for i := range b {
			for _, c := range alphabet {
				m := bytes.Clone(b)
				m[i] = c
				check(m)
			}
		}
		if _, ok := parseOslo(b); ok {
			matched++
		}
	}
	if matched != len(heads) {
		t.Fatalf("%d of %d real headers matched", matched, len(heads))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		b := []byte(heads[r.IntN(len(heads))])
		b = b[:r.IntN(len(b)+1)]
		for range r.IntN(4) {
			if len(b) > 0 {
				b[r.IntN(len(b))] = alphabet[r.IntN(len(alphabet))]
			}
		}
		check(b)
	}
}

func FuzzParseOslo(f *testing.F) {
	for _, l := range strings.Split(osloLog, "\n") {
		f.Add([]byte(l))
	}
	f.Add([]byte("2026-11-23 17:40:00.1 1 A \xff"))
	f.Fuzz(func(t *testing.T, line []byte) {
		if d := sameAsRegexp(line); d != "" {
			t.Fatalf("%q: %s", line, d)
		}
	})
}
