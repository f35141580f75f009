package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	os.Exit(run(m, setup))
}

func run(m *testing.M, setup func(*Env)) int { return runWith(m, Options{}, setup) }

func runWith(m *testing.M, o Options, setup func(*Env)) int {
	dir, err := os.MkdirTemp("", "kolla-agent-testenv-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	began := time.Now()
	env, err := StartWith(dir, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n(files kept in %s)\n", err, dir)
		return 1
	}
	if testing.Verbose() {
		what := "control plane"
		if env.node {
			what += " and node"
		}
		fmt.Fprintf(os.Stderr, "testenv: %s started in %.1fs in %s\n", what, time.Since(began).Seconds(), dir)
	}
	// Always: which etcd ran is what a failure's reader asks first.
	fmt.Fprintf(os.Stderr, "testenv: %s\n", env.Etcd)
	setup(env)
	code := m.Run()
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
	code := runWith(m, Options{Node: true}, setup)
	after, err := snapshotHost()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		code = 1
	}
	if d := before.diff(after); len(d) > 0 {
		fmt.Fprintf(os.Stderr, "testenv: the node left the host changed:\n  %s\n", strings.Join(d, "\n  "))
		code = 1
	}
	os.Exit(code)
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
