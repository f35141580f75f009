package main

// End-to-end tests: the built binary, run as a separate process with a
// ServiceAccount token bound to examples/rbac, against a real etcd,
// kube-apiserver, kube-controller-manager and CoreDNS (internal/testenv).

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/go-logr/logr"

	"github.com/kolla-agent/kolla-agent/internal/proc"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

// suite is what TestMain sets up once for the package's tests.
type suite struct {
	bin      string
	probeBin string // kolla-agent-probe
	dir      string // removed when the tests end
	env      *testenv.Env
}

var s suite // set once in TestMain, read-only after

func TestMain(m *testing.M) {
	// client-go's own logs in this process (the tests' watches, cancelled at
	// the end of each test) are noise here; the agent's logs are the subject.
	klog.SetLogger(logr.Discard())
	// Services the tests start themselves must begin with SIGHUP at its
	// default even when `go test` runs with it ignored (nohup): a signal
	// ignored at exec stays ignored, and sh may not trap it. One the process
	// handles is reset in its children.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	flag.Parse() // setup asks whether benchmarks run, before m.Run would parse
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// setup builds the agent and starts the control plane; both are removed when
// the tests end (testenv.Main would exit before the binary could be).
func setup(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "kolla-agent-e2e-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	s.dir = dir
	s.bin = filepath.Join(dir, "kolla-agent")
	s.probeBin = filepath.Join(dir, "kolla-agent-probe")
	for bin, pkg := range map[string]string{s.bin: ".", s.probeBin: "../kolla-agent-probe"} {
		build := exec.Command("go", "build", "-o", bin, pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("build %s: %v\n%s", pkg, err, out)
		}
	}
	// A benchmark run reads kube-apiserver's live heap from its
	// /debug/pprof (BenchmarkScale); the tests run it as clusters do.
	env, err := testenv.StartWith(filepath.Join(dir, "env"), testenv.Options{Profiling: testenv.Benchmarking()})
	if err != nil {
		return 0, err
	}
	defer env.Stop()
	s.env = env
	return m.Run(), nil
}

func client() kubernetes.Interface { return s.env.Client() }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// namespace creates a fresh namespace for one test.
func namespace(t testing.TB) string { return s.env.Namespace(t) }

// agent is one kolla-agent process under test.
type agentProc struct {
	t      testing.TB
	cmd    *exec.Cmd
	out    syncBuffer
	done   chan struct{}
	code   int
	exited time.Time
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// agentEnv is the environment of an agent in namespace ns, authenticated as
// the kolla-agent ServiceAccount of examples/rbac (plus extra rules).
func agentEnv(t testing.TB, ns string, extra ...rbacv1.PolicyRule) []string {
	t.Helper()
	return agentEnvWith(t, ns, nil, extra...)
}

// agentEnvWith is agentEnv with more of the RBAC examples applied.
func agentEnvWith(t testing.TB, ns string, manifests []string, extra ...rbacv1.PolicyRule) []string {
	t.Helper()
	kc, err := s.env.AgentKubeconfigWith(ctxT(t), ns, manifests, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"KUBECONFIG=" + kc,
		"NAMESPACE=" + ns,
		"KOLLA_AGENT_DNS_SERVER=" + s.env.DNSAddr,
		"CLUSTER_DOMAIN=" + s.env.ClusterDomain,
	}
}

func startAgent(t testing.TB, env []string, args ...string) *agentProc {
	t.Helper()
	return startAgentCmd(t, exec.Command(s.bin, args...), env)
}

// diesWithTest makes c killed when the test binary dies, a -timeout panic
// included: an agent in sidecar mode, or a service, would otherwise run on
// and write into the next run's machine.
func diesWithTest(c *exec.Cmd) *exec.Cmd {
	if c.SysProcAttr == nil {
		c.SysProcAttr = &syscall.SysProcAttr{}
	}
	c.SysProcAttr.Pdeathsig = syscall.SIGKILL
	return c
}

// startAgentCmd starts the agent through cmd (a wrapper such as unshare).
func startAgentCmd(t testing.TB, cmd *exec.Cmd, env []string) *agentProc {
	t.Helper()
	diesWithTest(cmd)
	a := &agentProc{t: t, done: make(chan struct{}), cmd: cmd}
	a.cmd.Env = env
	// A service orphaned by a killed agent keeps the output pipe open: do
	// not wait for it after the agent itself has gone.
	a.cmd.WaitDelay = 5 * time.Second
	a.cmd.Stdout = &a.out
	a.cmd.Stderr = &a.out
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := a.cmd.Wait()
		a.exited = time.Now()
		var ee *exec.ExitError
		switch {
		case err == nil:
			a.code = 0
		case errors.As(err, &ee):
			a.code = ee.ExitCode()
			// Killed by a signal (the agent exec'd a service that died of
			// one): report it as the container runtime does, 128+N.
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				a.code = 128 + int(ws.Signal())
			}
		default:
			a.code = -1
		}
		close(a.done)
	}()
	t.Cleanup(func() {
		select {
		case <-a.done:
		default:
			// The service runs in its own process group: a killed agent
			// would leave it running (as it does in a pod only until the
			// container's PID namespace goes). Stop it with the agent.
			for _, c := range proc.Children(a.cmd.Process.Pid) {
				syscall.Kill(-c, syscall.SIGKILL)
				syscall.Kill(c, syscall.SIGKILL)
			}
			a.cmd.Process.Kill()
			<-a.done
		}
		if t.Failed() {
			t.Logf("agent output:\n%s", a.out.String())
		}
		if strings.Contains(a.out.String(), "panic:") {
			t.Errorf("the agent panicked:\n%s", a.out.String())
		}
	})
	return a
}

// waitLog waits until the agent has logged s (it is still running then, or
// the test fails).
func (a *agentProc) waitLog(s string) {
	a.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(a.out.String(), s) {
		select {
		case <-a.done:
			a.t.Fatalf("agent exited (code %d) before logging %q:\n%s", a.code, s, a.out.String())
		default:
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("agent did not log %q:\n%s", s, a.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running fails the test if the agent has exited.
func (a *agentProc) running() {
	a.t.Helper()
	select {
	case <-a.done:
		a.t.Fatalf("agent exited (code %d) while its dependencies were not met:\n%s", a.code, a.out.String())
	default:
	}
}

// exit waits for the agent to exit and returns its code.
func (a *agentProc) exit(within time.Duration) int {
	a.t.Helper()
	select {
	case <-a.done:
		return a.code
	case <-time.After(within):
		a.cmd.Process.Signal(syscall.SIGQUIT)
		<-a.done
		a.t.Fatalf("agent still running after %v:\n%s", within, a.out.String())
	}
	return -1
}

func (a *agentProc) wantExit(code int) {
	a.t.Helper()
	if got := a.exit(60 * time.Second); got != code {
		a.t.Fatalf("exit code %d, want %d:\n%s", got, code, a.out.String())
	}
}
