package rabbitmq

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/proc"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRabbitMQ starts a broker, logs in with the escaped password, lists
// connections and queues, runs a real RPC server and a real RPC client
// against it, restarts the broker, and stops everything.
func TestRabbitMQ(t *testing.T) {
	if ok, why := Installed(); !ok {
		t.Fatalf("rabbitmq: %s", why)
	}
	dir := t.TempDir()
	s, err := Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			s.Stop()
		}
	})
	t.Logf("broker %s booted in %s (AMQP %d, TLS %d)", s.Node, s.BootTime.Round(time.Millisecond), s.AMQPPort, s.TLSPort)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	c, err := amqp.Dial(s.URLFor("amqp"))
	if err != nil {
		t.Fatalf("login with %s: %v", s.URLFor("amqp"), err)
	}
	conns, err := s.ListConnections(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(conns) != 1 || conns[0].User != s.User {
		t.Errorf("connections = %+v, want one of user %s", conns, s.User)
	}
	c.Close()

	srv, err := s.StartRPCServer(RPCServerOptions{Topic: "test", Server: "host-a", ControlExchange: "ctl", PingEnabled: true})
	if err != nil {
		t.Fatal(err)
	}
	qs, err := s.ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, q := range qs {
		if q.Name == "test.host-a" && q.Consumers == 1 {
			found = true
		}
	}
	if !found {
		t.Errorf("queues = %+v, want test.host-a with a consumer", qs)
	}
	for _, method := range []string{"oslo_rpc_server_ping", "echo", "no_such_method"} {
		res, err := s.RunRPCClient(ctx, srv.ConfigFile, "test", "host-a", method)
		if err != nil || res.ExitCode != 0 {
			t.Errorf("client call %s: %v %s\nserver: %s", method, err, res, srv.Output())
		} else {
			t.Logf("client call %s: %s", method, res)
		}
	}
	res, err := s.RunRPCClient(ctx, srv.ConfigFile, "test", "host-a", "fail")
	if err != nil || res.ExitCode != 1 || !strings.Contains(res.Output, "requested failure") {
		t.Errorf("client call fail: %v %s", err, res)
	}
	if err := srv.Stop(); err != nil {
		t.Error(err)
	}

	began := time.Now()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted in %s", time.Since(began).Round(time.Millisecond))
	if _, err := s.ListQueues(ctx); err != nil {
		t.Fatal(err)
	}

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*proc.Process{s.broker, s.epmd} {
		if p != nil {
			t.Errorf("%s still recorded after Stop", p.Name)
		}
	}
}
