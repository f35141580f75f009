package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"

	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

// BenchmarkScale (issue 12 §3): the API server's view of N pods of the
// keystone-api shape (2 Services whose pods are not ready, 3 Jobs not
// complete), each pod's `kolla-agent init` a real process with its own
// ServiceAccount and token, bound to examples/rbac/kolla-agent.yaml's Role.
// The baseline, in the same run and by the same method, is N
// kubernetes-entrypoint pods simulated by goroutines, each with its own
// token, client and connection, doing what its Resolve loop does: a
// goroutine per dependency that GETs the object (Endpoints for a Service,
// the Job for a job), sleeps 2 s, and stops after the check that found it
// resolved (the sleep comes after that check too).
//
// Phases, one after the other so that the control plane's CPU can be told
// apart: an idle window (the objects, no client); the baseline waiting; a
// second idle window; the agents started (spread a little, as pods are)
// and, once every one has logged all 5 dependencies waiting, the same
// window. Each side's idle and waiting windows run on a kube-apiserver
// started afresh for them, and each side is measured above its own idle:
// on one server the side measured second would carry the first side's
// history (heap pages Go returns to the OS only slowly, caches it filled),
// and its idle level would be the first side's leftovers. Then every
// dependency is met (the agents' namespace, then the baseline's with its
// pollers running again) and the time from the last dependency met to the
// last exit is taken on each side; then N agents start again with
// everything met (a mass restart), and N baseline pods likewise.
//
// Measured: requests from the audit log, per user prefix (each side's
// ServiceAccounts); open watches and the API server's heap, goroutines and
// fds from its /metrics (read with the admin client); kube-apiserver's and
// etcd's CPU seconds (utime+stime of /proc/PID/stat) over each window, their
// VmRSS sampled and VmHWM; etcd's range requests and the API server's
// consistent LISTs served from its watch cache. The method and the figures:
// docs/scale.md.
//
// Knobs: KOLLA_AGENT_SCALE_N (default 500), KOLLA_AGENT_SCALE_WINDOW
// (default BENCH_WAIT, else 60s), KOLLA_AGENT_SCALE_SPREAD (how long the
// starts take; default N x 10 ms, at most 5 s).
func BenchmarkScale(b *testing.B) {
	k := scaleKnobsFromEnv(b)
	for range b.N {
		runScale(b, k)
	}
}

type scaleKnobs struct {
	n              int
	window, spread time.Duration
}

func scaleKnobsFromEnv(b *testing.B) scaleKnobs {
	k := scaleKnobs{n: 500, window: benchWindow()}
	if v := os.Getenv("KOLLA_AGENT_SCALE_N"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("KOLLA_AGENT_SCALE_N=%q: want a positive integer", v)
		}
		k.n = n
	}
	if v := os.Getenv("KOLLA_AGENT_SCALE_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("KOLLA_AGENT_SCALE_WINDOW=%q: want a duration", v)
		}
		k.window = d
	}
	k.spread = min(5*time.Second, time.Duration(k.n)*10*time.Millisecond)
	if v := os.Getenv("KOLLA_AGENT_SCALE_SPREAD"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			b.Fatalf("KOLLA_AGENT_SCALE_SPREAD=%q: want a duration", v)
		}
		k.spread = d
	}
	return k
}

var scaleServices = []string{"mariadb", "memcached"}

func runScale(b *testing.B, k scaleKnobs) {
	n, window := k.n, k.window
	ctx := context.Background()
	machine := fmt.Sprintf("%d CPUs, %s, kube-apiserver %s, %s", runtime.NumCPU(), runtime.Version(), scaleServerVersion(), s.env.Etcd)

	// Objects: the keystone-api shape in two namespaces, none met.
	agentNS := keystoneShape(b, false)
	baseNS := keystoneShape(b, false)
	setupStart := time.Now()
	agentTokens := scaleAccounts(b, agentNS, "kolla-agent", n, scaleAgentRole(b))
	baseTokens := scaleAccounts(b, baseNS, "entrypoint", n, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes-entrypoint"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints"}, Verbs: []string{"get"}},
			{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"get"}},
		},
	})
	agentEnvs := scaleAgentEnvs(b, agentNS, agentTokens)
	baseCfgs := scaleBaseConfigs(baseTokens)
	setupTook := time.Since(setupStart)
	agentUsers := "system:serviceaccount:" + agentNS + ":"
	baseUsers := "system:serviceaccount:" + baseNS + ":"

	// 1. Idle: the control plane with the objects and no client, on a
	// fresh API server.
	plane := scaleFreshAPIServer(b)
	baseIdle := plane.measure(b, window, nil)
	baseIdleLive := plane.liveHeap(b)

	// 2. The baseline waiting.
	pctx, pcancel := context.WithCancel(ctx)
	pollers := scaleStartEntrypoints(pctx, baseCfgs, baseNS, 2*time.Second)
	time.Sleep(2*time.Second + 500*time.Millisecond) // every poller in its loop
	baseWait := plane.measure(b, window, nil)
	baseWaitLive := plane.liveHeap(b) // the pollers still polling
	pcancel()
	pollers.wait()

	// 3. The agents: start, sync, wait; their own idle window before, on
	// an API server of their own.
	plane = scaleFreshAPIServer(b)
	idle := plane.measure(b, window, nil)
	idleLive := plane.liveHeap(b)
	cfg := filepath.Join(b.TempDir(), "agent.yaml")
	deps := keystoneArgs()
	body := fmt.Sprintf("namespace: %s\ndependencies:\n  timeout: 30m\n  wait:\n", agentNS)
	for _, d := range deps {
		body += "    - " + d + "\n"
	}
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		b.Fatal(err)
	}
	var waitingLines []string
	for _, d := range deps {
		waitingLines = append(waitingLines, "dependency="+d+" state=waiting")
	}
	agentStart := time.Now()
	agents := scaleStartAgents(b, agentEnvs, cfg, k.spread)
	started := time.Now()
	scaleWaitLogs(b, agents, waitingLines, 10*time.Minute)
	synced := time.Now()
	time.Sleep(time.Second)
	agentWait := plane.measure(b, window, agents)
	agentWaitLive := plane.liveHeap(b)
	agentsRSS, agentsAnon := scaleAgentsRSS(agents)
	for _, a := range agents {
		a.running()
	}

	// 3b. The API server killed (SIGKILL) under the waiting agents and
	// started again after a 5 s outage: when each agent is back (its first
	// WATCH answered 200 after the kill, from the audit log) and how many
	// come back in the busiest second. The agents must spread themselves:
	// nothing else paces them.
	killAt := time.Now()
	if err := s.env.KillAPIServer(); err != nil {
		b.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	if err := s.env.StartAPIServer(); err != nil {
		b.Fatal(err)
	}
	plane = scalePlaneOf(b)      // the new API server's pid; the later phases run against it
	time.Sleep(15 * time.Second) // longer than the agents' longest retry wait
	resumedBy := time.Now()
	for _, a := range agents {
		a.running()
	}

	// 4. Every dependency met: the agents' namespace first, then the
	// baseline's with its pollers waiting again (their phases spread over
	// the 2 s period), so that neither side's clients load the machine
	// while the other's dependencies are met. When a dependency was met is
	// taken from the audit log: the write (by the Job, EndpointSlice or
	// Endpoints controller) after which this benchmark's own watch saw it
	// met; the watch alone comes late on a loaded machine.
	agentObs := scaleWatchMet(b, agentNS, true)
	satisfyAt := time.Now()
	if err := scaleSatisfy(ctx, agentNS); err != nil {
		b.Fatal(err)
	}
	agentMets := agentObs.wait(b)
	var exited []time.Time
	for _, a := range agents {
		if code := a.exit(5 * time.Minute); code != 0 {
			b.Fatalf("agent exit %d:\n%s", code, a.out.String())
		}
		exited = append(exited, a.exited)
	}
	time.Sleep(time.Second)
	pctx, pcancel = context.WithTimeout(ctx, 10*time.Minute)
	defer pcancel()
	pollers = scaleStartEntrypoints(pctx, baseCfgs, baseNS, 2*time.Second)
	time.Sleep(2*time.Second + 500*time.Millisecond)
	baseObs := scaleWatchMet(b, baseNS, false)
	baseSatisfyAt := time.Now()
	if err := scaleSatisfy(ctx, baseNS); err != nil {
		b.Fatal(err)
	}
	baseMets := baseObs.wait(b)
	pollers.wait()
	if pollers.failed.Load() > 0 {
		b.Fatalf("%d baseline pods did not see their dependencies met", pollers.failed.Load())
	}
	baseLastExit, baseLastSeen := pollers.last()

	// 5. A mass restart with everything met: N agents, then N baseline pods.
	time.Sleep(2 * time.Second)
	restartStart := time.Now()
	rm := plane.begin(b, nil)
	again := scaleStartAgents(b, agentEnvs, cfg, k.spread)
	var restartLast time.Time
	for _, a := range again {
		if code := a.exit(5 * time.Minute); code != 0 {
			b.Fatalf("restarted agent exit %d:\n%s", code, a.out.String())
		}
		restartLast = scaleLater(restartLast, a.exited)
	}
	agentRestart := rm.end(b)
	time.Sleep(2 * time.Second)
	baseRestartStart := time.Now()
	rm = plane.begin(b, nil)
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Minute)
	defer rcancel()
	restarted := scaleStartEntrypoints(rctx, baseCfgs, baseNS, k.spread)
	restarted.wait()
	baseRestart := rm.end(b)
	if restarted.failed.Load() > 0 {
		b.Fatalf("%d restarted baseline pods did not finish", restarted.failed.Load())
	}
	baseRestartLast, _ := restarted.last()

	// The audit log, once, for both sides.
	time.Sleep(2 * time.Second) // events reach the log a moment after the responses
	reqs := scaleAudit(b, setupStart, agentUsers, baseUsers, scaleControllers)
	lastMet, agentLag := scaleMetAt(reqs, agentNS, agentMets)
	baseLastMet, baseLag := scaleMetAt(reqs, baseNS, baseMets)
	var lastExit time.Time
	exits := make([]time.Duration, len(exited))
	for i, t := range exited {
		lastExit = scaleLater(lastExit, t)
		exits[i] = t.Sub(lastMet)
	}
	count := func(prefix string, from, to time.Time) scaleCount {
		return countScale(reqs, prefix, from, to)
	}
	agentSync := count(agentUsers, agentStart, agentWait.from)
	agentWaitReqs := count(agentUsers, agentWait.from, agentWait.to)
	baseWaitReqs := count(baseUsers, baseWait.from, baseWait.to)
	agentLife := count(agentUsers, agentStart, killAt)
	afterRestart := count(agentUsers, resumedBy, lastExit.Add(time.Second))
	agentLife.add(afterRestart)
	agentResume := count(agentUsers, killAt, resumedBy)
	resumeBusiest, resumeMedian, resumeLast, resumed := scaleResumes(reqs, agentUsers, killAt, resumedBy)
	if perAgent := 1; resumed != n*perAgent { // one watch at a time per wait (discovery/turn.go)
		b.Fatalf("%d of %d agents' %d watches resumed after the API server's restart", resumed, n, n*perAgent)
	}
	agentRestartReqs := count(agentUsers, restartStart, restartLast.Add(time.Second))
	baseRestartReqs := count(baseUsers, baseRestartStart, baseRestartLast.Add(time.Second))

	perPodMin := func(c scaleCount, w scaleResult) float64 { return float64(c.total) / float64(n) / (w.secs / 60) }
	// The long run: the watches' renewals (none in a window shorter than
	// their 5-10 min timeouts) and what else the window saw.
	var ws []watchReq
	for _, r := range reqs {
		if strings.HasPrefix(r.user, agentUsers) && r.verb == "watch" && r.code == http.StatusOK && !r.at.After(agentWait.to) {
			ws = append(ws, watchReq{r.user, r.uri})
		}
	}
	longRun := renewalsPerMinute(ws)/float64(n) + perPodMin(agentWaitReqs, agentWait) - float64(agentWaitReqs.verbs["watch"])/float64(n)/(agentWait.secs/60)
	fn := float64(n)
	watches := agentWait.med.watches - idle.med.watches
	kib := func(x float64) float64 { return x / 1024 }
	mibf := func(x float64) float64 { return x / (1 << 20) }

	// Per waiting pod, not per watch: the level above idle holds each
	// agent's connection (TLS, HTTP/2, its token's authentication) as well
	// as its watch, and the idle window has neither.
	heapPerPod := (agentWait.med.heap - idle.med.heap) / fn
	livePerPod := (agentWaitLive - idleLive) / fn
	rssPerPod := (agentWait.med.apiRSS - idle.med.apiRSS) / fn
	slices.Sort(exits)
	aboveIdle := func(w, idle scaleResult) string {
		return fmt.Sprintf("apiserver %.2f s, etcd %.2f s", w.apiCPU-idle.apiCPU/idle.secs*w.secs, w.etcdCPU-idle.etcdCPU/idle.secs*w.secs)
	}
	// At most 9 lines: the testing package trims a benchmark's log after 10.
	b.Logf("N=%d pods; %s; window %v; starts spread over %v; %d ServiceAccounts with tokens in %v; the agents all started in %v and had logged all %d dependencies waiting %v after the first start; every dependency met %v (agents' namespace) and %v (baseline's) after the satisfying writes began (this benchmark's watch saw it up to %v and %v after the write)",
		n, machine, window, k.spread, 2*n, setupTook.Round(100*time.Millisecond), started.Sub(agentStart).Round(10*time.Millisecond), len(deps),
		synced.Sub(agentStart).Round(10*time.Millisecond), lastMet.Sub(satisfyAt).Round(time.Millisecond), baseLastMet.Sub(baseSatisfyAt).Round(time.Millisecond), agentLag.Round(time.Millisecond), baseLag.Round(time.Millisecond))
	b.Logf("WAITING %.0f s, requests: agents %d = %.3f per pod-minute %s (in the long run, with their watches' renewals: %.3f) | kubernetes-entrypoint %d = %.1f per pod-minute %s. The agents' one-time sync before: %.2f per agent %s; start to exit: %.2f per agent %s",
		agentWait.secs, agentWaitReqs.total, perPodMin(agentWaitReqs, agentWait), agentWaitReqs, longRun, baseWaitReqs.total, perPodMin(baseWaitReqs, baseWait), baseWaitReqs,
		float64(agentSync.total)/fn, agentSync, float64(agentLife.total)/fn, agentLife)
	// What each side's fresh API server holds above its own idle window.
	above := func(w, idle scaleResult) string {
		return fmt.Sprintf("heap in use %+.1f MiB, VmRSS %+.1f MiB (less the free heap Go has not returned to the OS: %+.1f), goroutines %+.0f",
			mibf(w.med.heap-idle.med.heap), mibf(w.med.apiRSS-idle.med.apiRSS), mibf(w.med.apiRSS-w.med.free-(idle.med.apiRSS-idle.med.free)), w.med.goroutines-idle.med.goroutines)
	}
	b.Logf("WATCHES open (apiserver_longrunning_requests, verb WATCH): idle %.0f, kubernetes-entrypoint waiting %.0f, agents waiting %.0f (+%.0f, %.2f per agent); etcd's own watchers: idle %.0f, agents waiting %.0f. apiserver memory, each side above its own fresh server's idle (medians): agents %s, live heap after a forced GC %+.1f MiB; per waiting pod (its connection and its watches) %.1f KiB heap (live %.1f KiB), %.1f KiB RSS, %.2f goroutines | kubernetes-entrypoint %s, live heap %+.1f MiB",
		idle.med.watches, baseWait.med.watches, agentWait.med.watches, watches, watches/fn, idle.med.etcdWatchers, agentWait.med.etcdWatchers,
		above(agentWait, idle), mibf(agentWaitLive-idleLive), kib(heapPerPod), kib(livePerPod), kib(rssPerPod), (agentWait.med.goroutines-idle.med.goroutines)/fn, above(baseWait, baseIdle), mibf(baseWaitLive-baseIdleLive))
	b.Logf("CONTROL PLANE while waiting, idle (baseline's | agents') | kubernetes-entrypoint | agents: %s | %s | %s | %s. Above idle: kubernetes-entrypoint %s | agents %s. The load generator (this process) %.2f s CPU in the baseline's window; the %d agents %.2f s in theirs, VmRSS %.1f MiB each (anonymous %.1f)",
		baseIdle.brief(), idle.brief(), baseWait.brief(), agentWait.brief(), aboveIdle(baseWait, baseIdle), aboveIdle(agentWait, idle), baseWait.selfCPU, n, agentWait.agentsCPU, mibf(agentsRSS/fn), mibf(agentsAnon/fn))
	b.Logf("MET -> EXIT, last dependency met to last exit: agents %v (median agent %v) | kubernetes-entrypoint %v (its last resolving check %v after the last met, then its 2 s sleep)",
		lastExit.Sub(lastMet).Round(time.Millisecond), exits[len(exits)/2].Round(time.Millisecond),
		baseLastExit.Sub(baseLastMet).Round(time.Millisecond), baseLastSeen.Sub(baseLastMet).Round(time.Millisecond))
	b.Logf("MASS RESTART, everything met: agents %.2f requests per start %s, last exit %v after the first start; %s; above idle %s | kubernetes-entrypoint %.2f per start %s, last exit %v after the first start; %s; above idle %s",
		float64(agentRestartReqs.total)/fn, agentRestartReqs, restartLast.Sub(restartStart).Round(time.Millisecond), agentRestart.brief(), aboveIdle(agentRestart, idle),
		float64(baseRestartReqs.total)/fn, baseRestartReqs, baseRestartLast.Sub(baseRestartStart).Round(time.Millisecond), baseRestart.brief(), aboveIdle(baseRestart, idle))

	b.Logf("API SERVER RESTART under the waiting agents (killed, started again 5 s later): busiest second %d of the %d watches back (%.0f%%); the median watch back %v after the first, the last %v after it; %.2f requests per agent %s",
		resumeBusiest, resumed, 100*float64(resumeBusiest)/float64(resumed), resumeMedian.Round(time.Millisecond), resumeLast.Round(time.Millisecond), float64(agentResume.total)/fn, agentResume)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(fn, "pods")
	b.ReportMetric(100*float64(resumeBusiest)/float64(resumed), "agent-resume-busiest-second-%")
	b.ReportMetric(resumeMedian.Seconds(), "agent-resume-median-s")
	b.ReportMetric(resumeLast.Seconds(), "agent-resume-last-s")
	b.ReportMetric(float64(agentResume.total)/fn, "agent-resume-req/pod")
	b.ReportMetric(perPodMin(agentWaitReqs, agentWait), "agent-waiting-req/pod-min")
	b.ReportMetric(longRun, "agent-longrun-req/pod-min")
	b.ReportMetric(perPodMin(baseWaitReqs, baseWait), "entrypoint-waiting-req/pod-min")
	b.ReportMetric(float64(agentSync.total)/fn, "agent-sync-req/pod")
	b.ReportMetric(watches, "agent-watches")
	b.ReportMetric(idle.apiCPU, "idle-apiserver-cpu-s")
	b.ReportMetric(baseIdle.apiCPU, "entrypoint-idle-apiserver-cpu-s")
	b.ReportMetric(agentWait.apiCPU, "agent-waiting-apiserver-cpu-s")
	b.ReportMetric(baseWait.apiCPU, "entrypoint-waiting-apiserver-cpu-s")
	b.ReportMetric(idle.etcdCPU, "idle-etcd-cpu-s")
	b.ReportMetric(baseIdle.etcdCPU, "entrypoint-idle-etcd-cpu-s")
	b.ReportMetric(agentWait.etcdCPU, "agent-waiting-etcd-cpu-s")
	b.ReportMetric(baseWait.etcdCPU, "entrypoint-waiting-etcd-cpu-s")
	b.ReportMetric(mibf(idle.med.apiRSS), "idle-apiserver-rss-MiB")
	b.ReportMetric(mibf(baseIdle.med.apiRSS), "entrypoint-idle-apiserver-rss-MiB")
	b.ReportMetric(mibf(agentWait.med.apiRSS), "agent-waiting-apiserver-rss-MiB")
	b.ReportMetric(mibf(baseWait.med.apiRSS), "entrypoint-waiting-apiserver-rss-MiB")
	b.ReportMetric(mibf(max(baseIdle.apiHWM, idle.apiHWM, agentWait.apiHWM, baseWait.apiHWM)), "apiserver-hwm-MiB")
	b.ReportMetric(mibf(max(baseIdle.etcdHWM, idle.etcdHWM, agentWait.etcdHWM, baseWait.etcdHWM)), "etcd-hwm-MiB")
	b.ReportMetric(kib(heapPerPod), "apiserver-heap-KiB/pod")
	b.ReportMetric(mibf(idleLive), "idle-apiserver-live-heap-MiB")
	b.ReportMetric(mibf(baseIdleLive), "entrypoint-idle-apiserver-live-heap-MiB")
	b.ReportMetric(mibf(agentWaitLive), "agent-waiting-apiserver-live-heap-MiB")
	b.ReportMetric(mibf(baseWaitLive), "entrypoint-waiting-apiserver-live-heap-MiB")
	b.ReportMetric(kib(livePerPod), "apiserver-live-heap-KiB/pod")
	b.ReportMetric(ms(lastExit.Sub(lastMet)), "agent-met-to-last-exit-ms")
	b.ReportMetric(ms(baseLastExit.Sub(baseLastMet)), "entrypoint-met-to-last-exit-ms")
	b.ReportMetric(float64(agentLife.total)/fn, "agent-req/pod-lifetime")
	b.ReportMetric(float64(agentRestartReqs.total)/fn, "agent-restart-req/start")
	b.ReportMetric(float64(baseRestartReqs.total)/fn, "entrypoint-restart-req/start")
	// Above idle: the controllers' own reads, at the idle window's rate.
	readAbove := func(w scaleResult) float64 { return w.readBytes - idle.readBytes/idle.secs*w.secs }
	b.ReportMetric(readAbove(agentRestart)/fn, "agent-restart-read-bytes/start")
	b.ReportMetric(readAbove(baseRestart)/fn, "entrypoint-restart-read-bytes/start")
	b.ReportMetric(agentRestart.apiCPU, "agent-restart-apiserver-cpu-s")
	b.ReportMetric(baseRestart.apiCPU, "entrypoint-restart-apiserver-cpu-s")
	b.ReportMetric(restartLast.Sub(restartStart).Seconds(), "agent-restart-last-exit-s")
	b.ReportMetric(baseRestartLast.Sub(baseRestartStart).Seconds(), "entrypoint-restart-last-exit-s")
}

// scaleFreshAPIServer restarts kube-apiserver (and the controller manager
// with it) so that a side's windows start from no other client's history,
// and lets it settle: its first seconds fill the watch cache and the
// controllers list everything.
func scaleFreshAPIServer(b *testing.B) scalePlane {
	if err := s.env.KillAPIServer(); err != nil {
		b.Fatal(err)
	}
	if err := s.env.StartAPIServer(); err != nil {
		b.Fatal(err)
	}
	time.Sleep(10 * time.Second)
	return scalePlaneOf(b)
}

// scaleAgentRole is the Role of examples/rbac/kolla-agent.yaml, as shipped.
func scaleAgentRole(b *testing.B) *rbacv1.Role {
	path := filepath.Join("..", "..", testenv.RBACManifest)
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatalf("%s: %v", path, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			b.Fatalf("%s: %v", path, err)
		}
		if tm.Kind == "Role" {
			var role rbacv1.Role
			if err := yaml.UnmarshalStrict(doc, &role); err != nil {
				b.Fatalf("%s: %v", path, err)
			}
			return &role
		}
	}
	b.Fatalf("%s: no Role", path)
	return nil
}

// scaleAccounts creates role in ns, binds it to every ServiceAccount of ns
// (the group system:serviceaccounts:NS), creates n ServiceAccounts
// PREFIX-0..n-1 and returns a token for each from the TokenRequest API, once
// the API server's RBAC cache grants the role.
func scaleAccounts(b *testing.B, ns, prefix string, n int, role *rbacv1.Role) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := client()
	role = role.DeepCopy()
	role.Namespace = ns
	if _, err := c.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + ns}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	tokens := make([]string, n)
	errs := make([]error, n)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				name := fmt.Sprintf("%s-%d", prefix, i)
				if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
					errs[i] = err
					continue
				}
				ttl := int64(4 * 3600)
				tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
					Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl},
				}, metav1.CreateOptions{})
				if err != nil {
					errs[i] = err
					continue
				}
				tokens[i] = tr.Status.Token
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	// Asked as the admin: a self-review would be one of the users' requests.
	user := "system:serviceaccount:" + ns + ":" + prefix + "-0"
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					attrs := authorizationv1.ResourceAttributes{Namespace: ns, Group: g, Resource: res, Verb: v}
					for {
						sar, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
							Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &attrs},
						}, metav1.CreateOptions{})
						if err != nil {
							b.Fatal(err)
						}
						if sar.Status.Allowed {
							break
						}
						if ctx.Err() != nil {
							b.Fatalf("%s: %s %s.%s never allowed: %s", user, v, res, g, sar.Status.Reason)
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
			}
		}
	}
	return tokens
}

// scaleAgentEnvs writes one kubeconfig per agent (server, CA, its token;
// the versioned types, as testenv does) and returns each agent's
// environment.
func scaleAgentEnvs(b *testing.B, ns string, tokens []string) [][]string {
	admin := s.env.Admin()
	dir := b.TempDir()
	envs := make([][]string, len(tokens))
	for i, tok := range tokens {
		user := fmt.Sprintf("kolla-agent-%d", i)
		kc := clientcmdv1.Config{
			APIVersion: "v1",
			Kind:       "Config",
			Clusters: []clientcmdv1.NamedCluster{{Name: "testenv", Cluster: clientcmdv1.Cluster{
				Server:                   admin.Host,
				CertificateAuthorityData: admin.TLSClientConfig.CAData,
				InsecureSkipTLSVerify:    admin.TLSClientConfig.CAData == nil,
			}}},
			AuthInfos:      []clientcmdv1.NamedAuthInfo{{Name: user, AuthInfo: clientcmdv1.AuthInfo{Token: tok}}},
			Contexts:       []clientcmdv1.NamedContext{{Name: "testenv", Context: clientcmdv1.Context{Cluster: "testenv", AuthInfo: user, Namespace: ns}}},
			CurrentContext: "testenv",
		}
		data, err := yaml.Marshal(kc)
		if err != nil {
			b.Fatal(err)
		}
		path := filepath.Join(dir, user+".kubeconfig")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			b.Fatal(err)
		}
		envs[i] = []string{
			"PATH=" + os.Getenv("PATH"),
			"KUBECONFIG=" + path,
			"NAMESPACE=" + ns,
			"POD_NAME=" + fmt.Sprintf("keystone-api-%d", i),
			"KOLLA_AGENT_DNS_SERVER=" + s.env.DNSAddr,
			"CLUSTER_DOMAIN=" + s.env.ClusterDomain,
		}
	}
	return envs
}

// scaleBaseConfigs: one client configuration per baseline pod, with its own
// token; client-go's defaults otherwise (5 QPS, burst 10), as
// kubernetes-entrypoint has.
func scaleBaseConfigs(tokens []string) []*rest.Config {
	admin := s.env.Admin()
	cfgs := make([]*rest.Config, len(tokens))
	for i, tok := range tokens {
		cfgs[i] = &rest.Config{
			Host:            admin.Host,
			BearerToken:     tok,
			TLSClientConfig: rest.TLSClientConfig{CAData: admin.TLSClientConfig.CAData, Insecure: admin.TLSClientConfig.CAData == nil},
			UserAgent:       "kubernetes-entrypoint-baseline",
			WarningHandler:  rest.NoWarnings{}, // Endpoints is deprecated: reading it is the point
		}
	}
	return cfgs
}

func scaleStartAgents(b *testing.B, envs [][]string, cfg string, spread time.Duration) []*agentProc {
	agents := make([]*agentProc, len(envs))
	t0 := time.Now()
	for i, env := range envs {
		if d := time.Until(t0.Add(time.Duration(i) * spread / time.Duration(len(envs)))); d > 0 {
			time.Sleep(d)
		}
		agents[i] = startAgent(b, env, "--config", cfg, "init")
	}
	return agents
}

// scaleWaitLogs waits until every agent has logged every line of want.
func scaleWaitLogs(b *testing.B, agents []*agentProc, want []string, within time.Duration) {
	deadline := time.Now().Add(within)
	done := make([]bool, len(agents))
	for {
		pending := 0
		for i, a := range agents {
			if done[i] {
				continue
			}
			select {
			case <-a.done:
				b.Fatalf("agent %d exited (code %d) before logging all its dependencies waiting:\n%s", i, a.code, a.out.String())
			default:
			}
			out := a.out.String()
			done[i] = true
			for _, w := range want {
				if !strings.Contains(out, w) {
					done[i] = false
					pending++
					break
				}
			}
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d agents have not logged every dependency waiting after %v", pending, len(agents), within)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func scaleAgentsRSS(agents []*agentProc) (rss, anon float64) {
	for _, a := range agents {
		rss += scaleStatus(a.cmd.Process.Pid, "VmRSS")
		anon += scaleStatus(a.cmd.Process.Pid, "RssAnon")
	}
	return rss, anon
}

// scaleEntrypoints is N simulated kubernetes-entrypoint pods.
type scaleEntrypoints struct {
	wg     sync.WaitGroup
	mu     sync.Mutex
	exits  []time.Time // each pod's Resolve returned
	seen   []time.Time // each pod's last resolving check
	failed atomic.Int64
}

func (e *scaleEntrypoints) wait() { e.wg.Wait() }

func (e *scaleEntrypoints) last() (exit, seen time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range e.exits {
		exit, seen = scaleLater(exit, e.exits[i]), scaleLater(seen, e.seen[i])
	}
	return exit, seen
}

// scaleStartEntrypoints starts a baseline pod per configuration, the i-th
// after i*spread/N, until ctx ends. Their waiting counts as failed.
func scaleStartEntrypoints(ctx context.Context, cfgs []*rest.Config, ns string, spread time.Duration) *scaleEntrypoints {
	e := &scaleEntrypoints{}
	for i, cfg := range cfgs {
		e.wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(i) * spread / time.Duration(len(cfgs))):
			}
			seen, ok := scaleEntrypointPod(ctx, cfg, ns)
			if !ok {
				e.failed.Add(1)
				return
			}
			e.mu.Lock()
			e.exits = append(e.exits, time.Now())
			e.seen = append(e.seen, seen)
			e.mu.Unlock()
		})
	}
	return e
}

// scaleEntrypointPod is one kubernetes-entrypoint process: its own client
// and connection (closed when it ends, as a process's would be), and its
// Resolve loop: a goroutine per dependency that checks, sleeps 2 s, and
// stops after the check that found it resolved. It returns the time of the
// last resolving check, and whether every dependency resolved before ctx
// ended.
func scaleEntrypointPod(ctx context.Context, base *rest.Config, ns string) (time.Time, bool) {
	var mu sync.Mutex
	var conns []net.Conn
	cfg := rest.CopyConfig(base)
	dialer := &net.Dialer{}
	// A dialer of its own also keeps client-go from sharing one cached
	// transport (and one connection) among the pods.
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err == nil {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
		return c, err
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return time.Time{}, false
	}
	var checks []func(context.Context) bool
	for _, svc := range scaleServices {
		checks = append(checks, func(ctx context.Context) bool {
			ep, err := c.CoreV1().Endpoints(ns).Get(ctx, svc, metav1.GetOptions{})
			if err != nil {
				return false
			}
			for _, s := range ep.Subsets {
				if len(s.Addresses) > 0 {
					return true
				}
			}
			return false
		})
	}
	for _, j := range keystoneJobs {
		checks = append(checks, func(ctx context.Context) bool {
			job, err := c.BatchV1().Jobs(ns).Get(ctx, j, metav1.GetOptions{})
			return err == nil && job.Status.Succeeded > 0
		})
	}
	var wg sync.WaitGroup
	var failed atomic.Bool
	seen := make([]time.Time, len(checks))
	for i, check := range checks {
		wg.Go(func() {
			for {
				ok := check(ctx)
				if ok {
					seen[i] = time.Now()
				}
				select {
				case <-ctx.Done():
					failed.Store(true)
					return
				case <-time.After(2 * time.Second):
				}
				if ok {
					return
				}
			}
		})
	}
	wg.Wait()
	var last time.Time
	for _, t := range seen {
		last = scaleLater(last, t)
	}
	return last, !failed.Load()
}

// scaleMet is one dependency seen met by this benchmark's watch: the
// object (as the audit log names it) and when.
type scaleMet struct {
	resource, subresource, name string
	seen                        time.Time
}

type scaleMetWatch struct {
	wg   sync.WaitGroup
	mets []scaleMet
}

// scaleWatchMet watches the five dependencies of ns as one side reads them
// (the agent: a ready endpoint in an EndpointSlice, a Job's Complete
// condition; kubernetes-entrypoint: an address in the Endpoints object, a
// Job's succeeded count).
func scaleWatchMet(b *testing.B, ns string, agentSide bool) *scaleMetWatch {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	c := client()
	byName := func(name string) metav1.ListOptions {
		return metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	}
	// met reports whether the object is met and, if so, its name.
	type dep struct {
		w                     watch.Interface
		resource, subresource string
		met                   func(k8sruntime.Object) (string, bool)
	}
	var deps []dep
	add := func(w watch.Interface, err error, resource, subresource string, met func(k8sruntime.Object) (string, bool)) {
		if err != nil {
			b.Fatal(err)
		}
		deps = append(deps, dep{w, resource, subresource, met})
	}
	for _, svc := range scaleServices {
		if agentSide {
			w, err := c.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
			add(w, err, "endpointslices", "", func(o k8sruntime.Object) (string, bool) {
				s, ok := o.(*discoveryv1.EndpointSlice)
				if !ok {
					return "", false
				}
				for _, ep := range s.Endpoints {
					if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
						return s.Name, true
					}
				}
				return "", false
			})
		} else {
			w, err := c.CoreV1().Endpoints(ns).Watch(ctx, byName(svc))
			add(w, err, "endpoints", "", func(o k8sruntime.Object) (string, bool) {
				e, ok := o.(*corev1.Endpoints)
				if !ok {
					return "", false
				}
				for _, s := range e.Subsets {
					if len(s.Addresses) > 0 {
						return e.Name, true
					}
				}
				return "", false
			})
		}
	}
	for _, j := range keystoneJobs {
		w, err := c.BatchV1().Jobs(ns).Watch(ctx, byName(j))
		add(w, err, "jobs", "status", func(o k8sruntime.Object) (string, bool) {
			job, ok := o.(*batchv1.Job)
			if !ok {
				return "", false
			}
			if !agentSide {
				return job.Name, job.Status.Succeeded > 0
			}
			for _, cond := range job.Status.Conditions {
				if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
					return job.Name, true
				}
			}
			return "", false
		})
	}
	mw := &scaleMetWatch{mets: make([]scaleMet, len(deps))}
	for i, d := range deps {
		mw.wg.Go(func() {
			defer d.w.Stop()
			for ev := range d.w.ResultChan() {
				if ev.Type != watch.Added && ev.Type != watch.Modified {
					continue
				}
				if name, ok := d.met(ev.Object); ok {
					mw.mets[i] = scaleMet{resource: d.resource, subresource: d.subresource, name: name, seen: time.Now()}
					return
				}
			}
		})
	}
	return mw
}

func (mw *scaleMetWatch) wait(b *testing.B) []scaleMet {
	mw.wg.Wait()
	for _, m := range mw.mets {
		if m.seen.IsZero() {
			b.Fatal("a dependency was never seen met")
		}
	}
	return mw.mets
}

// scaleControllers is the user the Job, EndpointSlice and Endpoints
// controllers write as.
const scaleControllers = "system:kube-controller-manager"

// scaleMetAt returns when the last of mets was met: for each, the last
// successful write to its object that the API server had answered when the
// watch saw it met (the watch's time if the log has none); and the longest
// the watch took to see one.
func scaleMetAt(reqs []scaleReq, ns string, mets []scaleMet) (last time.Time, lag time.Duration) {
	for _, m := range mets {
		var at time.Time
		for _, r := range reqs {
			if r.ns != ns || r.resource != m.resource || r.subresource != m.subresource || r.name != m.name ||
				r.code < 200 || r.code > 299 || r.done.IsZero() || r.done.After(m.seen) {
				continue
			}
			switch r.verb {
			case "create", "update", "patch":
				at = scaleLater(at, r.done)
			}
		}
		if at.IsZero() {
			at = m.seen
		}
		last = scaleLater(last, at)
		lag = max(lag, m.seen.Sub(at))
	}
	return last, lag
}

// scaleSatisfy meets every dependency of ns: both Services' pods ready, the
// three Jobs' pods succeeded (the Job controller then completes the Jobs).
func scaleSatisfy(ctx context.Context, ns string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	k := s.env.Kubelet()
	errs := make([]error, len(scaleServices)+len(keystoneJobs))
	var wg sync.WaitGroup
	for i, svc := range scaleServices {
		wg.Go(func() { errs[i] = k.SetPodRunning(ctx, ns, svc+"-0", fmt.Sprintf("10.20.0.%d", i+1), true) })
	}
	for i, j := range keystoneJobs {
		wg.Go(func() {
			_, err := k.CompleteJobPod(ctx, ns, j)
			errs[len(scaleServices)+i] = err
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func scaleLater(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// scalePlane finds the control plane's processes and endpoints.
type scalePlane struct {
	apiserver, etcd int
	etcdURL         string
}

func scalePlaneOf(b *testing.B) scalePlane {
	var p scalePlane
	data, err := os.ReadFile(filepath.Join(s.env.Dir, "pids"))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		pid, _ := strconv.Atoi(f[1])
		switch f[0] {
		case testenv.APIServer:
			p.apiserver = pid
		case testenv.Etcd:
			p.etcd = pid
		}
	}
	if p.apiserver == 0 || p.etcd == 0 {
		b.Fatalf("no kube-apiserver or etcd pid in %s/pids:\n%s", s.env.Dir, data)
	}
	var st struct {
		Ports struct {
			EtcdClient int `json:"etcdClient"`
		} `json:"ports"`
	}
	if data, err := os.ReadFile(filepath.Join(s.env.Dir, "testenv.json")); err == nil && json.Unmarshal(data, &st) == nil && st.Ports.EtcdClient > 0 {
		p.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", st.Ports.EtcdClient)
	}
	return p
}

// scaleSample is one reading of the control plane's state.
type scaleSample struct {
	watches    float64 // apiserver_longrunning_requests{verb="WATCH"}, summed
	heap       float64 // the API server's go_memstats_heap_inuse_bytes
	free       float64 // its heap pages free but not yet returned to the OS (heap_idle - heap_released): in VmRSS, held by no object
	goroutines float64
	fds        float64
	apiRSS     float64 // VmRSS, bytes
	etcdRSS    float64
	// etcd's own count of watchers: the API server's watch cache holds one
	// per resource, whatever its clients do.
	etcdWatchers float64
}

type scaleResult struct {
	from, to              time.Time
	secs                  float64
	apiCPU, etcdCPU       float64
	selfCPU               float64 // this process: the baseline's load generator
	agentsCPU             float64 // every agent process, when measured
	med                   scaleSample
	apiRSSMax, etcdRSSMax float64
	apiHWM, etcdHWM       float64
	etcdRanges            float64 // etcd range requests served in the window
	cacheReads, fallback  float64 // consistent LISTs served by the watch cache, and those it passed to etcd
	readBytes             float64 // the bodies of the API server's LIST and GET answers (apiserver_response_sizes)
}

// brief is a window's control plane in one clause.
func (r scaleResult) brief() string {
	mib := func(x float64) float64 { return x / (1 << 20) }
	return fmt.Sprintf("%.1f s: kube-apiserver CPU %.2f s (%.1f%% of a core), VmRSS median %.0f MiB (max %.0f, VmHWM %.0f), heap in use %.0f MiB, %.0f goroutines, %.0f fds; etcd CPU %.2f s, VmRSS %.0f MiB (VmHWM %.0f), %.0f range requests; LISTs from the watch cache %.0f (passed to etcd %.0f); LIST and GET answers %.1f KiB",
		r.secs, r.apiCPU, 100*r.apiCPU/r.secs, mib(r.med.apiRSS), mib(r.apiRSSMax), mib(r.apiHWM), mib(r.med.heap), r.med.goroutines, r.med.fds,
		r.etcdCPU, mib(r.med.etcdRSS), mib(r.etcdHWM), r.etcdRanges, r.cacheReads, r.fallback, r.readBytes/1024)
}

type scaleMeter struct {
	p       scalePlane
	from    time.Time
	api0    float64
	etcd0   float64
	self0   float64
	agents  []int
	agents0 float64
	ranges0 float64
	cache0  float64
	fall0   float64
	read0   float64
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	samples []scaleSample
	errs    []error
}

const scaleSampleEvery = 5 * time.Second

// begin starts a window: CPU times now, a sample every few seconds.
func (p scalePlane) begin(b *testing.B, agents []*agentProc) *scaleMeter {
	m := &scaleMeter{p: p, stop: make(chan struct{}), done: make(chan struct{})}
	for _, a := range agents {
		m.agents = append(m.agents, a.cmd.Process.Pid)
	}
	m.ranges0, m.cache0, m.fall0, m.read0 = p.counters()
	m.from = time.Now()
	m.api0, m.etcd0, m.self0 = scaleCPU(p.apiserver), scaleCPU(p.etcd), scaleCPU(os.Getpid())
	for _, pid := range m.agents {
		m.agents0 += scaleCPU(pid)
	}
	go func() {
		defer close(m.done)
		t := time.NewTicker(scaleSampleEvery)
		defer t.Stop()
		for {
			sm, err := p.sample()
			m.mu.Lock()
			if err != nil {
				m.errs = append(m.errs, err)
			} else {
				m.samples = append(m.samples, sm)
			}
			m.mu.Unlock()
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

func (m *scaleMeter) end(b *testing.B) scaleResult {
	r := scaleResult{from: m.from, to: time.Now()}
	r.apiCPU, r.etcdCPU, r.selfCPU = scaleCPU(m.p.apiserver)-m.api0, scaleCPU(m.p.etcd)-m.etcd0, scaleCPU(os.Getpid())-m.self0
	for _, pid := range m.agents {
		r.agentsCPU += scaleCPU(pid)
	}
	r.agentsCPU -= m.agents0
	r.secs = r.to.Sub(r.from).Seconds()
	close(m.stop)
	<-m.done
	r.apiHWM, r.etcdHWM = scaleStatus(m.p.apiserver, "VmHWM"), scaleStatus(m.p.etcd, "VmHWM")
	ranges, cache, fall, read := m.p.counters()
	r.etcdRanges, r.cacheReads, r.fallback, r.readBytes = ranges-m.ranges0, cache-m.cache0, fall-m.fall0, read-m.read0
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.samples) == 0 {
		b.Fatalf("no sample of the control plane in the window: %v", errors.Join(m.errs...))
	}
	if len(m.errs) > 0 {
		b.Logf("%d of %d samples failed: %v", len(m.errs), len(m.errs)+len(m.samples), m.errs[0])
	}
	med := func(f func(scaleSample) float64) float64 {
		v := make([]float64, len(m.samples))
		for i, sm := range m.samples {
			v[i] = f(sm)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	r.med = scaleSample{
		watches:      med(func(s scaleSample) float64 { return s.watches }),
		heap:         med(func(s scaleSample) float64 { return s.heap }),
		free:         med(func(s scaleSample) float64 { return s.free }),
		goroutines:   med(func(s scaleSample) float64 { return s.goroutines }),
		fds:          med(func(s scaleSample) float64 { return s.fds }),
		apiRSS:       med(func(s scaleSample) float64 { return s.apiRSS }),
		etcdRSS:      med(func(s scaleSample) float64 { return s.etcdRSS }),
		etcdWatchers: med(func(s scaleSample) float64 { return s.etcdWatchers }),
	}
	for _, sm := range m.samples {
		r.apiRSSMax, r.etcdRSSMax = max(r.apiRSSMax, sm.apiRSS), max(r.etcdRSSMax, sm.etcdRSS)
	}
	return r
}

// measure is a window of d (agents: their CPU is summed too).
func (p scalePlane) measure(b *testing.B, d time.Duration, agents []*agentProc) scaleResult {
	m := p.begin(b, agents)
	time.Sleep(d)
	return m.end(b)
}

func (p scalePlane) sample() (scaleSample, error) {
	sm := scaleSample{apiRSS: scaleStatus(p.apiserver, "VmRSS"), etcdRSS: scaleStatus(p.etcd, "VmRSS")}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := client().CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return sm, fmt.Errorf("apiserver /metrics: %w", err)
	}
	text := string(raw)
	sm.watches, _ = scaleMetric(text, "apiserver_longrunning_requests", `verb="WATCH"`)
	sm.heap, _ = scaleMetric(text, "go_memstats_heap_inuse_bytes")
	heapIdle, _ := scaleMetric(text, "go_memstats_heap_idle_bytes")
	released, _ := scaleMetric(text, "go_memstats_heap_released_bytes")
	sm.free = heapIdle - released
	sm.goroutines, _ = scaleMetric(text, "go_goroutines")
	sm.fds, _ = scaleMetric(text, "process_open_fds")
	if p.etcdURL != "" {
		if et, err := scaleGet(p.etcdURL + "/metrics"); err == nil {
			sm.etcdWatchers, _ = scaleMetric(et, "etcd_debugging_mvcc_watcher_total")
		}
	}
	return sm, nil
}

// counters reads, outside the CPU window: etcd's range requests so far
// (etcd 3.5+ and 3.4 name the counter differently), the API server's
// consistent reads served from its watch cache and passed to etcd, and
// the bytes of its LIST and GET answers (its own histogram of response
// sizes: resource requests only, so this benchmark's /metrics reads are
// not in it).
func (p scalePlane) counters() (ranges, cacheReads, fallback, readBytes float64) {
	if p.etcdURL != "" {
		if text, err := scaleGet(p.etcdURL + "/metrics"); err == nil {
			a, _ := scaleMetric(text, "etcd_mvcc_range_total")
			b, _ := scaleMetric(text, "etcd_debugging_mvcc_range_total")
			ranges = a + b
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if raw, err := client().CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx); err == nil {
		cacheReads, _ = scaleMetric(string(raw), "apiserver_watch_cache_consistent_read_total", `fallback="false"`, `success="true"`)
		fallback, _ = scaleMetric(string(raw), "apiserver_watch_cache_consistent_read_total", `fallback="true"`)
		lists, _ := scaleMetric(string(raw), "apiserver_response_sizes_sum", `verb="LIST"`)
		gets, _ := scaleMetric(string(raw), "apiserver_response_sizes_sum", `verb="GET"`)
		readBytes = lists + gets
	}
	return ranges, cacheReads, fallback, readBytes
}

// liveHeap is the API server's heap in use by live objects: the least of
// 3 readings of HeapAlloc, each just after a GC that the heap profile
// forces (gc=1). Heap in use from /metrics also holds the garbage of the
// last GC cycle, which for the pollers is most of it and moves with the
// moment sampled. Read outside the CPU windows: the GCs cost CPU.
func (p scalePlane) liveHeap(b *testing.B) float64 {
	least := math.Inf(1)
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		raw, err := client().CoreV1().RESTClient().Get().AbsPath("/debug/pprof/heap").Param("gc", "1").Param("debug", "1").DoRaw(ctx)
		cancel()
		if err != nil {
			b.Fatalf("kube-apiserver /debug/pprof/heap (served only with testenv.Options.Profiling, set under -bench): %v", err)
		}
		v, err := heapAlloc(raw)
		if err != nil {
			b.Fatalf("kube-apiserver /debug/pprof/heap: %v", err)
		}
		least = min(least, v)
	}
	return least
}

// heapAlloc reads "# HeapAlloc = N" from a Go heap profile in its text
// form (debug=1), where the runtime's MemStats follow the samples.
func heapAlloc(profile []byte) (float64, error) {
	for line := range strings.SplitSeq(string(profile), "\n") {
		v, ok := strings.CutPrefix(line, "# HeapAlloc = ")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("HeapAlloc %q: %w", v, err)
		}
		return float64(n), nil
	}
	return 0, errors.New("no \"# HeapAlloc = \" line: not a heap profile in text form (debug=1)")
}

func scaleGet(url string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), err
}

// scaleMetric sums the samples of a metric in Prometheus text format whose
// labels contain every one of match.
func scaleMetric(text, name string, match ...string) (float64, bool) {
	var sum float64
	found := false
	for line := range strings.SplitSeq(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		labels := ""
		if rest[0] == '{' {
			i := strings.LastIndexByte(rest, '}')
			if i < 0 {
				continue
			}
			labels, rest = rest[:i+1], rest[i+1:]
		}
		if slices.ContainsFunc(match, func(m string) bool { return !strings.Contains(labels, m) }) {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}

// scaleCPU is a process's utime+stime in seconds (0 when it is gone).
func scaleCPU(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return 0
	}
	f := strings.Fields(string(data[i+2:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

// scaleStatus is a "kB" field of /proc/PID/status, in bytes (0 when absent).
func scaleStatus(pid int, field string) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb * 1024
		}
	}
	return 0
}

func scaleServerVersion() string {
	v, err := client().Discovery().ServerVersion()
	if err != nil {
		return "?"
	}
	return v.GitVersion
}

// scaleReq is one request of the audit log.
type scaleReq struct {
	user, verb, uri           string
	ns, resource, subresource string
	name                      string
	at                        time.Time // received
	done                      time.Time // response complete
	code                      int
}

// scaleAudit reads the API server's audit log once and returns the requests
// received at or after since from users whose names begin with one of the
// prefixes, counted once each (by audit ID). The testenv keeps one file
// (--audit-log-maxsize); rotated files, should an API server with the
// default 100 MB rotation have written some, are read too.
func scaleAudit(b *testing.B, since time.Time, prefixes ...string) []scaleReq {
	files, err := filepath.Glob(filepath.Join(filepath.Dir(s.env.AuditLog), "audit*.log"))
	if err != nil || len(files) == 0 {
		b.Fatalf("no audit log next to %s: %v", s.env.AuditLog, err)
	}
	needles := make([][]byte, len(prefixes))
	for i, p := range prefixes {
		needles[i] = []byte(`"username":"` + p)
	}
	byID := map[string]*scaleReq{}
	for _, file := range files {
		if fi, err := os.Stat(file); err != nil || fi.ModTime().Before(since) {
			continue // written to last before the window
		}
		scaleAuditFile(b, file, since, needles, byID)
	}
	out := make([]scaleReq, 0, len(byID))
	for _, req := range byID {
		out = append(out, *req)
	}
	return out
}

func scaleAuditFile(b *testing.B, file string, since time.Time, needles [][]byte, byID map[string]*scaleReq) {
	f, err := os.Open(file)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		if !slices.ContainsFunc(needles, func(n []byte) bool { return bytes.Contains(line, n) }) {
			continue
		}
		var ev struct {
			AuditID    string `json:"auditID"`
			Stage      string `json:"stage"`
			RequestURI string `json:"requestURI"`
			Verb       string `json:"verb"`
			User       struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef *struct {
				Resource    string `json:"resource"`
				Namespace   string `json:"namespace"`
				Name        string `json:"name"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
			ResponseStatus *struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
			RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
			StageTimestamp           time.Time `json:"stageTimestamp"`
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			b.Fatalf("%s: %v", file, err)
		}
		if ev.RequestReceivedTimestamp.Before(since) {
			continue
		}
		req := byID[ev.AuditID]
		if req == nil {
			req = &scaleReq{user: ev.User.Username, verb: ev.Verb, uri: ev.RequestURI, at: ev.RequestReceivedTimestamp}
			if o := ev.ObjectRef; o != nil {
				req.ns, req.resource, req.subresource, req.name = o.Namespace, o.Resource, o.Subresource, o.Name
			}
			byID[ev.AuditID] = req
		}
		if ev.ResponseStatus != nil {
			req.code = ev.ResponseStatus.Code
		}
		if ev.Stage == "ResponseComplete" {
			req.done = ev.StageTimestamp
		}
	}
}

// scaleCount is the requests of one side in one window.
type scaleCount struct {
	total  int
	verbs  map[string]int
	errors map[int]int // status codes other than 2xx (a watch still open has none yet)
}

func (c scaleCount) String() string {
	var parts []string
	for _, v := range slices.Sorted(maps.Keys(c.verbs)) {
		parts = append(parts, fmt.Sprintf("%s %d", v, c.verbs[v]))
	}
	for _, code := range slices.Sorted(maps.Keys(c.errors)) {
		parts = append(parts, fmt.Sprintf("HTTP %d: %d", code, c.errors[code]))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func (c *scaleCount) add(o scaleCount) {
	c.total += o.total
	for v, n := range o.verbs {
		c.verbs[v] += n
	}
	for code, n := range o.errors {
		c.errors[code] += n
	}
}

// scaleResumes finds, for each user with the prefix (an agent), the first
// WATCH received between since and until that the API server answered
// 200: when that agent's one watch was back (discovery/turn.go: which of
// its lookups holds it can change while the server warms up, a refused
// WATCH handing the turn on). It returns how many came back in the
// busiest second, when the median and the last came back after the first,
// and how many came back.
func scaleResumes(reqs []scaleReq, prefix string, since, until time.Time) (busiest int, median, last time.Duration, n int) {
	first := map[string]time.Time{}
	for _, r := range reqs {
		if !strings.HasPrefix(r.user, prefix) || r.verb != "watch" || r.code != http.StatusOK || r.at.Before(since) || r.at.After(until) {
			continue
		}
		if t, ok := first[r.user]; !ok || r.at.Before(t) {
			first[r.user] = r.at
		}
	}
	if len(first) == 0 {
		return 0, 0, 0, 0
	}
	at := slices.SortedFunc(maps.Values(first), time.Time.Compare)
	j := 0
	for i := range at {
		for at[i].Sub(at[j]) >= time.Second {
			j++
		}
		busiest = max(busiest, i-j+1)
	}
	return busiest, at[len(at)/2].Sub(at[0]), at[len(at)-1].Sub(at[0]), len(at)
}

func countScale(reqs []scaleReq, prefix string, from, to time.Time) scaleCount {
	c := scaleCount{verbs: map[string]int{}, errors: map[int]int{}}
	for _, r := range reqs {
		if !strings.HasPrefix(r.user, prefix) || r.at.Before(from) || r.at.After(to) {
			continue
		}
		c.total++
		c.verbs[r.verb]++
		if r.code != 0 && (r.code < 200 || r.code > 299) {
			c.errors[r.code]++
		}
	}
	return c
}

// TestHeapAllocOfAProfile reads HeapAlloc from a real heap profile, this
// process's, written as kube-apiserver's /debug/pprof/heap?debug=1 writes
// it; with the GC off, HeapAlloc only grows, so the figure lies between
// the runtime's own readings before and after.
func TestHeapAllocOfAProfile(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	// A cycle finished before the GC was turned off may still be sweeping,
	// and sweeping lowers HeapAlloc; runtime.GC returns with the sweep done.
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var text, proto bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&text, 1); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	got, err := heapAlloc(text.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got < float64(before.HeapAlloc) || got > float64(after.HeapAlloc) {
		t.Errorf("HeapAlloc %.0f: want between %d and %d", got, before.HeapAlloc, after.HeapAlloc)
	}
	if err := pprof.Lookup("heap").WriteTo(&proto, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := heapAlloc(proto.Bytes()); err == nil || !strings.Contains(err.Error(), "debug=1") {
		t.Errorf("a profile in protobuf form: %v, want an error naming the text form", err)
	}
	if _, err := heapAlloc([]byte("# HeapAlloc = 12x\n")); err == nil || !strings.Contains(err.Error(), `"12x"`) {
		t.Errorf("a malformed HeapAlloc: %v, want an error quoting it", err)
	}
}
