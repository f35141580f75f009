package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
)

// BenchmarkBytesPerStart: the bytes a pod receives from the API server for
// one start with everything met (the keystone-api shape: 2 Services, 3
// Jobs), in a namespace that also holds 0, 50 or 100 other Jobs of
// helm-toolkit's size, as an OpenStack namespace does. The agent lists the
// namespace's Jobs (rows of a table, about 200 bytes each) where
// kubernetes-entrypoint GETs each Job it names (client-go 0.36: protobuf):
// the agent's bytes grow with the namespace's Jobs, the incumbent's do
// not. Counted on the wire by a TCP proxy both sides connect through:
// whole answers, TLS (its handshake included: each start is a new
// connection) and HTTP/2 framing, as the pod receives them.
func BenchmarkBytesPerStart(b *testing.B) {
	const starts = 10
	for _, others := range []int{0, 50, 100} {
		b.Run(fmt.Sprintf("jobs=%d", others), func(b *testing.B) {
			ns := keystoneShape(b, true)
			for _, j := range keystoneJobs {
				if _, err := s.env.Kubelet().CompleteJobPod(context.Background(), ns, j); err != nil {
					b.Fatal(err)
				}
			}
			for i := range others {
				mkChartJob(b, ns, fmt.Sprintf("svc%d-db-sync", i))
			}
			env := agentEnv(b, ns)
			// kubernetes-entrypoint's own ServiceAccount, as BenchmarkScale's.
			base := scaleBaseConfigs(scaleAccounts(b, ns, "entrypoint", 1, &rbacv1.Role{
				ObjectMeta: metav1.ObjectMeta{Name: "kubernetes-entrypoint"},
				Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"", "batch"}, Resources: []string{"endpoints", "jobs"}, Verbs: []string{"get"}}},
			}))[0]
			u, err := url.Parse(base.Host)
			if err != nil {
				b.Fatal(err)
			}
			p := newWireCounter(b, u.Host)
			base.Host = "https://" + p.addr()
			env = throughProxy(b, env, p.addr())
			// One start of each first: the controllers' writes settle.
			startAgent(b, env, append([]string{"wait", "--timeout", "1m"}, keystoneArgs()...)...).wantExit(0)
			p.settle()

			var agent, incumbent int64
			for range b.N {
				agent += p.count(func() {
					for range starts {
						startAgent(b, env, append([]string{"wait", "--timeout", "1m"}, keystoneArgs()...)...).wantExit(0)
					}
				})
				incumbent += p.count(func() {
					for range starts {
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						_, ok := scaleEntrypointPod(ctx, base, ns)
						cancel()
						if !ok {
							b.Fatal("kubernetes-entrypoint did not see its dependencies met")
						}
					}
				})
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(agent)/float64(starts*b.N), "agent-wire-bytes/start")
			b.ReportMetric(float64(incumbent)/float64(starts*b.N), "entrypoint-wire-bytes/start")
		})
	}
}

// BenchmarkBytesWhileWaiting: the bytes a waiting pod receives from the
// API server per minute, once synced, in a namespace whose other Jobs keep
// changing. The keystone-api shape (2 Services, 3 Jobs) waits for its Jobs,
// its Services up (the db_sync wait: a pod whose Services are unmet
// watches them, not the Jobs, discovery/turn.go), and 100 other Jobs of
// helm-toolkit's size change twice a second in all (an annotation
// patched). The agent's one watch of the namespace's Jobs receives every
// change as a table row; kubernetes-entrypoint GETs its 3 Jobs every 2 s
// whatever changes. 10 real `kolla-agent wait`
// processes and 10 kubernetes-entrypoint loops, each side through its own
// counting proxy, at the same time; the window opens once both have
// synced (their LISTs, first GETs and TLS handshakes are logged, not
// counted). Knob: KOLLA_AGENT_BYTES_WINDOW (default 30s).
func BenchmarkBytesWhileWaiting(b *testing.B) {
	const pods, others = 10, 100
	window := 30 * time.Second
	if v := os.Getenv("KOLLA_AGENT_BYTES_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 4*time.Second {
			b.Fatalf("KOLLA_AGENT_BYTES_WINDOW=%q: want a duration of 4s or more", v)
		}
		window = d
	}
	var agent, incumbent int64
	for range b.N {
		ns := keystoneShape(b, true)
		for i := range others {
			mkChartJob(b, ns, fmt.Sprintf("svc%d-db-sync", i))
		}
		// The Job controller's first writes (its pods, the Jobs' status)
		// are over before anything is counted: the churn is what changes.
		jobsQuiet(b, ns)
		env := agentEnv(b, ns)
		cfgs := scaleBaseConfigs(scaleAccounts(b, ns, "entrypoint", pods, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "kubernetes-entrypoint"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"", "batch"}, Resources: []string{"endpoints", "jobs"}, Verbs: []string{"get"}}},
		}))
		u, err := url.Parse(cfgs[0].Host)
		if err != nil {
			b.Fatal(err)
		}
		ap, ep := newWireCounter(b, u.Host), newWireCounter(b, u.Host)
		env = throughProxy(b, env, ap.addr())

		ctx, cancel := context.WithCancel(context.Background())
		b.Cleanup(cancel)
		events := jobEvents(ctx, b, ns)
		churnErr := make(chan error, 1)
		go func() { churnErr <- churnJobs(ctx, ns, others) }()

		agents := make([]*agentProc, pods)
		for i := range agents {
			agents[i] = startAgent(b, env, append([]string{"wait", "--timeout", "10m"}, keystoneArgs()...)...)
		}
		gets := make([]atomic.Int64, pods)
		var failed atomic.Int64 // GETs not answered 200
		var loops sync.WaitGroup
		for i, cfg := range cfgs {
			cfg.Host = "https://" + ep.addr()
			cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
				return getCounter{rt, &gets[i], &failed}
			}
			loops.Go(func() { scaleEntrypointPod(ctx, cfg, ns) })
		}
		for _, a := range agents {
			for _, j := range keystoneJobs {
				a.waitLog("dependency=job:" + j + " state=waiting")
			}
		}
		for i := range gets {
			for deadline := time.Now().Add(time.Minute); gets[i].Load() < 5; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					b.Fatalf("kubernetes-entrypoint loop %d made %d GETs in a minute", i, gets[i].Load())
				}
			}
		}
		// The agents' WATCHes follow their LISTs' answers: let them start.
		time.Sleep(time.Second)

		a0, e0, ev0 := ap.bytes.Load(), ep.bytes.Load(), events.Load()
		g0 := make([]int64, pods)
		for i := range gets {
			g0[i] = gets[i].Load()
		}
		start := time.Now()
		time.Sleep(window)
		a1, e1, ev1 := ap.bytes.Load(), ep.bytes.Load(), events.Load()
		elapsed := time.Since(start)
		for _, a := range agents {
			a.running()
		}
		if n := failed.Load(); n > 0 {
			b.Fatalf("kubernetes-entrypoint: %d GETs not answered 200", n)
		}
		// A loop checks its 3 Jobs every 2 s (plus the GET's time); its
		// Services, met by their first GET, no more.
		want := int64(3 * (int(elapsed/(2*time.Second)) - 1))
		for i := range gets {
			if n := gets[i].Load() - g0[i]; n < want {
				b.Fatalf("kubernetes-entrypoint loop %d made %d GETs in %v, want %d or more", i, n, elapsed.Round(time.Millisecond), want)
			}
		}
		cancel()
		loops.Wait()
		if err := <-churnErr; err != nil {
			b.Fatal(err)
		}
		b.Logf("up to the window (sync), per pod: agent %d B, kubernetes-entrypoint %d B; window %v: %d Job events in the namespace",
			a0/pods, e0/pods, elapsed.Round(time.Millisecond), ev1-ev0)
		agent += int64(float64(a1-a0) / elapsed.Minutes())
		incumbent += int64(float64(e1-e0) / elapsed.Minutes())
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(agent)/float64(pods*b.N), "agent-wire-bytes/pod-min")
	b.ReportMetric(float64(incumbent)/float64(pods*b.N), "entrypoint-wire-bytes/pod-min")
}

// getCounter counts a kubernetes-entrypoint loop's requests, and those not
// answered 200.
type getCounter struct {
	rt           http.RoundTripper
	gets, failed *atomic.Int64
}

func (g getCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := g.rt.RoundTrip(r)
	g.gets.Add(1)
	if err != nil || resp.StatusCode != http.StatusOK {
		g.failed.Add(1)
	}
	return resp, err
}

// churnJobs patches an annotation of one of the Jobs svcN-db-sync (N <
// others), at random, twice a second until ctx ends: changes a watch of
// the namespace's Jobs receives, none a waiting pod's own.
func churnJobs(ctx context.Context, ns string, others int) error {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"bench.kolla-agent.io/churn":"%d"}}}`, n)
		name := fmt.Sprintf("svc%d-db-sync", rand.IntN(others))
		if _, err := client().BatchV1().Jobs(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "churn"}); err != nil && ctx.Err() == nil {
			return fmt.Errorf("churn: %s: %w", name, err)
		}
	}
}

// jobsQuiet waits until no Job of ns has changed for 3 s.
func jobsQuiet(b *testing.B, ns string) {
	var last string
	quiet := time.Now()
	for deadline := time.Now().Add(2 * time.Minute); time.Since(quiet) < 3*time.Second; time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("the Jobs of %s still changing after 2 minutes", ns)
		}
		l, err := client().BatchV1().Jobs(ns).List(ctxT(b), metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		var rvs strings.Builder
		for _, j := range l.Items {
			rvs.WriteString(j.Name + "=" + j.ResourceVersion + " ")
		}
		if rvs.String() != last {
			last, quiet = rvs.String(), time.Now()
		}
	}
}

// jobEvents counts the events of a watch of ns's Jobs (the admin's, not
// counted on the wire): what a namespace-wide watch receives.
func jobEvents(ctx context.Context, b *testing.B, ns string) *atomic.Int64 {
	w, err := client().BatchV1().Jobs(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	go func() {
		defer w.Stop()
		for e := range w.ResultChan() {
			if e.Type == watch.Modified || e.Type == watch.Added || e.Type == watch.Deleted {
				n.Add(1)
			}
		}
	}()
	return &n
}

// wireCounter is a TCP proxy to the API server that counts the bytes the
// server sends to the clients connected through it.
type wireCounter struct {
	ln     net.Listener
	target string
	bytes  atomic.Int64
	open   sync.WaitGroup
}

func newWireCounter(b *testing.B, target string) *wireCounter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	p := &wireCounter{ln: ln, target: target}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.open.Add(1)
			go func() {
				io.Copy(up, c)
				up.Close()
			}()
			go func() {
				defer p.open.Done()
				io.Copy(countingWriter{c, &p.bytes}, up)
				c.Close()
			}()
		}
	}()
	return p
}

func (p *wireCounter) addr() string { return p.ln.Addr().String() }

// settle waits until every connection through the proxy is closed.
func (p *wireCounter) settle() { p.open.Wait() }

// count is the bytes sent to the clients while fn ran, their connections
// closed.
func (p *wireCounter) count(fn func()) int64 {
	p.settle()
	before := p.bytes.Load()
	fn()
	p.settle()
	return p.bytes.Load() - before
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// throughProxy is env with its kubeconfig's server the proxy at addr.
func throughProxy(b *testing.B, env []string, addr string) []string {
	out := make([]string, 0, len(env))
	for _, e := range env {
		kc, ok := strings.CutPrefix(e, "KUBECONFIG=")
		if !ok {
			out = append(out, e)
			continue
		}
		cfg, err := clientcmd.LoadFromFile(kc)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range cfg.Clusters {
			c.Server = "https://" + addr
		}
		path := filepath.Join(b.TempDir(), "kubeconfig")
		if err := clientcmd.WriteToFile(*cfg, path); err != nil {
			b.Fatal(err)
		}
		out = append(out, "KUBECONFIG="+path)
	}
	return out
}
