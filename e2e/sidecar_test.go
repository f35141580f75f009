package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/image"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// uwsgiRef is a kolla-style image (images/kolla/Dockerfile) on a Debian
// root with Debian's uWSGI and its Python 3 plugin.
const uwsgiRef = "localhost/kolla-uwsgi:dev"

var uwsgiOnce struct {
	sync.Once
	err error
}

// uwsgiImage builds (the Debian root is cached by package list) and
// imports the uWSGI image once per test binary.
func uwsgiImage(t testing.TB) {
	t.Helper()
	uwsgiOnce.Do(func() {
		uwsgiOnce.err = func() error {
			rootfs, err := image.DebianRoot(filepath.Join(testenv.CacheDir(), "images"), "bookworm", image.UWSGIPackages())
			if err != nil {
				return err
			}
			imgs, err := image.Project(repoRoot())
			if err != nil {
				return err
			}
			img, err := image.KollaImage(repoRoot(), uwsgiRef, imgs[0], rootfs)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			_, err = env.ImportImages(ctx, env.Dir, img)
			return err
		}()
	})
	if uwsgiOnce.err != nil {
		t.Fatalf("the uWSGI image: %v", uwsgiOnce.err)
	}
}

// The app uWSGI serves: the config it read when it was loaded. uWSGI
// reloads it on SIGHUP (--lazy-apps: each worker imports it anew). A config
// that says "broken" parses but breaks the app: its workers serve 500s.
const uwsgiApp = `CONF = open('/shared/app.yaml').read().strip()
if CONF.startswith('broken'):
    raise RuntimeError('this config breaks the app: ' + CONF)

def application(environ, start_response):
    start_response('200 OK', [('Content-Type', 'text/plain')])
    return [CONF.encode()]
`

// TestNativeSidecarReloadsAcrossContainers: `kolla-agent sidecar` as a
// native sidecar (an init container with restartPolicy Always) in a pod
// with shareProcessNamespace, with the image's defaults for its own
// directories. It renders the service's config before the service runs
// (that first render is the start, not a reload to roll back), finds
// uWSGI in the other container, and takes each ConfigMap edit the kubelet
// writes into its volume to it with SIGHUP: a good one applied, a broken
// one (YAML that does not parse) refused with the service left alone, the
// pod Ready throughout both; a config that parses but breaks the app rolled
// back (uWSGI's old workers answer for a while after SIGHUP: a look they
// answer must not verify it, reload.settle); and a return to the first
// config applied again (REAL-PODS: the first config was remembered as
// refused and skipped, silently).
func TestNativeSidecarReloadsAcrossContainers(t *testing.T) {
	testenv.NeedNode(t, env)
	uwsgiImage(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	c := env.Client()
	agentYAML := `render:
  - src: /etc/app-src/app.yaml
    dest: /shared/app.yaml
sidecar:
  process: {name: uwsgi-core}
reload:
  action: signal
  signal: SIGHUP
  quiet: 500ms
  verifyTimeout: 15s
probes:
  address: ":8095"
  checks:
    - name: app
      http: {url: "http://127.0.0.1:8080/", expectStatus: [200]}
      probes: [readiness]
      period: 1s
`
	for name, data := range map[string]map[string]string{
		"agent":    {"agent.yaml": agentYAML},
		"app-src":  {"app.yaml": "v1"},
		"app-code": {"app.py": uwsgiApp},
	} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data}
		if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cmVol := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}
	}
	sidecar := agentContainer("kolla-agent", "sidecar")
	sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	sidecar.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/livez/agent", Port: intstr.FromInt(8095)}}, PeriodSeconds: 1, FailureThreshold: 30}
	sidecar.VolumeMounts = []corev1.VolumeMount{
		{Name: "agent", MountPath: "/etc/kolla-agent"},
		{Name: "app-src", MountPath: "/etc/app-src"},
		{Name: "shared", MountPath: "/shared"},
	}
	svc := corev1.Container{
		Name: "app", Image: uwsgiRef, ImagePullPolicy: corev1.PullNever,
		Command: []string{"/usr/bin/uwsgi-core", "--plugin", "python3", "--http-socket", ":8080", "--wsgi-file", "/app/app.py",
			"--master", "--lazy-apps", "--processes", "1", "--die-on-term"},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt(8095)}}, PeriodSeconds: 1},
		VolumeMounts:   []corev1.VolumeMount{{Name: "app-code", MountPath: "/app"}, {Name: "shared", MountPath: "/shared"}},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: corev1.PodSpec{
			ShareProcessNamespace: ptr.To(true),
			// One user for both: the agent signals the service's process.
			SecurityContext:               &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(65534)), RunAsGroup: ptr.To(int64(65534)), FSGroup: ptr.To(int64(65534))},
			TerminationGracePeriodSeconds: ptr.To(int64(10)),
			InitContainers:                []corev1.Container{sidecar},
			Containers:                    []corev1.Container{svc},
			Volumes: []corev1.Volume{cmVol("agent"), cmVol("app-src"), cmVol("app-code"),
				{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	createPod(t, pod)
	p := waitPod(t, ns, "app", "Ready", 120*time.Second, podReady)
	serves := func(want string) {
		t.Helper()
		var got string
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
			got = get(fmt.Sprintf("http://%s:8080/", p.Status.PodIP))
			return got == want, nil
		})
		if err != nil {
			logs, _ := c.CoreV1().Pods(ns).GetLogs("app", &corev1.PodLogOptions{Container: "kolla-agent"}).Do(ctx).Raw()
			t.Fatalf("uWSGI serves %q, want %q (the agent's port answers %q)\n%s\nthe sidecar's log:\n%s", got, want,
				get(fmt.Sprintf("http://%s:8095/readyz?verbose", p.Status.PodIP)), describe(ns, "app", nil), logs)
		}
	}
	edit := func(conf string) {
		t.Helper()
		cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "app-src", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["app.yaml"] = conf
		if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	logOf := func() string {
		logs, err := c.CoreV1().Pods(ns).GetLogs("app", &corev1.PodLogOptions{Container: "kolla-agent"}).Do(ctx).Raw()
		if err != nil {
			t.Fatal(err)
		}
		return string(logs)
	}
	waitLog := func(what string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Second, true, func(context.Context) (bool, error) {
			return strings.Contains(logOf(), what), nil
		})
		if err != nil {
			t.Fatalf("no %q in the sidecar's log:\n%s", what, logOf())
		}
	}
	serves("v1")
	notReady := watchNotReady(t, ns, "app")
	edit("v2") // written into the volume by the kubelet at its next sync
	serves("v2")
	waitLog("outcome=applied")
	edit("v3: [broken") // does not parse: refused before it is written
	waitLog("outcome=rejected")
	serves("v2")
	if n := notReady(); len(n) > 0 {
		t.Errorf("the pod was not Ready during a graceful reload and a refused edit: %s", strings.Join(n, "; "))
	}
	edit("broken v4") // parses, breaks the app once uWSGI has reloaded
	waitLog("outcome=rolled-back")
	serves("v2")
	waitPod(t, ns, "app", "Ready again after the rollback", 60*time.Second, podReady)
	edit("v1") // the first render's config: applied, not remembered as refused
	serves("v1")
	logs := logOf()
	if !strings.Contains(logs, "the service is not running; it will start on this config") {
		t.Errorf("the first render was not taken as the start:\n%s", logs)
	}
	if strings.Count(logs, `msg="reload pass" outcome=rolled-back`) != 1 || strings.Contains(logs, "refused before") {
		t.Errorf("want one rollback (the breaking edit's) and no config skipped as refused:\n%s", logs)
	}
	p, err := c.CoreV1().Pods(ns).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if cs.RestartCount != 0 {
			t.Errorf("container %s restarted %d times: the reloads were not graceful", cs.Name, cs.RestartCount)
		}
	}
}

// watchNotReady watches the pod until the test ends; the function it
// returns lists each time the pod was seen not Ready since the call.
func watchNotReady(t *testing.T, ns, name string) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := env.Client().CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && !podReady(p) {
				mu.Lock()
				seen = append(seen, time.Now().Format("15:04:05.000")+" "+string(ev.Type))
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// get returns the body of a GET, or the error's text.
func get(url string) string {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := c.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}
