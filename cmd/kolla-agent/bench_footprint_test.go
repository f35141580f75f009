package main

import (
	"os/exec"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

// The footprint of a pod's agent with every duty, idle for 60 s (issue 12
// §4), against an idle `sleep 3600` measured over the same 60 s of the same
// run: RSS (VmRSS sampled every second, its largest value in the window, and
// VmHWM, the peak since the start), CPU (utime+stime as a fraction of one
// core; schedstat's nanoseconds beside it, as ticks are coarse at this
// level), and wakeups (the context switches of all the agent's threads per
// second). The pod is startDutyPod's with agent.yaml's default periods.
// Targets, not asserted: RSS <= 25 MiB, CPU <= 0.2% of a core.
func BenchmarkFootprintIdle(b *testing.B) {
	pod := startDutyPod(b, defaultPeriods)
	sleep := diesWithTest(exec.Command("sleep", "3600"))
	if err := sleep.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sleep.Process.Kill(); sleep.Wait() })
	agentPID, sleepPID := pod.agent.cmd.Process.Pid, sleep.Process.Pid
	time.Sleep(5 * time.Second) // the start's work ends (see TestFootprintEveryDuty)

	const idle = 60 * time.Second
	var aw, sw window
	var a1, s1 procSnap
	var maxRSS, sleepMaxRSS uint64
	b.ResetTimer()
	for range b.N {
		a0, s0 := snapProc(b, agentPID), snapProc(b, sleepPID)
		maxRSS, sleepMaxRSS = a0.status.VmRSS, s0.status.VmRSS
		// Reading another process's /proc files does not wake it.
		for tick := time.NewTicker(time.Second); time.Since(a0.at) < idle; <-tick.C {
			maxRSS = max(maxRSS, rssOf(b, agentPID))
			sleepMaxRSS = max(sleepMaxRSS, rssOf(b, sleepPID))
		}
		a1, s1 = snapProc(b, agentPID), snapProc(b, sleepPID)
		aw, sw = diff(a0, a1), diff(s0, s1)
	}
	b.StopTimer()
	pod.agent.running()
	if code, body := get(pod.base + "/readyz?verbose"); code != 200 {
		b.Errorf("not ready after the idle window: %d\n%s", code, body)
	}

	maxRSS, sleepMaxRSS = max(maxRSS, a1.status.VmRSS), max(sleepMaxRSS, s1.status.VmRSS)
	model := wakeupsPerSec(defaultPeriods.wakeupModel())
	wakeups, sleepWakeups := float64(aw.switches)/aw.secs, float64(sw.switches)/sw.secs
	b.Logf("agent, every duty, idle %.1fs: VmRSS max %.2f MiB (anon %.2f, file %.2f), VmHWM %.2f MiB; CPU %.3f%% of a core (ticks), %.4f%% (schedstat); %.2f context switches/s across %d threads (the periods explain %.2f wakeups/s: %.1f switches each)",
		aw.secs, mib(maxRSS), mib(a1.status.RssAnon), mib(a1.status.RssFile), mib(a1.status.VmHWM), 100*aw.cpuFrac, 100*aw.runningFra, wakeups, len(a1.threads), model, wakeups/model)
	b.Logf("per thread: %s", aw.describeThreads(a1))
	b.Logf("sleep 3600, same window: VmRSS max %.2f MiB, VmHWM %.2f MiB; CPU %.3f%% (ticks), %.4f%% (schedstat); %.2f context switches/s",
		mib(sleepMaxRSS), mib(s1.status.VmHWM), 100*sw.cpuFrac, 100*sw.runningFra, sleepWakeups)
	b.Logf("ratios: VmRSS %.1fx, VmHWM %.1fx the sleep's; targets (not asserted): RSS <= 25 MiB, CPU <= 0.2%% of a core", float64(maxRSS)/float64(sleepMaxRSS), float64(a1.status.VmHWM)/float64(s1.status.VmHWM))
	b.ReportMetric(mib(maxRSS), "rss-MiB")
	b.ReportMetric(mib(a1.status.VmHWM), "hwm-MiB")
	b.ReportMetric(100*aw.cpuFrac, "cpu-%-of-core")
	b.ReportMetric(100*aw.runningFra, "cpu-sched-%-of-core")
	b.ReportMetric(wakeups, "switches/s")
	b.ReportMetric(mib(sleepMaxRSS), "sleep-rss-MiB")
	b.ReportMetric(mib(s1.status.VmHWM), "sleep-hwm-MiB")
	b.ReportMetric(100*sw.cpuFrac, "sleep-cpu-%-of-core")
	b.ReportMetric(sleepWakeups, "sleep-switches/s")
}

// rssOf is a process's VmRSS in bytes.
func rssOf(t testing.TB, pid int) uint64 {
	t.Helper()
	p, err := procfs.NewProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.NewStatus()
	if err != nil {
		t.Fatal(err)
	}
	return st.VmRSS
}
