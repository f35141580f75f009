package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/forwardserver"
)

// watchedWriter is a Python service logging through oslo.log's handler for
// watch_log_file, logging.handlers.WatchedFileHandler: before every record
// it stats the path and, when the file there is another or none, opens
// the path again (creating it). Under logrotate's create that races with
// logrotate itself: the writer can re-create the file between logrotate's
// rename and its create, and logrotate then renames the writer's new file
// aside (PATH-YYYYMMDDHH.backup) and creates another.
const watchedWriter = `
import logging, logging.handlers, sys, time
path, first, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
h = logging.handlers.WatchedFileHandler(path)
h.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d 4242 INFO app [-] %(message)s", "%Y-%m-%d %H:%M:%S"))
log = logging.getLogger("app")
log.addHandler(h)
log.setLevel(logging.INFO)
for i in range(first, first + total):
    log.info("line %d", i)
    if i % 1000 == 999:
        time.sleep(0.001)
`

// Lines a Python service writes through WatchedFileHandler while the real
// logrotate rotates its file in create mode every 100 ms, and the agent is
// SIGKILLed once and started again: every line that is on disk at the end,
// in whatever file logrotate left it (app.log.N, app.log-DATE.backup),
// arrives at the real Fluent receiver. Lines logrotate itself destroyed (a
// second .backup in the same hour replaces the first) are counted apart:
// no tailer can ship what is gone before it looked.
func TestLogsLogrotateCreateRace(t *testing.T) {
	bin, err := exec.LookPath("logrotate")
	if err != nil {
		bin = "/usr/sbin/logrotate"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("logrotate is not installed (hack/install-tools.sh services): %v", err)
	}
	srv := forwardserver.Start(t, forwardserver.Options{})
	dir := logDir(t, "app")
	log := filepath.Join(dir, "app.log")
	conf, state := filepath.Join(t.TempDir(), "logrotate.conf"), filepath.Join(t.TempDir(), "logrotate.state")
	write(t, conf, fmt.Sprintf("%s {\n    create\n    rotate 1000\n    missingok\n    notifempty\n}\n", log))
	cfg := agentYAML(t, fmt.Sprintf(`
logs:
  files: [{path: %s/*.log}]
  sink: {type: forward, address: %q, ackTimeout: 2s}
  stateDir: %s/state
`, dir, srv.Addr(), t.TempDir()))
	start := func() *agentProc {
		a := startAgent(t, logsEnv(), "--config", cfg, "sidecar")
		return a
	}
	a := start()
	const total = 200_000
	// Four processes log to the one file, as a service's workers do
	// (keystone under uWSGI): each reopens the path on its own.
	const writers = 4
	writerDone := make(chan error, writers)
	for k := range writers {
		w := diesWithTest(exec.Command("/usr/bin/python3", "-c", watchedWriter, log, strconv.Itoa(k*total/writers), strconv.Itoa(total/writers)))
		w.Stdout, w.Stderr = os.Stderr, os.Stderr
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { writerDone <- w.Wait() }()
	}
	var rotations int
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if out, err := exec.Command(bin, "-f", "-s", state, conf).CombinedOutput(); err != nil && !strings.Contains(string(out), "already exists") {
				t.Errorf("logrotate: %v: %s", err, out)
			}
			rotations++
		}
	})
	time.Sleep(1500 * time.Millisecond)
	syscall.Kill(a.cmd.Process.Pid, syscall.SIGKILL)
	a.exit(10 * time.Second)
	time.Sleep(300 * time.Millisecond) // rotations happen while it is down
	a = start()
	for range writers {
		if err := <-writerDone; err != nil {
			t.Fatalf("a writer: %v", err)
		}
	}
	close(stop)
	wg.Wait()

	onDisk, files := linesOnDisk(t, dir, appLine)
	got, missing := awaitShipped(t, srv, onDisk, appLine, time.Minute)
	if len(missing) > 0 {
		where := map[string]int{}
		for _, n := range missing {
			where[onDisk[n]]++
		}
		t.Errorf("%d lines on disk never arrived (first %v), by file: %v", len(missing), missing[:min(10, len(missing))], where)
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.exit(30 * time.Second)
	backups := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".backup") {
			backups++
		}
	}
	t.Logf("%d rotations, %d files on disk (%d .backup); %d of %d lines on disk, %d destroyed by logrotate; %d shipped",
		rotations, len(files), backups, len(onDisk), total, total-len(onDisk), len(got))
}

var appLine = regexp.MustCompile(`INFO app \[-\] line (\d+)$`)

// linesOnDisk is every numbered line (re's first group) in the files of
// dir, with the file holding it.
func linesOnDisk(t *testing.T, dir string, re *regexp.Regexp) (map[int]string, []string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[int]string{}
	var files []string
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		files = append(files, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if m := re.FindStringSubmatch(l); m != nil {
				n, _ := strconv.Atoi(m[1])
				lines[n] = e.Name()
			}
		}
	}
	return lines, files
}

// awaitShipped waits up to within for every line of onDisk to reach srv,
// and returns what arrived and, sorted, what did not.
func awaitShipped(t *testing.T, srv *forwardserver.Server, onDisk map[int]string, re *regexp.Regexp, within time.Duration) (got map[int]int, missing []int) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(200 * time.Millisecond) {
		recs, err := srv.Records()
		if err != nil {
			t.Fatal(err)
		}
		got, missing = linesShipped(recs, re), missing[:0]
		for n := range onDisk {
			if got[n] == 0 {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			slices.Sort(missing)
			return got, missing
		}
	}
}

// linesShipped counts the numbered lines among the records.
func linesShipped(recs []forwardserver.Record, re *regexp.Regexp) map[int]int {
	got := map[int]int{}
	for _, r := range recs {
		msg, _ := r.Fields["message"].([]byte)
		for _, l := range strings.Split(string(msg), "\n") {
			if m := re.FindStringSubmatch(l); m != nil {
				n, _ := strconv.Atoi(m[1])
				got[n]++
			}
		}
	}
	return got
}
