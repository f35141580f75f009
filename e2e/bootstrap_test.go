package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/image"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// bootstrapConfig is agent.yaml and the Job template of a create-mode
// bootstrap whose Job runs the agent's image: `kolla-agent bootstrap --`
// around args. A failed Job holds the replicas until timeout (an operator
// may delete the Job to run it again), then they exit 2.
func bootstrapConfig(t *testing.T, ns, timeout string, args ...string) {
	t.Helper()
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	job := fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  name: svc-db-sync
spec:
  template:
    spec:
      containers:
        - name: db-sync
          image: %s
          imagePullPolicy: Never
          args: ["bootstrap", "--", %s]
`, image.AgentRef, strings.Join(quoted, ", "))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns}, Data: map[string]string{
		"agent.yaml": `bootstrap:
  mode: create
  name: svc-db-sync
  job: /etc/kolla-agent/job.yaml
  command: ` + strings.Join(args, " ") + `
  timeout: ` + timeout + `
  retries: 0
  permanentExitCodes: [2]
`,
		"job.yaml": job,
	}}
	if _, err := env.Client().CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.AgentKubeconfigWith(context.Background(), ns, []string{"examples/rbac/bootstrap-create.yaml"}); err != nil {
		t.Fatal(err)
	}
}

// replicas is a Deployment whose pods run `kolla-agent init` (the
// bootstrap) as their init container, as the kolla-agent ServiceAccount.
func replicas(ns string, n int32) *appsv1.Deployment {
	init := agentContainer("init", "init")
	init.VolumeMounts = []corev1.VolumeMount{{Name: "agent-config", MountPath: "/etc/kolla-agent"}}
	labels := map[string]string{"app": "svc"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "svc", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            "kolla-agent",
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					InitContainers:                []corev1.Container{init},
					Containers:                    []corev1.Container{agentContainer("svc", "wait", "--timeout", "1h", "tcp:127.0.0.1:1")},
					Volumes: []corev1.Volume{{Name: "agent-config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "agent"}}}}},
				},
			},
		},
	}
}

func listPods(t *testing.T, ns, selector string) []corev1.Pod {
	t.Helper()
	l, err := env.Client().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// TestBootstrapCreateReplicas: three replicas start together; exactly one
// Job is created, the kubelet runs it to completion, the record outlives
// it, and every replica starts after it.
func TestBootstrapCreateReplicas(t *testing.T) {
	testenv.NeedNode(t, env)
	ns := env.Namespace(t)
	ctx := context.Background()
	bootstrapConfig(t, ns, "2m", "/usr/local/bin/kolla-agent", "wait", "--timeout", "30s", "tcp:10.96.0.10:53")
	if _, err := env.Client().AppsV1().Deployments(ns).Create(ctx, replicas(ns, 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		running := 0
		for _, p := range listPods(t, ns, "app=svc") {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 3, nil
	})
	if err != nil {
		var b strings.Builder
		for _, p := range listPods(t, ns, "app=svc") {
			b.WriteString(p.Name + ": " + describe(ns, p.Name, &p))
		}
		t.Fatalf("3 replicas not Running within 90 s:\n%s", b.String())
	}
	jobs, err := env.Client().BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 1 {
		t.Fatalf("%d Jobs, want exactly one for 3 replicas", len(jobs.Items))
	}
	j := jobs.Items[0]
	if !strings.HasPrefix(j.Name, "svc-db-sync-") || j.Status.Succeeded != 1 {
		t.Errorf("Job %s: succeeded %d, want the content-named svc-db-sync-* run once to completion", j.Name, j.Status.Succeeded)
	}
	if _, err := env.Client().CoreV1().ConfigMaps(ns).Get(ctx, "svc-db-sync-bootstrap", metav1.GetOptions{}); err != nil {
		t.Errorf("the bootstrap record: %v", err)
	}
}

// TestBootstrapFailureInPodStatus: a bootstrap whose command fails with a
// permanent exit code fails its Job at once (podFailurePolicy), is posted as
// an Event on the pod, and, at the bootstrap's timeout, ends the init
// container with the reason in its termination message.
func TestBootstrapFailureInPodStatus(t *testing.T) {
	testenv.NeedNode(t, env)
	ns := env.Namespace(t)
	ctx := context.Background()
	// exit 2: wait's timeout, listed as permanent.
	bootstrapConfig(t, ns, "15s", "/usr/local/bin/kolla-agent", "wait", "--timeout", "1s", "tcp:127.0.0.1:1")
	d := replicas(ns, 1)
	d.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	if _, err := env.Client().AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		for _, p := range listPods(t, ns, "app=svc") {
			for _, cs := range p.Status.InitContainerStatuses {
				if term := cs.LastTerminationState.Terminated; term != nil {
					pod = p
					return true, nil
				}
				if term := cs.State.Terminated; term != nil && term.ExitCode != 0 {
					pod = p
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		var b strings.Builder
		for _, p := range listPods(t, ns, "") {
			b.WriteString(p.Name + ": " + describe(ns, p.Name, &p))
		}
		jobs, _ := env.Client().BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		for _, j := range jobs.Items {
			fmt.Fprintf(&b, "job %s: active %d failed %d succeeded %d conditions %v\n", j.Name, j.Status.Active, j.Status.Failed, j.Status.Succeeded, j.Status.Conditions)
		}
		t.Fatalf("the init container never ended with the bootstrap's failure:\n%s", b.String())
	}
	cs := pod.Status.InitContainerStatuses[0]
	term := cs.State.Terminated
	if term == nil {
		term = cs.LastTerminationState.Terminated
	}
	if term.ExitCode != 2 || !strings.Contains(term.Message, "svc-db-sync") || !strings.Contains(term.Message, "exit code 2") {
		t.Errorf("init container: exit %d, termination message %q; want exit 2 naming the bootstrap", term.ExitCode, term.Message)
	}
	// Why, in the words of the bootstrap command: its pod's termination
	// message, quoted.
	if !strings.Contains(term.Message, "its pod said: bootstrap command") || !strings.Contains(term.Message, "not ready: tcp:127.0.0.1:1") {
		t.Errorf("init container's termination message does not quote the Job pod's: %q", term.Message)
	}
	events := describe(ns, pod.Name, nil)
	if !strings.Contains(events, "event Warning BootstrapJobFailed") {
		t.Errorf("no Warning Event on the pod:\n%s", events)
	}
	t.Logf("termination message: %s\n%s", term.Message, events)
}
