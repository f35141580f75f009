package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
