package discovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kolla-agent/kolla-agent/internal/poll"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// syncBuffer is a log sink safe for the waiter's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func mustParse(t *testing.T, s string) Dependency {
	t.Helper()
	d, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// freeAddr returns a loopback address nobody listens on (yet).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// eventually polls cond with a deadline: synchronisation without sleeps.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 10*time.Second, what, cond)
}

func stateOf(w *Waiter, i int) Observation { return w.Results()[i].Observation }

// Each local kind: not there -> still waiting (and saying why); appears ->
// the wait ends with nil.
func TestWaitLocalDependencies(t *testing.T) {
	dir := t.TempDir()
	tcpAddr := freeAddr(t)
	sock := filepath.Join(dir, "s.sock")
	file := filepath.Join(dir, "ready")
	var up atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !up.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	deps := []Dependency{
		mustParse(t, "tcp:"+tcpAddr),
		mustParse(t, "file:"+file),
		mustParse(t, "socket:"+sock),
		mustParse(t, srv.URL+"/healthz"),
	}
	var logs syncBuffer
	reg := prometheus.NewRegistry()
	w, err := New(Config{Dependencies: deps, Timeout: 30 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()

	want := []string{"connection refused", "does not exist", "does not exist", "HTTP 503"}
	for i, s := range want {
		eventually(t, deps[i].String()+" waiting", func() bool {
			o := stateOf(w, i)
			return o.State == Waiting && strings.Contains(o.Detail, s)
		})
	}
	if v := testutil.ToFloat64(w.metrics.waiting.WithLabelValues(deps[0].String(), "tcp")); v != 1 {
		t.Errorf("waiting metric = %v while waiting", v)
	}

	l, err := net.Listen("tcp", tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go acceptAll(l)
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	go acceptAll(ul)
	up.Store(true)

	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after every dependency came up")
	}
	for i, r := range w.Results() {
		if r.State != Ready {
			t.Errorf("dependency %d: %+v", i, r)
		}
	}
	for _, d := range deps {
		if v := testutil.ToFloat64(w.metrics.resolved.WithLabelValues(d.String(), string(d.Kind))); v != 1 {
			t.Errorf("%s: resolved metric = %v", d, v)
		}
		if v := testutil.ToFloat64(w.metrics.waiting.WithLabelValues(d.String(), string(d.Kind))); v != 0 {
			t.Errorf("%s: waiting metric = %v", d, v)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "kolla_agent_dependency_wait_seconds"); err != nil || n != len(deps) {
		t.Errorf("wait_seconds series: %d, %v", n, err)
	}
}

func acceptAll(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// A dependency that stays the same for many retries is logged once, not once
// per retry. The waits between looks are on a fake clock that the test steps
// once the waiter sleeps, so the looks are counted: a loaded machine that
// manages one look in the time given is not taken for one line over many.
func TestLogOncePerStateChange(t *testing.T) {
	const looks = 5
	var logs syncBuffer
	d := mustParse(t, "tcp:"+freeAddr(t))
	clk := clocktesting.NewFakeClock(time.Now())
	w, err := New(Config{Dependencies: []Dependency{d}, Timeout: time.Minute, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for i := 1; i <= looks; i++ {
		// The waiter sleeps on the clock after each look: after look i.
		eventually(t, fmt.Sprintf("the wait after look %d", i), clk.HasWaiters)
		if i < looks {
			clk.Step(time.Minute) // past any wait of the backoff
		}
	}
	cancel()
	err = <-done
	if n := strings.Count(logs.String(), "connection refused"); n != 1 {
		t.Errorf("%d log lines about the refused connection in %d looks, want 1:\n%s", n, looks, logs.String())
	}
	if err == nil || !strings.Contains(err.Error(), "interrupted") || !strings.Contains(err.Error(), d.String()+" (waiting: ") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Run: %v; want an interrupted wait naming the dependency and its last state", err)
	}
}

// A dependency's own timeout ends the wait before the overall one.
func TestPerDependencyTimeout(t *testing.T) {
	d := mustParse(t, "file:"+filepath.Join(t.TempDir(), "never"))
	d.Timeout = 200 * time.Millisecond
	w, err := New(Config{Dependencies: []Dependency{d}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = w.Run(context.Background())
	if !errors.Is(err, ErrTimeout) || time.Since(start) > 30*time.Second {
		t.Fatalf("Run: %v after %v", err, time.Since(start))
	}
}

func TestInterrupted(t *testing.T) {
	d := mustParse(t, "file:"+filepath.Join(t.TempDir(), "never"))
	w, err := New(Config{Dependencies: []Dependency{d}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		eventually(t, "first look", func() bool { return strings.Contains(stateOf(w, 0).Detail, "does not exist") })
		cancel()
	}()
	err = w.Run(ctx)
	if err == nil || errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("Run: %v, want interrupted", err)
	}
}

func TestHTTPExpectStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	}))
	defer srv.Close()
	d := mustParse(t, srv.URL)
	// 302 is up by default...
	w, err := New(Config{Dependencies: []Dependency{d}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); err != nil {
		t.Fatalf("302 with default expectations: %v", err)
	}
	// ...but not when only 200 is expected.
	d.ExpectStatus = []int{200}
	w, err = New(Config{Dependencies: []Dependency{d}, Timeout: 2 * time.Second}) // the first look's answer in by then, loaded or not
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "HTTP 302") {
		t.Fatalf("302 with expectStatus [200]: %v", err)
	}
}

// New refuses what could never be checked, before anything runs.
func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"dns without resolver", Config{Dependencies: []Dependency{{Kind: KindDNS, Name: "a"}}}, "no DNS resolver"},
		{"api without client", Config{Dependencies: []Dependency{{Kind: KindService, Name: "a"}}, Namespace: "x"}, "needs the Kubernetes API"},
		{"container without pod", Config{Dependencies: []Dependency{{Kind: KindContainer, Name: "a"}}, Namespace: "x", Kube: &Kube{}}, "POD_NAME"},
		{"negative", Config{Timeout: -1}, "negative timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
