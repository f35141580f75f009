package osloservice

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// reportWait bounds every wait for a report: start-up takes about 0.3 s
// (eventlet and oslo imports), a reload a few milliseconds.
const reportWait = 30 * time.Second

// svc is one service.py started by the test.
type svc struct {
	t      *testing.T
	cmd    *exec.Cmd
	conf   string
	status string
	log    string // its stderr: oslo's own log lines
	done   chan struct{}
	err    error // cmd.Wait's, once done is closed
}

func (s *svc) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *svc) logText() string {
	b, _ := os.ReadFile(s.log)
	return string(b)
}

// wait waits for a report ok accepts.
func (s *svc) wait(what string, ok func(Status) bool) Status {
	s.t.Helper()
	st, err := WaitStatus(s.status, reportWait, s.exited, ok)
	if err != nil {
		s.t.Fatalf("%s: %v\nlast report: %+v\nservice log:\n%s", what, err, st, s.logText())
	}
	return st
}

// writeConf replaces the config file as a renderer does (rename), so the
// service never reads half a file.
func (s *svc) writeConf(content string) {
	s.t.Helper()
	tmp := s.conf + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(tmp, s.conf); err != nil {
		s.t.Fatal(err)
	}
}

// hup sends SIGHUP to the service's process group, as the agent does.
func (s *svc) hup() {
	s.t.Helper()
	if err := syscall.Kill(-s.cmd.Process.Pid, syscall.SIGHUP); err != nil {
		s.t.Fatal(err)
	}
}

// start runs the service with its first config; attr says how (a process
// group of its own, or a terminal's session). stdin and stdout are tty
// when not nil, else /dev/null and a file.
func start(t *testing.T, conf string, attr *syscall.SysProcAttr, tty *os.File, extra ...string) (*svc, time.Duration) {
	t.Helper()
	if err := CheckInstalled(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script, err := WriteScript(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := &svc{
		t:      t,
		conf:   filepath.Join(dir, "service.conf"),
		status: filepath.Join(dir, "status.json"),
		log:    filepath.Join(dir, "service.log"),
		done:   make(chan struct{}),
	}
	s.writeConf(conf)
	logf, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	argv := Command(script, s.conf, s.status, extra...)
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	s.cmd.Stderr = logf
	if tty != nil {
		s.cmd.Stdin, s.cmd.Stdout = tty, tty
	} else {
		out, err := os.Create(filepath.Join(dir, "stdout"))
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		s.cmd.Stdout = out
	}
	attr.Pdeathsig = syscall.SIGKILL
	s.cmd.SysProcAttr = attr
	began := time.Now()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		if !s.exited() {
			syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
		if t.Failed() {
			t.Logf("service log:\n%s", s.logText())
		}
	})
	s.wait("the first report", func(st Status) bool { return st.Event == "start" })
	return s, time.Since(began)
}

// A process group of its own, stdout not a terminal: what the agent's
// supervisor gives a service.
func ownGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// restart_method "mutate" (ServiceLauncher): SIGHUP re-reads the file,
// the mutable greeting changes, the immutable color does not, reset() runs
// in the same process; again on a second SIGHUP; SIGTERM ends it at once.
func TestMutateOnSIGHUP(t *testing.T) {
	s, took := start(t, Config("hello", "red"), ownGroup(), nil)
	st0, _ := ReadStatus(s.status)
	t.Logf("start-up: %v", took)
	if st0.Pid != s.cmd.Process.Pid || st0.Pgrp != st0.Pid {
		t.Errorf("pid %d pgrp %d, want the started process %d leading its group", st0.Pid, st0.Pgrp, s.cmd.Process.Pid)
	}
	if st0.Daemon == nil || !*st0.Daemon {
		t.Fatalf("oslo.service does not consider the process a daemon: %+v", st0)
	}
	if st0.Greeting != "hello" || st0.Color != "red" || st0.RestartMethod != RestartMutate {
		t.Fatalf("first report %+v", st0)
	}

	for i, g := range []string{"bonjour", "ciao"} {
		s.writeConf(Config(g, "green"))
		sent := time.Now()
		s.hup()
		st := s.wait("the reset after SIGHUP", func(st Status) bool { return st.Resets == i+1 })
		t.Logf("SIGHUP -> report with the new value: %v", time.Since(sent))
		if st.Greeting != g {
			t.Errorf("greeting %q after SIGHUP %d, want %q", st.Greeting, i+1, g)
		}
		if st.Color != "red" {
			t.Errorf("the immutable color changed to %q", st.Color)
		}
		if st.Pid != st0.Pid || st.Starts != 1 || st.Event != "reset" {
			t.Errorf("not reset in place: %+v (first: %+v)", st, st0)
		}
		if !slices.Equal(st.Changed, []string{"DEFAULT.greeting"}) {
			t.Errorf("mutate hook saw %v, want [DEFAULT.greeting]", st.Changed)
		}
	}
	log := s.logText()
	for _, want := range []string{
		"Ignoring change to immutable option DEFAULT.color",
		"Option DEFAULT.greeting changed from [hello] to [bonjour]",
		"Option DEFAULT.greeting changed from [bonjour] to [ciao]",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the service's log lacks %q:\n%s", want, log)
		}
	}
	stdout, _ := os.ReadFile(filepath.Join(filepath.Dir(s.status), "stdout"))
	if string(stdout) != "greeting=hello\ngreeting=bonjour\ngreeting=ciao\n" {
		t.Errorf("stdout:\n%s", stdout)
	}

	// The report comes from inside reset(), before oslo.service's launcher
	// has its SIGTERM handler back: a SIGTERM then would meet the default
	// action. Wait until the process catches it again.
	waitCatches(t, s.cmd.Process.Pid, syscall.SIGTERM, true)
	sent := time.Now()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		t.Logf("SIGTERM -> exit: %v", time.Since(sent))
		if s.err != nil {
			t.Errorf("exit after SIGTERM: %v", s.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10 s after SIGTERM")
	}
}

// restart_method "reload": every option takes its new value, and the
// service is stopped and started again, still in the same process.
func TestReloadMethod(t *testing.T) {
	s, _ := start(t, Config("hello", "red"), ownGroup(), nil, "--restart-method", RestartReload)
	st0, _ := ReadStatus(s.status)
	s.writeConf(Config("bonjour", "green"))
	s.hup()
	st := s.wait("the restart after SIGHUP", func(st Status) bool { return st.Starts == 2 })
	if st.Greeting != "bonjour" || st.Color != "green" {
		t.Errorf("after SIGHUP: greeting %q color %q, want bonjour green", st.Greeting, st.Color)
	}
	if st.Pid != st0.Pid || st.Resets != 1 || st.RestartMethod != RestartReload {
		t.Errorf("after SIGHUP: %+v (first: %+v)", st, st0)
	}
}

// A file that does not parse: "reload" keeps the old values and runs on;
// "mutate" lets oslo.config's error end the process (exit 1). The agent
// checks a file before committing it, so a service never reads one.
func TestUnparsableConfig(t *testing.T) {
	const bad = "greeting = no section header\n"
	t.Run("reload", func(t *testing.T) {
		s, _ := start(t, Config("hello", ""), ownGroup(), nil, "--restart-method", RestartReload)
		s.writeConf(bad)
		s.hup()
		st := s.wait("the restart after SIGHUP", func(st Status) bool { return st.Starts == 2 })
		if st.Greeting != "hello" {
			t.Errorf("greeting %q, want the old hello", st.Greeting)
		}
		if !strings.Contains(s.logText(), "Caught Error while reloading configure files") {
			t.Errorf("no warning in the log:\n%s", s.logText())
		}
	})
	t.Run("mutate", func(t *testing.T) {
		s, _ := start(t, Config("hello", ""), ownGroup(), nil)
		s.writeConf(bad)
		s.hup()
		select {
		case <-s.done:
		case <-time.After(reportWait):
			t.Fatal("still running after SIGHUP with an unparsable file")
		}
		var ee *exec.ExitError
		if !errors.As(s.err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("exit %v, want status 1", s.err)
		}
		if !strings.Contains(s.logText(), "ConfigFileParseError") {
			t.Errorf("no ConfigFileParseError in the log:\n%s", s.logText())
		}
	})
}

// The services these tests start must begin with SIGHUP at its default even
// when `go test` runs with it ignored (nohup): one this process handles is
// reset in its children, one it ignores stays ignored.
func TestMain(m *testing.M) {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	os.Exit(m.Run())
}

// A SIGHUP before the launcher has installed its handlers (here: at once)
// has its default action.
func TestSIGHUPDuringStartup(t *testing.T) {
	dir := t.TempDir()
	script, err := WriteScript(dir)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "service.conf")
	if err := os.WriteFile(conf, []byte(Config("hello", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	argv := Command(script, conf, filepath.Join(dir, "status.json"))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGHUP)
	timer := time.AfterFunc(reportWait, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer timer.Stop()
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("exit %v, want killed by SIGHUP", err)
	}
	if ws := ee.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGHUP {
		t.Errorf("exit %v, want killed by SIGHUP", err)
	}
}

// The foreground process group of a terminal: _is_daemon() is false and a
// SIGHUP reloads nothing; the handlers are gone after it, so the next
// SIGHUP kills the process.
func TestForegroundOfTerminal(t *testing.T) {
	ptm, pts, err := openPTY()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer ptm.Close()
	defer pts.Close()
	// A session of its own with the terminal (fd 0) as its controlling
	// one: its group is the terminal's foreground group.
	s, _ := start(t, Config("hello", ""), &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}, pts)
	pts.Close()
	st0, _ := ReadStatus(s.status)
	if st0.Daemon == nil || *st0.Daemon {
		t.Fatalf("in the terminal's foreground group, oslo.service should not consider it a daemon: %+v", st0)
	}
	s.writeConf(Config("bonjour", ""))
	s.hup()
	// The launcher logs the signal (under a wrong name: SIGHUP's number
	// is also signal.SIG_UNBLOCK's), then decides.
	deadline := time.Now().Add(reportWait)
	for !strings.Contains(s.logText(), ", handling") {
		if time.Now().After(deadline) || s.exited() {
			t.Fatalf("SIGHUP not handled (exited: %v):\n%s", s.exited(), s.logText())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The first SIGHUP handled: its handler is gone (a second one while it
	// is still there would be handled again, not kill).
	waitCatches(t, s.cmd.Process.Pid, syscall.SIGHUP, false)
	if s.exited() {
		t.Fatalf("exited after the first SIGHUP: %v", s.err)
	}
	if st, _ := ReadStatus(s.status); st.Resets != 0 || st.Greeting != "hello" {
		t.Fatalf("reloaded in a terminal's foreground: %+v", st)
	}
	s.hup()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("still running after a second SIGHUP")
	}
	var ee *exec.ExitError
	if !errors.As(s.err, &ee) {
		t.Fatalf("exit %v", s.err)
	}
	if ws := ee.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGHUP {
		t.Errorf("exit %v, want killed by SIGHUP", s.err)
	}
}

// openPTY opens a pseudo-terminal pair.
func openPTY() (ptm, pts *os.File, err error) {
	ptm, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	fd := int(ptm.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		ptm.Close()
		return nil, nil, fmt.Errorf("unlockpt: %w", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		ptm.Close()
		return nil, nil, fmt.Errorf("ptsname: %w", err)
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		ptm.Close()
		return nil, nil, err
	}
	return ptm, pts, nil
}

// waitCatches waits until pid has a handler for sig (its SigCgt mask in
// /proc/PID/status), or, with catches false, until it has none.
func waitCatches(t *testing.T, pid int, sig syscall.Signal, catches bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		for l := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "SigCgt:"); ok {
				mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				if err != nil {
					t.Fatalf("SigCgt %q: %v", v, err)
				}
				if (mask&(1<<(uint(sig)-1)) != 0) == catches {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: a handler for %v is %v, still not %v after 10 s", pid, sig, !catches, catches)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
