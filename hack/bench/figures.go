package main

// figure is one row of docs/benchmarks.md: one metric of one benchmark (the
// median of its samples), and the baseline its benchmark measured in the
// same run. Every metric `make bench` reports must be a figure's Ours,
// Base, Minus, BaseMinus or listed in aux, so no figure goes unreported.
type figure struct {
	Area   string // the duty (and the subject)
	What   string // what is measured, for an operator
	Bench  string // the benchmark's full name, without the -GOMAXPROCS suffix
	Ours   string // the metric (unit) of kolla-agent's figure
	Minus  string // optional: a metric of Bench subtracted from Ours and Base (an idle level)
	Base   string // optional: the metric of the baseline
	BaseIn string // optional: the benchmark the baseline comes from, when not Bench
	BaseIs string // what the baseline is
	// BaseMinus, when set, is the baseline's own idle level, subtracted
	// from Base instead of Minus: each side measured on a fresh server.
	BaseMinus string
	Unit      string // shown after each value
	Scale     float64
	Target    string // the target, if it sets one
	// Quoted is a published figure of another tool that cannot be built or
	// run here, with its source: shown in a column of its own, never as a
	// baseline nor in the ratio.
	Quoted string
	// Headline, when set, puts the figure in the README's table too, with
	// this text for what it is.
	Headline string
}

// aux lists metrics that are no figure of their own, and why.
var aux = map[string]string{
	"ns/op":                  "0 where a benchmark measures whole processes itself",
	"pods":                   "the benchmark's parameter",
	"baseline/agent-cpu":     "the ratio, computed here",
	"baseline-wall-ms/check": "the baseline's wall time, shown in the rpc figure's notes",
	"overhead-ms/median":     "the difference of two figures shown",
	"agent-ms/max":           "the slowest sample, in the notes",
	"probe-ms/max":           "the slowest sample, in the notes",
	"small-probe-ms/max":     "the slowest sample, in the notes",
	"apiserver-hwm-MiB":      "the peak over the whole benchmark, in docs/scale.md",
	"etcd-hwm-MiB":           "the peak over the whole benchmark, in docs/scale.md",
	"B/op":                   "allocated bytes per /readyz, shown as allocations",
	"direct-kill-ms/median":  "the floor of signalling a process, in docs/reload.md",
	"hwm-MiB":                "equal to the largest RSS sample once idle",
	"sleep-hwm-MiB":          "equal to the largest RSS sample once idle",
	"agent-req/pod-lifetime": "the sync and the exit together, in docs/scale.md",
	"allocs/op":              "shown for the plain /readyz; the other forms allocate per check and per line",
	"MB/s":                   "files/s in bytes: the 200 files are of one size",
}

const (
	waitArea   = "dependencies"
	renderArea = "render"
	probeArea  = "probes"
	bootArea   = "bootstrap"
	reloadArea = "reload"
	logArea    = "logs"
	footArea   = "footprint"
	scaleArea  = "scale (500 pods)"
	sizeArea   = "binary"
	podArea    = "real pods"
)

const entrypoint = "kubernetes-entrypoint's loop: a GET per dependency every 2 s"

var figures = []figure{
	{Area: waitArea, What: "API requests while waiting (2 Services, 3 Jobs unmet), after the initial sync, in the long run: the watches' renewals (each every its 5-10 min timeout, from the audit log's WATCH requests) and what else the window saw", Bench: "BenchmarkAPIRequestsWhileWaiting",
		Ours: "agent-longrun-req/min", Base: "poller-req/min", BaseIs: entrypoint, Unit: "/min", Target: "fewer than the incumbent", Headline: "API requests per minute while waiting for 2 Services + 3 Jobs, after the first sync (long run, watch renewals counted)"},
	{Area: waitArea, What: "same, counted in the benchmark's window only (shorter than a watch's timeout: no renewal falls in it)", Bench: "BenchmarkAPIRequestsWhileWaiting",
		Ours: "agent-steady-req/min", Base: "poller-req/min", BaseIs: entrypoint, Unit: "/min"},

	{Area: waitArea, What: "API requests for the initial sync of those 5 dependencies (a LIST of the Services' EndpointSlices and one of the namespace's Jobs; one WATCH, the Services': one at a time per wait)", Bench: "BenchmarkAPIRequestsWhileWaiting",
		Ours: "agent-sync-req"},
	{Area: waitArea, What: "last dependency met (Job controller writes Complete) -> exit, median", Bench: "BenchmarkReadyToExitLatency",
		Ours: "agent-ms/median", Base: "poller-ms/median", BaseIs: entrypoint, Unit: "ms", Headline: "last dependency met -> exit, median"},

	{Area: waitArea, What: "whole process, every dependency already met, median", Bench: "BenchmarkStartAllSatisfied",
		Ours: "agent-ms/median", Base: "bin-true-ms/median", BaseIs: "`/bin/true`", Unit: "ms", Headline: "whole process, every dependency met, median"},

	{Area: renderArea, What: "`kolla-agent run`, kolla mode: copy a 20-file config set, exec `/bin/true`; whole process, median", Bench: "BenchmarkRunKollaStartOverhead",
		Ours: "agent-ms/median", Base: "bin-true-ms/median", BaseIs: "exec `/bin/true` directly", Unit: "ms", Headline: "`run` in kolla mode, 20-file config set, exec `/bin/true`, median"},

	{Area: renderArea, What: "render a 200-file kolla set (plan, compare, write, chown, fsync, rename)", Bench: "BenchmarkKollaRender200",
		Ours: "files/s", Base: "files/s", BaseIn: "BenchmarkKollaRender200Baseline", BaseIs: "write + fsync + rename alone", Unit: "files/s"},

	{Area: probeArea, What: "`rpc` check (real oslo.messaging server, RabbitMQ): CPU per check", Bench: "BenchmarkRPCCheck",
		Ours: "cpu-ms/check", Base: "baseline-cpu-ms/check", BaseIs: "`/usr/bin/python3` making the same call once, as an exec probe does", Unit: "ms", Target: ">= 50x less CPU", Headline: "`rpc` check, CPU per check (real oslo.messaging and RabbitMQ)"},

	{Area: probeArea, What: "`rpc` check: new AMQP connections per check", Bench: "BenchmarkRPCCheck",
		Ours: "conns/check", Base: "baseline-conns/check", BaseIs: "the same Python call", Target: "0", Headline: "`rpc` check, new connections per check"},

	{Area: probeArea, What: "`connections` check, service holding 1,000 fds", Bench: "BenchmarkConnectionsCheck",
		Ours: "ns/op", Base: "fdlist-ns/op", BaseIs: "listing `/proc/PID/fd` alone", Unit: "ms", Scale: 1e-6, Target: "<= 10 ms"},
	{Area: probeArea, What: "`/readyz` handler, 5 checks, in process", Bench: "BenchmarkReadyz/5_checks",
		Ours: "ns/op", Unit: "µs", Scale: 1e-3},
	{Area: probeArea, What: "`/readyz` handler, 5 checks: allocations per request", Bench: "BenchmarkReadyz/5_checks",
		Ours: "allocs/op"},
	{Area: probeArea, What: "`/readyz?verbose` handler, 5 checks", Bench: "BenchmarkReadyz/5_checks_verbose",
		Ours: "ns/op", Unit: "µs", Scale: 1e-3},
	{Area: probeArea, What: "`/readyz?format=json` handler, 5 checks", Bench: "BenchmarkReadyz/5_checks_json",
		Ours: "ns/op", Unit: "µs", Scale: 1e-3},
	{Area: probeArea, What: "`/readyz/NAME` handler, one of 5 checks", Bench: "BenchmarkReadyz/5_checks_one",
		Ours: "ns/op", Unit: "µs", Scale: 1e-3},
	{Area: probeArea, What: "`/readyz` handler, 200 failing checks with 5 KiB reasons (body capped under the kubelet's 10 KiB)", Bench: "BenchmarkReadyz/200_failing_5KiB_reasons",
		Ours: "ns/op", Unit: "µs", Scale: 1e-3},
	{Area: probeArea, What: "same, `?verbose`", Bench: "BenchmarkReadyz/200_failing_5KiB_reasons_verbose",
		Ours: "ns/op", Unit: "µs", Scale: 1e-3},
	{Area: probeArea, What: "same, `?format=json`", Bench: "BenchmarkReadyz/200_failing_5KiB_reasons_json",
		Ours: "ns/op", Unit: "µs", Scale: 1e-3},
	{Area: probeArea, What: "`/readyz` at 2,000 requests/s on loopback, a connection per request (as the kubelet), median", Bench: "BenchmarkReadyzLoopback/kubelet",
		Ours: "p50-us", Base: "baseline-p50-us", BaseIs: "a bare Go handler returning 200", Unit: "µs"},
	{Area: probeArea, What: "same, p99", Bench: "BenchmarkReadyzLoopback/kubelet",
		Ours: "p99-us", Base: "baseline-p99-us", BaseIs: "the bare handler", Unit: "µs", Target: "<= 1 ms", Headline: "`/readyz` at 2,000 requests/s, a connection per request, p99"},

	{Area: probeArea, What: "same, keep-alive, median", Bench: "BenchmarkReadyzLoopback/keepalive",
		Ours: "p50-us", Base: "baseline-p50-us", BaseIs: "the bare handler", Unit: "µs"},
	{Area: probeArea, What: "same, keep-alive, p99", Bench: "BenchmarkReadyzLoopback/keepalive",
		Ours: "p99-us", Base: "baseline-p99-us", BaseIs: "the bare handler", Unit: "µs"},
	{Area: probeArea, What: "`/readyz` answers 503 under that load, a connection per request", Bench: "BenchmarkReadyzLoopback/kubelet",
		Ours: "503s", Target: "0"},
	{Area: probeArea, What: "same, keep-alive", Bench: "BenchmarkReadyzLoopback/keepalive",
		Ours: "503s", Target: "0"},
	{Area: probeArea, What: "`kolla-agent-probe readiness`, whole process, median", Bench: "BenchmarkProbeClient",
		Ours: "small-probe-ms/median", Base: "bin-true-ms/median", BaseIs: "`/bin/true`", Unit: "ms", Target: "<= 5 ms", Headline: "exec probe `kolla-agent-probe readiness`, median"},

	{Area: probeArea, What: "`kolla-agent-probe readiness`, peak RSS", Bench: "BenchmarkProbeClient",
		Ours: "small-probe-MiB-peak-rss", Base: "bin-true-MiB-peak-rss", BaseIs: "`/bin/true`", Unit: "MiB", Target: "<= 10 MiB", Headline: "exec probe `kolla-agent-probe readiness`, peak RSS"},

	{Area: probeArea, What: "`kolla-agent probe readiness` (the same client in the agent's binary), median", Bench: "BenchmarkProbeClient",
		Ours: "probe-ms/median", Base: "bin-true-ms/median", BaseIs: "`/bin/true`", Unit: "ms", Target: "<= 5 ms"},
	{Area: probeArea, What: "`kolla-agent probe readiness`, peak RSS", Bench: "BenchmarkProbeClient",
		Ours: "probe-MiB-peak-rss", Base: "bin-true-MiB-peak-rss", BaseIs: "`/bin/true`", Unit: "MiB", Target: "<= 10 MiB"},

	{Area: bootArea, What: "20 replicas start at once: Jobs created (audit log)", Bench: "BenchmarkBootstrapColdStart/replicas=20",
		Ours: "creates", Target: "1"},
	{Area: bootArea, What: "20 replicas: creates answered AlreadyExists", Bench: "BenchmarkBootstrapColdStart/replicas=20",
		Ours: "already-exists"},
	{Area: bootArea, What: "20 replicas: API requests while the Job runs", Bench: "BenchmarkBootstrapColdStart/replicas=20",
		Ours: "agent-waiting-req/min", Base: "poller-waiting-req/min", BaseIs: "20 pods GETting the Job every 2 s", Unit: "/min"},
	{Area: bootArea, What: "20 replicas: all API requests, start to last exit (10 s wait)", Bench: "BenchmarkBootstrapColdStart/replicas=20",
		Ours: "agent-requests", Base: "poller-requests", BaseIs: "the same pollers"},
	{Area: bootArea, What: "20 replicas: Job Complete -> last replica proceeds", Bench: "BenchmarkBootstrapColdStart/replicas=20",
		Ours: "agent-complete-to-last-ms", Base: "poller-complete-to-last-ms", BaseIs: "the same pollers", Unit: "ms"},
	{Area: bootArea, What: "100 replicas start at once: Jobs created (audit log)", Bench: "BenchmarkBootstrapColdStart/replicas=100",
		Ours: "creates", Target: "1"},
	{Area: bootArea, What: "100 replicas: creates answered AlreadyExists", Bench: "BenchmarkBootstrapColdStart/replicas=100",
		Ours: "already-exists"},
	{Area: bootArea, What: "100 replicas: API requests while the Job runs", Bench: "BenchmarkBootstrapColdStart/replicas=100",
		Ours: "agent-waiting-req/min", Base: "poller-waiting-req/min", BaseIs: "100 pods GETting the Job every 2 s", Unit: "/min", Headline: "bootstrap, 100 replicas: API requests per minute while the Job runs"},

	{Area: bootArea, What: "100 replicas: all API requests, start to last exit (10 s wait)", Bench: "BenchmarkBootstrapColdStart/replicas=100",
		Ours: "agent-requests", Base: "poller-requests", BaseIs: "the same pollers"},
	{Area: bootArea, What: "100 replicas: Job Complete -> last replica proceeds", Bench: "BenchmarkBootstrapColdStart/replicas=100",
		Ours: "agent-complete-to-last-ms", Base: "poller-complete-to-last-ms", BaseIs: "the same pollers", Unit: "ms", Headline: "bootstrap: Job Complete -> last of 100 replicas proceeds"},

	{Area: reloadArea, What: "`..data` swapped by the kubelet's AtomicWriter -> SIGHUP at the service, quiet 0, median", Bench: "BenchmarkReloadLatency/quiet=0s",
		Ours: "agent-ms/median", Base: "fsnotify-loop-ms/median", BaseIs: "a bare fsnotify loop signalling on every `..data` event (configmap-reload)", Unit: "ms", Headline: "ConfigMap `..data` swap -> SIGHUP (render, check, commit, signal), median"},

	{Area: reloadArea, What: "same, p99", Bench: "BenchmarkReloadLatency/quiet=0s",
		Ours: "agent-ms/p99", Base: "fsnotify-loop-ms/p99", BaseIs: "the fsnotify loop", Unit: "ms"},
	{Area: reloadArea, What: "same, quiet 1 s, median", Bench: "BenchmarkReloadLatency/quiet=1s",
		Ours: "agent-ms/median", Base: "fsnotify-loop-ms/median", BaseIs: "the fsnotify loop", Unit: "ms", Target: "quiet + 20 ms"},
	{Area: reloadArea, What: "same, quiet 1 s, p99", Bench: "BenchmarkReloadLatency/quiet=1s",
		Ours: "agent-ms/p99", Base: "fsnotify-loop-ms/p99", BaseIs: "the fsnotify loop", Unit: "ms"},
	{Area: reloadArea, What: "100 swaps in one second, quiet 1 s: reload actions", Bench: "BenchmarkReloadBurst/quiet=1s",
		Ours: "agent-actions/burst", Base: "fsnotify-loop-actions/burst", BaseIs: "the fsnotify loop", Target: "1", Headline: "100 swaps in one second: reload actions"},

	{Area: reloadArea, What: "same: signals the service received", Bench: "BenchmarkReloadBurst/quiet=1s",
		Ours: "agent-signals-received/burst", Base: "fsnotify-loop-signals-received/burst", BaseIs: "the fsnotify loop"},
	{Area: reloadArea, What: "same: last swap -> action", Bench: "BenchmarkReloadBurst/quiet=1s",
		Ours: "agent-last-swap-to-action-ms", Base: "fsnotify-loop-last-swap-to-action-ms", BaseIs: "the fsnotify loop", Unit: "ms"},
	{Area: reloadArea, What: "100 swaps in one second, quiet 0: reload actions", Bench: "BenchmarkReloadBurst/quiet=0s",
		Ours: "agent-actions/burst", Base: "fsnotify-loop-actions/burst", BaseIs: "the fsnotify loop"},
	{Area: reloadArea, What: "same: signals the service received", Bench: "BenchmarkReloadBurst/quiet=0s",
		Ours: "agent-signals-received/burst", Base: "fsnotify-loop-signals-received/burst", BaseIs: "the fsnotify loop"},
	{Area: reloadArea, What: "same: last swap -> action", Bench: "BenchmarkReloadBurst/quiet=0s",
		Ours: "agent-last-swap-to-action-ms", Base: "fsnotify-loop-last-swap-to-action-ms", BaseIs: "the fsnotify loop", Unit: "ms"},

	{Area: logArea, What: "ship a 42.6 MB oslo-style file on one core (GOMAXPROCS=1) to a forward receiver in another process that acks every chunk (it skips the entries undecoded: never the bottleneck), offsets committed after each ack", Bench: "BenchmarkShipForward",
		Ours: "MB/s", Base: "raw-copy-MB/s", BaseIs: "a raw copy of the file into a loopback socket of that process, which counts the bytes back", Unit: "MB/s", Quoted: "file -> TCP, no acks: vector 76.7 MiB/s, fluent-bit 35 MiB/s (vector's published harness, as issue 10 quotes it)", Headline: "log shipping, one core, to a forward receiver with acks"},

	{Area: logArea, What: "same, lines", Bench: "BenchmarkShipForward",
		Ours: "lines/s", Unit: "lines/s"},
	{Area: logArea, What: "same, peak Go heap", Bench: "BenchmarkShipForward",
		Ours: "peak-heap-MiB", Unit: "MiB"},
	{Area: logArea, What: "same, peak RSS of the shipping process", Bench: "BenchmarkShipForward",
		Ours: "peak-RSS-MiB", Base: "base-RSS-MiB", BaseIs: "the same process before shipping", Unit: "MiB"},
	{Area: logArea, What: "ship 50,000 lines on one core to the real Fluent forward server (@fluent-org/logger on Node), which acks each message once it has its entries; every record checked against its line", Bench: "BenchmarkShipFluentServer",
		Ours: "MB/s", Unit: "MB/s", Headline: "log shipping, one core, to a real Fluent forward server with acks (the server included)"},
	{Area: logArea, What: "same, lines", Bench: "BenchmarkShipFluentServer",
		Ours: "lines/s", Unit: "lines/s"},
	{Area: logArea, What: "the agent shipping a steady 10,000 lines/s to a real forward server: CPU", Bench: "BenchmarkLogsCPUPer10kLines",
		Ours: "vCPU@10k-lines/s", Base: "vCPU-idle", BaseIs: "the same agent idle, same window", Unit: "vCPU", Quoted: "fluent-bit: 0.19 vCPU at that rate (issue 10's figure; fluent-bit is not packaged for this Debian)", Headline: "log shipping CPU at 10,000 lines/s"},

	{Area: footArea, What: "`kolla-agent run` with every duty (2 API watches, 4 checks with `rpc`, 1 log, 1 ConfigMap volume), idle 60 s: largest RSS", Bench: "BenchmarkFootprintIdle",
		Ours: "rss-MiB", Base: "sleep-rss-MiB", BaseIs: "`sleep 3600`, same window", Unit: "MiB", Target: "<= 25 MiB", Headline: "idle agent with every duty (2 API watches, 4 checks one `rpc`, a shipped log, a watched ConfigMap): RSS (target 25 MiB)"},

	{Area: footArea, What: "same: CPU (utime + stime)", Bench: "BenchmarkFootprintIdle",
		Ours: "cpu-%-of-core", Base: "sleep-cpu-%-of-core", BaseIs: "`sleep 3600`", Unit: "% of a core", Target: "<= 0.2 %"},
	{Area: footArea, What: "same: CPU from schedstat (all threads)", Bench: "BenchmarkFootprintIdle",
		Ours: "cpu-sched-%-of-core", Unit: "% of a core", Target: "<= 0.2 %", Headline: "same: CPU (target 0.2 % of a core)"},

	{Area: footArea, What: "same: context switches of all its threads", Bench: "BenchmarkFootprintIdle",
		Ours: "switches/s", Base: "sleep-switches/s", BaseIs: "`sleep 3600`", Unit: "/s"},

	{Area: scaleArea, What: "API requests while waiting, per pod-minute (2 Services + 3 Jobs unmet), in the long run: the watches' renewals (from their timeouts in the audit log) and what else the window saw", Bench: "BenchmarkScale",
		Ours: "agent-longrun-req/pod-min", Base: "entrypoint-waiting-req/pod-min", BaseIs: "500 kubernetes-entrypoint loops", Unit: "/pod-min", Target: "fewer than the incumbent", Headline: "500 pods waiting (real agents, own tokens): API requests per pod-minute (long run, watch renewals counted)"},
	{Area: scaleArea, What: "same, counted in the benchmark's window only (no renewal falls in it)", Bench: "BenchmarkScale",
		Ours: "agent-waiting-req/pod-min", Base: "entrypoint-waiting-req/pod-min", BaseIs: "500 kubernetes-entrypoint loops", Unit: "/pod-min"},

	{Area: scaleArea, What: "requests to sync, per pod (once)", Bench: "BenchmarkScale",
		Ours: "agent-sync-req/pod"},
	{Area: scaleArea, What: "watches held", Bench: "BenchmarkScale",
		Ours: "agent-watches"},
	{Area: scaleArea, What: "kube-apiserver CPU while waiting, above idle, per 60 s (each side on a fresh API server, above its own idle)", Bench: "BenchmarkScale",
		Ours: "agent-waiting-apiserver-cpu-s", Minus: "idle-apiserver-cpu-s", Base: "entrypoint-waiting-apiserver-cpu-s", BaseMinus: "entrypoint-idle-apiserver-cpu-s", BaseIs: "the 500 loops", Unit: "s", Headline: "the same: kube-apiserver CPU per minute above idle"},

	{Area: scaleArea, What: "etcd CPU while waiting, above idle, per 60 s", Bench: "BenchmarkScale",
		Ours: "agent-waiting-etcd-cpu-s", Minus: "idle-etcd-cpu-s", Base: "entrypoint-waiting-etcd-cpu-s", BaseMinus: "entrypoint-idle-etcd-cpu-s", BaseIs: "the 500 loops", Unit: "s"},
	{Area: scaleArea, What: "kube-apiserver RSS while waiting, above idle (median; each side on a fresh API server, above its own idle)", Bench: "BenchmarkScale",
		Ours: "agent-waiting-apiserver-rss-MiB", Minus: "idle-apiserver-rss-MiB", Base: "entrypoint-waiting-apiserver-rss-MiB", BaseMinus: "entrypoint-idle-apiserver-rss-MiB", BaseIs: "the 500 loops", Unit: "MiB", Headline: "the same: kube-apiserver RSS above idle (1 watch per pod)"},

	{Area: scaleArea, What: "kube-apiserver live heap while waiting, above idle: HeapAlloc just after a GC the heap profile forces, the least of 3 readings taken after the window (the heap in use of /metrics also holds the garbage of the last GC cycle)", Bench: "BenchmarkScale",
		Ours: "agent-waiting-apiserver-live-heap-MiB", Minus: "idle-apiserver-live-heap-MiB", Base: "entrypoint-waiting-apiserver-live-heap-MiB", BaseMinus: "entrypoint-idle-apiserver-live-heap-MiB", BaseIs: "the 500 loops", Unit: "MiB", Headline: "the same: kube-apiserver live heap above idle (after a forced GC)"},

	{Area: scaleArea, What: "kube-apiserver heap above idle per waiting pod (its one connection and its one watch)", Bench: "BenchmarkScale",
		Ours: "apiserver-heap-KiB/pod", Unit: "KiB"},
	{Area: scaleArea, What: "same, live heap (after a forced GC) per waiting pod", Bench: "BenchmarkScale",
		Ours: "apiserver-live-heap-KiB/pod", Unit: "KiB"},
	{Area: scaleArea, What: "last dependency met -> last pod exits", Bench: "BenchmarkScale",
		Ours: "agent-met-to-last-exit-ms", Base: "entrypoint-met-to-last-exit-ms", BaseIs: "the 500 loops", Unit: "ms"},
	{Area: scaleArea, What: "mass restart, everything met: requests per start", Bench: "BenchmarkScale",
		Ours: "agent-restart-req/start", Base: "entrypoint-restart-req/start", BaseIs: "the 500 loops (a GET per dependency)", Target: "<= the incumbent's", Headline: "500 pods restarting, everything met: API requests per start"},

	{Area: scaleArea, What: "same: kube-apiserver CPU for the 500 starts", Bench: "BenchmarkScale",
		Ours: "agent-restart-apiserver-cpu-s", Base: "entrypoint-restart-apiserver-cpu-s", BaseIs: "the 500 loops", Unit: "s"},
	{Area: scaleArea, What: "same: bytes the API server sent per start (its LIST and GET answers, apiserver_response_sizes)", Bench: "BenchmarkScale",
		Ours: "agent-restart-read-bytes/start", Base: "entrypoint-restart-read-bytes/start", BaseIs: "the 500 loops (a GET per dependency: Endpoints for a Service)", Unit: "B", Target: "<= the incumbent's"},
	{Area: waitArea, What: "bytes a pod receives from the API server for one start, everything met (2 Services, 3 Jobs), on the wire (TLS with its handshake; HTTP/2), the namespace holding no other Job", Bench: "BenchmarkBytesPerStart/jobs=0",
		Ours: "agent-wire-bytes/start", Base: "entrypoint-wire-bytes/start", BaseIs: "kubernetes-entrypoint's GETs (client-go 0.36: protobuf)", Unit: "B", Target: "<= the incumbent's"},
	{Area: waitArea, What: "same, the namespace holding 50 other Jobs of helm-toolkit's size (the agent lists the namespace's Jobs as table rows)", Bench: "BenchmarkBytesPerStart/jobs=50",
		Ours: "agent-wire-bytes/start", Base: "entrypoint-wire-bytes/start", BaseIs: "kubernetes-entrypoint's GETs", Unit: "B", Target: "<= the incumbent's"},
	{Area: waitArea, What: "same, 100 other Jobs", Bench: "BenchmarkBytesPerStart/jobs=100",
		Ours: "agent-wire-bytes/start", Base: "entrypoint-wire-bytes/start", BaseIs: "kubernetes-entrypoint's GETs", Unit: "B", Target: "<= the incumbent's"},
	{Area: waitArea, What: "bytes a waiting pod receives from the API server per minute, after its first sync (2 Services up, 3 Jobs unmet: the db_sync wait), on the wire (TLS; HTTP/2), the namespace holding 100 other Jobs of helm-toolkit's size that change twice a second in all: the agent's one watch of the namespace's Jobs receives each change as a table row; 10 pods each side", Bench: "BenchmarkBytesWhileWaiting",
		Ours: "agent-wire-bytes/pod-min", Base: "entrypoint-wire-bytes/pod-min", BaseIs: "kubernetes-entrypoint's GETs (a GET per unmet dependency every 2 s)", Unit: "B", Target: "<= the incumbent's"},
	{Area: scaleArea, What: "same: first start -> last exit (starts spread over 5 s)", Bench: "BenchmarkScale",
		Ours: "agent-restart-last-exit-s", Base: "entrypoint-restart-last-exit-s", BaseIs: "the 500 loops (their 2 s sleep)", Unit: "s"},

	{Area: scaleArea, What: "API server killed under the 500 waiting agents, back after 5 s: share of their watches (1 per pod) resumed in the busiest second", Bench: "BenchmarkScale",
		Ours: "agent-resume-busiest-second-%", Unit: "%", Target: "not all in the same second", Headline: "API server restarted under 500 waiting agents: share of their watches resumed in the busiest second"},
	{Area: scaleArea, What: "same: the median watch resumed, after the first", Bench: "BenchmarkScale",
		Ours: "agent-resume-median-s", Unit: "s"},
	{Area: scaleArea, What: "same: the last watch resumed, after the first", Bench: "BenchmarkScale",
		Ours: "agent-resume-last-s", Unit: "s"},
	{Area: scaleArea, What: "same: requests per agent the API server received, kill to all back", Bench: "BenchmarkScale",
		Ours: "agent-resume-req/pod"},

	{Area: sizeArea, What: "`kolla-agent`, stripped, static, every duty linked", Bench: "BenchmarkBinarySize",
		Ours: "agent-bytes", Unit: "bytes", Target: "<= 25,000,000", Quoted: "kubernetes-entrypoint: 44 MB stripped (issue 3's figure; its module is not served by the Go module proxy, so it cannot be built here)", Headline: "stripped static binary, every duty (budget 25,000,000 bytes)"},

	{Area: sizeArea, What: "`kolla-agent-probe`, stripped, static", Bench: "BenchmarkBinarySize",
		Ours: "probe-bytes", Unit: "bytes"},

	{Area: podArea, What: "a dependency's EndpointSlice ready -> the waiting pod Ready (init container; kubelet, containerd, runc), median", Bench: "BenchmarkRealPodReadyAfterDependency",
		Ours: "agent-ms/median", Base: "entrypoint-ms/median", BaseIs: "kubernetes-entrypoint's loop as its init container, same pod spec", Unit: "ms", Headline: "real pod: dependency ready -> pod Ready, median"},
	{Area: podArea, What: "the kubelet's httpGet readiness probe of the agent's /readyz (prober_probe_duration_seconds), mean", Bench: "BenchmarkRealPodProbeLatency",
		Ours: "readyz-ms/mean", Base: "tcp-ms/mean", BaseIs: "the kubelet's tcpSocket probe of the same port", Unit: "ms", Headline: "real pod: the kubelet's /readyz probe, mean"},
	{Area: podArea, What: "ConfigMap edit -> uWSGI reloaded on it and verified (`kolla-agent run` as PID 1, SIGHUP, workers replaced; kubelet syncFrequency 10 s), median", Bench: "BenchmarkRealPodConfigMapReload",
		Ours: "agent-ms/median", Base: "kubelet-ms/median", BaseIs: "the kubelet's part: the edit to the `..data` swap in the pod's volume", Unit: "ms", Headline: "real pod: ConfigMap edit -> service reloaded (10 s sync), median"},
	{Area: podArea, What: "the same at the kubelet's default syncFrequency (1m; the kubelet restarted with it, the pod kept), median", Bench: "BenchmarkRealPodConfigMapReload",
		Ours: "agent-60s-ms/median", Base: "kubelet-60s-ms/median", BaseIs: "the kubelet's part: the edit to the `..data` swap in the pod's volume", Unit: "ms", Headline: "real pod: ConfigMap edit -> service reloaded (default 1m sync), median"},
	{Area: podArea, What: "`kubectl delete pod` -> the pod gone (the agent as PID 1 stops its service), median", Bench: "BenchmarkRealPodDeletion",
		Ours: "agent-ms/median", Base: "pause-ms/median", BaseIs: "a pod of the pause program, which ends at once on SIGTERM", Unit: "ms", Headline: "real pod: delete -> gone, median"},
}
