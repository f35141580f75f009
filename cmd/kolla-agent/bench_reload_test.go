package main

// Benchmarks of the reload path: a ConfigMap volume updated by the kubelet's
// own AtomicWriter, and what reaches the service, with `kolla-agent run` in
// between (watch, debounce, render, check, commit, signal), against a bare
// fsnotify loop in the same run. They assert nothing about time; `make
// bench` runs them.
//
// The baseline is the loop configmap-reload runs: watch the volume's
// directory and act on every Create of ..data, with no debounce and no
// render. Its action here is the agent's (configmap-reload calls a webhook
// instead): SIGHUP to the process group of the same kind of service.
//
// The service on both sides is /bin/sh recording each SIGHUP: its trap runs
// date, which appends "hup <Unix ns>" to a file. That timestamp is taken a
// fork and an exec after the signal arrived; the direct-kill figure (the
// benchmark sends the SIGHUP itself) is that cost, included in both sides'
// figures. A latency is from just before the AtomicWriter's Write (which
// returns once ..data has been renamed over and the old version removed)
// to the time the service recorded.

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/kolla-agent/kolla-agent/internal/atomicwriter"
)

// hupScript is the service: $1 is its record file. `wait` returns as soon
// as a trapped signal arrives; the sleep, in the same process group, dies
// of the SIGHUP and the loop starts another.
const hupScript = `rec=$1
trap 'date "+hup %s%N" >>"$rec"' HUP
trap 'exit 0' TERM
echo "start $$" >>"$rec"
while :; do sleep 60 & wait $!; done`

// hupLog is a service's record file.
type hupLog string

// read returns the service's pid ("start" line) and the SIGHUPs' times, from
// whole lines only (date may be writing the last one).
func (h hupLog) read() (pid int, hups []time.Time) {
	b, _ := os.ReadFile(string(h))
	lines := strings.Split(string(b), "\n")
	for _, line := range lines[:len(lines)-1] {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "start":
			pid = int(n)
		case "hup":
			hups = append(hups, time.Unix(0, n))
		}
	}
	return pid, hups
}

// count is how many SIGHUPs the service has recorded.
func (h hupLog) count() int {
	_, hups := h.read()
	return len(hups)
}

// wait waits until the service has recorded n SIGHUPs and returns their
// times. It polls: the times are the service's own, not the poll's.
func (h hupLog) wait(b *testing.B, n int, within time.Duration) []time.Time {
	b.Helper()
	deadline := time.Now().Add(within)
	for {
		if _, hups := h.read(); len(hups) >= n {
			return hups
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: fewer than %d SIGHUPs recorded after %v", h, n, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitStart waits for the service's "start" line (its traps are set) and
// returns its pid.
func (h hupLog) waitStart(b *testing.B) int {
	b.Helper()
	var pid int
	eventually(b, "the service's start", func() bool { pid, _ = h.read(); return pid > 0 })
	return pid
}

// startHupService starts the baseline's service in its own process group,
// as the agent's supervisor starts its own, and returns its pid (= pgid).
func startHupService(b *testing.B, rec hupLog) int {
	b.Helper()
	c := exec.Command("/bin/sh", "-c", hupScript, "hup-service", string(rec))
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	pid := c.Process.Pid
	b.Cleanup(func() {
		syscall.Kill(-pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-pid, syscall.SIGKILL)
			<-done
		}
	})
	rec.waitStart(b)
	return pid
}

// signalLoop is the baseline: SIGHUP to the process group pgid on every
// Create of ..data in dir.
type signalLoop struct {
	sent atomic.Int64
}

func startSignalLoop(b *testing.B, dir string, pgid int) *signalLoop {
	b.Helper()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Add(dir); err != nil {
		b.Fatal(err)
	}
	l := &signalLoop{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if filepath.Base(ev.Name) == "..data" && ev.Has(fsnotify.Create) {
					syscall.Kill(-pgid, syscall.SIGHUP)
					l.sent.Add(1)
				}
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
			}
		}
	}()
	b.Cleanup(func() { w.Close(); <-done })
	return l
}

// baselineSide is the fsnotify loop, its volume and its service.
type baselineSide struct {
	vol  string
	rec  hupLog
	pgid int
	loop *signalLoop
}

func startBaseline(b *testing.B, kw *atomicwriter.Writer) *baselineSide {
	b.Helper()
	dir := b.TempDir()
	bs := &baselineSide{vol: filepath.Join(dir, "config_files"), rec: hupLog(filepath.Join(dir, "hups"))}
	swap(b, kw, bs.vol, 0)
	bs.pgid = startHupService(b, bs.rec)
	bs.loop = startSignalLoop(b, bs.vol, bs.pgid)
	return bs
}

// agentSide is a `kolla-agent run` rendering service.conf from its volume
// and supervising a hupScript service.
type agentSide struct {
	a         *agentProc
	vol, dest string
	rec       hupLog
}

func startReloadAgent(b *testing.B, kw *atomicwriter.Writer, quiet time.Duration) *agentSide {
	b.Helper()
	dir := b.TempDir()
	as := &agentSide{vol: filepath.Join(dir, "config_files"), dest: filepath.Join(dir, "service.conf"), rec: hupLog(filepath.Join(dir, "hups"))}
	swap(b, kw, as.vol, 0)
	// No probes: verification passes at once, as with a service that has
	// no readiness check.
	cfg := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
run:
  grace: 5s
render:
  - {src: %s/service.conf, dest: %s}
reload:
  quiet: %s
  stateDir: %s
`, as.vol, as.dest, quiet, filepath.Join(dir, "state"))), 0o600); err != nil {
		b.Fatal(err)
	}
	// Runs after startAgent's own cleanup: a service the agent left behind
	// (it was killed) is ended, if that pid is still this one's.
	b.Cleanup(func() {
		pid, _ := as.rec.read()
		if c, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); pid > 0 && err == nil && strings.Contains(string(c), string(as.rec)) {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
	as.a = startAgent(b, []string{"PATH=" + os.Getenv("PATH")}, "--config", cfg, "run", "--", "/bin/sh", "-c", hupScript, "hup-service", string(as.rec))
	as.a.waitLog("reload: watching")
	as.rec.waitStart(b)
	return as
}

// passes is how many reload passes the agent has finished with a change.
func (as *agentSide) passes() int { return strings.Count(as.a.out.String(), `msg="reload pass"`) }

// actions is how many times the agent has signalled the service.
func (as *agentSide) actions() int {
	return strings.Count(as.a.out.String(), "signalling the service")
}

// waitPasses waits until the agent has finished n passes with a change.
func (as *agentSide) waitPasses(b *testing.B, n int) {
	b.Helper()
	eventually(b, fmt.Sprintf("%d reload passes", n), func() bool { return as.passes() >= n })
}

// rendered fails the benchmark unless the live file holds version i.
func (as *agentSide) rendered(b *testing.B, i int) {
	b.Helper()
	if got, err := os.ReadFile(as.dest); err != nil || string(got) != confData(i) {
		b.Fatalf("%s holds %q (%v), want version %d:\n%s", as.dest, got, err, i, as.a.out.String())
	}
}

func (as *agentSide) stop() {
	as.a.cmd.Process.Signal(syscall.SIGTERM)
	as.a.exit(30 * time.Second)
}

func confData(i int) string { return fmt.Sprintf("[DEFAULT]\nrevision = %d\n", i) }

// swap writes version i into vol as the kubelet does and returns the time
// taken just before.
func swap(b *testing.B, kw *atomicwriter.Writer, vol string, i int) time.Time {
	b.Helper()
	t0 := time.Now()
	if err := kw.Write(vol, map[string]string{"service.conf": confData(i)}); err != nil {
		b.Fatal(err)
	}
	return t0
}

// reloadSamples is BENCH_SAMPLES, else def.
func reloadSamples(def int) int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_SAMPLES")); err == nil && n > 0 {
		return n
	}
	return def
}

// percentile is the nearest-rank p-th percentile (p in (0,1]): with fewer
// than 100 samples p99 is the largest.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// BenchmarkReloadLatency: from a ..data swap to the SIGHUP's arrival at the
// service, with a quiet period of 0 and of 1 s: kolla-agent, the fsnotify
// loop, and the SIGHUP sent directly (the service's own recording cost),
// taking turns swap by swap. Target: the agent's <= quiet + 20 ms.
func BenchmarkReloadLatency(b *testing.B) {
	for _, c := range []struct {
		quiet   time.Duration
		samples int
	}{{0, 20}, {time.Second, 10}} {
		b.Run(fmt.Sprintf("quiet=%v", c.quiet), func(b *testing.B) {
			kw := atomicwriter.Start(b)
			as := startReloadAgent(b, kw, c.quiet)
			bs := startBaseline(b, kw)
			n := reloadSamples(c.samples)
			wait := c.quiet + 30*time.Second
			var agentL, loopL, killL []time.Duration
			extra := 0
			version := 0
			for range b.N {
				// The first round warms both sides up and is not counted.
				for i := range n + 1 {
					version++
					// The agent: swap, signal, and the pass finished.
					had, passes := as.rec.count(), as.passes()
					t0 := swap(b, kw, as.vol, version)
					got := as.rec.wait(b, had+1, wait)[had]
					as.waitPasses(b, passes+1)
					as.rendered(b, version)
					extra += as.rec.count() - (had + 1)

					// The fsnotify loop.
					had = bs.rec.count()
					t1 := swap(b, kw, bs.vol, version)
					gotL := bs.rec.wait(b, had+1, wait)[had]

					// SIGHUP sent directly.
					time.Sleep(20 * time.Millisecond) // the service's loop back in wait
					had = bs.rec.count()
					t2 := time.Now()
					syscall.Kill(-bs.pgid, syscall.SIGHUP)
					gotK := bs.rec.wait(b, had+1, wait)[had]

					if i > 0 {
						agentL = append(agentL, got.Sub(t0))
						loopL = append(loopL, gotL.Sub(t1))
						killL = append(killL, gotK.Sub(t2))
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			if extra != 0 {
				b.Errorf("the agent's service got %d SIGHUPs more than one per swap", extra)
			}
			as.stop()
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(ms(median(agentL)), "agent-ms/median")
			b.ReportMetric(ms(percentile(agentL, 0.99)), "agent-ms/p99")
			b.ReportMetric(ms(median(loopL)), "fsnotify-loop-ms/median")
			b.ReportMetric(ms(percentile(loopL, 0.99)), "fsnotify-loop-ms/p99")
			b.ReportMetric(ms(median(killL)), "direct-kill-ms/median")
			var t strings.Builder
			fmt.Fprintf(&t, "..data swap -> SIGHUP at the service, quiet %v, %d samples each (p99: nearest rank)\n", c.quiet, len(agentL))
			fmt.Fprintf(&t, "  %-22s %10s %10s %10s\n", "", "median", "p99", "min")
			row := func(name string, d []time.Duration, note string) {
				fmt.Fprintf(&t, "  %-22s %7.1f ms %7.1f ms %7.1f ms  %s\n", name, ms(median(d)), ms(percentile(d, 0.99)), ms(slices.Min(d)), note)
			}
			target := c.quiet + 20*time.Millisecond
			verdict := "met"
			if percentile(agentL, 0.99) > target {
				verdict = "missed at p99"
			}
			if median(agentL) > target {
				verdict = "missed"
			}
			row("kolla-agent", agentL, fmt.Sprintf("target <= %v: %s", target, verdict))
			row("fsnotify loop", loopL, "baseline, no debounce")
			row("direct kill (service)", killL, "the service's own recording cost")
			b.Log("\n" + t.String())
		})
	}
}

// BenchmarkReloadBurst: 100 swaps 10 ms apart (about a second, as a
// ConfigMap edited in several steps, or several ConfigMaps of one projected
// volume, can give) -> how many actions the service gets: the agent's
// (target with quiet 1s: one) and the fsnotify loop's, and the time from
// the last swap to the last action. The agent's live file must end on the
// last version.
func BenchmarkReloadBurst(b *testing.B) {
	const swaps = 100
	for _, quiet := range []time.Duration{0, time.Second} {
		b.Run(fmt.Sprintf("quiet=%v", quiet), func(b *testing.B) {
			kw := atomicwriter.Start(b)
			as := startReloadAgent(b, kw, quiet)
			bs := startBaseline(b, kw)
			type result struct {
				actions, received  int
				took, lastToAction time.Duration
			}
			// burst swaps vol 100 times, waits until settled says so (given
			// the last version and the actions before) and a second more,
			// and reports.
			burst := func(vol string, from int, rec hupLog, sent func() int, settled func(last, before int) bool) result {
				had, before := rec.count(), sent()
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				start := time.Now()
				var last time.Time
				for i := 1; i <= swaps; i++ {
					last = swap(b, kw, vol, from+i)
					if i < swaps {
						<-tick.C
					}
				}
				took := time.Since(start)
				eventually(b, "the burst to be acted on", func() bool { return settled(from+swaps, before) })
				time.Sleep(quiet + time.Second) // anything more would come now
				_, hups := rec.read()
				r := result{actions: sent() - before, received: len(hups) - had, took: took}
				if r.received > 0 {
					r.lastToAction = hups[len(hups)-1].Sub(last)
				}
				return r
			}
			var agent, loop result
			version := 0
			for range b.N {
				agent = burst(as.vol, version, as.rec, as.actions, func(last, before int) bool {
					got, _ := os.ReadFile(as.dest)
					return string(got) == confData(last) && as.actions() > before
				})
				as.rendered(b, version+swaps)
				loop = burst(bs.vol, version, bs.rec, func() int { return int(bs.loop.sent.Load()) }, func(_, before int) bool {
					return int(bs.loop.sent.Load())-before >= swaps
				})
				version += swaps
			}
			as.stop()
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(agent.actions), "agent-actions/burst")
			b.ReportMetric(float64(agent.received), "agent-signals-received/burst")
			b.ReportMetric(ms(agent.lastToAction), "agent-last-swap-to-action-ms")
			b.ReportMetric(float64(loop.actions), "fsnotify-loop-actions/burst")
			b.ReportMetric(float64(loop.received), "fsnotify-loop-signals-received/burst")
			b.ReportMetric(ms(loop.lastToAction), "fsnotify-loop-last-swap-to-action-ms")
			var t strings.Builder
			fmt.Fprintf(&t, "a burst of %d ..data swaps 10 ms apart, quiet %v\n", swaps, quiet)
			fmt.Fprintf(&t, "  %-14s %8s %17s %12s %22s\n", "", "actions", "signals received", "burst took", "last swap -> action")
			row := func(name string, r result, note string) {
				fmt.Fprintf(&t, "  %-14s %8d %17d %9.0f ms %19.1f ms  %s\n", name, r.actions, r.received, ms(r.took), ms(r.lastToAction), note)
			}
			note := "no quiet period: a pass merges only the swaps made while the one before ran"
			if quiet > 0 {
				note = "target: 1 action"
			}
			row("kolla-agent", agent, note)
			row("fsnotify loop", loop, "baseline: one per swap")
			fmt.Fprintf(&t, "  (received can be below actions: a SIGHUP sent while one is pending merges with it, and one can kill the date recording the last)\n")
			b.Log("\n" + t.String())
		})
	}
}
