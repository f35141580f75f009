package rsyslog

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The tests write RFC 5424 messages by hand, so that they show the server
// works without the agent's syslog client.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	ioTimeout = 5 * time.Second
	waitFor   = 10 * time.Second
)

// octet frames msg for octet counting (RFC 6587 3.4.1): "LEN SP MSG".
func octet(msg string) string { return strconv.Itoa(len(msg)) + " " + msg }

// send writes data on one connection to addr and closes it.
func send(t *testing.T, addr string, tlsConfig *tls.Config, data ...string) {
	t.Helper()
	d := &net.Dialer{Timeout: ioTimeout}
	var c net.Conn
	var err error
	if tlsConfig != nil {
		c, err = (&tls.Dialer{NetDialer: d, Config: tlsConfig}).Dial("tcp", addr)
	} else {
		c, err = d.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		t.Fatal(err)
	}
	for _, b := range data {
		if _, err := c.Write([]byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOctetCounted(t *testing.T) {
	// 16 KiB: the long message below would be truncated at rsyslog's
	// default 8096.
	s := Start(t, Options{MaxMessageSize: 16 << 10})
	long := strings.Repeat("0123456789abcdef", 600) // 9600 bytes
	msgs := []string{
		"<134>1 2026-11-23T17:40:00.123456Z host keystone 4242 - - line one\nline two",
		// Structured data with escapes; a MSG with a BOM, TAB, CR, DEL,
		// invalid UTF-8 and other control bytes, JSON's specials and a
		// trailing LF.
		"<11>1 2026-11-23T18:40:00.5+01:00 node-1 nova-api - REQ42 [req@32473 id=\"a\\\"b\\]c\" x=\"/\"][meta@1 k=\"v\"] " +
			"\ufeffTraceback:\n\tFile \"x.py\"\r\n\x01\x1b\x7f\xff\xfe \\ \" / \u2028 é\n",
		"<13>1 - - - - - -",
		"<191>1 2026-11-23T17:40:01Z h a p m - " + long,
	}
	var frames []string
	for _, m := range msgs {
		frames = append(frames, octet(m))
	}
	send(t, s.Addr, nil, frames...)

	got := s.WaitMessages(t, len(msgs), waitFor)
	if len(got) != len(msgs) {
		t.Fatalf("got %d messages, want %d: %+v", len(got), len(msgs), got)
	}
	want := Message{
		PRI: 134, Facility: 16, Severity: 6, Version: 1,
		Timestamp: time.Date(2026, 11, 23, 17, 40, 0, 123456000, time.UTC),
		Hostname:  "host", AppName: "keystone", ProcID: "4242", MsgID: "-", StructuredData: "-",
		MSG: "line one\nline two",
		Raw: msgs[0],
	}
	checkMessage(t, got[0], want)

	want = Message{
		PRI: 11, Facility: 1, Severity: 3, Version: 1,
		Timestamp: time.Date(2026, 11, 23, 17, 40, 0, 500000000, time.UTC),
		Hostname:  "node-1", AppName: "nova-api", ProcID: "-", MsgID: "REQ42",
		StructuredData: "[req@32473 id=\"a\\\"b\\]c\" x=\"/\"][meta@1 k=\"v\"]",
		MSG:            "\ufeffTraceback:\n\tFile \"x.py\"\r\n\x01\x1b\x7f\xff\xfe \\ \" / \u2028 é\n",
		Raw:            msgs[1],
	}
	checkMessage(t, got[1], want)
	if _, off := got[1].Timestamp.Zone(); off != 3600 {
		t.Errorf("timestamp offset %d s, want +01:00 kept", off)
	}

	// All nil: rsyslog puts the time of reception in for the timestamp.
	m := got[2]
	if m.PRI != 13 || m.Version != 1 || m.Hostname != "-" || m.AppName != "-" || m.ProcID != "-" ||
		m.MsgID != "-" || m.StructuredData != "-" || m.MSG != "" || m.Raw != msgs[2] {
		t.Errorf("nil message: got %+v", m)
	}
	if d := time.Since(m.Timestamp); d < 0 || d > time.Minute {
		t.Errorf("nil timestamp: got %v, want about now", m.Timestamp)
	}

	if m := got[3]; m.PRI != 191 || m.Facility != 23 || m.Severity != 7 || m.MSG != long {
		t.Errorf("long message: PRI %d facility %d severity %d, MSG of %d bytes (want %d)", m.PRI, m.Facility, m.Severity, len(m.MSG), len(long))
	}
}

func checkMessage(t *testing.T, got, want Message) {
	t.Helper()
	if !got.Timestamp.Equal(want.Timestamp) {
		t.Errorf("timestamp: got %v, want %v", got.Timestamp, want.Timestamp)
	}
	got.Timestamp, want.Timestamp = time.Time{}, time.Time{}
	if got != want {
		t.Errorf("got  %#v\nwant %#v", got, want)
	}
}

// Without octet counting a message ends at LF: rsyslog splits a two-line
// message in two, the second not being RFC 5424 at all.
func TestNonTransparent(t *testing.T) {
	s := Start(t, Options{})
	send(t, s.Addr, nil,
		"<134>1 2026-11-23T17:40:00.123456Z host keystone 4242 - - line one\nline two\n",
		// Both framings on one connection: rsyslog picks per frame.
		octet("<134>1 2026-11-23T17:40:02Z host keystone 4242 - - three\nfour"),
		"<134>1 2026-11-23T17:40:03Z host keystone 4242 - - five\n",
	)
	got := s.WaitMessages(t, 4, waitFor)
	var bodies []string
	for _, m := range got {
		bodies = append(bodies, m.MSG)
	}
	if len(got) != 4 || got[0].MSG != "line one" || got[1].Raw != "line two" || got[1].Version != 0 ||
		got[2].MSG != "three\nfour" || got[3].MSG != "five" {
		t.Errorf("got %d messages, MSGs %q; second %+v", len(got), bodies, got[1])
	}
}

func TestKillRestart(t *testing.T) {
	s := Start(t, Options{})
	addr := s.Addr
	send(t, addr, nil, octet("<134>1 2026-11-23T17:40:00Z host keystone 1 - - before\nkill"))
	s.WaitMessages(t, 1, waitFor)

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", addr, ioTimeout); err == nil {
		c.Close()
		t.Fatal("connected to a killed rsyslogd")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial after Kill: got %v, want connection refused", err)
	}

	s.Restart(t)
	if s.Addr != addr {
		t.Fatalf("Addr changed from %s to %s", addr, s.Addr)
	}
	send(t, addr, nil, octet("<134>1 2026-11-23T17:40:01Z host keystone 2 - - after\nrestart"))
	got := s.WaitMessages(t, 2, waitFor)
	if len(got) != 2 || got[0].MSG != "before\nkill" || got[1].MSG != "after\nrestart" {
		t.Fatalf("got %+v", got)
	}

	// Restart of a running server stops it gracefully first.
	s.Restart(t)
	send(t, addr, nil, octet("<134>1 2026-11-23T17:40:02Z host keystone 3 - - again"))
	if got := s.WaitMessages(t, 3, waitFor); len(got) != 3 || got[2].MSG != "again" {
		t.Fatalf("got %+v", got)
	}
}

// Restart waits for a port that another process holds for a moment.
func TestRestartPortTaken(t *testing.T) {
	s := Start(t, Options{})
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	// The port is freed once Restart has found it taken (not after a
	// time a loaded machine may spend before its first try).
	released := make(chan struct{})
	go func() {
		defer close(released)
		defer l.Close()
		for deadline := time.Now().Add(restartWindow); time.Now().Before(deadline); time.Sleep(pollInterval) {
			s.mu.Lock()
			n := s.clashes
			s.mu.Unlock()
			if n > 0 {
				return
			}
		}
	}()
	s.Restart(t)
	select {
	case <-released:
	default:
		t.Fatal("Restart returned while the port was taken")
	}
	if s.clashes == 0 {
		t.Fatal("Restart never found the port taken")
	}
	send(t, s.Addr, nil, octet("<134>1 2026-11-23T17:40:00Z host keystone 1 - - back"))
	if got := s.WaitMessages(t, 1, waitFor); got[0].MSG != "back" {
		t.Fatalf("got %+v", got)
	}
}

func TestTLS(t *testing.T) {
	s := Start(t, Options{TLS: true})
	cfg, err := s.ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	send(t, s.Addr, cfg, octet("<134>1 2026-11-23T17:40:00Z host keystone 4242 - - over\nTLS ("+s.Driver+")"))
	got := s.WaitMessages(t, 1, waitFor)
	if len(got) != 1 || got[0].MSG != "over\nTLS ("+s.Driver+")" {
		t.Fatalf("got %+v", got)
	}
}

// The configuration quotes paths as rsyslog strings, and -N1 reports what
// rsyslog rejects before rsyslogd runs.
func TestConfigValidation(t *testing.T) {
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir() + `/a "b" \c`
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := newServer(dir, Options{MaxMessageSize: 4096}, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.config(1)
	if !strings.Contains(cfg, `maxMessageSize="4096"`) || !strings.Contains(cfg, `a \"b\" \\c`) {
		t.Errorf("config:\n%s", cfg)
	}
	if err := os.WriteFile(s.Config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := validate(bin, s.Config); err != nil {
		t.Error(err)
	}

	bad := strings.Replace(cfg, `ruleset="tcp"`, `ruleset="tcp" bogus="1"`, 1)
	if err := os.WriteFile(s.Config, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := validate(bin, s.Config); err == nil || !strings.Contains(err.Error(), "parameter 'bogus' not known") {
		t.Errorf("got %v, want rsyslog's complaint about bogus", err)
	}
}

func TestUnquote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`""`, ""},
		{`"a\nb\r\t\b\f\"\\\/"`, "a\nb\r\t\b\f\"\\/"},
		{`"\u0001\u001B\u001f"`, "\x01\x1b\x1f"},
		{"\"\xff\xfe\x7f é\"", "\xff\xfe\x7f é"},
		{`"\u00e9\ud83d\ude00"`, "é😀"},
	} {
		got, err := unquote([]byte(tc.in))
		if err != nil || got != tc.want {
			t.Errorf("unquote(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{`"a\"`, `"\x"`, `"\u12"`, `abc`} {
		if got, err := unquote([]byte(in)); err == nil {
			t.Errorf("unquote(%q) = %q, want an error", in, got)
		}
	}
}
