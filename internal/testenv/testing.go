package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
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

func run(m *testing.M, setup func(*Env)) int {
	dir, err := os.MkdirTemp("", "kolla-agent-testenv-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	began := time.Now()
	env, err := Start(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n(files kept in %s)\n", err, dir)
		return 1
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "testenv: control plane started in %.1fs in %s\n", time.Since(began).Seconds(), dir)
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
		fmt.Fprintf(os.Stderr, "testenv: logs kept in %s\n", dir)
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
