package agent

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/probes"
)

// pidSignaller is a service known by its PID only.
type pidSignaller int

func (p pidSignaller) PID() int { return int(p) }
func (p pidSignaller) Signal(_ context.Context, sig syscall.Signal) error {
	return syscall.Kill(int(p), sig)
}

// A service with workers: the verification's looks count only once every
// worker from before the signal has exited, or from reload.settle on when
// some never do. Real processes: a shell and its two sleeps.
func TestSettledWaitsForTheWorkers(t *testing.T) {
	svc := exec.Command("sh", "-c", "sleep 300 & sleep 300 & wait")
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Process.Kill(); svc.Wait() })
	pid := svc.Process.Pid
	var workers probes.Workers
	deadline := time.Now().Add(10 * time.Second)
	for len(workers) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		workers = probes.WorkersOf("", pid)
	}
	if len(workers) != 2 {
		t.Fatalf("workers of the shell: %v", workers)
	}
	rr := &reloadRun{s: New(Options{}).bind(&Plan{}), cfg: &config.Reload{Settle: config.ParseDuration("1m")}, svc: &serviceHandle{signal: pidSignaller(pid)}}
	if w := rr.settled([]string{"/etc/x.conf"}); w == nil {
		t.Fatal("no wait for a signal")
	}

	// The workers exit a while after the signal: the wait ends then.
	wait := rr.settled([]string{"/etc/x.conf"})
	killed := make(chan time.Time, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		killed <- time.Now() // before the first kill: the wait may end at once
		for w := range workers {
			syscall.Kill(w, syscall.SIGKILL)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	from := wait(ctx)
	if k := <-killed; from.Before(k) {
		t.Errorf("looks counted from %v, before the workers exited at %v", from, k)
	}
	if ctx.Err() != nil {
		t.Fatal("the wait did not end when the workers exited")
	}

	// A worker that never exits: reload.settle bounds the wait.
	svc2 := exec.Command("sh", "-c", "sleep 300 & wait")
	if err := svc2.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc2.Process.Kill(); svc2.Wait() })
	for len(probes.WorkersOf("", svc2.Process.Pid)) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	rr.cfg.Settle = config.ParseDuration("400ms")
	rr.svc.signal = pidSignaller(svc2.Process.Pid)
	start := time.Now()
	from = rr.settled([]string{"/etc/x.conf"})(ctx)
	if d := from.Sub(start); d < 400*time.Millisecond {
		t.Errorf("looks counted %v after the signal, before reload.settle (400ms)", d)
	}
	if ctx.Err() != nil {
		t.Fatal("reload.settle did not end the wait")
	}

	// No signal, or settle 0: no wait.
	rr.cfg.Actions = []config.ReloadAction{{Path: "/etc/none.conf", Action: "none"}}
	if rr.settled([]string{"/etc/none.conf"}) != nil {
		t.Error("a wait for a file whose action is none")
	}
	rr.cfg.Settle = config.ParseDuration("0s")
	if rr.settled([]string{"/etc/x.conf"}) != nil {
		t.Error("a wait with reload.settle 0")
	}
}
