package logs

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/rsyslog"
)

// The syslog sink against the real rsyslog (imtcp): an oslo traceback
// record arrives as one message with its newlines, severity ERROR, the
// tag as APP-NAME and the file, the offset and the fields as structured
// data; over TLS too; rsyslog SIGKILLed: Send fails rather than
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
