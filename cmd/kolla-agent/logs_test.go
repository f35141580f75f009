package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/forwardserver"
	"github.com/kolla-agent/kolla-agent/internal/keystone"
	"github.com/kolla-agent/kolla-agent/internal/rsyslog"
)

// logsEnv is the environment of an agent in a keystone pod without the API:
// the record fields come from it.
func logsEnv(extra ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "POD_NAME=keystone-0", "NAMESPACE=openstack", "CONTAINER_NAME=keystone"}, extra...)
}

// osloLine is line n as oslo.log writes it: each its own record.
func osloLine(n int) string {
	return fmt.Sprintf("2026-11-23 17:40:%02d.%03d 4242 INFO keystone.server [-] line %d\n", n/1000%60, n%1000, n)
}

var lineNo = regexp.MustCompile(`\] line (\d+)$`)

// shipped is what the receiver holds of the lines osloLine wrote: how often
// each arrived, and how often after dropping the duplicates a receiver can
// recognise by (id, offset).
type shipped struct {
	seen, unique map[int]int
	where        map[int][]string // line -> the id@offset of each record that held it
	records      int
	outOfOrder   int // lines of one file that arrived after a later one of it
}

func collect(t *testing.T, recs []forwardserver.Record) shipped {
	t.Helper()
	s := shipped{seen: map[int]int{}, unique: map[int]int{}, where: map[int][]string{}, records: len(recs)}
	type at struct {
		id     string
		offset float64
	}
	first := map[at]string{}
	last := map[string]int{} // by file id
	for _, r := range recs {
		msg, _ := r.Fields["message"].([]byte)
		id, _ := r.Fields["id"].(string)
		off, _ := r.Fields["offset"].(float64)
		k := at{id, off}
		prev, dup := first[k]
		if dup && prev != string(msg) {
			t.Errorf("two records at %s offset %v differ:\n%q\n%q", id, off, prev, msg)
		}
		first[k] = string(msg)
		for _, l := range strings.Split(string(msg), "\n") {
			m := lineNo.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			n, _ := strconv.Atoi(m[1])
			s.seen[n]++
			s.where[n] = append(s.where[n], fmt.Sprintf("%s@%v", id, off))
			if dup {
				continue
			}
			s.unique[n]++
			if n < last[id] {
				s.outOfOrder++
			}
			last[id] = n
		}
	}
	return s
}

func (s shipped) dups() int {
	d := 0
	for _, c := range s.seen {
		d += c - 1
	}
	return d
}

// Log files shipped by `kolla-agent run` to a real Fluent forward server
// through everything that can go wrong on the way: the receiver SIGKILLed
// and restarted, the agent SIGKILLed and started again, a rename rotation
// and a copytruncate, then SIGTERM right after the last lines. Every line
// arrives; the duplicates at-least-once delivery makes are exactly those a
// receiver drops by (file id, offset), and in order within each file; the
// failing receiver shows as a degraded duty, never as an unready pod.
func TestLogsShippedThroughFaults(t *testing.T) {
	srv := forwardserver.Start(t, forwardserver.Options{})
	dir := logDir(t, "keystone")
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfg := agentYAML(t, fmt.Sprintf(`
probes:
  address: 127.0.0.1:%d
  socket: "off"
logs:
  files:
    - path: %s/*.log
      exclude: ["*.gz"]
  sink: {type: forward, address: %q, ackTimeout: 2s}
  stateDir: %s/.kolla-agent
`, port, dir, srv.Addr(), dir))
	start := func() *agentProc {
		a := startAgent(t, logsEnv(), "--config", cfg, "run", "--", "sleep", "300")
		a.waitLog("logs: following")
		return a
	}
	log := filepath.Join(dir, "keystone.log")
	w, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { w.Close() }()
	a := start()
	const total = 30_000
	for i := range total {
		if _, err := w.WriteString(osloLine(i)); err != nil {
			t.Fatal(err)
		}
		switch i {
		case 3_000:
			if err := srv.Kill(); err != nil {
				t.Fatal(err)
			}
		case 3_001:
			// Readiness is the service's: a log receiver that is down
			// shows in ?verbose as a degraded duty.
			var body string
			deadline := time.Now().Add(30 * time.Second)
			for code := 0; code != 200 || !strings.Contains(body, "logs"); code, body = get(base + "/readyz?verbose") {
				if time.Now().After(deadline) {
					t.Fatalf("the receiver down is not shown as the logs duty degraded: %d\n%s", code, body)
				}
				time.Sleep(50 * time.Millisecond)
			}
		case 6_000:
			srv.Restart(t)
		case 10_000:
			syscall.Kill(a.cmd.Process.Pid, syscall.SIGKILL)
			a.exit(10 * time.Second)
			a = start()
		case 15_000: // rename rotation: logrotate's create
			w.Close()
			if err := os.Rename(log, log+".1"); err != nil {
				t.Fatal(err)
			}
			if w, err = os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
				t.Fatal(err)
			}
		case 20_000: // logrotate's copytruncate, with delaycompress
			if err := os.Rename(log+".1", log+".2"); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("cp", "-p", log, log+".1").CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if err := w.Truncate(0); err != nil {
				t.Fatal(err)
			}
		}
		if i%500 == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	// The last lines are shipped by the stop's drain, or never: once the
	// agent has exited nothing else reads them.
	a.cmd.Process.Signal(syscall.SIGTERM)
	if code := a.exit(60 * time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit code %d, want the service's 143:\n%s", code, a.out.String())
	}
	recs, err := srv.Records()
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, recs)
	var missing []int
	for i := range total {
		if got.seen[i] == 0 {
			missing = append(missing, i)
		}
		if got.unique[i] > 1 {
			t.Errorf("line %d arrived %d times at distinct (id, offset): %v", i, got.unique[i], got.where[i])
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d of %d lines missing, first %v\nagent:\n%s", len(missing), total, missing[:min(10, len(missing))], a.out.String())
	}
	if got.outOfOrder > 0 {
		t.Errorf("%d lines arrived after a later line of their file", got.outOfOrder)
	}
	r := recs[0]
	if r.Tag != "kolla.keystone.keystone" || r.Fields["pod"] != "keystone-0" || r.Fields["namespace"] != "openstack" || r.Fields["container"] != "keystone" || r.Fields["file"] != log {
		t.Errorf("record fields: %s %v", r.Tag, r.Fields)
	}
	t.Logf("%d lines in %d records; %d duplicate lines, all recognisable by (id, offset)", total, got.records, got.dups())
	// One batch (512 KiB) in flight at each of the two failures that can
	// make duplicates: the receiver's kill and the agent's.
	if limit := 2 * (512 << 10) / len(osloLine(total)); got.dups() > limit {
		t.Errorf("%d duplicate lines, more than two batches' %d", got.dups(), limit)
	}
}

// A real traceback: keystone under `kolla-agent run`, its database damaged
// under it, logs the exception of a token request (oslo.log prefixes every
// traceback line with the header of the line that logged it). It arrives
// as one record, not one per line.
func TestLogsKeystoneTraceback(t *testing.T) {
	shared, err := keystoneOnce()
	if err != nil {
		t.Fatalf("keystone: %v", err)
	}
	inst, err := shared.Clone(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := forwardserver.Start(t, forwardserver.Options{})
	ksPort := freePort(t)
	cfg := agentYAML(t, fmt.Sprintf(`
logs:
  files:
    - path: %s
      tag: kolla.keystone
  sink: {type: forward, address: %q}
  stateDir: %s/.kolla-agent
`, inst.LogFile, srv.Addr(), filepath.Dir(inst.LogFile)))
	a := startAgent(t, append(inst.Env(), "POD_NAME=keystone-0", "NAMESPACE=openstack"), append([]string{"--config", cfg, "run", "--"}, inst.Command(ksPort)...)...)
	if _, err := keystone.WaitV3(ctxT(t), ksPort, a.done); err != nil {
		t.Fatalf("%v\n%s", err, a.out.String())
	}
	drop := exec.Command("/usr/bin/python3", "-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('DROP TABLE local_user'); c.commit()", filepath.Join(inst.Dir, "keystone.db"))
	if out, err := drop.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	body := `{"auth": {"identity": {"methods": ["password"], "password": {"user": {"name": "admin", "domain": {"id": "default"}, "password": "x"}}}}}`
	// keystone answers 500, or uWSGI drops the connection: either way the
	// exception is in its log.
	if resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v3/auth/tokens", ksPort), "application/json", strings.NewReader(body)); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 500 {
			t.Fatalf("token request on a damaged database: %d, want a server error", resp.StatusCode)
		}
	}
	var tb []int
	var all []forwardserver.Record
	eventually(t, "the traceback shipped", func() bool {
		all, _ = srv.Records()
		tb = tb[:0]
		for i, r := range all {
			if msg, _ := r.Fields["message"].([]byte); bytes.Contains(msg, []byte("Traceback (most recent call last)")) {
				tb = append(tb, i)
			}
		}
		return len(tb) > 0
	})
	if len(tb) != 1 {
		t.Fatalf("%d records hold a traceback, want 1", len(tb))
	}
	rec := all[tb[0]]
	msg := string(rec.Fields["message"].([]byte))
	lines := strings.Split(strings.TrimSuffix(msg, "\n"), "\n")
	header := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \d+ ERROR \S+ `).FindString(lines[0])
	if header == "" || len(lines) < 5 || !strings.Contains(msg, "no such table: local_user") {
		t.Fatalf("the traceback record (%d lines):\n%s", len(lines), msg)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, header) {
			t.Errorf("a line of another header in the traceback record: %q", l)
		}
	}
	// No line of that header in any other record.
	for i, r := range all {
		m, _ := r.Fields["message"].([]byte)
		if i != tb[0] && bytes.Contains(m, []byte(header)) {
			t.Errorf("a piece of the traceback in another record:\n%s", m)
		}
	}
	if rec.Tag != "kolla.keystone" {
		t.Errorf("tag %q", rec.Tag)
	}
	t.Logf("traceback: one record of %d lines", len(lines))
}

// A directory that gets 100 files after the agent started (found by the
// directory watch), one with a 10 MB line (split at maxLineSize, never
// skipped, every byte shipped), one of invalid UTF-8 (passed through as
// bytes), one shorter than the identity's fingerprint.
func TestLogsManyFilesLongLineBytes(t *testing.T) {
	srv := forwardserver.Start(t, forwardserver.Options{})
	dir := logDir(t, "nova")
	cfg := agentYAML(t, fmt.Sprintf(`
logs:
  files: [{path: %s/*.log}]
  sink: {type: forward, address: %q}
  stateDir: %s/.kolla-agent
  maxLineSize: 262144
  rescan: 1h
`, dir, srv.Addr(), dir))
	write(t, filepath.Join(dir, "f000.log"), osloLine(0))
	a := startAgent(t, logsEnv(), "--config", cfg, "run", "--", "sleep", "300")
	a.waitLog("logs: following") // the watch is set: the others are found by it
	for i := 1; i < 100; i++ {
		write(t, filepath.Join(dir, fmt.Sprintf("f%03d.log", i)), osloLine(i))
	}
	long := bytes.Repeat([]byte("0123456789abcdef"), 10<<20/16)
	write(t, filepath.Join(dir, "long.log"), string(long)+"\n")
	raw := []byte("2026-11-23 17:40:00.000 1 INFO x [-] \xff\xfe bytes \xc3\x28\n")
	write(t, filepath.Join(dir, "raw.log"), string(raw))
	write(t, filepath.Join(dir, "short.log"), "x\n")

	var recs []forwardserver.Record
	eventually(t, "every file shipped", func() bool {
		recs, _ = srv.Records()
		files := map[string]bool{}
		n := 0
		for _, r := range recs {
			f, _ := r.Fields["file"].(string)
			files[f] = true
			if strings.HasSuffix(f, "/long.log") {
				m, _ := r.Fields["message"].([]byte)
				n += len(m)
			}
		}
		return len(files) == 103 && n >= len(long)
	})
	var pieces [][]byte
	for _, r := range recs {
		f, _ := r.Fields["file"].(string)
		m, _ := r.Fields["message"].([]byte)
		switch filepath.Base(f) {
		case "long.log":
			if len(m) > 256<<10+1 {
				t.Errorf("a piece of %d bytes, over maxLineSize", len(m))
			}
			pieces = append(pieces, m)
		case "raw.log":
			if !bytes.Equal(m, bytes.TrimSuffix(raw, []byte("\n"))) && !bytes.Equal(m, raw) {
				t.Errorf("invalid UTF-8 changed on the way: %q", m)
			}
		case "short.log":
			if strings.TrimSpace(string(m)) != "x" {
				t.Errorf("short file: %q", m)
			}
		}
	}
	joined := bytes.ReplaceAll(bytes.Join(pieces, nil), []byte("\n"), nil)
	if !bytes.Equal(joined, long) {
		t.Errorf("the 10 MB line arrived as %d bytes in %d pieces, want %d bytes", len(joined), len(pieces), len(long))
	}
	t.Logf("10 MB line: %d pieces", len(pieces))
}

// The receiver down for a minute while the service writes: the agent stops
// reading (the file is the buffer) and its memory stays bounded; once the
// receiver is back every line arrives.
func TestLogsMemoryBoundedWhileReceiverDown(t *testing.T) {
	srv := forwardserver.Start(t, forwardserver.Options{})
	dir := logDir(t, "glance")
	cfg := agentYAML(t, fmt.Sprintf(`
logs:
  files: [{path: %s/*.log}]
  sink: {type: forward, address: %q, ackTimeout: 2s}
  stateDir: %s/.kolla-agent
`, dir, srv.Addr(), dir))
	w, err := os.OpenFile(filepath.Join(dir, "glance-api.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	a := startAgent(t, logsEnv(), "--config", cfg, "run", "--", "sleep", "300")
	a.waitLog("logs: following")
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	// A minute of a busy service: 300,000 lines, 21 MB.
	n := 0
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		var b strings.Builder
		for range 1_000 {
			b.WriteString(osloLine(n))
			n++
		}
		w.WriteString(b.String())
		time.Sleep(200 * time.Millisecond)
	}
	hwm := vmHWM(t, a.cmd.Process.Pid)
	t.Logf("%d lines written with the receiver down; the agent's peak RSS %.1f MiB", n, float64(hwm)/(1<<20))
	if hwm > 32<<20 {
		t.Errorf("peak RSS %d bytes, over 32 MiB", hwm)
	}
	srv.Restart(t)
	recs := srv.WaitRecords(t, n, 3*time.Minute) // one record per line, and duplicates
	if got := collect(t, recs); len(got.seen) != n {
		t.Errorf("%d of %d lines after the outage", len(got.seen), n)
	}
}

// logDir is a new directory of log files named like a kolla service's.
func logDir(t testing.TB, service string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), service)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// vmHWM is a process's peak resident set, in bytes.
func vmHWM(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// What the logs: section names but cannot be opened is exit 1 before the
// service starts, naming the field.
func TestLogsBadCAFile(t *testing.T) {
	dir := t.TempDir()
	cfg := agentYAML(t, fmt.Sprintf(`
logs:
  files: [{path: %s/*.log}]
  sink: {type: syslog, address: "127.0.0.1:6514", tls: {caFile: %s/missing.pem}}
  stateDir: %s/state
`, dir, dir, dir))
	a := startAgent(t, logsEnv(), "--config", cfg, "run", "--", "touch", filepath.Join(dir, "started"))
	a.wantExit(1)
	if out := a.out.String(); !strings.Contains(out, "logs.sink.tls: caFile") || !strings.Contains(out, "missing.pem") {
		t.Errorf("output does not name the field and the file:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
		t.Error("the service started")
	}
}

// `kolla-agent sidecar` with the stdout sink: the streaming-sidecar
// pattern, so `kubectl logs` of the sidecar shows the service's file as
// JSON lines tagged with the file, the offset and the pod.
func TestLogsSidecarStdout(t *testing.T) {
	dir := logDir(t, "glance")
	write(t, filepath.Join(dir, "glance-api.log"), osloLine(1)+osloLine(2))
	cfg := agentYAML(t, fmt.Sprintf(`
logs:
  files: [{path: %s/*.log}]
  sink: {type: stdout, format: json}
  stateDir: %s/.kolla-agent
`, dir, dir))
	a := startAgent(t, logsEnv(), "--config", cfg, "sidecar")
	a.waitLog(`"message":"2026-11-23 17:40:00.002 4242 INFO keystone.server [-] line 2"`)
	out := a.out.String()
	if !strings.Contains(out, `"tag":"kolla.glance.glance-api"`) || !strings.Contains(out, `"pod":"keystone-0"`) || !strings.Contains(out, `"id":"`) {
		t.Errorf("stdout records:\n%s", out)
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.wantExit(0)
}

// The sinks' TLS with verification on, as agent.yaml sets it: the forward
// sink to the real Fluent server with a private CA and the shared key read
// from a file (a mounted Secret), and the syslog sink to the real rsyslog
// with the name taken from the address. A serverName the certificate does
// not carry ships nothing.
func TestLogsTLSVerifiedAndSharedKeyFile(t *testing.T) {
	fwd := forwardserver.Start(t, forwardserver.Options{TLS: true, SharedKey: "k3y-from-a-secret"})
	syslog := rsyslog.Start(t, rsyslog.Options{TLS: true})
	run := func(name, sink string) (string, *agentProc) {
		dir := logDir(t, name)
		keyFile := filepath.Join(t.TempDir(), "shared-key")
		write(t, keyFile, "k3y-from-a-secret\n")
		cfg := agentYAML(t, fmt.Sprintf(`
logs:
  files: [{path: %s/*.log}]
  sink: %s
  stateDir: %s/.kolla-agent
`, dir, strings.NewReplacer("KEYFILE", keyFile).Replace(sink), dir))
		write(t, filepath.Join(dir, name+".log"), osloLine(1))
		return dir, startAgent(t, logsEnv(), "--config", cfg, "sidecar")
	}

	_, a := run("forward", fmt.Sprintf(`{type: forward, address: %q, sharedKeyFile: KEYFILE, tls: {caFile: %s}}`, fwd.Addr(), fwd.CAFile))
	if recs := fwd.WaitRecords(t, 1, 30*time.Second); !bytes.Contains(recs[0].Fields["message"].([]byte), []byte("line 1")) {
		t.Errorf("forward record %+v", recs[0])
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.wantExit(0)

	_, a = run("syslog", fmt.Sprintf(`{type: syslog, address: %q, tls: {caFile: %s}}`, syslog.Addr, syslog.CAFile))
	if m := syslog.WaitMessages(t, 1, 30*time.Second)[0]; !strings.Contains(m.MSG, "line 1") {
		t.Errorf("syslog message %+v", m)
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.wantExit(0)

	_, a = run("wrong", fmt.Sprintf(`{type: syslog, address: %q, tls: {caFile: %s, serverName: syslog.wrong.example}}`, syslog.Addr, syslog.CAFile))
	a.waitLog("syslog.wrong.example")
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.wantExit(0)
	msgs, err := syslog.Messages()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if m.AppName == "kolla.wrong.wrong" {
			t.Errorf("shipped to a certificate of another name: %+v", m)
		}
	}
}
