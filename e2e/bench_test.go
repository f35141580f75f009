package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/kolla-agent/kolla-agent/internal/image"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

// Figures from real pods, read from what the kubelet and the API server
// report; each benchmark measures its baseline in the same run. Run with
// -benchtime 1x: each takes its own samples.

// modelRef is kubernetes-entrypoint's Service loop as an image
// (internal/testenv/cmd/entrypoint-model): the incumbent's behaviour, the
// real one not being on the Go module proxy.
const modelRef = "localhost/entrypoint-model:dev"

var modelOnce struct {
	sync.Once
	err error
}

func modelImage(b *testing.B) {
	b.Helper()
	modelOnce.Do(func() {
		bin := filepath.Join(b.TempDir(), "entrypoint-model")
		build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./internal/testenv/cmd/entrypoint-model")
		build.Dir = repoRoot()
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			modelOnce.err = fmt.Errorf("%v: %s", err, out)
			return
		}
		img := image.Image{Ref: modelRef, Layers: []image.Layer{{Files: []image.File{{Path: "/entrypoint-model", Mode: 0o755, Src: bin}}}},
			Config: image.Config{User: "65534:65534", Entrypoint: []string{"/entrypoint-model"}}}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, modelOnce.err = env.ImportImages(ctx, b.TempDir(), img)
	})
	if modelOnce.err != nil {
		b.Fatalf("the entrypoint model's image: %v", modelOnce.err)
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// reportSamples reports the median of samples (seconds) as NAME/median in
// ms, with their count and range (NAME/samples, /min, /max), which
// hack/bench shows as the figure's spread: these benchmarks run once and
// take their own samples.
func reportSamples(b *testing.B, samples []float64, name string) {
	b.ReportMetric(median(samples)*1000, name+"/median")
	b.ReportMetric(float64(len(samples)), name+"/samples")
	b.ReportMetric(slices.Min(samples)*1000, name+"/min")
	b.ReportMetric(slices.Max(samples)*1000, name+"/max")
}

// idle is a container that runs until stopped and is Ready once started
// (no probe): the agent's binary waiting for a port that never opens.
func idle(name string) corev1.Container {
	return agentContainer(name, "wait", "--timeout", "1h", "tcp:127.0.0.1:1")
}

// BenchmarkRealPodReadyAfterDependency: a pod whose init container waits
// for a Service; the Service's pod is created, and the time from its
// EndpointSlice saying ready to the waiting pod's Ready is what the user
// waits. The agent's init container (`kolla-agent wait service:...`, a
// watch) against kubernetes-entrypoint's loop (a GET every 2 s), same pod
// spec otherwise, alternately.
func BenchmarkRealPodReadyAfterDependency(b *testing.B) {
	testenv.NeedNode(b, env)
	modelImage(b)
	ns := env.Namespace(b)
	get := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"endpoints"}, Verbs: []string{"get"}}
	if _, err := env.AgentKubeconfig(context.Background(), ns, get); err != nil {
		b.Fatal(err)
	}
	samples := 9
	if s := os.Getenv("BENCH_SAMPLES"); s != "" {
		fmt.Sscan(s, &samples)
	}
	var agent, model []float64
	for range b.N {
		for i := range samples {
			agent = append(agent, readyAfterDependency(b, ns, fmt.Sprintf("a%d", i), false))
			model = append(model, readyAfterDependency(b, ns, fmt.Sprintf("m%d", i), true))
		}
	}
	b.Logf("seconds, agent: %.2f; entrypoint: %.2f", agent, model)
	b.ReportMetric(0, "ns/op")
	reportSamples(b, agent, "agent-ms")
	reportSamples(b, model, "entrypoint-ms")
}

func readyAfterDependency(b *testing.B, ns, id string, model bool) float64 {
	b.Helper()
	ctx := context.Background()
	c := env.Client()
	dep, waiter := "dep-"+id, "waiter-"+id
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: dep, Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": dep}, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if _, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	init := agentContainer("wait", "wait", "--timeout", "5m", "service:"+dep)
	if model {
		init = corev1.Container{Name: "wait", Image: modelRef, ImagePullPolicy: corev1.PullNever, Env: []corev1.EnvVar{
			{Name: "POD_NAMESPACE", Value: ns}, {Name: "DEPENDENCY_SERVICE", Value: ns + ":" + dep},
		}}
	}
	w := onePod(ns, waiter, idle("main"))
	w.Spec.ServiceAccountName = "kolla-agent"
	w.Spec.InitContainers = []corev1.Container{init}
	createPod(b, w)
	waitPod(b, ns, waiter, "waiting in its init container", 2*time.Minute, func(p *corev1.Pod) bool {
		return len(p.Status.InitContainerStatuses) == 1 && p.Status.InitContainerStatuses[0].State.Running != nil
	})
	// Past the first look of either, and at a random point of the
	// entrypoint's 2 s period: with a fixed pause, the steps from here to
	// the dependency's readiness take about the same time in every sample,
	// so its GETs would meet the readiness at the same phase each time.
	time.Sleep(3*time.Second + rand.N(2*time.Second))
	createPod(b, onePod(ns, dep, idle("main")))
	var depReady, initDone, waiterReady time.Time
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if depReady.IsZero() {
			sl, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + dep})
			if err == nil && slices.ContainsFunc(sl.Items, func(s discoveryv1.EndpointSlice) bool {
				return slices.ContainsFunc(s.Endpoints, func(e discoveryv1.Endpoint) bool { return ptr.Deref(e.Conditions.Ready, false) })
			}) {
				depReady = time.Now()
			}
		}
		if p, err := c.CoreV1().Pods(ns).Get(ctx, waiter, metav1.GetOptions{}); err == nil {
			if initDone.IsZero() && len(p.Status.InitContainerStatuses) == 1 && p.Status.InitContainerStatuses[0].State.Terminated != nil {
				initDone = time.Now()
			}
			if podReady(p) {
				waiterReady = time.Now()
			}
		}
		return !depReady.IsZero() && !waiterReady.IsZero(), nil
	})
	if err != nil {
		b.Fatalf("%s: dependency ready %v, waiter ready %v\n%s", waiter, depReady, waiterReady, describe(ns, waiter, nil))
	}
	for _, name := range []string{waiter, dep} {
		c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	}
	b.Logf("%s: init container seen ended %.2fs, pod Ready %.2fs after the dependency's EndpointSlice", waiter, initDone.Sub(depReady).Seconds(), waiterReady.Sub(depReady).Seconds())
	return waiterReady.Sub(depReady).Seconds()
}

// BenchmarkRealPodProbeLatency: the kubelet's own measure of its probes
// (prober_probe_duration_seconds, from its /metrics/probes) of one pod:
// an httpGet readiness probe of the agent's /readyz with a process check,
// and, as the baseline, a tcpSocket liveness probe of the same port (a
// connection and nothing else: the kubelet's floor), both every second.
func BenchmarkRealPodProbeLatency(b *testing.B) {
	testenv.NeedNode(b, env)
	ns := env.Namespace(b)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns}, Data: map[string]string{"agent.yaml": `probes:
  address: ":8095"
  socket: "off"
  checks:
    - name: service
      process: {}
      probes: [readiness]
      period: 1s
`}}
	if _, err := env.Client().CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	ct := agentContainer("api", "run", "--", "/usr/local/bin/kolla-agent", "wait", "--timeout", "1h", "tcp:127.0.0.1:1")
	ct.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt(8095)}}, PeriodSeconds: 1}
	ct.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(8095)}}, PeriodSeconds: 1, FailureThreshold: 5}
	ct.VolumeMounts = []corev1.VolumeMount{{Name: "config", MountPath: "/etc/kolla-agent"}}
	pod := onePod(ns, "api", ct)
	pod.Spec.Volumes = []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "agent"}}}}}
	createPod(b, pod)
	waitPod(b, ns, "api", "Ready", time.Minute, podReady)
	mean := func(kind string) (float64, float64) {
		labels := []string{`probe_type="` + kind + `"`, `namespace="` + ns + `"`, `pod="api"`}
		sum, err := kubeletMetric("prober_probe_duration_seconds_sum", labels...)
		if err != nil {
			b.Fatal(err)
		}
		n, err := kubeletMetric("prober_probe_duration_seconds_count", labels...)
		if err != nil {
			b.Fatal(err)
		}
		return sum, n
	}
	s0r, n0r := mean("Readiness")
	s0l, n0l := mean("Liveness")
	for range b.N {
		time.Sleep(60 * time.Second)
	}
	s1r, n1r := mean("Readiness")
	s1l, n1l := mean("Liveness")
	if n1r-n0r < 30 || n1l-n0l < 30 {
		b.Fatalf("the kubelet probed %v readiness and %v liveness times in the window, want about 60 each", n1r-n0r, n1l-n0l)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric((s1r-s0r)/(n1r-n0r)*1000, "readyz-ms/mean")
	b.ReportMetric((s1l-s0l)/(n1l-n0l)*1000, "tcp-ms/mean")
}

// BenchmarkRealPodDeletion: `kubectl delete pod` to the pod gone from the
// API (the kubelet has stopped its containers and confirmed), for the
// agent as PID 1 supervising a service, against a pod of the sandbox's
// own pause program (which ends at once on SIGTERM: the kubelet's floor).
func BenchmarkRealPodDeletion(b *testing.B) {
	testenv.NeedNode(b, env)
	ns := env.Namespace(b)
	gone := func(name string, c corev1.Container) float64 {
		ctx := context.Background()
		createPod(b, onePod(ns, name, c))
		waitPod(b, ns, name, "Running", time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		start := time.Now()
		if err := env.Client().CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := env.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			b.Fatalf("pod %s not gone a minute after its deletion", name)
		}
		return time.Since(start).Seconds()
	}
	const samples = 5
	var agent, pause []float64
	for range b.N {
		for i := range samples {
			agent = append(agent, gone(fmt.Sprintf("agent-%d", i), agentContainer("api", "run", "--", "/usr/local/bin/kolla-agent", "wait", "--timeout", "1h", "tcp:127.0.0.1:1")))
			pause = append(pause, gone(fmt.Sprintf("pause-%d", i), corev1.Container{Name: "api", Image: testenv.SandboxImage, ImagePullPolicy: corev1.PullNever}))
		}
	}
	b.ReportMetric(0, "ns/op")
	reportSamples(b, agent, "agent-ms")
	reportSamples(b, pause, "pause-ms")
}

// BenchmarkRealPodConfigMapReload: a ConfigMap edit to the service running
// on it, with the node's kubelet (syncFrequency 10 s, then its own default
// 1m after a restart of the kubelet): uWSGI in a
// kolla-style image, `kolla-agent run` as PID 1 rendering the app's config
// from the ConfigMap volume and reloading uWSGI by SIGHUP, verified once
// its workers were replaced. The baseline is the kubelet's own part: the
// edit to the `..data` swap in the pod's volume (seen from the host).
func BenchmarkRealPodConfigMapReload(b *testing.B) {
	testenv.NeedNode(b, env)
	uwsgiImage(b)
	ns := env.Namespace(b)
	ctx := context.Background()
	c := env.Client()
	agentYAML := `render:
  - src: /etc/app-src/app.yaml
    dest: /shared/app.yaml
reload:
  watch: [/etc/app-src]
  quiet: 100ms
  action: signal
  signal: SIGHUP
  verifyTimeout: 30s
  stateDir: /var/lib/kolla-agent/reload
probes:
  address: ":8095"
  socket: "off"
  checks:
    - name: app
      http: {url: "http://127.0.0.1:8080/", expectStatus: [200]}
      probes: [readiness]
      period: 1s
`
	for name, data := range map[string]map[string]string{
		"agent":    {"agent.yaml": agentYAML},
		"app-src":  {"app.yaml": "v0"},
		"app-code": {"app.py": uwsgiApp},
	} {
		if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	cmVol := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}
	}
	empty := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	}
	ct := corev1.Container{
		Name: "app", Image: uwsgiRef, ImagePullPolicy: corev1.PullNever,
		Command: []string{"/usr/local/bin/kolla-agent", "run", "--", "/usr/bin/uwsgi-core", "--plugin", "python3", "--http-socket", ":8080",
			"--wsgi-file", "/app/app.py", "--master", "--lazy-apps", "--processes", "1", "--die-on-term"},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt(8095)}}, PeriodSeconds: 1},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "agent", MountPath: "/etc/kolla-agent"}, {Name: "app-src", MountPath: "/etc/app-src"}, {Name: "app-code", MountPath: "/app"},
			{Name: "shared", MountPath: "/shared"}, {Name: "state", MountPath: "/var/lib/kolla-agent"},
		},
	}
	pod := onePod(ns, "app", ct)
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(65534)), RunAsGroup: ptr.To(int64(65534)), FSGroup: ptr.To(int64(65534))}
	pod.Spec.Volumes = []corev1.Volume{cmVol("agent"), cmVol("app-src"), cmVol("app-code"), empty("shared"), empty("state")}
	createPod(b, pod)
	p := waitPod(b, ns, "app", "Ready", 2*time.Minute, podReady)
	data := filepath.Join(env.KubeletRootDir(), "pods", string(p.UID), "volumes/kubernetes.io~configmap/app-src/..data")
	if _, err := os.Readlink(data); err != nil {
		b.Fatalf("the pod's ConfigMap volume: %v", err)
	}
	samples := 5
	if s := os.Getenv("BENCH_SAMPLES"); s != "" {
		fmt.Sscan(s, &samples)
	}
	edits := 0
	measure := func(samples int, agent, kubelet *[]float64) {
		for range samples {
			edits++
			want := fmt.Sprintf("v%d", edits)
			target, _ := os.Readlink(data)
			applied, _ := appliedPasses(b, ns)
			cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "app-src", metav1.GetOptions{})
			if err != nil {
				b.Fatal(err)
			}
			cm.Data["app.yaml"] = want
			edited := time.Now()
			if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				b.Fatal(err)
			}
			var swapped time.Time
			err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
				if t, _ := os.Readlink(data); swapped.IsZero() && t != target {
					swapped = time.Now()
				}
				return !swapped.IsZero(), nil
			})
			if err != nil {
				b.Fatalf("the kubelet did not write the edit into %s", data)
			}
			var done time.Time
			err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
				n, at := appliedPasses(b, ns)
				done = at
				return n > applied && get(fmt.Sprintf("http://%s:8080/", p.Status.PodIP)) == want, nil
			})
			if err != nil {
				b.Fatalf("%s was not applied", want)
			}
			*kubelet = append(*kubelet, swapped.Sub(edited).Seconds())
			*agent = append(*agent, done.Sub(edited).Seconds())
			b.Logf("%s: the kubelet swapped ..data %.2fs after the edit, the agent's reload was applied %.2fs after it", want, swapped.Sub(edited).Seconds(), done.Sub(edited).Seconds())
		}
	}
	var agent, kubelet, agent60, kubelet60 []float64
	for range b.N {
		measure(samples, &agent, &kubelet)
		// The kubelet's own default syncFrequency (1m), fewer samples:
		// each waits up to a minute and more for the kubelet.
		if err := env.RestartKubelet(time.Minute); err != nil {
			b.Fatal(err)
		}
		waitPod(b, ns, "app", "Ready under the restarted kubelet", 2*time.Minute, podReady)
		// The restarted kubelet serves the pod's logs once it has synced it.
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := c.CoreV1().Pods(ns).GetLogs("app", &corev1.PodLogOptions{}).Do(ctx).Raw()
			return err == nil, nil
		})
		if err != nil {
			b.Fatal("the restarted kubelet does not serve the pod's logs")
		}
		// A kubelet just started syncs every pod at once: the first edit
		// after it is not what a running node shows, and is not counted.
		var warmA, warmK []float64
		measure(1, &warmA, &warmK)
		measure(max(samples/2, 3), &agent60, &kubelet60)
		if err := env.RestartKubelet(0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(0, "ns/op")
	reportSamples(b, agent, "agent-ms")
	reportSamples(b, kubelet, "kubelet-ms")
	reportSamples(b, agent60, "agent-60s-ms")
	reportSamples(b, kubelet60, "kubelet-60s-ms")
}

// appliedPasses counts the applied reload passes in the log of the pod
// "app"'s agent and returns the time its last one says.
func appliedPasses(b *testing.B, ns string) (int, time.Time) {
	logs, err := env.Client().CoreV1().Pods(ns).GetLogs("app", &corev1.PodLogOptions{}).Do(context.Background()).Raw()
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	var at time.Time
	for _, l := range strings.Split(string(logs), "\n") {
		if !strings.Contains(l, `msg="reload pass" outcome=applied`) || strings.Contains(l, "why=start") {
			continue
		}
		n++
		if ts, ok := strings.CutPrefix(strings.Fields(l)[0], "time="); ok {
			at, _ = time.Parse(time.RFC3339Nano, ts)
		}
	}
	return n, at
}
