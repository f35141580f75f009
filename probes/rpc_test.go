package probes

// Tests of the rpc check against a real RabbitMQ and real oslo.messaging RPC
// servers (internal/rabbitmq). One broker serves the package's tests: the
// first test that needs it starts it, stopRPCBroker (TestMain) stops it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kolla-agent/kolla-agent/internal/poll"
	"github.com/kolla-agent/kolla-agent/internal/rabbitmq"
)

// rpcBrokerState is the broker shared by the package's tests.
var rpcBrokerState struct {
	mu      sync.Mutex
	started bool
	dir     string
	srv     *rabbitmq.Server
	err     error
}

// rpcBroker returns the package's broker, starting it on first use. Tests
// do not skip without one: hack/install-tools.sh installs it.
func rpcBroker(t testing.TB) *rabbitmq.Server {
	t.Helper()
	st := &rpcBrokerState
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.started {
		st.started = true
		if ok, why := rabbitmq.Installed(); !ok {
			st.err = errors.New(why)
		} else if st.dir, st.err = os.MkdirTemp("", "kolla-agent-rabbitmq-"); st.err == nil {
			st.srv, st.err = rabbitmq.Start(st.dir)
			if st.err == nil {
				t.Logf("rabbitmq %s booted in %s", st.srv.Node, st.srv.BootTime.Round(time.Millisecond))
			}
		}
	}
	if st.err != nil {
		t.Fatalf("rabbitmq: %v", st.err)
	}
	return st.srv
}

// stopRPCBroker stops the broker if a test started it, and removes its
// files unless the broker failed. TestMain calls it after m.Run, before the
// goroutine-leak check.
func stopRPCBroker() error {
	st := &rpcBrokerState
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.srv == nil {
		return nil
	}
	err := st.srv.Stop()
	st.srv = nil
	if err == nil {
		os.RemoveAll(st.dir)
	} else {
		err = fmt.Errorf("rabbitmq: %w (files kept in %s)", err, st.dir)
	}
	return err
}

// rpcServer starts a real oslo.messaging RPC server, stopped when the test
// ends.
func rpcServer(t testing.TB, b *rabbitmq.Server, o rabbitmq.RPCServerOptions) *rabbitmq.RPCServer {
	t.Helper()
	s, err := b.StartRPCServer(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Kill(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// newRPC makes a check that is closed when the test ends.
func newRPC(t testing.TB, cfg RPCConfig) *RPC {
	t.Helper()
	r, err := NewRPC(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	return r
}

// check runs one Check with a timeout.
func check(r *RPC, timeout time.Duration) (string, error, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	began := time.Now()
	detail, err := r.Check(ctx)
	return detail, err, time.Since(began)
}

// deadlineSlack is how long after its deadline a check may return: one
// that stops at it returns at once, one that does not waits for a reply
// that never comes. Wide, so that a loaded machine's scheduling cannot fail
// a check that stops; not a speed figure.
const deadlineSlack = 5 * time.Second

func mustPass(t testing.TB, r *RPC, timeout time.Duration) string {
	t.Helper()
	detail, err, _ := check(r, timeout)
	if err != nil {
		t.Fatalf("check failed: %v", err)
	}
	return detail
}

// eventually checks every interval until the check passes or d has passed;
// it returns the failures seen on the way.
func eventually(t testing.TB, r *RPC, d time.Duration) []string {
	t.Helper()
	var seen []string
	deadline := time.Now().Add(d)
	for {
		_, err, _ := check(r, 3*time.Second)
		if err == nil {
			return seen
		}
		seen = append(seen, err.Error())
		if time.Now().After(deadline) {
			t.Fatalf("check still failing after %s; failures:\n%s", d, strings.Join(seen, "\n"))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRPCPasses(t *testing.T) {
	b := rpcBroker(t)
	ping := rpcServer(t, b, rabbitmq.RPCServerOptions{Topic: "conductor", Server: "host-ping", ControlExchange: "nova", PingEnabled: true})
	rpcServer(t, b, rabbitmq.RPCServerOptions{Topic: "conductor", Server: "host-noping", ControlExchange: "nova"})

	t.Run("ping from the service's own config", func(t *testing.T) {
		// transport_url, control_exchange, host and rpc_ping_enabled all come
		// from the config file the RPC server itself reads.
		r := newRPC(t, RPCConfig{ConfigFile: ping.ConfigFile, Topic: "conductor"})
		detail := mustPass(t, r, 10*time.Second)
		if !strings.HasPrefix(detail, "pong from conductor.host-ping in ") {
			t.Errorf("detail = %q", detail)
		}
		t.Log(detail)
	})
	t.Run("NoSuchMethod proves the server alive", func(t *testing.T) {
		r := newRPC(t, RPCConfig{TransportURL: b.URL(), Topic: "conductor", Server: "host-noping", Exchange: "nova"})
		detail := mustPass(t, r, 10*time.Second)
		if !strings.Contains(detail, "conductor.host-noping answered in ") || !strings.Contains(detail, "NoSuchMethod") {
			t.Errorf("detail = %q", detail)
		}
		t.Log(detail)
	})
	t.Run("oslo config written by the test", func(t *testing.T) {
		// The first broker refuses connections: hosts are tried in order.
		// The password is percent-encoded, a '$' in oslo.config is "$$".
		dead := closedPort(t)
		u := strings.Replace(b.URL(), "rabbit://", "rabbit://"+url.UserPassword(b.User, b.Password).String()+"@"+dead+",", 1)
		conf := writeFile(t, "nova.conf", fmt.Sprintf(`# nova.conf, as rendered
[DEFAULT]
debug = True
transport_url = %s
; the control exchange nova sets in code, written out
control_exchange = nova
host = host-noping
host = host-ping
rpc_ping_enabled = yes
my_ip = 10.0.0.5
log_dir = $state_path/log
  continued

[oslo_messaging_rabbit]
heartbeat_timeout_threshold = 60
`, strings.ReplaceAll(u, "$", "$$")))
		r := newRPC(t, RPCConfig{ConfigFile: conf, Topic: "conductor"})
		detail := mustPass(t, r, 10*time.Second)
		if !strings.HasPrefix(detail, "pong from conductor.host-ping in ") {
			t.Errorf("detail = %q", detail)
		}
	})
	t.Run("transport_url in a --config-dir snippet (openstack-helm's layout)", func(t *testing.T) {
		// nova.conf names a broker that refuses; the snippet, read after
		// it as oslo.config reads --config-dir, names the real one.
		dir := t.TempDir()
		main := filepath.Join(dir, "nova.conf")
		os.WriteFile(main, []byte("[DEFAULT]\ntransport_url = rabbit://u:p@"+closedPort(t)+"/\ncontrol_exchange = nova\nhost = host-ping\n"), 0o644)
		os.Mkdir(filepath.Join(dir, "nova.conf.d"), 0o755)
		os.WriteFile(filepath.Join(dir, "nova.conf.d", "50-messaging.conf"), []byte(fmt.Sprintf("[DEFAULT]\ntransport_url = %s\nrpc_ping_enabled = true\n", strings.ReplaceAll(b.URL(), "$", "$$"))), 0o644)
		argv := []string{"nova-conductor", "--config-file", main, "--config-dir", filepath.Join(dir, "nova.conf.d")}
		r := newRPC(t, RPCConfig{Sources: OsloSources(argv), Topic: "conductor"})
		detail := mustPass(t, r, 10*time.Second)
		if !strings.HasPrefix(detail, "pong from conductor.host-ping in ") {
			t.Errorf("detail = %q", detail)
		}
	})
	t.Run("namespace and version (nova's BaseAPI ping)", func(t *testing.T) {
		r := newRPC(t, RPCConfig{TransportURL: b.URL(), Topic: "conductor", Server: "host-noping", Exchange: "nova",
			Method: "ping", Namespace: "baseapi", Version: "1.1"})
		detail := mustPass(t, r, 10*time.Second)
		if !strings.HasPrefix(detail, "reply from conductor.host-noping to ping in ") {
			t.Errorf("detail = %q", detail)
		}
	})
	t.Run("a failure reply fails with the exception", func(t *testing.T) {
		r := newRPC(t, RPCConfig{TransportURL: b.URL(), Topic: "conductor", Server: "host-noping", Exchange: "nova", Method: "fail"})
		_, err, _ := check(r, 10*time.Second)
		if err == nil || err.Error() != "conductor.host-noping replied with an error to fail: ValueError: requested failure" {
			t.Errorf("err = %v", err)
		}
		// An explicit method no endpoint has is a misconfiguration, not a pass.
		r = newRPC(t, RPCConfig{TransportURL: b.URL(), Topic: "conductor", Server: "host-noping", Exchange: "nova", Method: "nosuch"})
		_, err, _ = check(r, 10*time.Second)
		if err == nil || !strings.Contains(err.Error(), "NoSuchMethod: Endpoint does not support RPC method nosuch") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestRPCTLS(t *testing.T) {
	b := rpcBroker(t)
	rpcServer(t, b, rabbitmq.RPCServerOptions{Topic: "scheduler", Server: "tls", ControlExchange: "nova", PingEnabled: true})
	conf := func(rabbit string) string {
		return writeFile(t, "nova.conf", fmt.Sprintf("[DEFAULT]\ntransport_url = %s\ncontrol_exchange = nova\nhost = tls\nrpc_ping_enabled = true\n[oslo_messaging_rabbit]\n%s\n",
			strings.ReplaceAll(b.TLSURL(), "$", "$$"), rabbit))
	}
	for _, tc := range []struct {
		name, rabbit, wantErr string
	}{
		// The certificate is for rabbitmq.test, not 127.0.0.1: as in
		// oslo.messaging, the chain is verified, the name only when asked.
		{"CA file", "ssl = true\nssl_ca_file = " + b.CAFile, ""},
		{"deprecated option names", "rabbit_use_ssl = true\nkombu_ssl_ca_certs = " + b.CAFile, ""},
		{"host name verification", "ssl = true\nssl_ca_file = " + b.CAFile + "\nssl_enforce_hostname_verification = true", "x509: cannot validate certificate for 127.0.0.1"},
		{"no CA: system roots", "ssl = true", "certificate signed by unknown authority"},
		{"TLS port without TLS", "", "the broker's reply is not AMQP (a TLS port? then set [oslo_messaging_rabbit] ssl = true)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRPC(t, RPCConfig{ConfigFile: conf(tc.rabbit), Topic: "scheduler"})
			detail, err, _ := check(r, 5*time.Second)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("check failed: %v", err)
			case tc.wantErr == "" && !strings.HasPrefix(detail, "pong from scheduler.tls"):
				t.Errorf("detail = %q", detail)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
	t.Run("ssl=1 in the URL", func(t *testing.T) {
		u := strings.TrimSuffix(b.TLSURL(), "/") + "/?ssl=1&ssl_ca_file=" + url.QueryEscape(b.CAFile)
		r := newRPC(t, RPCConfig{TransportURL: u, Topic: "scheduler", Server: "tls", Exchange: "nova", Method: rpcPingMethod})
		mustPass(t, r, 5*time.Second)
	})
}

func TestRPCServerStopped(t *testing.T) {
	b := rpcBroker(t)
	opts := rabbitmq.RPCServerOptions{Topic: "conductor", Server: "host-stop", ControlExchange: "nova", PingEnabled: true}
	srv := rpcServer(t, b, opts)
	r := newRPC(t, RPCConfig{ConfigFile: srv.ConfigFile, Topic: "conductor"})
	mustPass(t, r, 10*time.Second)

	want := "no reply from conductor.host-stop on exchange nova within 2s"
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err, took := check(r, 2*time.Second)
	if err == nil || err.Error() != want {
		t.Fatalf("with the server stopped: err = %v, want %q", err, want)
	}
	if took > 2*time.Second+deadlineSlack {
		t.Errorf("the check took %s: it does not stop at its 2s timeout", took)
	}

	srv = rpcServer(t, b, opts)
	mustPass(t, r, 10*time.Second)

	// A hung server: its connection and consumer stay, it answers nothing.
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	_, err, took = check(r, 2*time.Second)
	if resumeErr := srv.Resume(); resumeErr != nil {
		t.Fatal(resumeErr)
	}
	if err == nil || err.Error() != want {
		t.Fatalf("with the server paused: err = %v, want %q", err, want)
	}
	if took > 2*time.Second+deadlineSlack {
		t.Errorf("the check took %s: it does not stop at its 2s timeout", took)
	}
	// Resumed, it answers the late call (a stale reply, discarded) and then
	// the next one.
	detail := mustPass(t, r, 10*time.Second)
	if !strings.HasPrefix(detail, "pong from conductor.host-stop") {
		t.Errorf("detail = %q", detail)
	}

	// Close ends a check that waits for a reply, and waits for it.
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err, _ := check(r, 20*time.Second)
		errc <- err
	}()
	// Close once the check holds the RPC (its semaphore), not after a
	// sleep a loaded machine can outlast: a Close before it would end the
	// check before it began, and pass without testing this. Holding it,
	// the check returns errRPCClosed only from its wait for the reply.
	poll.Until(t, 10*time.Second, "the check to start", func() bool { return len(r.sem) == 1 })
	began := time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, errRPCClosed) {
		t.Errorf("check during Close: err = %v, want %v", err, errRPCClosed)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("Close took %s", took)
	}
}

func TestRPCBrokerRestart(t *testing.T) {
	b := rpcBroker(t)
	srv := rpcServer(t, b, rabbitmq.RPCServerOptions{Topic: "conductor", Server: "host-restart", ControlExchange: "nova", PingEnabled: true})
	ignore := goleak.IgnoreCurrent()
	r, err := NewRPC(RPCConfig{ConfigFile: srv.ConfigFile, Topic: "conductor"})
	if err != nil {
		t.Fatal(err)
	}
	mustPass(t, r, 10*time.Second)

	if err := b.Down(); err != nil {
		t.Fatal(err)
	}
	var downErrs []string
	for i := 0; i < 4; i++ {
		_, err, took := check(r, 2*time.Second)
		if err == nil {
			t.Fatal("check passed with the broker down")
		}
		if took > 2*time.Second+deadlineSlack {
			t.Errorf("check %d took %s with the broker down: it does not stop at its 2s timeout", i, took)
		}
		downErrs = append(downErrs, err.Error())
	}
	t.Logf("with the broker down:\n%s", strings.Join(downErrs, "\n"))
	if !strings.Contains(downErrs[0], "connection to broker "+b.Addr()+" lost") &&
		!strings.Contains(downErrs[0], "broker "+b.Addr()+": connection refused") {
		t.Errorf("first failure %q names neither the lost connection nor the refusal", downErrs[0])
	}
	if !strings.Contains(strings.Join(downErrs, "\n"), "(next connection attempt in ") {
		t.Errorf("no failure came from the backoff: %q", downErrs)
	}

	if err := b.Up(); err != nil {
		t.Fatal(err)
	}
	// The RPC server (oslo.messaging's own reconnection) and the check
	// (its backoff) both come back by themselves.
	seen := eventually(t, r, 90*time.Second)
	t.Logf("recovered after %d more failures", len(seen))
	if err := r.Close(); err != nil {
		t.Error(err)
	}
	goleak.VerifyNone(t, ignore)
}

// TestRPCNoNewConnections: 100 checks open one connection and one reply
// queue; Close leaves neither behind.
func TestRPCNoNewConnections(t *testing.T) {
	b := rpcBroker(t)
	srv := rpcServer(t, b, rabbitmq.RPCServerOptions{Topic: "conductor", Server: "host-count", ControlExchange: "nova", PingEnabled: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ours := func() (conns []rabbitmq.Connection, queues []rabbitmq.Queue, exchanges []string) {
		t.Helper()
		cs, err := b.ListConnections(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if strings.HasPrefix(c.ProvidedName, "kolla-agent rpc check conductor.host-count") {
				conns = append(conns, c)
			}
		}
		qs, err := b.ListQueues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if strings.HasPrefix(q.Name, rpcReplyQueuePrefix) {
				queues = append(queues, q)
			}
		}
		xs, err := b.ListExchanges(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range xs {
			if strings.HasPrefix(x, rpcReplyQueuePrefix) {
				exchanges = append(exchanges, x)
			}
		}
		return conns, queues, exchanges
	}
	allQueues := func() int {
		qs, err := b.ListQueues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(qs)
	}
	conns, queues, _ := ours()
	if len(conns) != 0 || len(queues) != 0 {
		t.Fatalf("before: connections %+v, queues %+v", conns, queues)
	}
	acceptedBefore := acceptedConnections(t, b, "kolla-agent rpc check")

	r, err := NewRPC(RPCConfig{ConfigFile: srv.ConfigFile, Topic: "conductor"})
	if err != nil {
		t.Fatal(err)
	}
	mustPass(t, r, 10*time.Second)
	first, firstQueues, _ := ours()
	if len(first) != 1 || len(firstQueues) != 1 {
		t.Fatalf("after one check: connections %+v, queues %+v; want one of each", first, firstQueues)
	}
	queuesAfterFirst := allQueues()
	for i := 0; i < 99; i++ {
		mustPass(t, r, 10*time.Second)
	}
	during, duringQueues, _ := ours()
	if len(during) != 1 || during[0].Name != first[0].Name {
		t.Errorf("after 100 checks: connections %+v, want the first one, %+v", during, first)
	}
	if len(duringQueues) != 1 || duringQueues[0].Name != firstQueues[0].Name || duringQueues[0].Messages != 0 {
		t.Errorf("after 100 checks: reply queues %+v, want the first one, empty: %+v", duringQueues, firstQueues)
	}
	if n := allQueues(); n != queuesAfterFirst {
		t.Errorf("the broker has %d queues after 100 checks, %d after the first", n, queuesAfterFirst)
	}
	if n := acceptedConnections(t, b, "kolla-agent rpc check") - acceptedBefore; n != 1 {
		t.Errorf("the broker accepted %d connections during 100 checks, want 1", n)
	}

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	after, afterQueues, afterExchanges := ours()
	if len(after) != 0 || len(afterQueues) != 0 || len(afterExchanges) != 0 {
		t.Errorf("after Close: connections %+v, queues %+v, exchanges %v", after, afterQueues, afterExchanges)
	}
}

// acceptedConnections reads the broker's count of connections named with
// prefix once its log is stable.
func acceptedConnections(t testing.TB, b *rabbitmq.Server, prefix string) int {
	t.Helper()
	last := -1
	for i := 0; i < 50; i++ {
		n, err := b.AcceptedConnections(prefix)
		if err != nil {
			t.Fatal(err)
		}
		if n == last {
			return n
		}
		last = n
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

func TestRPCBadInputs(t *testing.T) {
	dir := t.TempDir()
	noURL := filepath.Join(dir, "nova.conf")
	if err := os.WriteFile(noURL, []byte("[DEFAULT]\ndebug = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badBool := filepath.Join(dir, "bool.conf")
	if err := os.WriteFile(badBool, []byte("[DEFAULT]\ntransport_url = rabbit://u:p@h/\nrpc_ping_enabled = maybe\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badINI := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(badINI, []byte("[DEFAULT]\ntransport_url = rabbit://u:hunter2@h/\n  \n[oops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badURLConf := filepath.Join(dir, "url.conf")
	if err := os.WriteFile(badURLConf, []byte("[DEFAULT]\n\ntransport_url = rabbit://u:hunter2@h:port/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  RPCConfig
		want string
	}{
		{"no topic", RPCConfig{TransportURL: "rabbit://u:p@h/"}, "rpc: topic is required"},
		{"no transport", RPCConfig{Topic: "t"}, "rpc: a config file or a transport URL is required"},
		{"missing config file", RPCConfig{ConfigFile: filepath.Join(dir, "nosuch.conf"), Topic: "t"},
			"rpc: open " + filepath.Join(dir, "nosuch.conf") + ": no such file or directory"},
		{"no transport_url", RPCConfig{ConfigFile: noURL, Topic: "t"}, "rpc: " + noURL + ": [DEFAULT] transport_url: missing"},
		{"bad boolean", RPCConfig{ConfigFile: badBool, Topic: "t"}, "rpc: " + badBool + ":3: [DEFAULT] rpc_ping_enabled: invalid boolean \"maybe\" (want true or false)"},
		{"bad INI", RPCConfig{ConfigFile: badINI, Topic: "t"}, "rpc: " + badINI + `:4: section header does not end with ']' in "[oops"`},
		{"bad URL in the config", RPCConfig{ConfigFile: badURLConf, Topic: "t"},
			"rpc: " + badURLConf + ":3: [DEFAULT] transport_url: transport URL rabbit://u:***@h:port/: host 1: invalid port (want 1-65535)"},
		{"malformed URL", RPCConfig{TransportURL: "rabbit://u:hunter2@h1:5672,u:hunter2@[::1/", Topic: "t"},
			"rpc: transport URL rabbit://u:***@h1:5672,u:***@[::1/: host 2: invalid IPv6 address (no ']')"},
		{"AMQP 1.0 URL", RPCConfig{TransportURL: "amqp://u:hunter2@h/", Topic: "t"},
			`rpc: transport URL amqp://u:***@h/: scheme "amqp" is not supported: the rpc check speaks AMQP 0-9-1 to RabbitMQ (rabbit://)`},
		{"login method", RPCConfig{TransportURL: "rabbit://u:p@h/?rabbit_login_method=CRAM", Topic: "t"},
			`rpc: transport URL option rabbit_login_method: login method "CRAM" is not supported (PLAIN, AMQPLAIN or EXTERNAL)`},
		{"missing CA file", RPCConfig{TransportURL: "rabbit://u:p@h/?ssl=true&ssl_ca_file=" + filepath.Join(dir, "ca.pem"), Topic: "t"},
			"rpc: TLS: ssl_ca_file: open " + filepath.Join(dir, "ca.pem") + ": no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewRPC(tc.cfg)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("err = %v\nwant  %s", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error shows the password")
			}
		})
	}
}

func TestRPCBadBroker(t *testing.T) {
	b := rpcBroker(t)
	srv := rpcServer(t, b, rabbitmq.RPCServerOptions{Topic: "conductor", Server: "host-bad", ControlExchange: "nova", PingEnabled: true})

	t.Run("wrong password", func(t *testing.T) {
		var logs bytes.Buffer
		u := fmt.Sprintf("rabbit://%s:WrongPassw0rd@%s/", b.User, b.Addr())
		r := newRPC(t, RPCConfig{TransportURL: u, Topic: "conductor", Server: "host-bad", Exchange: "nova",
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		_, err, _ := check(r, 5*time.Second)
		want := fmt.Sprintf("broker %s: authentication failed for user %q", b.Addr(), b.User)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("err = %v, want %q", err, want)
		}
		if strings.Contains(err.Error(), "WrongPassw0rd") || strings.Contains(logs.String(), "WrongPassw0rd") {
			t.Errorf("the password shows: %v\n%s", err, logs.String())
		}
		t.Log(err)
	})
	t.Run("unknown vhost", func(t *testing.T) {
		u := strings.TrimSuffix(b.URL(), "/") + "/nosuch"
		r := newRPC(t, RPCConfig{TransportURL: u, Topic: "conductor", Server: "host-bad", Exchange: "nova"})
		_, err, _ := check(r, 5*time.Second)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("broker %s: vhost refused for user %q", b.Addr(), b.User)) {
			t.Fatalf("err = %v", err)
		}
		t.Log(err)
	})
	t.Run("connection refused, then backoff", func(t *testing.T) {
		dead := closedPort(t)
		r := newRPC(t, RPCConfig{TransportURL: "rabbit://u:p@" + dead + "/", Topic: "conductor", Server: "x"})
		// "At once" is no connection attempt: the real dialer, counted, and
		// a backoff clock that stands still, so that a check slowed by a
		// loaded machine is neither a failure nor past the backoff.
		now := time.Now()
		r.now = func() time.Time { return now }
		dials, dial := 0, r.dial
		r.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials++
			return dial(ctx, network, addr)
		}
		_, err, _ := check(r, 5*time.Second)
		if err == nil || err.Error() != "broker "+dead+": connection refused" || dials != 1 {
			t.Fatalf("err = %v after %d dials, want connection refused after 1", err, dials)
		}
		_, err, _ = check(r, 5*time.Second)
		if err == nil || !strings.HasPrefix(err.Error(), "broker "+dead+": connection refused (next connection attempt in ") || dials != 1 {
			t.Fatalf("second check: err = %v, %d dials in all; want the last error without a dial", err, dials)
		}
	})
	t.Run("unknown server", func(t *testing.T) {
		r := newRPC(t, RPCConfig{TransportURL: b.URL(), Topic: "conductor", Server: "nosuch-host", Exchange: "nova"})
		// The broker's answer, not the 5 s deadline's "no reply": reported
		// at once (the text says which; no time bound to fail under load).
		_, err, _ := check(r, 5*time.Second)
		want := `nothing consumes conductor.nosuch-host on exchange nova (NO_ROUTE): is the RPC server running, with host "nosuch-host"?`
		if err == nil || err.Error() != want {
			t.Fatalf("err = %v, want %q", err, want)
		}
	})
	t.Run("unknown exchange, until it appears", func(t *testing.T) {
		exchange := "late-" + randomHex(4) // oslo's exchanges outlive a test (-count=2)
		r := newRPC(t, RPCConfig{TransportURL: b.URL(), Topic: "conductor", Server: "host-late", Exchange: exchange, Method: rpcPingMethod})
		want := "exchange " + exchange + " not found: no RPC server has declared it (is the control exchange right?)"
		for i := 0; i < 2; i++ { // the channel the broker closed is reopened
			_, err, _ := check(r, 5*time.Second) // the broker's answer, not the deadline's
			if err == nil || err.Error() != want {
				t.Fatalf("check %d: err = %v, want %q", i, err, want)
			}
		}
		rpcServer(t, b, rabbitmq.RPCServerOptions{Topic: "conductor", Server: "host-late", ControlExchange: exchange, PingEnabled: true})
		detail := mustPass(t, r, 10*time.Second)
		if !strings.HasPrefix(detail, "pong from conductor.host-late") {
			t.Errorf("detail = %q", detail)
		}
	})
	t.Run("still fine", func(t *testing.T) {
		r := newRPC(t, RPCConfig{ConfigFile: srv.ConfigFile, Topic: "conductor"})
		mustPass(t, r, 10*time.Second)
	})
}

// TestRPCLegacyReplies: a server of an older oslo.messaging replies through
// a direct exchange named after the reply queue, in two messages (result,
// then ending), after a call-monitor heartbeat; a stale reply comes first.
// The "server" here is the test, speaking the wire format by hand.
func TestRPCLegacyReplies(t *testing.T) {
	b := rpcBroker(t)
	conn, err := amqp.Dial(b.URLFor("amqp"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	const exchange, key = "legacy", "conductor.legacy"
	if err := ch.ExchangeDeclare(exchange, "topic", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(key, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(key, key, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	calls, err := ch.Consume(key, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg       sync.WaitGroup
		received = make(chan map[string]any, 10)
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for d := range calls {
			msg, err := decodeEnvelope(d.Body)
			if err != nil {
				t.Errorf("call: %v", err)
				continue
			}
			received <- msg
			replyQ, _ := msg["_reply_q"].(string)
			msgID, _ := msg["_msg_id"].(string)
			for _, rep := range []string{
				`{"_msg_id": "stale", "result": "old", "failure": null, "ending": true}`,
				`{"_msg_id": "%s", "result": null, "failure": null, "ending": false}`,
				`{"_msg_id": "%s", "result": "pong", "failure": null, "ending": false}`,
				`{"_msg_id": "%s", "result": null, "failure": null, "ending": true}`,
			} {
				if strings.Contains(rep, "%s") {
					rep = fmt.Sprintf(rep, msgID)
				}
				body := fmt.Sprintf(`{"oslo.version": "2.0", "oslo.message": %q}`, rep)
				if err := ch.Publish(replyQ, replyQ, false, false, amqp.Publishing{ContentType: "application/json", Body: []byte(body)}); err != nil {
					t.Errorf("reply: %v", err)
				}
			}
		}
	}()
	defer wg.Wait()
	defer ch.Close()

	r := newRPC(t, RPCConfig{TransportURL: b.URL(), Topic: "conductor", Server: "legacy", Exchange: exchange, Method: rpcPingMethod,
		Namespace: "baseapi", Version: "1.1"})
	for i := 0; i < 3; i++ {
		detail := mustPass(t, r, 10*time.Second)
		if !strings.HasPrefix(detail, "pong from conductor.legacy in ") {
			t.Errorf("detail = %q", detail)
		}
	}
	msg := <-received
	for k, want := range map[string]any{"method": rpcPingMethod, "namespace": "baseapi", "version": "1.1", "_timeout": nil} {
		if got, ok := msg[k]; !ok || got != want {
			t.Errorf("call %s = %#v, want %#v", k, got, want)
		}
	}
	for _, k := range []string{"_msg_id", "_unique_id", "_reply_q", "_context_request_id"} {
		if s, _ := msg[k].(string); s == "" {
			t.Errorf("call %s = %#v, want a string", k, msg[k])
		}
	}
	if args, ok := msg["args"].(map[string]any); !ok || len(args) != 0 {
		t.Errorf("call args = %#v, want {}", msg["args"])
	}
}

// TestRPCBackoff: with the broker unreachable, attempts follow the backoff
// and checks in between fail at once with the last error (a fake clock, a
// dialer that counts).
func TestRPCBackoff(t *testing.T) {
	r, err := NewRPC(RPCConfig{TransportURL: "rabbit://u:p@broker-a:5672,u:p@broker-b:5672/", Topic: "conductor", Server: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	now := time.Unix(1000, 0)
	var dials []string
	r.now = func() time.Time { return now }
	r.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials = append(dials, addr)
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	r.newBackoff = func() wait.Backoff {
		return wait.Backoff{Duration: time.Second, Factor: 2, Steps: 100, Cap: 4 * time.Second}
	}
	r.backoff = r.newBackoff()

	want := "broker broker-a:5672: connection refused; broker broker-b:5672: connection refused"
	for _, step := range []struct {
		advance time.Duration
		dials   int
		suffix  string
	}{
		{0, 2, ""},
		{500 * time.Millisecond, 2, " (next connection attempt in 500ms)"},
		{500 * time.Millisecond, 4, ""},                                     // 1s after the first attempt
		{1900 * time.Millisecond, 4, " (next connection attempt in 100ms)"}, // the next wait is 2s
		{100 * time.Millisecond, 6, ""},
		{4 * time.Second, 8, ""}, // capped at 4s
		{3 * time.Second, 8, " (next connection attempt in 1s)"},
	} {
		now = now.Add(step.advance)
		_, err, _ := check(r, time.Second)
		if err == nil || err.Error() != want+step.suffix || len(dials) != step.dials {
			t.Fatalf("at +%s: err = %v, %d dials; want %q, %d dials", step.advance, err, len(dials), want+step.suffix, step.dials)
		}
	}
}

func TestRPCClosed(t *testing.T) {
	r, err := NewRPC(RPCConfig{TransportURL: "rabbit://u:p@127.0.0.1:1/", Topic: "t", Server: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err, _ := check(r, time.Second); !errors.Is(err, errRPCClosed) {
		t.Fatalf("err = %v", err)
	}
}

func TestRPCReplyDecoding(t *testing.T) {
	s := &rpcSettings{topic: "conductor", server: "h", method: rpcAbsentMethod, absent: true}
	failure := func(class, msg string) string {
		inner := fmt.Sprintf(`{"class": %q, "module": "oslo_messaging.rpc.dispatcher", "message": %q, "tb": ["Traceback..."], "args": [], "kwargs": {}}`, class, msg)
		rep := fmt.Sprintf(`{"_msg_id": "m", "result": null, "failure": %q, "ending": true, "_unique_id": "u"}`, inner)
		return fmt.Sprintf(`{"oslo.version": "2.0", "oslo.message": %q}`, rep)
	}
	for _, tc := range []struct {
		name, body, detail, err string
	}{
		{"NoSuchMethod", failure("NoSuchMethod", "Endpoint does not support RPC method x"), "conductor.h answered in 1ms (NoSuchMethod: its dispatcher is alive)", ""},
		{"UnsupportedVersion", failure("UnsupportedVersion", "Endpoint does not support RPC version 1.0"), "conductor.h answered in 1ms (UnsupportedVersion: its dispatcher is alive)", ""},
		{"other failure", failure("MessagingTimeout", "db down\nTraceback"), "", "conductor.h replied with an error to kolla_agent_probe_ignore_errors: MessagingTimeout: db down"},
		{"bare 1.0 reply", `{"_msg_id": "m", "result": 1, "failure": null, "ending": true}`, "reply from conductor.h to kolla_agent_probe_ignore_errors in 1ms", ""},
		{"failure as an object", `{"_msg_id": "m", "failure": {"class": "KeyError", "message": "x"}}`, "", "conductor.h replied with an error to kolla_agent_probe_ignore_errors: KeyError: x"},
		{"failure not JSON", `{"_msg_id": "m", "failure": "boom"}`, "", "conductor.h replied with an error to kolla_agent_probe_ignore_errors: RemoteError: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := decodeRPCReply([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			detail, err := (&RPC{}).verdict(s, rep, time.Millisecond)
			if detail != tc.detail || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
				t.Errorf("verdict = %q, %v; want %q, %q", detail, err, tc.detail, tc.err)
			}
		})
	}
	for _, bad := range []string{"", "[]", `{"oslo.message": 1}`, `{"oslo.message": "not json"}`} {
		if _, err := decodeRPCReply([]byte(bad)); err == nil {
			t.Errorf("decodeRPCReply(%q) accepted", bad)
		}
	}
}

// decodeEnvelope unwraps a 2.0 envelope into the message.
func decodeEnvelope(body []byte) (map[string]any, error) {
	rep, err := decodeRPCReply(body) // checks the envelope
	if err != nil || rep == nil {
		return nil, err
	}
	var env rpcEnvelope
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, err
	}
	if env.Version != "2.0" {
		return nil, fmt.Errorf("oslo.version %q", env.Version)
	}
	var msg map[string]any
	return msg, json.Unmarshal([]byte(env.Message), &msg)
}

// closedPort is a loopback address nothing listens on.
func closedPort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
