package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// A process of the agent's uid (the service in another container of a pod
// that shares its process namespace) cannot read the agent's environment
// or reach its root directory (where the ServiceAccount token is mounted)
// through /proc; the service the agent started stays readable to it, so
// the agent's own checks on the service still work.
func TestAgentNotReadableBySameUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs the agent and a reader as another uid: needs root (CI runs as root)")
	}
	const nobody = 65534
	dir, err := os.MkdirTemp("", "kolla-agent-dumpable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(dir, nobody, nobody)
	cfg := filepath.Join(dir, "agent.yaml")
	write(t, cfg, "run:\n  command: sleep 600\nprobes:\n  socket: "+filepath.Join(dir, "agent.sock")+
		"\n  checks:\n    - {name: alive, process: {}, probes: [liveness]}\n")
	os.Chmod(cfg, 0o644)
	// The suite's binary sits in a directory only root may enter.
	bin := filepath.Join(dir, "kolla-agent")
	b, err := os.ReadFile(s.bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfg, "run")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	a := startAgentCmd(t, cmd, []string{"PATH=" + os.Getenv("PATH"), "AGENT_SECRET=shh"})
	a.waitLog("service started")
	agent := a.cmd.Process.Pid
	service := childOf(t, agent)
	read := func(path string) error {
		c := exec.Command("cat", path)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		if out, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	for _, p := range []string{"environ", "root/etc/hostname", "mem"} {
		path := "/proc/" + strconv.Itoa(agent) + "/" + p
		if err := read(path); err == nil {
			t.Errorf("a process of the agent's uid read %s", path)
		}
	}
	// The same reader, the same uid: the service's own entries are
	// readable, so the refusals above are the agent's doing.
	if err := read("/proc/" + strconv.Itoa(service) + "/environ"); err != nil {
		t.Errorf("the service (%d) is not readable to its own uid: %v", service, err)
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.exit(15 * time.Second)
}
