package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// BenchmarkBootstrapColdStart: N replicas start at once in create mode and
// wait for one bootstrap Job; after a fixed wait the Job completes. Reported
// from the audit log: the Job creations that succeeded and those answered
// AlreadyExists, all the agents' requests, and the time from the Job
// controller's write of Complete to the last replica's exit. The baseline,
// in the same run and another namespace, is the kubernetes-entrypoint
// pattern: N pods each GET the Job every 2 s until it has succeeded (the
// Job made by a Helm hook, not by them).
func BenchmarkBootstrapColdStart(b *testing.B) {
	for _, n := range []int{20, 100} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			for range b.N {
				benchColdStart(b, n, 10*time.Second)
			}
		})
	}
}

func benchColdStart(b *testing.B, n int, wait time.Duration) {
	ns := namespace(b)
	env := bootstrapEnv(b, ns, "create")
	cfg := bootstrapFiles(b, ns, "  mode: create\n  name: keystone-db-sync\n  command: keystone-manage db_sync\n  timeout: 5m\n", "")
	pollNS := namespace(b)
	mkJob(b, pollNS, "keystone-db-sync", nil)
	pc := pollerClient(b, pollNS)

	start := time.Now()
	agents := make([]*agentProc, n)
	for i := range agents {
		agents[i] = startAgent(b, withEnv(env, fmt.Sprintf("POD_NAME=keystone-api-%d", i)), "--config", cfg, "init")
	}
	pctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var polled []time.Time
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// Pods start over a moment, not in step: spread the pollers'
			// phases over the 2 s period.
			time.Sleep(time.Duration(i) * 2 * time.Second / time.Duration(n))
			if seen, ok := pollJob(pctx, pc, pollNS, "keystone-db-sync"); ok {
				mu.Lock()
				polled = append(polled, seen)
				mu.Unlock()
			}
		})
	}
	name := waitJobs(b, ns, "keystone-db-sync", 1)[0]
	for _, a := range agents {
		a.waitLog("waiting for job " + name)
	}
	// The window opens once every replica's WATCH is in the audit log: a
	// replica logs that it waits a moment before its WATCH gets there, and
	// those late WATCHes are its start, not requests made while waiting.
	jobWatchesOpen(b, ns, start, n)
	waitStart := time.Now()
	time.Sleep(wait)
	waitEnd := time.Now()
	agentDone := jobCompleteAt(b, ns, name)
	pollDone := jobCompleteAt(b, pollNS, "keystone-db-sync")
	if _, err := s.env.Kubelet().CompleteJobPod(context.Background(), ns, name); err != nil {
		b.Fatal(err)
	}
	if _, err := s.env.Kubelet().CompleteJobPod(context.Background(), pollNS, "keystone-db-sync"); err != nil {
		b.Fatal(err)
	}
	t0, p0 := <-agentDone, <-pollDone
	var last time.Time
	for _, a := range agents {
		if code := a.exit(2 * time.Minute); code != 0 {
			b.Fatalf("agent exit %d:\n%s", code, a.out.String())
		}
		if a.exited.After(last) {
			last = a.exited
		}
	}
	wg.Wait()
	end := time.Now()
	var pollLast time.Time
	for _, t := range polled {
		if t.After(pollLast) {
			pollLast = t
		}
	}
	codes := agentCreates(b, ns, start)
	total := func(ns string, from, to time.Time) int {
		reqs, err := s.env.Requests("system:serviceaccount:"+ns+":kolla-agent", from)
		if err != nil {
			b.Fatal(err)
		}
		c := 0
		for _, r := range reqs {
			if !r.Time.After(to) && !strings.Contains(r.RequestURI, "/events") {
				c++
			}
		}
		return c
	}
	perMin := func(ns string) float64 {
		return float64(total(ns, waitStart, waitEnd)) / waitEnd.Sub(waitStart).Minutes()
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(codes[201]), "creates")
	b.ReportMetric(float64(codes[409]), "already-exists")
	b.ReportMetric(float64(total(ns, start, end)), "agent-requests")
	b.ReportMetric(float64(total(pollNS, start, end)), "poller-requests")
	b.ReportMetric(perMin(ns), "agent-waiting-req/min")
	b.ReportMetric(perMin(pollNS), "poller-waiting-req/min")
	b.ReportMetric(ms(last.Sub(t0)), "agent-complete-to-last-ms")
	b.ReportMetric(ms(pollLast.Sub(p0)), "poller-complete-to-last-ms")
}

// jobWatchesOpen waits until the audit log holds n open WATCHes of ns's
// Jobs by its agents.
func jobWatchesOpen(b *testing.B, ns string, since time.Time, n int) {
	eventually(b, fmt.Sprintf("%d open Job WATCHes in the audit log", n), func() bool {
		open := 0
		for _, r := range auditOf(b, ns, since) {
			if r.Verb == "watch" && strings.Contains(r.RequestURI, "/jobs") && !r.Complete {
				open++
			}
		}
		return open >= n
	})
}

// pollJob is one kubernetes-entrypoint pod: GET the Job every 2 s until it
// has succeeded; it returns when it saw that.
func pollJob(ctx context.Context, c kubernetes.Interface, ns, name string) (time.Time, bool) {
	for {
		if j, err := c.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{}); err == nil && j.Status.Succeeded > 0 {
			return time.Now(), true
		}
		select {
		case <-ctx.Done():
			return time.Time{}, false
		case <-time.After(2 * time.Second):
		}
	}
}
