package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/forwardserver"
)

// The agent's CPU while it ships a steady 10,000 lines/s (610 KB/s) to a
// real forward receiver, against the same agent idle over the same time in
// the same run. fluent-bit is quoted at 0.19 vCPU for that rate.
func BenchmarkLogsCPUPer10kLines(b *testing.B) {
	srv := forwardserver.Start(b, forwardserver.Options{})
	dir := logDir(b, "nova")
	w, err := os.OpenFile(filepath.Join(dir, "nova-conductor.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	cfgPath := filepath.Join(b.TempDir(), "agent.yaml")
	cfg := fmt.Sprintf("logs:\n  files: [{path: %s/*.log}]\n  sink: {type: forward, address: %q}\n  stateDir: %s/.kolla-agent\n", dir, srv.Addr(), dir)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	a := startAgent(b, logsEnv(), "--config", cfgPath, "run", "--", "sleep", "600")
	a.waitLog("logs: following")
	const window = 10 * time.Second
	n := 0
	steady := func(rate int) float64 { // CPU seconds per second over the window
		before := cpuSeconds(b, a.cmd.Process.Pid)
		start := time.Now()
		for tick := time.NewTicker(100 * time.Millisecond); time.Since(start) < window; <-tick.C {
			var s strings.Builder
			for range rate / 10 {
				s.WriteString(osloLine(n))
				n++
			}
			w.WriteString(s.String())
		}
		return (cpuSeconds(b, a.cmd.Process.Pid) - before) / time.Since(start).Seconds()
	}
	b.ResetTimer()
	var busy, idle float64
	for range b.N {
		steady(10_000) // warm up: the first pass reads the file from its start
		busy = steady(10_000)
		idle = steady(0)
	}
	b.StopTimer()
	srv.WaitRecords(b, n, time.Minute) // it did ship them all
	b.ReportMetric(busy, "vCPU@10k-lines/s")
	b.ReportMetric(idle, "vCPU-idle")
}

// cpuSeconds is a process's user + system time so far.
func cpuSeconds(t testing.TB, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}
