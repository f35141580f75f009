package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/image"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// agentContainer is a container of the agent's image as its Dockerfile
// declares it (its user, its paths): only args change.
func agentContainer(name string, args ...string) corev1.Container {
	return corev1.Container{
		Name:            name,
		Image:           image.AgentRef,
		ImagePullPolicy: corev1.PullNever,
		Args:            args,
		Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		},
	}
}

// createPod creates a pod, retrying while the namespace's default
// ServiceAccount does not exist yet (the ServiceAccount admission plugin
// refuses pods until the controller manager has made it).
func createPod(t testing.TB, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var created *corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		created, err = env.Client().CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "serviceaccount") {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return created
}

// waitPod waits until cond holds for the pod; when it does not in time the
// test fails with what the kubelet said: phase, container states and the
// pod's Events.
func waitPod(t testing.TB, ns, name, what string, timeout time.Duration, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last *corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: not %s within %s\n%s", ns, name, what, timeout, describe(ns, name, last))
	}
	return last
}

// describe is what `kubectl describe pod` would show of a stuck pod.
func describe(ns, name string, p *corev1.Pod) string {
	var b strings.Builder
	if p != nil {
		fmt.Fprintf(&b, "phase %s", p.Status.Phase)
		for _, c := range p.Status.Conditions {
			fmt.Fprintf(&b, ", %s=%s", c.Type, c.Status)
		}
		b.WriteString("\n")
		for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			fmt.Fprintf(&b, "  container %s: ready=%t restarts=%d state=%s last=%s\n", cs.Name, cs.Ready, cs.RestartCount, state(cs.State), state(cs.LastTerminationState))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	evs, err := env.Client().CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
	if err != nil {
		fmt.Fprintf(&b, "  events: %v\n", err)
		return b.String()
	}
	for _, e := range evs.Items {
		fmt.Fprintf(&b, "  event %s %s: %s\n", e.Type, e.Reason, e.Message)
	}
	return b.String()
}

func state(s corev1.ContainerState) string {
	switch {
	case s.Waiting != nil:
		return "waiting (" + s.Waiting.Reason + ": " + s.Waiting.Message + ")"
	case s.Running != nil:
		return "running"
	case s.Terminated != nil:
		return fmt.Sprintf("terminated (exit %d, %s: %q)", s.Terminated.ExitCode, s.Terminated.Reason, s.Terminated.Message)
	}
	return "-"
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// terminated is the state of the pod's only container once it has ended.
func terminated(p *corev1.Pod) *corev1.ContainerStateTerminated {
	if len(p.Status.ContainerStatuses) == 0 {
		return nil
	}
	return p.Status.ContainerStatuses[0].State.Terminated
}

func onePod(ns, name string, c corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			Containers:                    []corev1.Container{c},
			TerminationGracePeriodSeconds: ptr.To(int64(10)),
		},
	}
}

// TestAgentAsPID1ReadyByKubelet runs `kolla-agent run` as the container's
// PID 1, as the image's user, with the kubelet's own httpGet readiness and
// liveness probes against it: the pod turns Ready, its Service's
// EndpointSlice says ready, and deleting the pod ends the container by its
// SIGTERM handling, not by the kubelet's SIGKILL after the grace period.
func TestAgentAsPID1ReadyByKubelet(t *testing.T) {
	testenv.NeedNode(t, env)
	ns := env.Namespace(t)
	ctx := context.Background()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Data: map[string]string{"agent.yaml": `probes:
  address: ":8095"
  socket: "off"
  checks:
    - name: service
      process: {}
      probes: [startup, readiness, liveness]
      period: 1s
`},
	}
	if _, err := env.Client().CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The service: a process that runs until signalled. The image is
	// scratch, so it is the agent's own binary, waiting for a port that
	// never opens.
	c := agentContainer("api", "run", "--", "/usr/local/bin/kolla-agent", "wait", "--timeout", "1h", "tcp:127.0.0.1:1")
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt(8095)}},
			PeriodSeconds: 1, FailureThreshold: 3,
		}
	}
	c.StartupProbe, c.ReadinessProbe, c.LivenessProbe = probe("/startupz"), probe("/readyz"), probe("/livez")
	c.VolumeMounts = []corev1.VolumeMount{{Name: "config", MountPath: "/etc/kolla-agent"}}
	pod := onePod(ns, "api", c)
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	pod.Spec.Volumes = []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "agent"}}}}}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "api"}, Ports: []corev1.ServicePort{{Port: 8095}}},
	}
	if _, err := env.Client().CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, pod)
	p := waitPod(t, ns, "api", "Ready", 60*time.Second, podReady)
	if cs := p.Status.ContainerStatuses[0]; cs.RestartCount != 0 {
		t.Errorf("container restarted %d times before Ready", cs.RestartCount)
	}
	// The kubelet's Ready became the EndpointSlice controller's ready.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		sl, err := env.Client().DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=api"})
		if err != nil {
			return false, nil
		}
		for _, s := range sl.Items {
			for _, ep := range s.Endpoints {
				if ptr.Deref(ep.Conditions.Ready, false) && slices.Contains(ep.Addresses, p.Status.PodIP) {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("EndpointSlice of Service api never listed %s as ready", p.Status.PodIP)
	}

	// Delete: the last status the kubelet reports before the pod goes says
	// how the container ended.
	w, err := env.Client().CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=api", ResourceVersion: p.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := env.Client().CoreV1().Pods(ns).Delete(ctx, "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var end *corev1.ContainerStateTerminated
	timeout := time.After(60 * time.Second)
	for gone := false; !gone; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch ended before the pod was gone")
			}
			if got, ok := ev.Object.(*corev1.Pod); ok && len(got.Status.ContainerStatuses) > 0 {
				if s := got.Status.ContainerStatuses[0].State.Terminated; s != nil {
					end = s
				}
			}
			gone = ev.Type == watch.Deleted
		case <-timeout:
			t.Fatalf("pod not gone 60 s after delete\n%s", describe(ns, "api", p))
		}
	}
	if end == nil {
		t.Fatal("the kubelet reported no terminated state before the pod went")
	}
	// 143 or 0: the agent stopped the service on SIGTERM; 137 would be the
	// kubelet's SIGKILL after the grace period.
	if end.ExitCode == 137 {
		t.Errorf("container ended by SIGKILL (exit 137): SIGTERM was not handled within the grace period")
	}
	t.Logf("container ended: exit %d (%s)", end.ExitCode, end.Reason)
}

// TestWaitWithoutToken: a pod that opts out of a ServiceAccount token (a
// common hardening) and waits only for a port must behave as outside a
// cluster; one that waits for a Service must fail saying that it needs the
// API, in its termination message.
func TestWaitWithoutToken(t *testing.T) {
	testenv.NeedNode(t, env)
	ns := env.Namespace(t)
	// kube-dns through kube-proxy: a port that is open, reached by ClusterIP.
	ok := onePod(ns, "tcp-only", agentContainer("wait", "wait", "--timeout", "60s", "tcp:10.96.0.10:53"))
	ok.Spec.AutomountServiceAccountToken = ptr.To(false)
	api := onePod(ns, "needs-api", agentContainer("wait", "wait", "--timeout", "60s", "service:default/kubernetes"))
	api.Spec.AutomountServiceAccountToken = ptr.To(false)
	createPod(t, ok)
	createPod(t, api)
	p := waitPod(t, ns, "tcp-only", "Succeeded", 60*time.Second, func(p *corev1.Pod) bool {
		return p.Status.Phase != corev1.PodPending && p.Status.Phase != corev1.PodRunning
	})
	if p.Status.Phase != corev1.PodSucceeded {
		t.Errorf("tcp-only pod: %s\n%s", p.Status.Phase, describe(ns, "tcp-only", p))
	}
	p = waitPod(t, ns, "needs-api", "ended", 60*time.Second, func(p *corev1.Pod) bool { return terminated(p) != nil })
	term := terminated(p)
	if term.ExitCode != 1 || !strings.Contains(term.Message, "needs the Kubernetes API") || !strings.Contains(term.Message, "service:default/kubernetes") {
		t.Errorf("needs-api pod: exit %d, termination message %q; want exit 1 and a message naming the dependency that needs the API", term.ExitCode, term.Message)
	}
}

// TestTerminationMessages: why the agent stopped is in the pod's status,
// as the image's user, for a bad configuration (exit 1) and for a wait that
// timed out (exit 2).
func TestTerminationMessages(t *testing.T) {
	testenv.NeedNode(t, env)
	ns := env.Namespace(t)
	cases := []struct {
		name     string
		args     []string
		code     int32
		contains []string
	}{
		{"bad-config", []string{"wait", "nonsense:x"}, 1, []string{"bad configuration", "nonsense:x"}},
		{"timeout", []string{"wait", "--timeout", "2s", "tcp:127.0.0.1:1"}, 2, []string{"timed out", "tcp:127.0.0.1:1"}},
	}
	for _, c := range cases {
		createPod(t, onePod(ns, c.name, agentContainer("agent", c.args...)))
	}
	for _, c := range cases {
		p := waitPod(t, ns, c.name, "ended", 60*time.Second, func(p *corev1.Pod) bool { return terminated(p) != nil })
		term := terminated(p)
		if term.ExitCode != c.code {
			t.Errorf("%s: exit %d, want %d", c.name, term.ExitCode, c.code)
		}
		for _, want := range c.contains {
			if !strings.Contains(term.Message, want) {
				t.Errorf("%s: termination message %q does not contain %q", c.name, term.Message, want)
			}
		}
	}
}

// TestGuardKeepsRangesLocal: a connection to an unassigned Service IP, from
// the host and from a pod, is refused by the node's guard (it would
// otherwise follow the default route off the machine).
func TestGuardKeepsRangesLocal(t *testing.T) {
	testenv.NeedNode(t, env)
	before, err := testenv.GuardPackets()
	if err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	createPod(t, onePod(ns, "unassigned", agentContainer("wait", "wait", "--timeout", "3s", "tcp:10.96.0.250:80")))
	p := waitPod(t, ns, "unassigned", "ended", 60*time.Second, func(p *corev1.Pod) bool { return terminated(p) != nil })
	// Refused, not unanswered: the guard's REJECT. (The last attempt can
	// be cut off by the wait's own deadline, so the whole log is read, not
	// only the final state.)
	logs, err := env.Client().CoreV1().Pods(ns).GetLogs("unassigned", &corev1.PodLogOptions{}).Do(context.Background()).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if term := terminated(p); term.ExitCode != 2 || !strings.Contains(string(logs), "connection refused") {
		t.Errorf("pod to 10.96.0.250:80: exit %d, %q, log:\n%s\nwant exit 2 and connection refused (the guard's REJECT)", term.ExitCode, term.Message, logs)
	}
	after, err := testenv.GuardPackets()
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("guard rejected %d packets before and %d after: the pod's packets did not meet it", before, after)
	}
}

// agentConfigMap creates a ConfigMap "agent" holding agent.yaml.
func agentConfigMap(t *testing.T, ns, agentYAML string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns}, Data: map[string]string{"agent.yaml": agentYAML}}
	if _, err := env.Client().CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// withAgentConfig mounts the "agent" ConfigMap at /etc/kolla-agent.
func withAgentConfig(p *corev1.Pod) *corev1.Pod {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "agent-config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "agent"}}}})
	for i := range p.Spec.Containers {
		p.Spec.Containers[i].VolumeMounts = append(p.Spec.Containers[i].VolumeMounts, corev1.VolumeMount{Name: "agent-config", MountPath: "/etc/kolla-agent"})
	}
	return p
}

// TestExecProbeAsImageUser: the kubelet's exec probes run kolla-agent-probe
// in the agent's image as its user, against the agent's default socket,
// which the image's own directory makes writable. With a read-only root
// filesystem the agent stops at once, naming the path and the volume to
// mount, and with that emptyDir mounted it works again.
func TestExecProbeAsImageUser(t *testing.T) {
	testenv.NeedNode(t, env)
	ns := env.Namespace(t)
	agentConfigMap(t, ns, `probes:
  address: "off"
  checks:
    - name: service
      process: {}
      probes: [readiness, liveness]
      period: 1s
`)
	mk := func(name string, readOnly, emptyDir bool) *corev1.Pod {
		c := agentContainer("api", "run", "--", "/usr/local/bin/kolla-agent", "wait", "--timeout", "1h", "tcp:127.0.0.1:1")
		exec := func(kind string) *corev1.Probe {
			return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"/usr/local/bin/kolla-agent-probe", kind}}}, PeriodSeconds: 1, FailureThreshold: 3}
		}
		c.ReadinessProbe, c.LivenessProbe = exec("readiness"), exec("liveness")
		if readOnly {
			c.SecurityContext = &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)}
		}
		p := onePod(ns, name, c)
		if emptyDir {
			p.Spec.Volumes = []corev1.Volume{{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "run", MountPath: "/run/kolla-agent"}}
			// An emptyDir is root's: the pod's fsGroup lets the image's user write it.
			p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To(int64(65534))}
		}
		return withAgentConfig(p)
	}
	createPod(t, mk("as-shipped", false, false))
	createPod(t, mk("read-only", true, false))
	createPod(t, mk("read-only-emptydir", true, true))

	for _, name := range []string{"as-shipped", "read-only-emptydir"} {
		waitPod(t, ns, name, "Ready", 60*time.Second, podReady)
		// Ready proves readiness ran; liveness must have passed as often.
		n := waitProbes(t, ns, name, "Liveness", 3)
		p, err := env.Client().CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rc := p.Status.ContainerStatuses[0].RestartCount; rc != 0 {
			t.Errorf("%s: restarted %d times after %v liveness probes\n%s", name, rc, n, describe(ns, name, p))
		}
	}
	p := waitPod(t, ns, "read-only", "ended", 60*time.Second, func(p *corev1.Pod) bool { return terminated(p) != nil })
	term := terminated(p)
	for _, want := range []string{"probes.socket", "/run/kolla-agent", "emptyDir"} {
		if term.ExitCode != 1 || !strings.Contains(term.Message, want) {
			t.Errorf("read-only root: exit %d, termination message %q; want exit 1 naming %q", term.ExitCode, term.Message, want)
		}
	}
}

// TestSecondNodeRefused: one node per machine. Another Env asking for a
// node while this one runs is refused, names the running one, and its
// failed start leaves that node's pods alone (it once killed every pod's
// cgroup on its way out).
func TestSecondNodeRefused(t *testing.T) {
	testenv.NeedNode(t, env)
	ns := env.Namespace(t)
	createPod(t, onePod(ns, "idle", idle("main")))
	p := waitPod(t, ns, "idle", "Running", time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	pids := podProcesses(t, *p, "kolla-agent")
	second, err := testenv.StartWith(t.TempDir(), testenv.Options{Node: true})
	if err == nil {
		second.Stop()
		t.Fatal("a second node started beside the first")
	}
	if !strings.Contains(err.Error(), "a node already runs on this machine, started in "+env.Dir) {
		t.Errorf("the refusal: %v", err)
	}
	for _, pid := range pids {
		// A killed process may linger as a zombie: its state says.
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if i := bytes.LastIndexByte(st, ')'); err != nil || i < 0 || len(st) < i+3 || st[i+2] == 'Z' {
			t.Errorf("the running node's pod process %d is gone after the refused start (%v): %s", pid, err, st)
		}
	}
	time.Sleep(2 * time.Second) // the kubelet's next look
	p = waitPod(t, ns, "idle", "Running", time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if n := p.Status.ContainerStatuses[0].RestartCount; n != 0 {
		t.Errorf("the pod's container restarted %d times", n)
	}
}
