package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, func(e *testenv.Env) { env = e })
}

// eventually polls cond every 50 ms until it returns nil or d has passed.
func eventually(t *testing.T, d time.Duration, what string, cond func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var last error
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		last = cond(ctx)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s: %v", what, d, last)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// lookupA asks addr for name's A records.
func lookupA(ctx context.Context, addr, name string) ([]string, int, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	r, _, err := (&dns.Client{Timeout: 500 * time.Millisecond}).ExchangeContext(ctx, m, addr)
	if err != nil {
		return nil, 0, err
	}
	var ips []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			ips = append(ips, a.A.String())
		}
	}
	return ips, r.Rcode, nil
}

func TestStartWritesUserFiles(t *testing.T) {
	envFile, err := os.ReadFile(filepath.Join(env.Dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"export KUBECONFIG='" + env.Kubeconfig + "'",
		"export KOLLA_AGENT_DNS_SERVER=" + env.DNSAddr,
		"export CLUSTER_DOMAIN=cluster.local",
	} {
		if !strings.Contains(string(envFile), want+"\n") {
			t.Errorf("env file lacks %q:\n%s", want, envFile)
		}
	}
	if !strings.HasPrefix(env.DNSAddr, "127.0.0.1:") {
		t.Errorf("DNSAddr = %q, want loopback", env.DNSAddr)
	}
	pids, err := os.ReadFile(filepath.Join(env.Dir, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{testenv.Etcd, testenv.APIServer, testenv.ControllerManager, testenv.CoreDNS} {
		if !strings.Contains(string(pids), name+" ") {
			t.Errorf("pids file lacks %s:\n%s", name, pids)
		}
	}
	if _, err := os.Stat(env.AuditLog); err != nil {
		t.Error(err)
	}

	// The admin kubeconfig works and verifies the serving certificate.
	cfg, err := testenv.LoadKubeconfig(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Insecure || len(cfg.CAData) == 0 {
		t.Errorf("admin kubeconfig skips TLS verification; want the serving CA")
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.Major != "1" || !strings.HasPrefix(v.GitVersion, "v1.") {
		t.Errorf("server version %+v: want a parsable v1.x", v)
	}
	ns := env.Namespace(t)
	if _, err := client.CoreV1().Namespaces().Get(testCtx(t), ns, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}

func newJob(name string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			BackoffLimit: new(int32(0)),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "main", Image: "registry.invalid/db-sync:1"}},
			}},
		},
	}
}

func jobCondition(j *batchv1.Job, c batchv1.JobConditionType) bool {
	for _, cond := range j.Status.Conditions {
		if cond.Type == c && cond.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func TestJobControllerCompletesJob(t *testing.T) {
	ctx, ns, kubelet := testCtx(t), env.Namespace(t), env.Kubelet()
	jobs := env.Client().BatchV1().Jobs(ns)
	for _, tc := range []struct {
		name   string
		finish func(job string) (*corev1.Pod, error)
		want   batchv1.JobConditionType
	}{
		{"succeeded", func(job string) (*corev1.Pod, error) { return kubelet.CompleteJobPod(ctx, ns, job) }, batchv1.JobComplete},
		{"failed", func(job string) (*corev1.Pod, error) { return kubelet.FailJobPod(ctx, ns, job, 3) }, batchv1.JobFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := jobs.Create(ctx, newJob(tc.name), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			pod, err := tc.finish(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if pod.Spec.NodeName != "" {
				t.Errorf("pod %s was already bound to %q: no scheduler should run", pod.Name, pod.Spec.NodeName)
			}
			eventually(t, 30*time.Second, "job condition "+string(tc.want), func(ctx context.Context) error {
				j, err := jobs.Get(ctx, tc.name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if !jobCondition(j, tc.want) {
					return errors.New("conditions: " + conditionTypes(j))
				}
				return nil
			})
		})
	}
}

func conditionTypes(j *batchv1.Job) string {
	var s []string
	for _, c := range j.Status.Conditions {
		s = append(s, string(c.Type)+"="+string(c.Status))
	}
	return strings.Join(s, ",")
}

func TestHeadlessServiceResolvesWhenPodReady(t *testing.T) {
	ctx, ns, kubelet := testCtx(t), env.Namespace(t), env.Kubelet()
	core := env.Client().CoreV1()
	labels := map[string]string{"app": "memcached"}
	if _, err := core.Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "memcached"},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  labels,
			Ports:     []corev1.ServicePort{{Name: "mc", Port: 11211}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "memcached-0", Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "memcached", Image: "registry.invalid/memcached:1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name := "memcached." + ns + ".svc." + env.ClusterDomain
	ips, rcode, err := lookupA(ctx, env.DNSAddr, name)
	if err != nil || len(ips) != 0 {
		t.Fatalf("before the pod is ready: %v %s %v, want no address", ips, dns.RcodeToString[rcode], err)
	}

	const ip = "10.244.0.7"
	if err := kubelet.SetPodRunning(ctx, ns, "memcached-0", ip, true); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "ready EndpointSlice", func(ctx context.Context) error {
		slices, err := env.Client().DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=memcached"})
		if err != nil {
			return err
		}
		for _, s := range slices.Items {
			for _, ep := range s.Endpoints {
				if len(ep.Addresses) > 0 && ep.Addresses[0] == ip && ep.Conditions.Ready != nil && *ep.Conditions.Ready {
					return nil
				}
			}
		}
		return errors.New("no ready endpoint " + ip)
	})
	eventually(t, 30*time.Second, "A record", func(ctx context.Context) error {
		ips, rcode, err := lookupA(ctx, env.DNSAddr, name)
		if err != nil {
			return err
		}
		if !slices.Equal(ips, []string{ip}) {
			return errors.New(dns.RcodeToString[rcode] + " " + strings.Join(ips, ","))
		}
		return nil
	})

	// A failing readiness probe takes the address out of DNS again.
	if err := kubelet.SetContainerReady(ctx, ns, "memcached-0", "memcached", false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "A record gone", func(ctx context.Context) error {
		ips, _, err := lookupA(ctx, env.DNSAddr, name)
		if err != nil {
			return err
		}
		if len(ips) != 0 {
			return errors.New("still " + strings.Join(ips, ","))
		}
		return nil
	})
}

// DaemonSet pods are pinned to a node by affinity; the stand-in binds them
// there, not to its default node.
func TestDaemonSetPodBoundToItsNode(t *testing.T) {
	ctx, ns, kubelet := testCtx(t), env.Namespace(t), env.Kubelet()
	if err := kubelet.EnsureNode(ctx, "testenv-node-b"); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "openvswitch"}
	if _, err := env.Client().AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "openvswitch"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "ovs", Image: "registry.invalid/ovs:1"}}},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := kubelet.WaitForPod(ctx, ns, "app=openvswitch")
	if err != nil {
		t.Fatal(err)
	}
	if err := kubelet.SetPodRunning(ctx, ns, pod.Name, "10.244.1.3", true); err != nil {
		t.Fatal(err)
	}
	got, err := env.Client().CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0]
	if got.Spec.NodeName != want || got.Status.Phase != corev1.PodRunning {
		t.Errorf("pod on %q in phase %s, want on %q and Running", got.Spec.NodeName, got.Status.Phase, want)
	}
}

func TestAPIServerRestartKeepsData(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func() error
	}{
		{"stopped", env.StopAPIServer},
		{"killed", env.KillAPIServer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, ns := testCtx(t), env.Namespace(t)
			cms := env.Client().CoreV1().ConfigMaps(ns)
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "keep"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := env.StartAPIServer(); err != nil {
					t.Error(err)
				}
			})
			began := time.Now()
			if err := tc.stop(); err != nil {
				t.Fatal(err)
			}
			stopped := time.Now()
			if _, err := cms.Get(ctx, "keep", metav1.GetOptions{}); err == nil {
				t.Fatal("API server still answers after it was stopped")
			}
			if err := env.StartAPIServer(); err != nil {
				t.Fatal(err)
			}
			t.Logf("stop %s, start %s", stopped.Sub(began).Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))
			cm, err := cms.Get(ctx, "keep", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if cm.Data["k"] != "v" {
				t.Errorf("configmap data %v after restart", cm.Data)
			}
			// The admin kubeconfig (same port, same serving certificate) still works.
			cfg, err := testenv.LoadKubeconfig(env.Kubeconfig)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps(ns).Get(ctx, "keep", metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDNSRestartSamePort(t *testing.T) {
	ctx := testCtx(t)
	name := "kubernetes.default.svc." + env.ClusterDomain
	t.Cleanup(func() {
		if err := env.StartDNS(); err != nil {
			t.Error(err)
		}
	})
	if err := env.StopDNS(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := lookupA(ctx, env.DNSAddr, name); err == nil {
		t.Fatal("CoreDNS still answers after StopDNS")
	}
	addr := env.DNSAddr

	// Another socket sharing the port through SO_REUSEPORT (as a second
	// CoreDNS would) must make StartDNS fail, not go unnoticed.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		})
		return errors.Join(err, serr)
	}}
	squatter, err := lc.ListenPacket(ctx, "udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.StartDNS(); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Errorf("StartDNS beside another socket on %s: %v, want a port clash", addr, err)
	}
	squatter.Close()

	if err := env.StartDNS(); err != nil {
		t.Fatal(err)
	}
	if env.DNSAddr != addr {
		t.Errorf("DNSAddr changed from %s to %s", addr, env.DNSAddr)
	}
	ips, _, err := lookupA(ctx, env.DNSAddr, name)
	if err != nil || len(ips) == 0 {
		t.Fatalf("after StartDNS: %v %v", ips, err)
	}
}

func TestAgentKubeconfigIsMinimal(t *testing.T) {
	ctx, ns, other := testCtx(t), env.Namespace(t), env.Namespace(t)
	since := time.Now()
	path, err := env.AgentKubeconfig(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if admin, _ := testenv.LoadKubeconfig(env.Kubeconfig); strings.Contains(string(kc), admin.BearerToken) {
		t.Fatal("agent kubeconfig carries the admin token")
	}
	cfg, err := testenv.LoadKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	agent := kubernetes.NewForConfigOrDie(cfg)

	// What the agent needs.
	allowed := map[string]func() error{
		"list pods": func() error { _, err := agent.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); return err },
		"list endpointslices": func() error {
			_, err := agent.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
			return err
		},
		"list jobs":       func() error { _, err := agent.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{}); return err },
		"list daemonsets": func() error { _, err := agent.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{}); return err },
		"watch jobs": func() error {
			w, err := agent.BatchV1().Jobs(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=keystone-db-sync"})
			if err == nil {
				w.Stop()
			}
			return err
		},
		"create event": func() error {
			_, err := agent.CoreV1().Events(ns).Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{GenerateName: "kolla-agent-"},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "keystone-api-0"},
				Reason:         "DependencyTimeout", Message: "test", Type: corev1.EventTypeWarning,
			}, metav1.CreateOptions{})
			return err
		},
	}
	for what, call := range allowed {
		if err := call(); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	// What it must not do.
	forbidden := map[string]func() error{
		"list secrets":        func() error { _, err := agent.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); return err },
		"list configmaps":     func() error { _, err := agent.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); return err },
		"delete pods":         func() error { return agent.CoreV1().Pods(ns).Delete(ctx, "x", metav1.DeleteOptions{}) },
		"list pods elsewhere": func() error { _, err := agent.CoreV1().Pods(other).List(ctx, metav1.ListOptions{}); return err },
		"create jobs": func() error {
			_, err := agent.BatchV1().Jobs(ns).Create(ctx, newJob("x"), metav1.CreateOptions{})
			return err
		},
		"list pods in all of them": func() error { _, err := agent.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err },
	}
	for what, call := range forbidden {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: got %v, want forbidden", what, err)
		}
	}

	// The audit log counts exactly the agent's requests.
	want := len(allowed) + len(forbidden)
	var got []testenv.AuditRequest
	eventually(t, 10*time.Second, "audit log", func(context.Context) error {
		if got, err = env.Requests(testenv.AgentUser(ns), since); err != nil {
			return err
		}
		if len(got) != want {
			return errors.New("got " + strconv.Itoa(len(got)) + " requests, want " + strconv.Itoa(want))
		}
		return nil
	})
	var forbiddenCount int
	for _, r := range got {
		if r.Code == 403 {
			forbiddenCount++
		}
		if r.User != testenv.AgentUser(ns) || r.Verb == "" || r.RequestURI == "" || r.Time.Before(since) {
			t.Errorf("bad audit record %+v", r)
		}
	}
	if forbiddenCount != len(forbidden) {
		t.Errorf("%d requests answered 403, want %d: %+v", forbiddenCount, len(forbidden), got)
	}

	// Extra rules, e.g. for a custom resource dependency, widen the Role.
	path, err = env.AgentKubeconfig(ctx, ns, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list"}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = testenv.LoadKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list configmaps with the extra rule: %v", err)
	}
}

// A second control plane beside the shared one: its own ports, Open finds it
// again (as hack/testenv does), and Stop ends exactly its processes.
func TestSecondEnvStopsOnlyItsProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second control plane")
	}
	dir := t.TempDir()
	began := time.Now()
	e2, err := testenv.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second control plane started in %s", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() { e2.Stop() })
	if e2.DNSAddr == env.DNSAddr || e2.Admin().Host == env.Admin().Host {
		t.Fatalf("second env shares an address: %s %s", e2.DNSAddr, e2.Admin().Host)
	}

	opened, err := testenv.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := opened.Healthy(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	pids := readPids(t, dir)
	if err := opened.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := opened.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := e2.Stop(); err != nil {
		t.Fatalf("Stop of the original handle: %v", err)
	}
	for _, pid := range pids {
		eventually(t, 5*time.Second, "pid "+strconv.Itoa(pid)+" gone", func(context.Context) error {
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				return errors.New("still there")
			}
			return nil
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "pids")); !os.IsNotExist(err) {
		t.Errorf("pids file left after Stop: %v", err)
	}
	// The shared control plane is untouched.
	if err := env.Healthy(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

func readPids(t *testing.T, dir string) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		pid, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if len(pids) != 4 {
		t.Fatalf("pids file: %q", b)
	}
	return pids
}

// The default etcd is the version hack/install-tools.sh builds, and the
// running etcd is the one TESTENV_ETCD asked for.
func TestEtcdVersion(t *testing.T) {
	script, err := os.ReadFile("../../hack/install-tools.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ETCD_VERSION=\$\{ETCD_VERSION:-(v[0-9.]+)\}$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("hack/install-tools.sh sets no ETCD_VERSION default")
	}
	if string(m[1]) != testenv.EtcdVersion {
		t.Errorf("hack/install-tools.sh builds etcd %s, testenv.EtcdVersion is %s", m[1], testenv.EtcdVersion)
	}
	t.Logf("running %s", env.Etcd)
	switch want := os.Getenv(testenv.EtcdEnv); {
	case want == testenv.EtcdDebian:
		if env.Etcd.Source != want || !strings.HasPrefix(env.Etcd.Version, "3.") {
			t.Errorf("%s=%s runs %+v", testenv.EtcdEnv, want, env.Etcd)
		}
	default:
		if want == "" {
			want = testenv.EtcdVersion
		}
		if env.Etcd.Source != want || "v"+env.Etcd.Version != want {
			t.Errorf("%s=%q runs %+v, want etcd %s", testenv.EtcdEnv, os.Getenv(testenv.EtcdEnv), env.Etcd, want)
		}
	}
}

// What the API server can serve depends on its etcd: with on-demand
// progress requests (etcd 3.6) it streams a watch-list (sendInitialEvents)
// from its watch cache, ending the initial events with a bookmark; without
// them (Debian's 3.4.23) it refuses the stream, and clients fall back to
// LIST+WATCH.
func TestWatchListFollowsEtcd(t *testing.T) {
	ctx := testCtx(t)
	ns := env.Namespace(t)
	cms := env.Client().CoreV1().ConfigMaps(ns)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{
		FieldSelector:        "metadata.name=a", // not the controller manager's kube-root-ca.crt
		SendInitialEvents:    new(true),
		AllowWatchBookmarks:  true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	for ev := range w.ResultChan() {
		switch o := ev.Object.(type) {
		case *corev1.ConfigMap:
			got = append(got, string(ev.Type)+" "+o.Name)
			if ev.Type == "BOOKMARK" && o.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
				got[len(got)-1] = "BOOKMARK initial-events-end"
			}
		case *metav1.Status:
			got = append(got, string(ev.Type)+" "+o.Message)
		default:
			got = append(got, fmt.Sprintf("%s %T", ev.Type, o))
		}
		if ev.Type != "ADDED" {
			break
		}
	}
	t.Logf("on %s: %q", env.Etcd, got)
	if env.Etcd.ProgressRequests() {
		if !slices.Equal(got, []string{"ADDED a", "BOOKMARK initial-events-end"}) {
			t.Errorf("watch-list on %s: %q, want the ConfigMap and the initial-events-end bookmark", env.Etcd, got)
		}
	} else if len(got) != 1 || !strings.HasPrefix(got[0], "ERROR ") || !strings.Contains(got[0], "RequestWatchProgress") {
		t.Errorf("watch-list on %s: %q, want it refused for lack of RequestWatchProgress", env.Etcd, got)
	}
}
