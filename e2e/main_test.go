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
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/image"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	if testenv.NodeMissing() == "" {
		if err := checkUpDown(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: hack/testenv:", err)
			os.Exit(1)
		}
	}
	testenv.MainNode(m, func(e *testenv.Env) {
		if err := importImages(e); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			os.Exit(1)
		}
		env = e
	})
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
