// Package osloservice is a tiny OpenStack-style service for tests of the
// agent's reload: service.py, a few lines of Python on Debian's
// python3-oslo.service and python3-oslo.config, run by /usr/bin/python3.
//
// The service registers [DEFAULT] greeting (mutable=True) and [DEFAULT]
// color (immutable), reads them from --config-file, and is launched as
// nova's or neutron's services are, with oslo_service.service.launch(conf,
// svc, workers=1, restart_method="mutate" or "reload"). It reports the
// options' values on start and after every reload: it rewrites the status
// file (JSON, see Status) and prints "greeting=VALUE" on stdout.
//
// What oslo.service (3.0, Debian bookworm) does on SIGHUP, from
// oslo_service/service.py:
//
//   - launch() with workers=1 (or None) builds a ServiceLauncher, which runs
//     the service in the calling process; more workers give a
//     ProcessLauncher, a parent that forks the workers.
//   - ServiceLauncher.handle_signal maps SIGHUP to _reload_service, which
//     clears every handler and raises SignalExit(SIGHUP), a SystemExit
//     that eventlet's hub passes on to the main green thread.
//     ServiceLauncher.wait catches it and asks
//     _is_sighup_and_daemon: only when _is_daemon() holds, i.e. the process
//     group differs from the terminal's foreground group
//     (os.getpgrp() != os.tcgetpgrp(stdout)) or stdout is no terminal at all
//     (ENOTTY), does it call Launcher.restart and loop, installing the
//     handlers again.
//   - Launcher.restart with restart_method "mutate" calls
//     ConfigOpts.mutate_config_files (only options with mutable=True change;
//     a changed immutable one is logged "Ignoring change to immutable
//     option"; the hooks of register_mutate_hook get {(group, name): (old,
//     new)}), then Services.restart calls reset() on each service, which
//     keeps running. With "reload" it calls reload_config_files (every
//     option changes) and Services.restart stops each service, calls
//     reset() and starts it again in a new green thread. Either way the
//     process, and so its pid, stays.
//   - A config file that does not parse: reload_config_files logs "Caught
//     Error while reloading configure files" and keeps the old values (the
//     service is still stopped and started); mutate_config_files raises, the
//     exception leaves ServiceLauncher.wait, and the process exits 1.
//   - The handlers are installed by ServiceLauncher.wait, after launch():
//     a SIGHUP before (while Python imports eventlet and oslo, ~0.3 s) has
//     its default action and kills the process. The first report (start())
//     runs after wait() has installed them.
//   - In the foreground of a terminal the SIGHUP is no reload: the handlers
//     are cleared, the launcher waits on with the old config, and the next
//     SIGHUP or SIGTERM kills the process at once (default action).
//
// So a supervisor must start an oslo.service-based service in a process
// group of its own (Setpgid), or without a terminal, for SIGHUP to reload
// it; the agent's supervisor does. This package's tests check each of these
// facts against the installed packages.
//
// One more, for a service that holds no file descriptor: eventlet's hub
// then waits in time.sleep (up to 60 s) instead of epoll, the signal
// handler only spawns a green thread, and the sleep resumes (PEP 475;
// SignalHandler's EINTR trick recognises oslo.service's own sleep wrapper,
// which this eventlet's poll hub does not call), so SIGHUP and SIGTERM take
// effect up to a minute late. Real services always poll sockets;
// service.py watches a pipe for the same effect.
//
// And with a file descriptor, a race: the hub takes its poll timeout from
// its next timer, then polls. A signal whose Python handler runs between
// the two (not inside the poll, where SignalHandler raises EINTR) spawns
// its green thread too late for that timeout, and the hub runs it only
// when the poll returns: with no timer, up to 60 s later (a SIGHUP seen
// lost for over 30 s under a CPU hog). A real service's timers (RPC
// heartbeats, report_interval, periodic tasks) bound the delay; service.py
// has a green thread that sleeps 1 s at a time for the same effect.
package osloservice

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const (
	// Python is Debian's: its dist-packages hold python3-oslo.service; the
	// python3 first on PATH may be another interpreter.
	Python = "/usr/bin/python3"
	// ScriptName is the file WriteScript writes.
	ScriptName = "osloservice.py"

	// RestartMutate and RestartReload are oslo.service's restart_method
	// values, for Command's --restart-method.
	RestartMutate = "mutate"
	RestartReload = "reload"
)

//go:embed service.py
var script []byte

// required lists what must be installed, with the Debian package providing it.
var required = [][2]string{
	{Python, "python3"},
	{"/usr/lib/python3/dist-packages/oslo_service/service.py", "python3-oslo.service"},
	{"/usr/lib/python3/dist-packages/oslo_config/cfg.py", "python3-oslo.config"},
	{"/usr/lib/python3/dist-packages/eventlet/__init__.py", "python3-eventlet"},
}

// CheckInstalled reports every missing file in one error naming the Debian
// packages to install.
func CheckInstalled() error {
	var missing []string
	for _, r := range required {
		if _, err := os.Stat(r[0]); err != nil {
			missing = append(missing, fmt.Sprintf("%s (Debian package %s)", r[0], r[1]))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("oslo.service test tooling: missing %s; install them with hack/install-tools.sh services "+
			"(apt-get install python3-oslo.service python3-oslo.config)", strings.Join(missing, ", "))
	}
	return nil
}

// WriteScript writes the service's Python source into dir and returns its
// absolute path.
func WriteScript(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, ScriptName)
	if err := os.WriteFile(p, script, 0o644); err != nil {
		return "", err
	}
	return p, nil
}

// Command is the argv that runs the service written by WriteScript:
// Python in isolated mode (-I: no PYTHON* variables, no user site, the
// script's directory not on sys.path) with --config-file configFile and
// --status-file statusFile. extra is appended, e.g. "--restart-method",
// RestartReload (the default is RestartMutate).
func Command(script, configFile, statusFile string, extra ...string) []string {
	argv := []string{Python, "-I", script, "--config-file", configFile, "--status-file", statusFile}
	return append(argv, extra...)
}

// Config is a config file for the service: [DEFAULT] greeting and, when not
// empty, color.
func Config(greeting, color string) string {
	s := "[DEFAULT]\ngreeting = " + greeting + "\n"
	if color != "" {
		s += "color = " + color + "\n"
	}
	return s
}

// Status is one report of the service, the status file's content.
type Status struct {
	Event  string `json:"event"` // "start" or "reset"
	Pid    int    `json:"pid"`
	Pgrp   int    `json:"pgrp"`
	Daemon *bool  `json:"daemon"` // oslo_service.service._is_daemon(); nil if it failed
	// Greeting and Color are the options' current values.
	Greeting string `json:"greeting"`
	Color    string `json:"color"`
	// Starts and Resets count Service.start and Service.reset calls.
	Starts int `json:"starts"`
	Resets int `json:"resets"`
	// Changed lists the mutable options ("DEFAULT.greeting") the last
	// mutate_config_files changed, as its hooks were told.
	Changed       []string `json:"changed"`
	RestartMethod string   `json:"restart_method"`
}

// ReadStatus reads the service's last report.
func ReadStatus(path string) (Status, error) {
	var s Status
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("osloservice: status file %s: %w", path, err)
	}
	return s, nil
}

// WaitStatus polls the status file until ok accepts a report, for at most
// timeout, and returns that report; or the last one read, and an error.
// exited, if not nil, is asked at each poll and ends the wait early.
func WaitStatus(path string, timeout time.Duration, exited func() bool, ok func(Status) bool) (Status, error) {
	deadline := time.Now().Add(timeout)
	var last Status
	var lastErr error
	for {
		s, err := ReadStatus(path)
		if err == nil {
			last, lastErr = s, nil
			if ok(s) {
				return s, nil
			}
		} else {
			lastErr = err
		}
		if exited != nil && exited() {
			return last, errors.New("osloservice: the service exited")
		}
		if time.Now().After(deadline) {
			if lastErr != nil {
				return last, fmt.Errorf("osloservice: no matching report within %v: %w", timeout, lastErr)
			}
			return last, fmt.Errorf("osloservice: no matching report within %v; last: %+v", timeout, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
