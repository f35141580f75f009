// Package e2e runs the agent's images as real pods on a real node:
// hack/testenv's control plane with containerd, runc, the kubelet,
// kube-proxy and kube-scheduler (testenv.Options.Node). What it proves comes
// from what the kubelet and the API server report: pod status, conditions,
// termination messages, Events, EndpointSlices.
//
// The node needs root and the tools of hack/install-tools.sh node; without
// them every test skips and says why.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/image"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

var env *testenv.Env

// hangChild, set in the environment, makes this binary the child
// checkTeardown runs: a node without images, and TestHang.
const hangChild = "KOLLA_AGENT_E2E_HANG"

func TestMain(m *testing.M) {
	if os.Getenv(hangChild) != "" {
		testenv.MainNode(m, func(*testenv.Env) {})
		return
	}
	if testenv.NodeMissing() == "" {
		if err := checkUpDown(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: hack/testenv:", err)
			os.Exit(1)
		}
		if err := checkTeardown(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: teardown before go test ends the run:", err)
			os.Exit(1)
		}
	}
	testenv.MainNode(m, func(e *testenv.Env) {
		if err := importImages(e); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			if err := e.Stop(); err != nil { // the node's host state back
				fmt.Fprintln(os.Stderr, "e2e:", err)
			}
			os.Exit(1)
		}
		env = e
	})
}

// TestHang hangs until its run is ended: what checkTeardown's child runs.
func TestHang(t *testing.T) {
	if os.Getenv(hangChild) == "" {
		t.Skip("run only in the child of TestMain's check of the teardown (checkTeardown)")
	}
	time.Sleep(time.Hour)
}

// checkTeardown runs this binary as a child whose one test hangs (TestHang)
// on a node, twice: until -test.timeout nears, and until it is sent SIGTERM
// (a CI job cancelled). go test's timeout panic, its kill and a signal all
// end a binary without its deferred teardown, which would leave the node's
// mounts and iptables rules behind. Each child must stop its node itself
// (exit 1, not the panic's 2), leave no process of its node running, and
// leave the host as it was.
func checkTeardown() error {
	for _, c := range []struct {
		name, timeout, says string
		term                bool
	}{
		// The panic's deadline, or the kill's when the node took over a
		// minute to start.
		{"the -test.timeout nears", "40s", "testenv: go test's -timeout is 40s: ", false},
		{"SIGTERM", "10m", "testenv: told to stop (terminated)", true},
	} {
		if err := hangUntilEnded(c.timeout, c.says, c.term); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	return nil
}

func hangUntilEnded(timeout, says string, term bool) error {
	before, err := testenv.SnapshotHost()
	if err != nil {
		return err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHang$", "-test.v", "-test.timeout="+timeout)
	cmd.Env = append(os.Environ(), hangChild+"=1")
	out := &watchedOutput{running: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if term {
		select {
		case <-out.running:
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				return err
			}
		case err := <-done:
			return fmt.Errorf("the child ended before TestHang ran: %v:\n%s", err, out)
		case <-time.After(3 * time.Minute):
			cmd.Process.Kill()
			return fmt.Errorf("TestHang not running after 3 minutes:\n%s", out)
		}
	}
	select {
	case err = <-done:
	case <-time.After(5 * time.Minute):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("the child still ran after 5 minutes:\n%s", out)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		return fmt.Errorf("the child ended with %v, want exit status 1 (2 is go test's timeout panic):\n%s", err, out)
	}
	text := out.String()
	if !strings.Contains(text, says) {
		return fmt.Errorf("the child did not say %q:\n%s", says, text)
	}
	m := regexp.MustCompile(`testenv: logs kept in (\S+)`).FindStringSubmatch(text)
	if m == nil {
		return fmt.Errorf("the child did not say where it kept its logs:\n%s", text)
	}
	if pids, err := testenv.Running(m[1]); err != nil || len(pids) > 0 {
		return fmt.Errorf("processes of the child's node still run: %v %v (logs in %s)", pids, err, m[1])
	}
	diff, err := before.Diff()
	if err != nil {
		return err
	}
	if len(diff) > 0 {
		return fmt.Errorf("the child left the host changed (logs in %s):\n  %s", m[1], strings.Join(diff, "\n  "))
	}
	return os.RemoveAll(m[1])
}

// watchedOutput collects a child's output and closes running once TestHang
// has started.
type watchedOutput struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	running chan struct{}
	seen    bool
}

func (w *watchedOutput) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.seen && strings.Contains(w.buf.String(), "=== RUN   TestHang") {
		w.seen = true
		close(w.running)
	}
	return len(p), nil
}

func (w *watchedOutput) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// checkUpDown runs what a developer runs, `hack/testenv up DIR` (a node,
// as root) and `hack/testenv down DIR`, and checks that the node came up
// and that down left the host as up found it: sysctls, iptables rules,
// mounts, links, cgroups and the kubelet's well-known paths. On the way it
// abandons a node as a killed run does (every component SIGKILLed, down
// never run) and checks that the next up brings that one down whole.
func checkUpDown() error {
	// A node a killed run left on this machine (a CI job at its time limit)
	// goes first: up would bring it down, removing what the record below
	// would then hold.
	if err := testenv.BringDownAbandoned(); err != nil {
		return err
	}
	before, err := testenv.SnapshotHost()
	if err != nil {
		return err
	}
	abandonedDir, err := os.MkdirTemp("", "kolla-agent-e2e-abandoned-")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "kolla-agent-e2e-updown-")
	if err != nil {
		return err
	}
	script := filepath.Join(repoRoot(), "hack/testenv")
	if out, err := exec.Command(script, "up", abandonedDir).CombinedOutput(); err != nil {
		return fmt.Errorf("up: %v: %s", err, out)
	}
	if err := testenv.AbandonNode(abandonedDir); err != nil {
		return err
	}
	if out, err := exec.Command(script, "up", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("up after a node was abandoned in %s: %v: %s", abandonedDir, err, out)
	}
	envFile, err := os.ReadFile(filepath.Join(dir, "env"))
	upErr := err
	if err == nil && !strings.Contains(string(envFile), "TESTENV_NODE="+testenv.NodeName) {
		upErr = fmt.Errorf("up as root started no node: %s has no TESTENV_NODE", filepath.Join(dir, "env"))
	}
	if out, err := exec.Command(script, "down", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("down: %v: %s (files kept in %s)", err, out, dir)
	}
	if upErr != nil {
		return upErr
	}
	diff, err := before.Diff()
	if err != nil {
		return err
	}
	if len(diff) > 0 {
		return fmt.Errorf("down left the host changed (files kept in %s and %s):\n  %s", abandonedDir, dir, strings.Join(diff, "\n  "))
	}
	return errors.Join(os.RemoveAll(abandonedDir), os.RemoveAll(dir))
}

func repoRoot() string {
	root, err := filepath.Abs("..")
	if err != nil {
		panic(err)
	}
	return root
}

// importImages builds the agent's binaries as make build does and the
// images their Dockerfiles describe, and imports them into the node.
func importImages(e *testenv.Env) error {
	root := repoRoot()
	build := exec.Command("make", "-s", "build")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("make build: %v: %s", err, out)
	}
	imgs, err := image.Project(root)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err = e.ImportImages(ctx, e.Dir, imgs...)
	return err
}
