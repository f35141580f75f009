package reload

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/agent/kolla"
	"github.com/kolla-agent/kolla-agent/agent/render"
	"github.com/kolla-agent/kolla-agent/discovery"
	"github.com/kolla-agent/kolla-agent/internal/poll"
	"github.com/kolla-agent/kolla-agent/probes"
)

// pidSignaller is a service known by its PID only.
type pidSignaller int

func (p pidSignaller) PID() int { return int(p) }
func (p pidSignaller) Signal(_ context.Context, sig syscall.Signal) error {
	return syscall.Kill(int(p), sig)
}

// fakeService counts the signals it is sent.
type fakeService struct {
	mu      sync.Mutex
	signals []syscall.Signal
}

func (f *fakeService) PID() int { return 0 }
func (f *fakeService) Signal(_ context.Context, sig syscall.Signal) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.signals = append(f.signals, sig)
	return nil
}

func (f *fakeService) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.signals)
}

var discard = slog.New(slog.DiscardHandler)

func parse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	c, err := config.Parse("agent.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newHealth(t *testing.T) *probes.Health {
	t.Helper()
	h, err := probes.New(probes.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// lines is what the readiness probe's verbose answer says: name -> state
// and reason.
func lines(t *testing.T, h *probes.Health) map[string]string {
	t.Helper()
	rep, err := h.Evaluate(probes.Readiness, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range rep.Checks {
		out[c.Name] = c.State + ": " + c.Reason
	}
	return out
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
	d := &Duty{cfg: &config.Reload{Settle: config.ParseDuration("1m")}, m: Means{Signal: pidSignaller(pid), Logger: discard}}
	if w := d.settled([]string{"/etc/x.conf"}); w == nil {
		t.Fatal("no wait for a signal")
	}

	// The workers exit a while after the signal: the wait ends then.
	wait := d.settled([]string{"/etc/x.conf"})
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
	d.cfg.Settle = config.ParseDuration("400ms")
	d.m.Signal = pidSignaller(svc2.Process.Pid)
	start := time.Now()
	from = d.settled([]string{"/etc/x.conf"})(ctx)
	if d := from.Sub(start); d < 400*time.Millisecond {
		t.Errorf("looks counted %v after the signal, before reload.settle (400ms)", d)
	}
	if ctx.Err() != nil {
		t.Fatal("reload.settle did not end the wait")
	}

	// No signal, or settle 0: no wait.
	d.cfg.Actions = []config.ReloadAction{{Path: "/etc/none.conf", Action: "none"}}
	if d.settled([]string{"/etc/none.conf"}) != nil {
		t.Error("a wait for a file whose action is none")
	}
	d.cfg.Settle = config.ParseDuration("0s")
	if d.settled([]string{"/etc/x.conf"}) != nil {
		t.Error("a wait with reload.settle 0")
	}
}

// What is watched: reload.watch when given; else kolla's config dir in
// kolla mode and each render source's volume (the nearest directory with
// ..data under --root), once each.
func TestWatchDirs(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/vol/sub"), 0o755)
	os.Symlink("..2024", filepath.Join(root, "etc/vol/..data"))
	c := parse(t, `
render:
  - {src: /etc/vol/sub/a.conf.j2, dest: /etc/a.conf}
  - {src: /etc/vol/b.conf.j2, dest: /etc/b.conf}
  - {src: /etc/plain/c.conf.j2, dest: /etc/c.conf}
reload: {}
`)
	if got, want := watchDirs(c, true, root), []string{kolla.ConfigDir, "/etc/vol", "/etc/plain"}; !slices.Equal(got, want) {
		t.Errorf("kolla mode: %v, want %v", got, want)
	}
	if got, want := watchDirs(c, false, root), []string{"/etc/vol", "/etc/plain"}; !slices.Equal(got, want) {
		t.Errorf("%v, want %v", got, want)
	}
	c.Reload.Watch = []string{"/etc/x"}
	if got := watchDirs(c, true, root); !slices.Equal(got, []string{"/etc/x"}) {
		t.Errorf("reload.watch: %v", got)
	}
}

// The action is the strongest the changed files ask for, done through the
// service's means; none is nothing, and a means the agent lacks is said.
func TestDutyAct(t *testing.T) {
	c := parse(t, `
reload:
  signal: SIGUSR1
  actions:
    - {path: /etc/none.conf, action: none}
    - {path: /etc/restart.conf, action: restart}
    - {path: /etc/rollout.conf, action: rollout}
`)
	svc := &fakeService{}
	restarts := 0
	d, err := NewDuty(c, Means{Logger: discard, Signal: svc, Restart: func(context.Context) error { restarts++; return nil },
		Kube: func() (*discovery.Kube, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, f := range []string{"/etc/none.conf", "/etc/x.conf", "/etc/restart.conf"} {
		if err := d.act(ctx, "h", []string{"/etc/none.conf", f}); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if !slices.Equal(svc.signals, []syscall.Signal{syscall.SIGUSR1}) || restarts != 1 {
		t.Errorf("signals %v, restarts %d", svc.signals, restarts)
	}
	if err := d.act(ctx, "h", []string{"/etc/rollout.conf"}); err == nil || !strings.Contains(err.Error(), "rollout needs the Kubernetes API") {
		t.Errorf("rollout without the API: %v", err)
	}
	d.m.Signal, d.m.Restart = nil, nil
	for f, want := range map[string]string{"/etc/x.conf": "no service to signal", "/etc/restart.conf": "no service to restart"} {
		if err := d.act(ctx, "h", []string{f}); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", f, err, want)
		}
	}
}

// A Lease turn is waited for only when the service is signalled or
// restarted.
func TestDutyHoldsForSignalAndRestartOnly(t *testing.T) {
	c := parse(t, `
reload:
  actions: [{path: /etc/none.conf, action: none}, {path: /etc/rollout.conf, action: rollout}]
`)
	c.Bootstrap.Name, c.Reload.MaxUnavailable = "keystone", 1
	asked := 0
	d, err := NewDuty(c, Means{Logger: discard, Kube: func() (*discovery.Kube, error) { asked++; return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if d.lease != "kolla-reload-keystone" || d.rcfg.Hold == nil {
		t.Fatalf("lease %q", d.lease)
	}
	for _, f := range []string{"/etc/none.conf", "/etc/rollout.conf"} {
		release, err := d.rcfg.Hold(context.Background(), []string{f})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		release()
	}
	if asked != 0 {
		t.Errorf("the API asked %d times for no turn", asked)
	}
	if _, err := d.rcfg.Hold(context.Background(), []string{"/etc/x.conf"}); err == nil || !strings.Contains(err.Error(), "reload.maxUnavailable needs the Kubernetes API") {
		t.Errorf("signal: %v", err)
	}
	c.Reload.MaxUnavailable = 0
	if d, _ := NewDuty(c, Means{Logger: discard}); d.rcfg.Hold != nil {
		t.Error("a Hold without reload.maxUnavailable")
	}
}

// A restart fails readiness while it is acted on and verified; a signal
// only shows in the verbose answer. Every outcome but unchanged is an
// Event, a skipped config a drift shown until a pass clears it.
func TestDutyGateAndReport(t *testing.T) {
	c := parse(t, "reload:\n  actions: [{path: /etc/restart.conf, action: restart}]\n")
	h := newHealth(t)
	type ev struct{ typ, reason, msg string }
	var events []ev
	d, err := NewDuty(c, Means{Logger: discard, Health: h, Event: func(typ, reason, msg string) error {
		events = append(events, ev{typ, reason, msg})
		return errors.New("forbidden")
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct{ file, reason, want string }{
		{"/etc/restart.conf", "reload abc", "fail: reload abc"},
		{"/etc/restart.conf", "", ""},
		{"/etc/x.conf", "reload abc", "degraded: reload abc"},
		{"/etc/x.conf", "", ""},
	} {
		d.gate([]string{step.file}, step.reason)
		if got := lines(t, h); got["reloading"] != step.want {
			t.Errorf("%s %q: %v", step.file, step.reason, got)
		}
	}

	for _, o := range []string{OutcomeApplied, OutcomeRejected, OutcomeRolledBack, OutcomeFailed, OutcomeSkipped, OutcomeUnchanged} {
		d.report(o, "abc", "msg "+o)
	}
	want := []ev{
		{"Normal", "ReloadApplied", "msg applied"},
		{"Warning", "ReloadRejected", "msg rejected"},
		{"Warning", "ReloadRolledBack", "msg rolled-back"},
		{"Warning", "ReloadFailed", "msg failed"},
		{"Warning", "ReloadSkipped", "msg skipped"},
	}
	if !slices.Equal(events, want) {
		t.Errorf("events %v\nwant %v", events, want)
	}
	if got := lines(t, h); got["config-drift"] != "degraded: msg skipped" {
		t.Errorf("skipped: %v", got)
	}
}

// The duty from its start to a reload, and run again as sideDuty does after
// a failure: the config the service started with is recorded once, so the
// second run does not take the service back to it and reload once more.
func TestDutyRun(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(root, "etc/src/svc.conf.j2")
	os.MkdirAll(filepath.Dir(src), 0o755)
	os.MkdirAll(filepath.Join(root, "etc/svc"), 0o755)
	os.WriteFile(src, []byte("a = 1\n"), 0o644)
	c := parse(t, `
render: [{src: /etc/src/svc.conf.j2, dest: /etc/svc/svc.conf}]
reload: {quiet: 20ms, maxWait: 200ms, rescan: 100ms, settle: 0s, stateDir: /state}
`)
	renders := func(_ context.Context, _ render.Overlay) (*kolla.Output, error) {
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		it := render.TemplateItem{Src: "/etc/src/svc.conf.j2", Dest: "/etc/svc/svc.conf"}
		return &kolla.Output{Templates: []render.RenderedTemplate{{Item: it, Path: filepath.Join(root, it.Dest), Data: b, Mode: 0o644, UID: -1, GID: -1}}}, nil
	}
	first, _ := renders(context.Background(), nil)
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	svc := &fakeService{}
	d, err := NewDuty(c, Means{Logger: discard, Render: renders, Files: first.Files(), Signal: svc, Health: newHealth(t), Root: root})
	if err != nil {
		t.Fatal(err)
	}
	run := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	}
	// Each run makes a pass at its start: waited for on the duty's count
	// of passes, so that a slow start is not taken for a pass that
	// signalled nothing.
	stop := run()
	poll.Until(t, 10*time.Second, "the start's pass", func() bool { return passes(d, "") == 1 })
	if n, u := svc.count(), passes(d, OutcomeUnchanged); n != 0 || u != 1 {
		t.Fatalf("the start's pass: %d signals, %d passes unchanged, for the config the service started with; want none and 1", n, u)
	}
	os.WriteFile(src, []byte("a = 2\n"), 0o644)
	poll.Until(t, 10*time.Second, "the reload's signal", func() bool { return svc.count() == 1 })
	stop()
	if b, _ := os.ReadFile(filepath.Join(root, "etc/svc/svc.conf")); string(b) != "a = 2\n" {
		t.Errorf("committed %q", b)
	}

	before, unchanged := passes(d, ""), passes(d, OutcomeUnchanged)
	stop = run()
	poll.Until(t, 10*time.Second, "the second run's start pass", func() bool { return passes(d, "") == before+1 })
	stop()
	if n, u := svc.count(), passes(d, OutcomeUnchanged)-unchanged; n != 1 || u != 1 {
		t.Errorf("%d signals after the duty ran again, its start's pass unchanged %d times; want the one reload's, and 1", n, u)
	}
	if d.api != nil || d.files != nil {
		t.Error("the API source or the start's files kept after the run")
	}
}

// passes is the duty's count of reload passes with outcome, or of all
// passes when outcome is "".
func passes(d *Duty, outcome string) int {
	if outcome != "" {
		return int(testutil.ToFloat64(d.metrics.outcome.WithLabelValues(outcome)))
	}
	n := 0
	for _, o := range []string{OutcomeUnchanged, OutcomeSkipped, OutcomeFailed, OutcomeRejected, OutcomeApplied, OutcomeRolledBack} {
		n += passes(d, o)
	}
	return n
}
