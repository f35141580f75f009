// Command testenv starts and stops the local control plane for developers:
// hack/testenv runs it. "up DIR" leaves etcd (TESTENV_ETCD picks which:
// see testenv.EtcdEnv), kube-apiserver,
// kube-controller-manager and CoreDNS running after it exits; "down DIR"
// stops exactly the processes recorded in DIR/pids.
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

const usage = `usage: hack/testenv up DIR     start a control plane in DIR (no-op if one runs there)
       hack/testenv down DIR   stop the control plane started in DIR
`

func main() {
	if len(os.Args) != 3 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(1)
	}
	var err error
	switch cmd, dir := os.Args[1], os.Args[2]; cmd {
	case "up":
		err = up(dir)
	case "down":
		err = down(dir)
	default:
		fmt.Fprint(os.Stderr, usage)
		os.Exit(1)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func up(dir string) error {
	if env, err := testenv.Open(dir); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := env.Healthy(ctx); err == nil {
			fmt.Printf("testenv: already running in %s, %s\n", env.Dir, env.Etcd)
			printUsage(env)
			return nil
		} else {
			fmt.Fprintf(os.Stderr, "%v; starting afresh\n", err)
		}
		// Whatever is left of it goes before a fresh start in the same DIR.
		if err := env.Stop(); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	start := time.Now()
	env, err := testenv.StartDetached(dir)
	if err != nil {
		return err
	}
	fmt.Printf("testenv: control plane up in %s (%.1fs), %s\n", env.Dir, time.Since(start).Seconds(), env.Etcd)
	printUsage(env)
	return nil
}

func down(dir string) error {
	env, err := testenv.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Printf("testenv: nothing running in %s\n", dir)
		return nil
	}
	if err != nil {
		return err
	}
	if err := env.Stop(); err != nil {
		return err
	}
	fmt.Printf("testenv: stopped the control plane in %s\n", env.Dir)
	return nil
}

func printUsage(env *testenv.Env) {
	fmt.Printf(`
  . %s       # KUBECONFIG, KOLLA_AGENT_DNS_SERVER=%s, CLUSTER_DOMAIN=%s
  kubectl get namespaces     # admin kubeconfig: %s
  logs: %s
  audit log: %s
  stop: hack/testenv down %s
`, filepath.Join(env.Dir, "env"), env.DNSAddr, env.ClusterDomain, env.Kubeconfig,
		filepath.Join(env.Dir, "*.log"), env.AuditLog, env.Dir)
}
