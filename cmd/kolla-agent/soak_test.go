package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/forwardserver"
)

// soakWriter is the soaked service: oslo.log's WatchedFileHandler writing
// numbered lines, each run numbering on from where the last one's counter
// file says (a SIGKILL loses at most the line being written, which is then
// not on disk either).
const soakWriter = `
import logging, logging.handlers, os, sys, time
path, counter = sys.argv[1], sys.argv[2]
try:
    n = int(open(counter).read() or 0)
except FileNotFoundError:
    n = 0
h = logging.handlers.WatchedFileHandler(path)
h.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d 4242 INFO soak [-] %(message)s", "%Y-%m-%d %H:%M:%S"))
log = logging.getLogger("soak")
log.addHandler(h)
log.setLevel(logging.INFO)
while True:
    log.info("line %d", n)
    n += 1
    if n % 50 == 0:
        with open(counter + ".tmp", "w") as f:
            f.write(str(n + 50))
        os.replace(counter + ".tmp", counter)
        time.sleep(0.025)
`

// soakFor is how long TestSoak runs: KOLLA_AGENT_SOAK (`make soak` sets
// 30m), else 3 minutes.
func soakFor(t *testing.T) time.Duration {
	if v := os.Getenv("KOLLA_AGENT_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("KOLLA_AGENT_SOAK=%q: %v", v, err)
		}
		return d
	}
	return 3 * time.Minute
}

// `kolla-agent sidecar` beside a service that logs through
// WatchedFileHandler (~2,000 lines/s) while logrotate rotates its file in
// create mode, and at random every 5-15 s one of: the API server
// SIGKILLed, CoreDNS stopped, the Fluent receiver SIGKILLed (each back
// after 2-6 s), the service SIGKILLed (started again, as the kubelet
// would). The agent checks the API and DNS the whole time (dependency
// and dns checks) and ships the file. At the end every line on disk has
// arrived, and the agent's RSS, open files and goroutines are flat: the
// slopes are reported, and the last quarter of the run is held to the
// second's.
func TestSoak(t *testing.T) {
	d := soakFor(t)
	ns := namespace(t)
	mkService(t, ns, "mariadb", false, map[string]string{"app": "mariadb"})
	mkPod(t, ns, "mariadb-0", map[string]string{"app": "mariadb"})
	setReady(t, ns, "mariadb-0", "10.10.0.5", true)
	srv := forwardserver.Start(t, forwardserver.Options{})
	dir := logDir(t, "soak")
	log := filepath.Join(dir, "soak.log")
	counter := filepath.Join(t.TempDir(), "counter")
	conf, lrState := filepath.Join(t.TempDir(), "logrotate.conf"), filepath.Join(t.TempDir(), "logrotate.state")
	write(t, conf, fmt.Sprintf("%s {\n    create\n    rotate 1000\n    missingok\n    notifempty\n}\n", log))
	port := freePort(t)
	cfg := agentYAML(t, fmt.Sprintf(`
sidecar:
  process: {cmdline: "soak-writer"}
probes:
  address: 127.0.0.1:%d
  socket: "off"
  checks:
    - name: process
      process: {}
      probes: [liveness]
    - name: db
      dependency: {wait: "service:mariadb"}
      probes: [readiness]
      period: 2s
    - name: dns
      dependency: {wait: "dns:mariadb.%s.svc.%s"}
      probes: [readiness]
      period: 2s
logs:
  files: [{path: %s/*.log}]
  sink: {type: forward, address: %q, ackTimeout: 2s}
  stateDir: %s/state
`, port, ns, s.env.ClusterDomain, dir, srv.Addr(), t.TempDir()))
	a := startAgent(t, append(agentEnv(t, ns), "POD_NAME=soak-0"), "--config", cfg, "sidecar")

	var service *exec.Cmd
	startService := func() {
		service = diesWithTest(exec.Command("/usr/bin/python3", "-c", soakWriter, log, counter, "soak-writer"))
		service.Stdout, service.Stderr = os.Stderr, os.Stderr
		if err := service.Start(); err != nil {
			t.Fatal(err)
		}
		go service.Wait()
	}
	startService()
	defer func() { service.Process.Kill() }()
	a.waitLog("logs: following")

	type sample struct {
		at                   time.Duration
		rss, fds, goroutines float64
	}
	var samples []sample
	begin := time.Now()
	faults := map[string]int{}
	nextFault := begin.Add(randBetween(5, 15))
	nextRotate := begin.Add(3 * time.Second)
	nextSample := begin
	for time.Since(begin) < d {
		now := time.Now()
		if now.After(nextSample) {
			_, m := get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
			samples = append(samples, sample{at: now.Sub(begin), rss: metricValue(t, m, "process_resident_memory_bytes"),
				fds: metricValue(t, m, "process_open_fds"), goroutines: metricValue(t, m, "go_goroutines")})
			nextSample = now.Add(5 * time.Second)
		}
		if now.After(nextRotate) {
			if out, err := exec.Command("logrotate", "-f", "-s", lrState, conf).CombinedOutput(); err != nil && !strings.Contains(string(out), "already exists") {
				t.Errorf("logrotate: %v: %s", err, out)
			}
			nextRotate = now.Add(randBetween(2, 8))
		}
		if now.After(nextFault) && time.Since(begin) < d-20*time.Second {
			down := randBetween(2, 6)
			switch what := []string{"apiserver", "dns", "receiver", "service"}[rand.IntN(4)]; what {
			case "apiserver":
				faults[what]++
				if err := s.env.KillAPIServer(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(down)
				if err := s.env.StartAPIServer(); err != nil {
					t.Fatal(err)
				}
			case "dns":
				faults[what]++
				if err := s.env.StopDNS(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(down)
				if err := s.env.StartDNS(); err != nil {
					t.Fatal(err)
				}
			case "receiver":
				faults[what]++
				if err := srv.Kill(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(down)
				srv.Restart(t)
			case "service":
				faults[what]++
				service.Process.Kill()
				time.Sleep(down / 2)
				startService()
			}
			nextFault = time.Now().Add(randBetween(5, 15))
		}
		time.Sleep(200 * time.Millisecond)
		select {
		case <-a.done:
			t.Fatalf("the agent exited (%d) during the soak:\n%s", a.code, a.out.String())
		default:
		}
	}
	service.Process.Kill()
	time.Sleep(200 * time.Millisecond)

	onDisk, files := linesOnDisk(t, dir, soakLine)
	_, missing := awaitShipped(t, srv, onDisk, soakLine, 2*time.Minute)
	if len(missing) > 0 {
		t.Errorf("%d of %d lines on disk never arrived (first %v)", len(missing), len(onDisk), missing[:min(10, len(missing))])
	}
	code, body := get(fmt.Sprintf("http://127.0.0.1:%d/readyz?verbose", port))
	if code != 200 {
		t.Errorf("not ready after the faults: %d\n%s", code, body)
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.exit(30 * time.Second)

	slope := func(f func(sample) float64) float64 { // per hour, least squares
		var n, sx, sy, sxx, sxy float64
		for _, s := range samples {
			x, y := s.at.Hours(), f(s)
			n, sx, sy, sxx, sxy = n+1, sx+x, sy+y, sxx+x*x, sxy+x*y
		}
		return (n*sxy - sx*sy) / (n*sxx - sx*sx)
	}
	quarter := func(q int, f func(sample) float64) float64 {
		k := len(samples) / 4
		var v []float64
		for _, s := range samples[q*k : (q+1)*k] {
			v = append(v, f(s))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	rss := func(s sample) float64 { return s.rss }
	fds := func(s sample) float64 { return s.fds }
	gor := func(s sample) float64 { return s.goroutines }
	t.Logf("soak %v: faults %v; %d lines on disk in %d files, all shipped: %v", d, faults, len(onDisk), len(files), len(missing) == 0)
	t.Logf("slopes per hour: RSS %+.1f MiB, open files %+.1f, goroutines %+.1f (%d samples; RSS %.1f -> %.1f MiB, fds %.0f -> %.0f, goroutines %.0f -> %.0f)",
		slope(rss)/(1<<20), slope(fds), slope(gor), len(samples), quarter(1, rss)/(1<<20), quarter(3, rss)/(1<<20), quarter(1, fds), quarter(3, fds), quarter(1, gor), quarter(3, gor))
	// Medians of the second and the last quarter: the first holds the
	// start's growth. A leak of one descriptor or goroutine per fault
	// shows over a dozen faults.
	if len(samples) >= 8 {
		if quarter(3, fds) > quarter(1, fds)+4 {
			t.Errorf("open files grow: %.0f -> %.0f", quarter(1, fds), quarter(3, fds))
		}
		if quarter(3, gor) > quarter(1, gor)+8 {
			t.Errorf("goroutines grow: %.0f -> %.0f", quarter(1, gor), quarter(3, gor))
		}
		if quarter(3, rss) > 1.5*quarter(1, rss) {
			t.Errorf("RSS grows: %.1f -> %.1f MiB", quarter(1, rss)/(1<<20), quarter(3, rss)/(1<<20))
		}
	}
}

func randBetween(lo, hi int) time.Duration {
	return time.Duration(lo)*time.Second + rand.N(time.Duration(hi-lo)*time.Second)
}

// metricValue reads one unlabelled sample from a /metrics page's body.
func metricValue(t *testing.T, body, name string) float64 {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	t.Errorf("no %s in the /metrics page", name)
	return 0
}

var soakLine = regexp.MustCompile(`INFO soak \[-\] line (\d+)$`)
