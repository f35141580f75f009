// Command testenv starts and stops the local control plane for developers:
// hack/testenv runs it. "up DIR" leaves etcd (TESTENV_ETCD picks which:
// see testenv.EtcdEnv), kube-apiserver, kube-controller-manager and CoreDNS
// running after it exits, and, as root unless --no-node, a real node
// (containerd, kubelet, kube-proxy, kube-scheduler); "down DIR" stops
// exactly the processes recorded in DIR/pids and puts the host back as the
// node found it.
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

const usage = `usage: hack/testenv up [--no-node] DIR   start a control plane in DIR (no-op if one runs there),
                                       and a node when run as root
       hack/testenv down DIR             stop what up started in DIR and restore the host
`

func main() {
	args := os.Args[1:]
	withNode := os.Geteuid() == 0
	if len(args) == 3 && args[0] == "up" && args[1] == "--no-node" {
		args, withNode = []string{"up", args[2]}, false
	}
	if len(args) != 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(1)
	}
	var err error
	switch cmd, dir := args[0], args[1]; cmd {
	case "up":
		err = up(dir, withNode)
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

func up(dir string, withNode bool) error {
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
	env, err := testenv.StartWith(dir, testenv.Options{Detach: true, Node: withNode})
	if err != nil {
		return err
	}
	what := "control plane"
	if env.Node() {
		what += " and node " + testenv.NodeName
	}
	fmt.Printf("testenv: %s up in %s (%.1fs), %s\n", what, env.Dir, time.Since(start).Seconds(), env.Etcd)
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
	fmt.Printf("testenv: stopped what ran in %s; the host is as it was\n", env.Dir)
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
