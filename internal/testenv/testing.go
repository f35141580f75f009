package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Main runs a test package against one control plane shared by its tests:
// call it from TestMain. setup receives the Env before any test runs (store
// it in a package variable). The Env's directory is removed after a passing
// run and kept, with the component logs, after a failing one.
func Main(m *testing.M, setup func(*Env)) {
	flag.Parse() // for testing.Verbose; m.Run does not parse twice
	os.Exit(runWith(m, Options{}, setup, func(code int) int { return code }))
}

// runWith starts an Env, runs the tests and stops the Env (runGuard: also
// when go test or a signal is about to end the binary); check then has the
// last word on the exit code (MainNode's host check).
func runWith(m *testing.M, o Options, setup func(*Env), check func(code int) int) int {
	dir, err := os.MkdirTemp("", "kolla-agent-testenv-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return check(1)
	}
	start := time.Now()
	g := guardRun()
	env, err := StartWith(dir, o)
	if err != nil {
		g.disarm()
		fmt.Fprintf(os.Stderr, "%v\n(files kept in %s)\n", err, dir)
		return check(1)
	}
	if testing.Verbose() {
		what := "control plane"
		if env.node {
			what += " and node"
		}
		fmt.Fprintf(os.Stderr, "testenv: %s started in %.1fs in %s\n", what, time.Since(start).Seconds(), dir)
	}
	// Always: which etcd ran is what a failure's reader asks first.
	fmt.Fprintf(os.Stderr, "testenv: %s\n", env.Etcd)
	g.armed(func(code int) int { return check(finish(env, dir, code)) })
	setup(env)
	g.testsStart()
	code := m.Run()
	g.disarm()
	return check(finish(env, dir, code))
}

// finish stops the Env and removes its directory after a passing run; after
// a failing one it keeps the logs.
func finish(env *Env, dir string, code int) int {
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code != 0 {
		// The logs are for the reader; the images and containerd's store
		// (gigabytes with the slice's images) are not, and a few failed
		// runs would fill the disk (the kubelet then evicts pods).
		tars, _ := filepath.Glob(filepath.Join(dir, "*.tar"))
		for _, p := range append(tars, env.nodePath("containerd/root"), env.nodePath("images")) {
			os.RemoveAll(p)
		}
		fmt.Fprintf(os.Stderr, "testenv: logs kept in %s (the images removed)\n", dir)
		return code
	}
	os.RemoveAll(dir)
	return code
}

// Namespace creates a namespace for one test, named after it, and deletes it
// when the test ends.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	prefix := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(t.Name()))
	if len(prefix) > 40 {
		prefix = prefix[:40]
	}
	if prefix = strings.Trim(prefix, "-"); prefix == "" {
		prefix = "test"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("testenv: create namespace: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("testenv: delete namespace %s: %v", ns.Name, err)
		}
	})
	return ns.Name
}

// MainNode is Main with a real node (Options{Node: true}). Where no node can
// run here (NodeMissing: not root, or not built), the tests run with a nil
// Env and each that needs one skips saying why (NeedNode). After the tests
// it checks, independently of Stop's own check, that the host is as it was
// before the node started (a node a killed run abandoned is brought down
// before that record).
func MainNode(m *testing.M, setup func(*Env)) {
	flag.Parse()
	if why := NodeMissing(); why != "" {
		fmt.Fprintf(os.Stderr, "testenv: no node: %s; the tests that need one skip\n", why)
		os.Exit(m.Run())
	}
	if err := BringDownAbandoned(); err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		os.Exit(1)
	}
	before, err := snapshotHost()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		os.Exit(1)
	}
	os.Exit(runWith(m, Options{Node: true}, setup, func(code int) int {
		after, err := snapshotHost()
		if err != nil {
			fmt.Fprintln(os.Stderr, "testenv:", err)
			code = 1
		}
		if d := before.diff(after); len(d) > 0 {
			fmt.Fprintf(os.Stderr, "testenv: the node left the host changed:\n  %s\n", strings.Join(d, "\n  "))
			code = 1
		}
		return code
	}))
}

// runGuard ends the run through the Env's teardown when go test is about
// to end the binary, or when the binary is told to stop (SIGINT, SIGTERM: a
// CI job cancelled). go test's ends, the -test.timeout panic and the go
// command's kill, exit without a teardown: the components die with the
// binary, but the node's host state (mounts, iptables rules, sysctls)
// stays until the next run brings the abandoned node down. It fires a
// margin before the earlier of the two: the kill comes -test.timeout plus
// its wait delay (a minute, or a tenth of the timeout when longer) after
// the binary started, the panic -test.timeout after m.Run starts
// (testsStart). With -test.bench or -test.fuzz there is neither (the
// alarm covers no benchmark or fuzzing, and the go command sets no kill),
// and only the signals count. A run whose tests end within the margin of
// the timeout fails where go test would pass it; the margin is a minute
// at most. The goroutines' stacks are printed first, as the panic would.
type runGuard struct {
	timeout time.Duration // 0: no deadline
	began   time.Time     // the binary's start
	timer   *time.Timer
	sigs    chan os.Signal

	mu    sync.Mutex
	end   func(code int) int // nil until the Env runs
	why   string             // a stop asked before then
	ended bool
}

// guardRun starts catching SIGINT and SIGTERM, until the process exits: one
// that comes before the Env runs (armed) ends the run once it does.
func guardRun() *runGuard {
	g := &runGuard{sigs: make(chan os.Signal, 1)}
	if flagSet("test.fuzzworker") {
		return g // its coordinator's: signals and all
	}
	if flagSet("test.bench") || flagSet("test.fuzz") {
		return g.listen()
	}
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, ok := f.Value.(flag.Getter).Get().(time.Duration); ok && d > 0 {
			began, ok := startedAt(os.Getpid())
			if !ok {
				began = time.Now()
			}
			g.timeout, g.began = d, began
		}
	}
	return g.listen()
}

func (g *runGuard) listen() *runGuard {
	signal.Notify(g.sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for sig := range g.sigs {
			g.stop("told to stop (" + sig.String() + ")")
		}
	}()
	return g
}

// Benchmarking: this test binary runs benchmarks (-test.bench set; flags
// parsed).
func Benchmarking() bool { return flagSet("test.bench") }

// flagSet: the testing flag name is set to something.
func flagSet(name string) bool {
	f := flag.Lookup(name)
	return f != nil && f.Value.String() != "" && f.Value.String() != "false"
}

// fireAt is when a run that began at began, whose tests start at tests
// (zero: not yet), is stopped with -test.timeout timeout, and what ends it
// then: a margin (what Stop needs: a few seconds' grace per component)
// before go test's kill or its -timeout panic, the earlier.
func fireAt(began, tests time.Time, timeout time.Duration) (time.Time, string) {
	margin := min(timeout/4, time.Minute)
	at, what := began.Add(timeout+max(time.Minute, timeout/10)), "the go command kills"
	if !tests.IsZero() && tests.Add(timeout).Before(at) {
		at, what = tests.Add(timeout), "the -timeout panic ends"
	}
	return at.Add(-margin), fmt.Sprintf("go test's -timeout is %s: %s this binary in %s", timeout, what, margin.Round(time.Second))
}

func (g *runGuard) arm(tests time.Time) {
	at, why := fireAt(g.began, tests, g.timeout)
	if g.timer == nil {
		g.timer = time.AfterFunc(time.Until(at), func() { g.stop(why) })
		return
	}
	if g.timer.Stop() {
		g.timer = time.AfterFunc(time.Until(at), func() { g.stop(why) })
	}
}

// armed: the Env runs, and end tears it down. The kill's deadline counts
// from now on; a stop asked meanwhile happens now.
func (g *runGuard) armed(end func(code int) int) {
	g.mu.Lock()
	g.end = end
	why := g.why
	if g.timeout > 0 {
		g.arm(time.Time{})
	}
	g.mu.Unlock()
	if why != "" {
		g.stop(why)
	}
}

// testsStart is called just before m.Run: its alarm counts from now.
func (g *runGuard) testsStart() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.timer != nil {
		g.arm(time.Now())
	}
}

func (g *runGuard) stop(why string) {
	g.mu.Lock()
	if g.ended {
		g.mu.Unlock()
		return // the teardown runs already
	}
	if g.end == nil {
		g.why = why // the Env is starting: ended once it runs
		g.mu.Unlock()
		return
	}
	g.ended = true
	end := g.end
	g.mu.Unlock()
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	fmt.Fprintf(os.Stderr, "testenv: %s; the goroutines:\n%s\ntestenv: %s: stopping the test environment before the binary ends without its teardown\n", why, buf, why)
	os.Exit(end(1))
}

// disarm is called once the tests are done, before the teardown; if a
// stop's teardown has begun, it waits for its exit. Signals stay caught:
// one now does not cut the teardown short.
func (g *runGuard) disarm() {
	g.mu.Lock()
	if g.ended {
		g.mu.Unlock()
		select {}
	}
	g.ended = true
	if g.timer != nil {
		g.timer.Stop()
	}
	g.mu.Unlock()
}

// NeedNode skips the test, saying why, when there is no node.
func NeedNode(t testing.TB, e *Env) {
	t.Helper()
	if e == nil || !e.node {
		why := NodeMissing()
		if why == "" {
			why = "the test environment runs no node"
		}
		t.Skip("needs a real node: " + why)
	}
}

// HostSnapshot is the host state a node changes, recorded by SnapshotHost:
// what a test of `hack/testenv down` compares with.
type HostSnapshot struct{ s hostState }

// SnapshotHost records the host state a node changes.
func SnapshotHost() (HostSnapshot, error) {
	s, err := snapshotHost()
	return HostSnapshot{s}, err
}

// Diff lists what differs now from the snapshot, one line a difference.
func (h HostSnapshot) Diff() ([]string, error) {
	now, err := snapshotHost()
	if err != nil {
		return nil, err
	}
	return h.s.diff(now), nil
}
