package probes

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/rabbitmq"
)

// BenchmarkRPCCheck measures what one rpc check costs the agent (CPU time
// of this process, user+system, and new broker connections per check)
// against what an exec probe pays for the same call: a /usr/bin/python3
// process that imports oslo.messaging and makes the call once (CPU time of
// that child, its connections). Both call oslo_rpc_server_ping on a real
// oslo.messaging server through a real broker.
func BenchmarkRPCCheck(b *testing.B) {
	if ok, why := rabbitmq.Installed(); !ok {
		b.Skip("rabbitmq: " + why)
	}
	broker := rpcBroker(b)
	srv := rpcServer(b, broker, rabbitmq.RPCServerOptions{Topic: "bench", Server: "host-bench", ControlExchange: "nova", PingEnabled: true})
	r := newRPC(b, RPCConfig{ConfigFile: srv.ConfigFile, Topic: "bench"})
	mustPass(b, r, 10*time.Second) // connects

	const agentName, pythonName = "kolla-agent rpc check", "rpcclient.py:"
	conns := acceptedConnections(b, broker, agentName)
	before := cpuTime(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err, _ := check(r, 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	agentCPU := (cpuTime(b) - before) / time.Duration(b.N)
	agentConns := float64(acceptedConnections(b, broker, agentName)-conns) / float64(b.N)

	pyConns := acceptedConnections(b, broker, pythonName)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := broker.RunRPCClient(ctx, srv.ConfigFile, "bench", "host-bench", rpcPingMethod)
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("baseline call: %v %s", err, res)
	}
	pyConns = acceptedConnections(b, broker, pythonName) - pyConns

	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(agentCPU), "cpu-ms/check")
	b.ReportMetric(agentConns, "conns/check")
	b.ReportMetric(ms(res.CPU), "baseline-cpu-ms/check")
	b.ReportMetric(float64(pyConns), "baseline-conns/check")
	b.ReportMetric(ms(res.Wall), "baseline-wall-ms/check")
	if agentCPU > 0 {
		b.ReportMetric(float64(res.CPU)/float64(agentCPU), "baseline/agent-cpu")
	}
}

// cpuTime is this process' user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
