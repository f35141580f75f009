package logs

import (
	"bufio"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// octetReceiver reads octet-counted syslog frames; with closeAfter > 0 it
// closes each connection after that many frames.
type octetReceiver struct {
	ln         net.Listener
	mu         sync.Mutex
	msgs       []string
	closeAfter atomic.Int64
}

func startOctetReceiver(t *testing.T, closeAfter int) *octetReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &octetReceiver{ln: ln}
	r.closeAfter.Store(int64(closeAfter))
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 0; ; n++ {
					if c := r.closeAfter.Load(); c > 0 && int64(n) == c {
						return
					}
					l, err := br.ReadString(' ')
					if err != nil {
						return
					}
					size, err := strconv.Atoi(strings.TrimSpace(l))
					if err != nil {
						t.Errorf("bad frame length %q", l)
						return
					}
					b := make([]byte, size)
					if _, err := io.ReadFull(br, b); err != nil {
						return
					}
					r.mu.Lock()
					r.msgs = append(r.msgs, string(b))
					r.mu.Unlock()
				}
			}()
		}
	}()
	return r
}

func (r *octetReceiver) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

func TestSyslogFormatAndFraming(t *testing.T) {
	r := startOctetReceiver(t, 0)
	s, err := NewSyslog(SyslogConfig{Address: r.ln.Addr().String(), Hostname: "keystone-api-0", Confirm: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := []Record{
		{Data: []byte("2026-11-23 17:40:00.123 4242 ERROR keystone.server [req-1] boom\n2026-11-23 17:40:00.123 4242 ERROR keystone.server Traceback (most recent call last):"), File: Position{Path: `/var/log/kolla/keystone/ke"y].log`, Dev: 1, Ino: 2, Head: "ab", First: "ab"}, End: 300},
		{Data: []byte("plain \xff\xfe line"), File: Position{Path: "/a.log"}, End: 17, Partial: true},
	}
	if err := s.Send(context.Background(), "kolla.keystone.keystone", nil, recs); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(r.got()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	got := r.got()
	if len(got) != 2 {
		t.Fatalf("%d messages", len(got))
	}
	if !strings.HasPrefix(got[0], "<11>1 ") || !strings.Contains(got[0], " keystone-api-0 kolla.keystone.keystone 4242 - [kolla@32473 file=\"/var/log/kolla/keystone/ke\\\"y\\].log\" offset=\"300\" id=\"1:2:ab\"] 2026-11-23 17:40:00.123 4242 ERROR") || !strings.Contains(got[0], "boom\n2026-11-23") {
		t.Errorf("first message:\n%s", got[0])
	}
	if !strings.HasPrefix(got[1], "<14>1 ") || !strings.Contains(got[1], ` partial="true"] plain \xff\xfe line`) {
		t.Errorf("second message:\n%s", got[1])
	}
}

// A receiver that closes the connection right after the batch (it died
// before reading it all): Send says so, and the batch goes again over a
// new connection.
func TestSyslogReceiverClosesDuringConfirmation(t *testing.T) {
	r := startOctetReceiver(t, 1)
	// A long window: the close ends it as soon as it comes, and a loaded
	// machine's late close must not pass for a confirmation.
	s, _ := NewSyslog(SyslogConfig{Address: r.ln.Addr().String(), Confirm: 30 * time.Second})
	defer s.Close()
	recs := []Record{{Data: []byte("one")}, {Data: []byte("two")}}
	if err := s.Send(context.Background(), "t", nil, recs); err == nil {
		t.Fatal("a batch the receiver did not take was confirmed")
	}
	s.cfg.Confirm = 20 * time.Millisecond // a receiver that stays up: confirmed once the window ends
	r.closeAfter.Store(0)
	if err := s.Send(context.Background(), "t", nil, recs); err != nil {
		t.Fatal(err)
	}
}

// The fields are params of the structured data, after the record's own,
// in the order of their keys, their values escaped.
func TestSyslogFields(t *testing.T) {
	r := startOctetReceiver(t, 0)
	s, err := NewSyslog(SyslogConfig{Address: r.ln.Addr().String(), Hostname: "h", Confirm: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := []Record{{Data: []byte("x"), File: Position{Path: "/a.log", Dev: 1, Ino: 2, Head: "ab", First: "ab"}, End: 2, Partial: true}}
	if err := s.Send(context.Background(), "t", map[string]string{"pod": "keystone-api-0", "namespace": `o"p]e\n`}, recs); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(r.got()) < 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := r.got(); len(got) != 1 || !strings.HasSuffix(got[0], ` h t - - [kolla@32473 file="/a.log" offset="2" id="1:2:ab" partial="true" namespace="o\"p\]e\\n" pod="keystone-api-0"] x`) {
		t.Errorf("messages %q", got)
	}
}

func TestStdoutSink(t *testing.T) {
	var b strings.Builder
	recs := []Record{{Data: []byte("a\nb"), File: Position{Path: "/x.log", Dev: 1, Ino: 2, Head: "ab", First: "ab"}, End: 4}, {Data: []byte("c"), File: Position{Path: "/x.log", Dev: 1, Ino: 2, Head: "ab", First: "ab"}, End: 6}}
	if err := NewStdout(&b, false).Send(context.Background(), "t", nil, recs); err != nil || b.String() != "a\nb\nc\n" {
		t.Errorf("raw: %q %v", b.String(), err)
	}
	b.Reset()
	if err := NewStdout(&b, true).Send(context.Background(), "kolla.x", nil, recs[:1]); err != nil || b.String() != `{"tag":"kolla.x","file":"/x.log","offset":4,"id":"1:2:ab","message":"a\nb"}`+"\n" {
		t.Errorf("json: %q %v", b.String(), err)
	}
	// The fields as more keys, in their order; raw lines have no room
	// for them.
	b.Reset()
	fields := map[string]string{"pod": "keystone-api-0", "namespace": "open\"stack"}
	if err := NewStdout(&b, true).Send(context.Background(), "kolla.x", fields, recs[:1]); err != nil || b.String() != `{"tag":"kolla.x","file":"/x.log","offset":4,"id":"1:2:ab","message":"a\nb","namespace":"open\"stack","pod":"keystone-api-0"}`+"\n" {
		t.Errorf("json with fields: %q %v", b.String(), err)
	}
	b.Reset()
	if err := NewStdout(&b, false).Send(context.Background(), "t", fields, recs); err != nil || b.String() != "a\nb\nc\n" {
		t.Errorf("raw with fields: %q %v", b.String(), err)
	}
}
