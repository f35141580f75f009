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
// oslo.messaging server through a real broker. Each side is rpcSamples
// samples, the median reported: the agent's b.N checks in rpcSamples runs
// (each sample the CPU per check of its run), and as many Python calls.
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
	var agentCPU []time.Duration
	b.ResetTimer()
	for i := range rpcSamples {
		n := b.N/rpcSamples + min(1, max(0, b.N%rpcSamples-i)) // b.N in all
		before := cpuTime(b)
		for range n {
			if _, err, _ := check(r, 10*time.Second); err != nil {
				b.Fatal(err)
			}
		}
		if n > 0 {
			agentCPU = append(agentCPU, (cpuTime(b)-before)/time.Duration(n))
		}
	}
	b.StopTimer()
	agentConns := float64(acceptedConnections(b, broker, agentName)-conns) / float64(b.N)

	var pyCPU, pyWall []time.Duration
	pyConns := acceptedConnections(b, broker, pythonName)
	for range rpcSamples {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := broker.RunRPCClient(ctx, srv.ConfigFile, "bench", "host-bench", rpcPingMethod)
		cancel()
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("baseline call: %v %s", err, res)
		}
		pyCPU, pyWall = append(pyCPU, res.CPU), append(pyWall, res.Wall)
	}
	pyPerCall := float64(acceptedConnections(b, broker, pythonName)-pyConns) / rpcSamples

	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	agent, py := percentile(agentCPU, 50), percentile(pyCPU, 50)
	b.ReportMetric(ms(agent), "cpu-ms/check")
	b.ReportMetric(agentConns, "conns/check")
	b.ReportMetric(ms(py), "baseline-cpu-ms/check")
	b.ReportMetric(pyPerCall, "baseline-conns/check")
	b.ReportMetric(ms(percentile(pyWall, 50)), "baseline-wall-ms/check")
	if agent > 0 {
		b.ReportMetric(float64(py)/float64(agent), "baseline/agent-cpu")
	}
}

// rpcSamples is how many samples each side of BenchmarkRPCCheck takes.
const rpcSamples = 5

// cpuTime is this process' user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
