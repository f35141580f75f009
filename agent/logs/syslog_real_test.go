package logs

import (
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/rsyslog"
)

// The syslog sink against the real rsyslog (imtcp): an oslo traceback
// record arrives as one message with its newlines, severity ERROR, the
// tag as APP-NAME and the file, the offset and the fields as structured
// data; over TLS too, verified against a private CA with the name taken
// from the address (and refused for a wrong name); rsyslog SIGKILLed: Send fails rather than
// confirming, and after the restart the batch goes through.
func TestSyslogRealRsyslog(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "tls"}[useTLS], func(t *testing.T) {
			srv := rsyslog.Start(t, rsyslog.Options{TLS: useTLS})
			cfg := SyslogConfig{Address: srv.Addr, Hostname: "keystone-api-0"}
			var err error
			if useTLS {
				if cfg.TLS, err = srv.ClientTLSConfig(); err != nil {
					t.Fatal(err)
				}
			}
			s, err := NewSyslog(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			tb := "2026-11-23 17:40:00.123 4242 ERROR keystone.server [req-1] boom\n2026-11-23 17:40:00.123 4242 ERROR keystone.server Traceback (most recent call last):\n2026-11-23 17:40:00.123 4242 ERROR keystone.server ValueError: boom"
			rec := Record{Data: []byte(tb), File: Position{Path: "/var/log/kolla/keystone/keystone.log", Dev: 1, Ino: 2, Head: "ab", First: "ab"}, End: 4096}
			if err := s.Send(context.Background(), "kolla.keystone.keystone", map[string]string{"pod": "keystone-api-0"}, []Record{rec}); err != nil {
				t.Fatal(err)
			}
			m := srv.WaitMessages(t, 1, 10*time.Second)[0]
			if m.MSG != tb || m.Severity != 3 || m.AppName != "kolla.keystone.keystone" || m.Hostname != "keystone-api-0" || m.ProcID != "4242" || !strings.Contains(m.StructuredData, `offset="4096"`) || !strings.Contains(m.StructuredData, `pod="keystone-api-0"`) {
				t.Errorf("message %+v", m)
			}
			if useTLS {
				// Verification is on: a certificate for another name is
				// refused, and nothing is confirmed.
				wrong := cfg
				wrong.TLS = cfg.TLS.Clone()
				wrong.TLS.ServerName = "rsyslog.wrong.example"
				ws, err := NewSyslog(wrong)
				if err != nil {
					t.Fatal(err)
				}
				defer ws.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := ws.Send(ctx, "t", nil, []Record{{Data: []byte("to the wrong name")}}); err == nil || !strings.Contains(err.Error(), "certificate") {
					t.Errorf("Send to a certificate of another name: %v, want a certificate error", err)
				}
				return
			}
			srv.Kill()
			if err := s.Send(context.Background(), "t", nil, []Record{{Data: []byte("during the outage")}}); err == nil {
				t.Error("a batch confirmed while rsyslog was dead")
			}
			srv.Restart(t)
			if err := s.Send(context.Background(), "t", nil, []Record{{Data: []byte("after the restart")}}); err != nil {
				t.Fatal(err)
			}
			msgs := srv.WaitMessages(t, 2, 10*time.Second)
			if msgs[len(msgs)-1].MSG != "after the restart" {
				t.Errorf("last message %+v", msgs[len(msgs)-1])
			}
		})
	}
}

// What a receiver kill costs over plain syslog, which has no application
// ack: 20,000 lines shipped to the real rsyslog, SIGKILLed mid-stream and
// restarted. The lines the shipper committed that rsyslog never wrote out
// are lost (measured, at most one batch); the rest arrive, some twice.
func TestShipperSyslogReceiverKill(t *testing.T) {
	srv := rsyslog.Start(t, rsyslog.Options{})
	dir := filepath.Join(t.TempDir(), "nova")
	mkdir(t, dir)
	w := writer(t, filepath.Join(dir, "nova-conductor.log"))
	sl, err := NewSyslog(SyslogConfig{Address: srv.Addr, Hostname: "nova-conductor-0"})
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	stop := runShipper(t, ShipperConfig{Files: []FileSpec{{Glob: filepath.Join(dir, "*.log")}}, Sink: sl,
		StateDir: filepath.Join(t.TempDir(), "state"), Idle: 50 * time.Millisecond, Rescan: time.Second})
	defer stop()
	const total = 20_000
	for i := range total {
		w.WriteString(lines(i, i+1))
		switch i {
		case 8_000:
			srv.Kill()
		case 10_000:
			srv.Restart(t)
		}
		if i%200 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	lineNo := regexp.MustCompile(` line (\d+) `)
	seen := map[int]int{}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		msgs, err := srv.Messages()
		if err != nil {
			t.Fatal(err)
		}
		clear(seen)
		for _, m := range msgs {
			for _, l := range strings.Split(m.MSG, "\n") {
				if g := lineNo.FindStringSubmatch(l); g != nil {
					n, _ := strconv.Atoi(g[1])
					seen[n]++
				}
			}
		}
		if seen[total-1] > 0 {
			break
		}
	}
	lost, dups := 0, 0
	for i := range total {
		switch c := seen[i]; {
		case c == 0:
			lost++
		case c > 1:
			dups += c - 1
		}
	}
	t.Logf("rsyslog SIGKILLed mid-stream: %d of %d lines lost, %d duplicates", lost, total, dups)
	if seen[total-1] == 0 {
		t.Fatal("the last line never arrived")
	}
	if limit := (512 << 10) / len(lines(0, 1)); lost > limit {
		t.Errorf("%d lines lost, more than one batch (%d lines)", lost, limit)
	}
}
