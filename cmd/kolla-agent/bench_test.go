package main

// Benchmarks for a keystone-api-shaped pod (2 services + 3 jobs) against the
// local control plane. Each reports the agent's figure and a baseline measured
// in the same run; `make bench` runs them. They assert nothing about time.
//
// The baseline for API cost and latency is a poller that does what
// kubernetes-entrypoint does: every 2 s, one GET per dependency (Endpoints
// for a service, the Job for a job) until all are resolved.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

var keystoneJobs = []string{"keystone-db-sync", "keystone-fernet-setup", "keystone-credential-setup"}

func keystoneArgs() []string {
	args := []string{"service:mariadb", "service:memcached"}
	for _, j := range keystoneJobs {
		args = append(args, "job:"+j)
	}
	return args
}

// keystoneShape creates the 2 services (each with a ready pod unless
// servicesReady is false) and the 3 jobs (running) in a new namespace.
func keystoneShape(t testing.TB, servicesReady bool) string {
	ns := namespace(t)
	for i, svc := range []string{"mariadb", "memcached"} {
		mkService(t, ns, svc, false, map[string]string{"app": svc})
		mkPod(t, ns, svc+"-0", map[string]string{"app": svc})
		setReady(t, ns, svc+"-0", fmt.Sprintf("10.20.0.%d", i+1), servicesReady)
	}
	for _, j := range keystoneJobs {
		mkChartJob(t, ns, j)
	}
	return ns
}

// mkChartJob creates a Job the size and shape openstack-helm's
// helm-toolkit renders (its db-sync template: the chart's labels and
// Helm's annotations, a kubernetes-entrypoint init container with its
// DEPENDENCY_* variables, the service's container with its environment,
// mounts and volumes), applied server-side as helm does, so it carries
// managedFields: the bytes a lookup of it costs are a real Job's.
func mkChartJob(t testing.TB, ns, name string) {
	t.Helper()
	app, component, _ := strings.Cut(name, "-")
	labels := map[string]string{"release_group": app, "application": app, "component": component}
	env := func(kv ...string) []corev1.EnvVar {
		var out []corev1.EnvVar
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, corev1.EnvVar{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	fieldRef := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
	}
	mounts := []corev1.VolumeMount{
		{Name: "pod-tmp", MountPath: "/tmp"},
		{Name: app + "-bin", MountPath: "/tmp/" + component + ".sh", SubPath: component + ".sh", ReadOnly: true},
		{Name: "etc-service", MountPath: "/etc/" + app},
		{Name: app + "-etc", MountPath: "/etc/" + app + "/" + app + ".conf", SubPath: app + ".conf", ReadOnly: true},
		{Name: app + "-etc", MountPath: "/etc/" + app + "/logging.conf", SubPath: "logging.conf", ReadOnly: true},
	}
	j := &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels:      map[string]string{"release_group": app, "application": app, "component": component, "app.kubernetes.io/managed-by": "Helm"},
			Annotations: map[string]string{"meta.helm.sh/release-name": app, "meta.helm.sh/release-namespace": ns},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](1000),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
					"configmap-bin-hash": strings.Repeat("3f", 32), "configmap-etc-hash": strings.Repeat("a7", 32),
				}},
				Spec: corev1.PodSpec{
					ServiceAccountName: name,
					RestartPolicy:      corev1.RestartPolicyOnFailure,
					NodeSelector:       map[string]string{"openstack-control-plane": "enabled"},
					SecurityContext:    &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](42424)},
					InitContainers: []corev1.Container{{
						Name: "init", Image: "quay.io/airshipit/kubernetes-entrypoint:latest-ubuntu_jammy", ImagePullPolicy: corev1.PullIfNotPresent,
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), RunAsUser: ptr.To[int64](65534)},
						Env: append([]corev1.EnvVar{fieldRef("POD_NAME", "metadata.name"), fieldRef("NAMESPACE", "metadata.namespace")},
							env("INTERFACE_NAME", "eth0", "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin/",
								"DEPENDENCY_SERVICE", ns+":mariadb", "DEPENDENCY_DAEMONSET", "", "DEPENDENCY_CONTAINER", "",
								"DEPENDENCY_POD_JSON", "", "DEPENDENCY_CUSTOM_RESOURCE", "", "DEPENDENCY_JOBS", app+"-db-init")...),
						Command: []string{"kubernetes-entrypoint"},
					}},
					Containers: []corev1.Container{{
						Name: name, Image: "quay.io/airshipit/" + app + ":2025.1-ubuntu_jammy", ImagePullPolicy: corev1.PullIfNotPresent,
						Resources: corev1.ResourceRequirements{
							Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2000m"), corev1.ResourceMemory: resource.MustParse("1024Mi")},
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
						},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true)},
						Env:             env("OS_AUTH_URL", "http://keystone-api."+ns+".svc.cluster.local:5000/v3", "OS_REGION_NAME", "RegionOne", "OS_INTERFACE", "internal"),
						Command:         []string{"/tmp/" + component + ".sh"},
						VolumeMounts:    mounts,
					}},
					Volumes: []corev1.Volume{
						{Name: "pod-tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						{Name: "etc-service", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						{Name: app + "-bin", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: app + "-bin"}, DefaultMode: ptr.To[int32](0o555)}}},
						{Name: app + "-etc", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: app + "-etc", DefaultMode: ptr.To[int32](0o444)}}},
					},
				},
			},
		},
	}
	body, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client().BatchV1().Jobs(ns).Patch(ctxT(t), name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "helm"}); err != nil {
		t.Fatal(err)
	}
}

// entrypointPoller is the baseline: kubernetes-entrypoint's loop.
func entrypointPoller(ctx context.Context, c kubernetes.Interface, ns string) {
	for {
		resolved := 0
		for _, svc := range []string{"mariadb", "memcached"} {
			if ep, err := c.CoreV1().Endpoints(ns).Get(ctx, svc, metav1.GetOptions{}); err == nil {
				for _, s := range ep.Subsets {
					if len(s.Addresses) > 0 {
						resolved++
						break
					}
				}
			}
		}
		for _, j := range keystoneJobs {
			if job, err := c.BatchV1().Jobs(ns).Get(ctx, j, metav1.GetOptions{}); err == nil && job.Status.Succeeded > 0 {
				resolved++
			}
		}
		if resolved == 5 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

func pollerClient(b *testing.B, ns string) kubernetes.Interface {
	// kubernetes-entrypoint GETs what it checks: its Role needs get.
	get := rbacv1.PolicyRule{APIGroups: []string{"", "batch"}, Resources: []string{"endpoints", "jobs"}, Verbs: []string{"get"}}
	kc, err := s.env.AgentKubeconfig(context.Background(), ns, get)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		b.Fatal(err)
	}
	cfg.WarningHandler = rest.NoWarnings{} // Endpoints is deprecated: that is the point
	// One client stands for many entrypoint processes, each with its own
	// rate limiter that its 0.5 requests/s never reach: no limit here.
	cfg.QPS, cfg.Burst = 1e6, 1e6
	return kubernetes.NewForConfigOrDie(cfg)
}

func benchWindow() time.Duration {
	if v := os.Getenv("BENCH_WAIT"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return 60 * time.Second
}

// API requests per minute while waiting, from the audit log, agent and
// baseline side by side in the same window. The agent's one-time sync (a
// LIST, then a WATCH from its resourceVersion, per dependency) is reported
// apart from the steady state.
func BenchmarkAPIRequestsWhileWaiting(b *testing.B) {
	window := benchWindow()
	for range b.N {
		agentNS := keystoneShape(b, false)
		pollNS := keystoneShape(b, false)
		ctx, cancel := context.WithCancel(context.Background())
		pc := pollerClient(b, pollNS)
		start := time.Now()
		go entrypointPoller(ctx, pc, pollNS)
		a := startAgent(b, agentEnv(b, agentNS), append([]string{"wait", "--timeout", "10m"}, keystoneArgs()...)...)
		for _, d := range keystoneArgs() {
			a.waitLog("dependency=" + d + " state=waiting")
		}
		synced := time.Now()
		time.Sleep(window)
		cancel()
		end := time.Now()
		count := func(ns string, from time.Time) int {
			reqs, err := s.env.Requests("system:serviceaccount:"+ns+":kolla-agent", from)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for _, r := range reqs {
				if !r.Time.After(end) {
					n++
				}
			}
			return n
		}
		all := count(agentNS, start)
		steady := count(agentNS, synced)
		reqs, err := s.env.Requests("system:serviceaccount:"+agentNS+":kolla-agent", start)
		if err != nil {
			b.Fatal(err)
		}
		var ws []watchReq
		others := 0 // in the window, besides watch renewals
		for _, r := range reqs {
			switch {
			case r.Time.After(end):
			case r.Verb == "watch":
				ws = append(ws, watchReq{r.User, r.RequestURI})
			case r.Time.After(synced):
				others++
			}
		}
		b.ReportMetric(float64(all-steady), "agent-sync-req")
		b.ReportMetric(float64(steady)/end.Sub(synced).Minutes(), "agent-steady-req/min")
		b.ReportMetric(renewalsPerMinute(ws)+float64(others)/end.Sub(synced).Minutes(), "agent-longrun-req/min")
		b.ReportMetric(float64(count(pollNS, start))/end.Sub(start).Minutes(), "poller-req/min")
	}
}

// watchReq is a WATCH request of a user, as the audit log has it.
type watchReq struct{ user, uri string }

// renewalsPerMinute is the long-run rate of the renewals of the watches in
// ws (in the order made): each watch, a user's path and selectors, is made
// again every timeoutSeconds of its last WATCH (the server ends it then,
// the agent resumes it: one request). The timeouts are drawn from 5-10
// minutes, so a window of one minute sees none of these requests; this is
// their rate over any longer one.
func renewalsPerMinute(ws []watchReq) float64 {
	last := map[string]float64{}
	for _, w := range ws {
		u, err := url.Parse(w.uri)
		if err != nil {
			continue
		}
		q := u.Query()
		t, err := strconv.ParseFloat(q.Get("timeoutSeconds"), 64)
		if err != nil || t <= 0 {
			continue
		}
		last[w.user+" "+u.Path+"?"+q.Get("labelSelector")+"&"+q.Get("fieldSelector")] = t
	}
	rate := 0.0
	for _, t := range last {
		rate += 60 / t
	}
	return rate
}

// From the Job controller's write of Complete (seen by the benchmark's own
// watch) to the agent's exit; and to the baseline poller's return.
func BenchmarkReadyToExitLatency(b *testing.B) {
	samples := benchSamples()
	var agentLat, pollLat []time.Duration
	for range b.N {
		for range samples {
			ns := keystoneShape(b, true)
			for _, j := range keystoneJobs[:2] {
				if _, err := s.env.Kubelet().CompleteJobPod(context.Background(), ns, j); err != nil {
					b.Fatal(err)
				}
			}
			a := startAgent(b, agentEnv(b, ns), append([]string{"wait", "--timeout", "5m"}, keystoneArgs()...)...)
			a.waitLog("keystone-credential-setup (Running")
			pollDone := make(chan time.Time, 1)
			pctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			go func() { entrypointPoller(pctx, pollerClient(b, ns), ns); pollDone <- time.Now() }()
			complete := jobCompleteAt(b, ns, keystoneJobs[2])
			if _, err := s.env.Kubelet().CompleteJobPod(context.Background(), ns, keystoneJobs[2]); err != nil {
				b.Fatal(err)
			}
			t0 := <-complete
			if code := a.exit(time.Minute); code != 0 {
				b.Fatalf("agent exit %d:\n%s", code, a.out.String())
			}
			agentLat = append(agentLat, a.exited.Sub(t0))
			pollLat = append(pollLat, (<-pollDone).Sub(t0))
			cancel()
		}
	}
	b.ReportMetric(ms(median(agentLat)), "agent-ms/median")
	b.ReportMetric(ms(median(pollLat)), "poller-ms/median")
	b.ReportMetric(ms(maxOf(agentLat)), "agent-ms/max")
}

// jobCompleteAt watches the Job and sends the time its Complete condition is
// first seen.
func jobCompleteAt(b *testing.B, ns, name string) <-chan time.Time {
	ch := make(chan time.Time, 1)
	w, err := client().BatchV1().Jobs(ns).Watch(context.Background(), metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				continue
			}
			if j, ok := ev.Object.(*batchv1.Job); ok {
				for _, c := range j.Status.Conditions {
					if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
						ch <- time.Now()
						return
					}
				}
			}
		}
	}()
	return ch
}

// Whole-process time when every dependency is already satisfied, against the
// cost of starting any process (/bin/true) in the same run.
func BenchmarkStartAllSatisfied(b *testing.B) {
	samples := 3 * benchSamples()
	ns := keystoneShape(b, true)
	for _, j := range keystoneJobs {
		if _, err := s.env.Kubelet().CompleteJobPod(context.Background(), ns, j); err != nil {
			b.Fatal(err)
		}
	}
	env := agentEnv(b, ns)
	args := append([]string{"wait", "--timeout", "1m"}, keystoneArgs()...)
	// Wait until the Job controller has written Complete on all three.
	eventually(b, "jobs complete", func() bool {
		c := exec.Command(s.bin, args...)
		c.Env = env
		return c.Run() == nil
	})
	cmd := func(env []string, name string, args ...string) time.Duration {
		c := exec.Command(name, args...)
		c.Env = env
		t0 := time.Now()
		if err := c.Run(); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		return time.Since(t0)
	}
	var agentT, trueT []time.Duration
	for range b.N {
		for range samples {
			agentT = append(agentT, cmd(env, s.bin, args...))
			trueT = append(trueT, cmd(env, "/bin/true"))
		}
	}
	b.ReportMetric(ms(median(agentT)), "agent-ms/median")
	b.ReportMetric(ms(median(trueT)), "bin-true-ms/median")
}

func benchSamples() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_SAMPLES")); err == nil && n > 0 {
		return n
	}
	return 7
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func maxOf(d []time.Duration) time.Duration {
	var m time.Duration
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// kollaSet makes a --root with a kolla config.json copying n files, whose
// command is /bin/true.
func kollaSet(b *testing.B, n int) string {
	root := b.TempDir()
	var entries []string
	for i := range n {
		name := fmt.Sprintf("file-%03d.conf", i)
		src := filepath.Join(root, "var/lib/kolla/config_files", name)
		os.MkdirAll(filepath.Dir(src), 0o755)
		os.WriteFile(src, []byte(strings.Repeat(fmt.Sprintf("option_%d = value\n", i), 40)), 0o644)
		entries = append(entries, fmt.Sprintf(`{"source": "/var/lib/kolla/config_files/%s", "dest": "/etc/service/%s", "owner": "root", "perm": "0640"}`, name, name))
	}
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\n"), 0o644)
	cfg := `{"command": "/bin/true", "config_files": [` + strings.Join(entries, ",") + `]}`
	os.WriteFile(filepath.Join(root, "var/lib/kolla/config_files/config.json"), []byte(cfg), 0o644)
	return root
}

// Whole-process start overhead of `kolla-agent run` in kolla mode: copy a
// 20-file config set (COPY_ALWAYS) and exec /bin/true, against exec'ing
// /bin/true directly, alternating, in the same run.
func BenchmarkRunKollaStartOverhead(b *testing.B) {
	root := kollaSet(b, 20)
	env := []string{"PATH=" + os.Getenv("PATH"), "KOLLA_CONFIG_STRATEGY=COPY_ALWAYS"}
	run := func(name string, args ...string) time.Duration {
		c := exec.Command(name, args...)
		c.Env = env
		t0 := time.Now()
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", name, err, out)
		}
		return time.Since(t0)
	}
	var agentT, trueT []time.Duration
	for range b.N {
		for range 5 * benchSamples() {
			agentT = append(agentT, run(s.bin, "--root", root, "run"))
			trueT = append(trueT, run("/bin/true"))
		}
	}
	b.ReportMetric(ms(median(agentT)), "agent-ms/median")
	b.ReportMetric(ms(median(trueT)), "bin-true-ms/median")
	b.ReportMetric(ms(median(agentT)-median(trueT)), "overhead-ms/median")
}

// peakRSSMiB runs a command under GNU time and returns its peak RSS. A
// child started from this (large) test process would report the test's own
// high-water mark: Linux keeps the old memory's peak across an exec after
// vfork. GNU time forks from its own small process.
func peakRSSMiB(b *testing.B, args ...string) float64 {
	c := exec.Command("/usr/bin/time", append([]string{"-f", "%M"}, args...)...)
	var stderr strings.Builder
	c.Stderr = &stderr
	if err := c.Run(); err != nil {
		b.Fatalf("%v: %v\n%s", args, err, stderr.String())
	}
	lines := strings.Fields(stderr.String())
	kib, err := strconv.ParseFloat(lines[len(lines)-1], 64)
	if err != nil {
		b.Fatalf("GNU time: %q", stderr.String())
	}
	return kib / 1024
}

// The exec-probe client as the kubelet runs it every few seconds: a whole
// `kolla-agent probe readiness` process, and a whole `kolla-agent-probe
// readiness` (the client on its own), against a running agent, and
// /bin/true, in the same run (alternating). Targets: <= 5 ms median wall,
// <= 10 MiB peak RSS.
func BenchmarkProbeClient(b *testing.B) {
	dir := b.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	cfg := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
probes:
  address: "off"
  socket: %s
  checks:
    - name: alive
      process: {}
      probes: [startup, readiness, liveness]
      period: 1s
`, sock)), 0o600)
	a := startAgent(b, []string{"PATH=" + os.Getenv("PATH")}, "--config", cfg, "run", "--", "sleep", "300")
	deadline := time.Now().Add(20 * time.Second)
	for {
		c := exec.Command(s.bin, "probe", "readiness", "--socket", sock)
		if c.Run() == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("agent never ready:\n%s", a.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	run := func(name string, args ...string) time.Duration {
		c := exec.Command(name, args...)
		t0 := time.Now()
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", name, err, out)
		}
		return time.Since(t0)
	}
	var probeT, smallT, trueT []time.Duration
	for range b.N {
		for range 10 * benchSamples() {
			probeT = append(probeT, run(s.bin, "probe", "readiness", "--socket", sock))
			smallT = append(smallT, run(s.probeBin, "readiness", "--socket", sock))
			trueT = append(trueT, run("/bin/true"))
		}
	}
	b.ReportMetric(ms(median(probeT)), "probe-ms/median")
	b.ReportMetric(ms(maxOf(probeT)), "probe-ms/max")
	b.ReportMetric(ms(median(smallT)), "small-probe-ms/median")
	b.ReportMetric(ms(maxOf(smallT)), "small-probe-ms/max")
	b.ReportMetric(ms(median(trueT)), "bin-true-ms/median")
	b.ReportMetric(peakRSSMiB(b, s.bin, "probe", "readiness", "--socket", sock), "probe-MiB-peak-rss")
	b.ReportMetric(peakRSSMiB(b, s.probeBin, "readiness", "--socket", sock), "small-probe-MiB-peak-rss")
	b.ReportMetric(peakRSSMiB(b, "/bin/true"), "bin-true-MiB-peak-rss")
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.exit(30 * time.Second)
}
