package main

// The footprint of a pod's agent with every duty (issue 12 §4): `kolla-agent
// run` supervising a service, with 2 API watches (dependency checks on two
// Services), 4 probe checks (one an oslo.messaging rpc call through a real
// RabbitMQ to a real oslo.messaging server), 1 log file shipped to a real
// Fluent forward server, and 1 ConfigMap volume watched for reload, laid out
// by the kubelet's own AtomicWriter.
//
// Everything here is read from /proc. The test (TestFootprintEveryDuty)
// asserts only what holds on any machine at any speed: how many wakeups the
// configured periods explain, which descriptors and connections the agent
// holds, and that an idle window leaves them as they were. RSS and CPU are
// figures, not assertions: BenchmarkFootprintIdle reports them beside an
// idle `sleep` measured in the same run.

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/kolla-agent/kolla-agent/internal/atomicwriter"
	"github.com/kolla-agent/kolla-agent/internal/forwardserver"
	"github.com/kolla-agent/kolla-agent/internal/proc"
	"github.com/kolla-agent/kolla-agent/internal/rabbitmq"
)

// footprintPeriods are the periods the pod's agent.yaml sets; the wakeups
// an idle agent may have are derived from them (wakeupModel).
type footprintPeriods struct {
	check        time.Duration // probes.checks[].period, each of the 4 checks
	logsIdle     time.Duration // logs.multiline.idle: the shipper ticks at half of it while grouping
	logsRescan   time.Duration // logs.rescan
	reloadRescan time.Duration // reload.rescan
}

// defaultPeriods are agent.yaml's defaults: what a pod that sets none has.
var defaultPeriods = footprintPeriods{check: 10 * time.Second, logsIdle: time.Second, logsRescan: 10 * time.Second, reloadRescan: time.Minute}

// wakeupSource is one periodic reason for the idle agent to run, and how
// often it comes.
type wakeupSource struct {
	what    string
	perSec  float64
	derived string // where the rate comes from
}

// wakeupModel lists every timer an idle agent with every duty has, from the
// configured periods and the constants of the code and of the libraries it
// uses. Anything else that wakes the agent (a busy loop, a short poll) is
// not in it.
func (p footprintPeriods) wakeupModel() []wakeupSource {
	per := func(d time.Duration) float64 { return 1 / d.Seconds() }
	return []wakeupSource{
		{"agent's own loop (liveness beat, drain file)", 1, "probes.Config.Tick, 1s"},
		{"4 checks", 4 * per(p.check), "4 / probes.checks[].period " + p.check.String()},
		// The shipper's tick (half of logs.multiline.idle) runs only while
		// a record is being grouped or a file is under no watch: not idle.
		{"log glob rescan", per(p.logsRescan), "1 / logs.rescan " + p.logsRescan.String()},
		{"reload volume rescan", per(p.reloadRescan), "1 / reload.rescan " + p.reloadRescan.String()},
		// amqp091-go's heartbeater ticks every negotiated interval (the
		// rpc check asks 10 s); RabbitMQ sends one every half interval.
		{"AMQP heartbeats", per(10*time.Second) + 2*per(10*time.Second), "sent every 10s, received every 5s"},
		// client-go's HTTP/2 transport pings after 30 s without a frame;
		// the API server sends a watch a bookmark about once a minute.
		{"API connection", per(30*time.Second) + 2*per(time.Minute), "HTTP/2 ping after 30s idle; a bookmark per watch per minute"},
		{"Go runtime", per(2 * time.Minute), "forced GC every 2 min"},
	}
}

func wakeupsPerSec(m []wakeupSource) float64 {
	sum := 0.0
	for _, w := range m {
		sum += w.perSec
	}
	return sum
}

// dutyPod is a running agent with every duty and what it talks to.
type dutyPod struct {
	agent    *agentProc
	base     string // the probe server, http://127.0.0.1:PORT
	sock     string // the probe socket
	amqpPort int
	fwdPort  int
	apiPort  int
	logFile  string
	periods  footprintPeriods
	ns       string
	began    time.Time // before the agent started
}

// startDutyPod starts the broker and its oslo.messaging server, the forward
// server, two Services with a ready pod each, the ConfigMap volume, and the
// agent; it returns once every check passes, a log line was acknowledged and
// the volume is watched. Everything stops when the test ends, the agent
// first.
func startDutyPod(t testing.TB, p footprintPeriods) *dutyPod {
	t.Helper()
	if ok, why := rabbitmq.Installed(); !ok {
		t.Fatalf("rabbitmq: %s", why)
	}
	// Outside t.TempDir: a broker that fails to stop keeps its files.
	bdir, err := os.MkdirTemp("", "kolla-agent-rabbitmq-")
	if err != nil {
		t.Fatal(err)
	}
	broker, err := rabbitmq.Start(bdir)
	if err != nil {
		t.Fatalf("rabbitmq: %v", err)
	}
	t.Cleanup(func() {
		if err := broker.Stop(); err != nil {
			t.Errorf("rabbitmq: %v (files kept in %s)", err, bdir)
			return
		}
		os.RemoveAll(bdir)
	})
	t.Logf("rabbitmq booted in %s", broker.BootTime.Round(time.Millisecond))
	// nova-conductor's RPC server; Stop above stops it too.
	rpcSrv, err := broker.StartRPCServer(rabbitmq.RPCServerOptions{Topic: "conductor", Server: "footprint", ControlExchange: "nova", PingEnabled: true})
	if err != nil {
		t.Fatal(err)
	}
	osloConf, err := os.ReadFile(rpcSrv.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	fwd := forwardserver.Start(t, forwardserver.Options{})

	ns := namespace(t)
	for i, svc := range []string{"mariadb", "rabbitmq"} {
		mkService(t, ns, svc, false, map[string]string{"app": svc})
		mkPod(t, ns, svc+"-0", map[string]string{"app": svc})
		setReady(t, ns, svc+"-0", fmt.Sprintf("10.30.0.%d", i+1), true)
	}

	// The service's config comes from a ConfigMap volume, as the kubelet
	// writes one: the rpc check reads the rendered copy.
	kw := atomicwriter.Start(t)
	dir := t.TempDir()
	vol := filepath.Join(dir, "config_files")
	if err := kw.Write(vol, map[string]string{"nova.conf": string(osloConf)}); err != nil {
		t.Fatal(err)
	}
	confDir := filepath.Join(dir, "etc-nova")
	logs := filepath.Join(dir, "log", "nova")
	for _, d := range []string{confDir, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logFile := filepath.Join(logs, "nova-conductor.log")
	if err := os.WriteFile(logFile, []byte(osloLine(0)), 0o644); err != nil {
		t.Fatal(err)
	}

	port := freePort(t)
	sock := filepath.Join(dir, "agent.sock")
	cfgPath := filepath.Join(dir, "agent.yaml")
	cfg := fmt.Sprintf(`
run:
  grace: 5s
render:
  - {src: %[1]s/nova.conf, dest: %[2]s/nova.conf}
reload:
  stateDir: %[3]s/reload
  rescan: %[4]s
probes:
  address: 127.0.0.1:%[5]d
  socket: %[6]s
  checks:
    - {name: service, process: {}, probes: [startup, readiness, liveness], period: %[7]s}
    - {name: rpc, rpc: {configFile: %[2]s/nova.conf, topic: conductor, server: footprint}, period: %[7]s}
    - {name: database, dependency: {wait: "service:mariadb"}, period: %[7]s}
    - {name: broker, dependency: {wait: "service:rabbitmq"}, period: %[7]s}
logs:
  files: [{path: %[8]s/*.log}]
  sink: {type: forward, address: %[9]q}
  stateDir: %[8]s/.kolla-agent
  rescan: %[10]s
  multiline: {idle: %[11]s}
`, vol, confDir, dir, p.reloadRescan, port, sock, p.check, logs, fwd.Addr(), p.logsRescan, p.logsIdle)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	api, err := url.Parse(s.env.Admin().Host)
	if err != nil {
		t.Fatal(err)
	}
	pod := &dutyPod{
		base: fmt.Sprintf("http://127.0.0.1:%d", port), sock: sock, logFile: logFile,
		amqpPort: broker.AMQPPort, fwdPort: portOf(t, fwd.Addr()), apiPort: portOf(t, api.Host),
		periods: p, ns: ns, began: time.Now(),
	}
	pod.agent = startAgent(t, agentEnv(t, ns), "--config", cfgPath, "run", "--", "sleep", "3600")
	waitStatus(t, pod.base+"/readyz", 200, 90*time.Second)
	body := waitStatus(t, pod.base+"/readyz?verbose", 200, 5*time.Second)
	for _, c := range []string{"service", "rpc", "database", "broker"} {
		if !strings.Contains(body, "[+]"+c+" ") {
			t.Fatalf("check %s does not pass:\n%s", c, body)
		}
	}
	fwd.WaitRecords(t, 1, time.Minute)
	pod.agent.waitLog("reload: watching")
	if _, err := os.Stat(filepath.Join(confDir, "nova.conf")); err != nil {
		t.Fatalf("the config was not rendered: %v", err)
	}
	// get's keep-alive connections to the probe server would stay open
	// in the agent: the kubelet's probes do not keep one.
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	return pod
}

func portOf(t testing.TB, hostport string) int {
	t.Helper()
	i := strings.LastIndexByte(hostport, ':')
	n, err := strconv.Atoi(hostport[i+1:])
	if err != nil {
		t.Fatalf("no port in %q", hostport)
	}
	return n
}

// threadSnap is one thread's counters.
type threadSnap struct {
	comm      string
	switches  uint64 // voluntary + nonvoluntary context switches
	runningNs uint64 // time on a CPU (schedstat)
}

// procSnap is what /proc says of a process at one moment.
type procSnap struct {
	at       time.Time
	cpuTicks uint                // utime + stime of the whole process, USER_HZ ticks
	threads  map[int]threadSnap  // by TID
	status   procfs.ProcStatus   // VmRSS, VmHWM, RssAnon, RssFile (bytes)
	fds      map[string][]string // kind -> targets, without those inherited
	nfds     int
	inherit  []string // descriptors the agent inherited from the test's environment
}

func snapProc(t testing.TB, pid int) procSnap {
	t.Helper()
	p, err := procfs.NewProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	sn := procSnap{at: time.Now(), threads: map[int]threadSnap{}, fds: map[string][]string{}}
	st, err := p.Stat()
	if err != nil {
		t.Fatal(err)
	}
	sn.cpuTicks = st.UTime + st.STime
	if sn.status, err = p.NewStatus(); err != nil {
		t.Fatal(err)
	}
	threads, err := procfs.AllThreads(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range threads {
		ts, err := th.NewStatus()
		if err != nil {
			continue // it has just exited
		}
		comm, _ := th.Comm()
		ss, _ := th.Schedstat()
		sn.threads[th.PID] = threadSnap{comm: comm, switches: ts.VoluntaryCtxtSwitches + ts.NonVoluntaryCtxtSwitches, runningNs: ss.RunningNanoseconds}
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	inherited := inheritedFDs()
	for _, e := range ents {
		tg, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed since
		}
		if inherited[e.Name()] == tg {
			sn.inherit = append(sn.inherit, e.Name()+" "+tg)
			continue
		}
		sn.nfds++
		sn.fds[fdKind(tg)] = append(sn.fds[fdKind(tg)], tg)
	}
	return sn
}

// inheritedFDs are the test process's descriptors above 2 without
// close-on-exec (a harness's /dev/null or pipe): every process it starts has
// them too, the agent and its service included. They are not the agent's.
func inheritedFDs() map[string]string {
	out := map[string]string{}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err != nil || n <= 2 {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(info), "\n") {
			if f, ok := strings.CutPrefix(l, "flags:"); ok {
				if flags, err := strconv.ParseUint(strings.TrimSpace(f), 8, 64); err == nil && flags&0o2000000 == 0 { // O_CLOEXEC
					out[e.Name()], _ = os.Readlink("/proc/self/fd/" + e.Name())
				}
			}
		}
	}
	return out
}

// fdKind names what a descriptor is: socket, pipe, an anon inode's kind
// (eventpoll, inotify, pidfd, ...), /dev/null, or file.
func fdKind(target string) string {
	switch {
	case strings.HasPrefix(target, "socket:"):
		return "socket"
	case strings.HasPrefix(target, "pipe:"):
		return "pipe"
	case strings.HasPrefix(target, "anon_inode:"):
		return strings.Trim(strings.TrimPrefix(target, "anon_inode:"), "[]")
	case strings.HasPrefix(target, "/dev/"):
		return target
	}
	return "file"
}

// window is what changed between two snapshots of one process.
type window struct {
	secs       float64
	switches   uint64         // all threads present at the end
	perThread  map[int]uint64 // TID -> switches in the window
	cpuFrac    float64        // utime+stime / wall time: fraction of one core
	runningFra float64        // the same from schedstat (ns, not ticks)
	newThreads int            // threads at the end that were not there at the start
}

func diff(a, b procSnap) window {
	w := window{secs: b.at.Sub(a.at).Seconds(), perThread: map[int]uint64{}}
	var runNs uint64
	for tid, tb := range b.threads {
		ta, ok := a.threads[tid]
		if !ok {
			w.newThreads++
		}
		d := tb.switches - ta.switches
		w.perThread[tid] = d
		w.switches += d
		runNs += tb.runningNs - ta.runningNs
	}
	w.cpuFrac = float64(b.cpuTicks-a.cpuTicks) / 100 / w.secs // USER_HZ
	w.runningFra = float64(runNs) / 1e9 / w.secs
	return w
}

// describeThreads is one line per thread that switched in the window.
func (w window) describeThreads(sn procSnap) string {
	tids := make([]int, 0, len(w.perThread))
	for tid := range w.perThread {
		tids = append(tids, tid)
	}
	sort.Slice(tids, func(i, j int) bool { return w.perThread[tids[i]] > w.perThread[tids[j]] })
	var out []string
	for _, tid := range tids {
		out = append(out, fmt.Sprintf("%d(%s)=%d", tid, sn.threads[tid].comm, w.perThread[tid]))
	}
	return strings.Join(out, " ")
}

// tcpConn is one of the agent's TCP sockets.
type tcpConn struct {
	local, remote int // ports
	listening     bool
	inode         uint64
}

// tcpConns lists the TCP sockets of pid's descriptors (its network
// namespace is the test's).
func tcpConns(t testing.TB, sn procSnap) (conns []tcpConn, unix []uint64) {
	t.Helper()
	mine := map[uint64]bool{}
	for _, tg := range sn.fds["socket"] {
		n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(tg, "socket:["), "]"), 10, 64)
		if err == nil {
			mine[n] = true
		}
	}
	fs, err := procfs.NewFS(procfs.DefaultMountPoint)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for _, read := range []func() (procfs.NetTCP, error){fs.NetTCP, fs.NetTCP6} {
		tab, err := read()
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		for _, l := range tab {
			if !mine[l.Inode] || seen[l.Inode] {
				continue
			}
			seen[l.Inode] = true
			conns = append(conns, tcpConn{local: int(l.LocalPort), remote: int(l.RemPort), listening: l.St == 0x0A, inode: l.Inode})
		}
	}
	for in := range mine {
		if !seen[in] {
			unix = append(unix, in) // not TCP: Unix (the probe socket, or a connection)
		}
	}
	slices.Sort(unix)
	return conns, unix
}

// unixPath is the path of the Unix socket with this inode ("" if none).
func unixPath(t testing.TB, inode uint64) string {
	t.Helper()
	fs, err := procfs.NewFS(procfs.DefaultMountPoint)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := fs.NetUNIX()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range tab.Rows {
		if r.Inode == inode {
			return r.Path
		}
	}
	return ""
}

// The agent with every duty, idle for 10 s after it is ready: its wakeups
// stay within what the configured periods explain, it holds exactly the
// connections and descriptors its duties need, reused, not redialled, and
// no more at the end of the window than at its start.
// Wall time, CPU time and RSS are not asserted here: BenchmarkFootprintIdle
// reports them.
func TestFootprintEveryDuty(t *testing.T) {
	// Checks every 2 s: the checks' own wakeups are a good part of the
	// window's, not drowned by the fixed ones.
	periods := defaultPeriods
	periods.check = 2 * time.Second
	pod := startDutyPod(t, periods)
	pid := pod.agent.cmd.Process.Pid

	// Static: nothing but the agent's own executable is mapped from a file
	// (no libc, no loader), so the binary is all an image needs.
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := procfs.NewProc(pid)
	maps, err := p.ProcMaps()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if strings.HasPrefix(m.Pathname, "/") && m.Pathname != exe {
			t.Errorf("the agent maps %s: it is not a static binary", m.Pathname)
		}
	}

	// Let the start's work end (the first checks' connections, the first
	// log batch's offsets, the first reload pass), then watch it idle.
	time.Sleep(3 * time.Second)
	const idle = 10 * time.Second
	start := time.Now()
	a := snapProc(t, pid)
	time.Sleep(idle)
	b := snapProc(t, pid)
	pod.agent.running()
	w := diff(a, b)

	// 1. Wakeups. Each timer the model lists costs the Go runtime a few
	// context switches (the thread that waits in epoll for the next timer
	// wakes, sysmon wakes with it, a second thread may run the goroutine,
	// all sleep again; an rpc look is a publish and a reply): 5.2-8.1 in
	// the development runs. perEvent is about twice the most seen. A Go
	// program doing nothing but tick every 10 ms switches 4,323 times in
	// 10 s on the 2-core development machine, 4.7x this bound for the
	// test's periods; one spinning in a loop 7,726 times, its sysmon alone
	// (which sleeps and wakes 100 times a second while any goroutine runs,
	// whatever else the machine does) 1,214.
	const perEvent, slack = 15.0, 100
	model := periods.wakeupModel()
	events := wakeupsPerSec(model) * w.secs
	bound := uint64(perEvent*events) + slack
	for _, m := range model {
		t.Logf("timer: %-46s %6.3f/s  (%s)", m.what, m.perSec, m.derived)
	}
	t.Logf("idle %.1fs: %d context switches (%.1f/s) across %d threads; the periods explain %.0f wakeups (%.2f/s): %.1f switches each; bound %d",
		w.secs, w.switches, float64(w.switches)/w.secs, len(b.threads), events, events/w.secs, float64(w.switches)/events, bound)
	t.Logf("per thread: %s", w.describeThreads(b))
	if w.switches > bound {
		t.Errorf("%d context switches in %.1fs idle, over %d (%.0f wakeups the configured periods explain x %.0f + %d): a busy loop or a short polling timer",
			w.switches, w.secs, bound, events, perEvent, slack)
	}

	// 2. Connections: one AMQP connection (the rpc check's, kept), one to
	// the forward server (kept between batches), one to the API server
	// (HTTP/2 carries both watches), the probe listener and the probe
	// socket; nothing else. The same sockets at both ends of the window:
	// no check or duty dials per look.
	conns, unix := tcpConns(t, b)
	count := map[string]int{}
	probePort := portOf(t, strings.TrimPrefix(pod.base, "http://"))
	for _, c := range conns {
		switch {
		case c.listening && c.local == probePort:
			count["probe listener"]++
		case c.local == probePort:
			count["probe client"]++
			t.Errorf("a probe client's connection is open (%d -> %d): nothing asked while idle", c.local, c.remote)
		case c.listening:
			count["other listener"]++
			t.Errorf("the agent listens on TCP port %d", c.local)
		case c.remote == pod.amqpPort:
			count["AMQP"]++
		case c.remote == pod.fwdPort:
			count["forward"]++
		case c.remote == pod.apiPort:
			count["API server"]++
		default:
			count["other"]++
			t.Errorf("the agent has a TCP connection %d -> %d", c.local, c.remote)
		}
	}
	t.Logf("TCP: %v; other sockets (Unix): %d", count, len(unix))
	for what, want := range map[string]int{"probe listener": 1, "AMQP": 1, "forward": 1, "API server": 1} {
		if count[what] != want {
			t.Errorf("%d %s TCP sockets, want %d", count[what], what, want)
		}
	}
	if len(unix) != 1 {
		t.Errorf("%d non-TCP sockets, want 1 (the probe socket)", len(unix))
	} else if path := unixPath(t, unix[0]); path != pod.sock {
		t.Errorf("the agent's non-TCP socket is %q, want the probe socket %s", path, pod.sock)
	}
	aConns, aUnix := tcpConns(t, a)
	inodes := func(cs []tcpConn, u []uint64) []uint64 {
		out := slices.Clone(u)
		for _, c := range cs {
			out = append(out, c.inode)
		}
		slices.Sort(out)
		return out
	}
	if before, after := inodes(aConns, aUnix), inodes(conns, unix); !slices.Equal(before, after) {
		t.Errorf("the sockets changed while idle: %v -> %v (a connection redialled)", before, after)
	}

	// 3. Descriptors: the same before and after (a leak would grow them),
	// and each accounted for.
	t.Logf("descriptors: %d: %s (and %d inherited from the test's environment, not the agent's: %s)", b.nfds, describeFDs(b), len(b.inherit), strings.Join(b.inherit, ", "))
	t.Logf("files: %s; pipes: %s; /dev/null x%d", strings.Join(b.fds["file"], ", "), strings.Join(b.fds["pipe"], ", "), len(b.fds["/dev/null"]))
	if a.nfds != b.nfds {
		t.Errorf("descriptors %d -> %d while idle:\nbefore %s\nafter  %s", a.nfds, b.nfds, describeFDs(a), describeFDs(b))
	}
	logs := 0
	for _, f := range b.fds["file"] {
		switch {
		case f == pod.logFile:
			logs++
		case strings.HasPrefix(f, "/sys/fs/cgroup/"):
			// The Go runtime's (1.25+): it keeps the cgroup's CPU limit
			// open to follow changes of it with GOMAXPROCS.
		default:
			t.Errorf("the agent holds %s open; the only file it should hold is the followed log", f)
		}
	}
	if logs != 1 {
		t.Errorf("the followed log is open %d times, want 1", logs)
	}
	if n := len(b.fds["inotify"]); n != 2 {
		t.Errorf("%d inotify instances, want 2 (the log directory, the ConfigMap volume)", n)
	}

	// 4. Threads are logged, not asserted: the Go runtime starts one
	// whenever a goroutine blocks in a syscall while no idle thread is
	// left (more often on a loaded machine), and keeps it; that is not a
	// leak. The goroutines themselves are not visible from /proc.
	t.Logf("threads: %d, %d new in the window; CPU %.3f%% of a core (ticks) / %.3f%% (schedstat); VmRSS %.1f MiB (figures only: see BenchmarkFootprintIdle)",
		len(b.threads), w.newThreads, 100*w.cpuFrac, 100*w.runningFra, mib(b.status.VmRSS))

	// 5. One child, the service: no check left a process behind.
	if kids := proc.Children(pid); len(kids) != 1 {
		t.Errorf("the agent has %d children %v, want 1 (the service)", len(kids), kids)
	}

	// 6. No API request while idle: the two watches only receive.
	reqs, err := s.env.Requests("system:serviceaccount:"+pod.ns+":kolla-agent", start)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if r.Time.Before(b.at) {
			t.Errorf("API request while idle: %s %s", r.Verb, r.RequestURI)
		}
	}
	if code, body := get(pod.base + "/readyz?verbose"); code != 200 {
		t.Errorf("not ready after the idle window: %d\n%s", code, body)
	}
}

func describeFDs(sn procSnap) string {
	kinds := make([]string, 0, len(sn.fds))
	for k := range sn.fds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var out []string
	for _, k := range kinds {
		out = append(out, fmt.Sprintf("%s x%d", k, len(sn.fds[k])))
	}
	return strings.Join(out, ", ")
}

func mib(bytes uint64) float64 { return float64(bytes) / (1 << 20) }
