package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kolla-agent/kolla-agent/internal/slice"
)

// The ServiceAccount token of a pod in create mode can create Jobs. With
// examples/rbac/job-policy.yaml (a ValidatingAdmissionPolicy) the real API
// server refuses a Job forged with that token that asks for another
// account, the node's namespaces or files, privilege, an image or a Secret
// the namespace's parameters do not list; the Job the agent itself
// creates from its template passes; the same forged Job from an
// administrator (not a token of the namespace) is not the policy's to judge.
func TestJobPolicyRefusesForgedJobs(t *testing.T) {
	ns := namespace(t)
	env := bootstrapEnv(t, ns, "create")
	var kubeconfig string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "KUBECONFIG="); ok {
			kubeconfig = v
		}
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	stolen := kubernetes.NewForConfigOrDie(rc)

	// The example, as an operator applies it: the policy and its binding,
	// the namespace labelled, its parameters.
	policy, binding, params, err := slice.JobPolicy(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	// Each test namespace gets its own binding name: the policy is cluster
	// scoped, and another run may hold it.
	admin := client()
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctxT(t), policy, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	binding.Name += "-" + ns
	binding.Spec.MatchResources.NamespaceSelector.MatchLabels = map[string]string{"kolla.openstack.org/job-policy": "enforced-" + ns}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctxT(t), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctxT(t), binding.Name, metav1.DeleteOptions{})
	})
	params.Data["images"] = "kolla/ quay.io/openstack.kolla/"
	params.Data["secrets"] = "keystone-db"
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctxT(t), params, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nsObj, err := admin.CoreV1().Namespaces().Get(ctxT(t), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nsObj.Labels == nil {
		nsObj.Labels = map[string]string{}
	}
	nsObj.Labels["kolla.openstack.org/job-policy"] = "enforced-" + ns
	if _, err := admin.CoreV1().Namespaces().Update(ctxT(t), nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	job := func(name string, edit func(*corev1.PodSpec)) *batchv1.Job {
		j := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "db-sync", Image: "kolla/keystone:2026.1",
					Env: []corev1.EnvVar{{Name: "OS_DATABASE__CONNECTION", ValueFrom: &corev1.EnvVarSource{
						SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "keystone-db"}, Key: "connection"}}}}}},
			}}},
		}
		if edit != nil {
			edit(&j.Spec.Template.Spec)
		}
		return j
	}
	yes := true
	forged := map[string]struct {
		edit func(*corev1.PodSpec)
		want string
	}{
		"other-account": {func(p *corev1.PodSpec) { p.ServiceAccountName = "keystone" }, "default ServiceAccount"},
		"host-network":  {func(p *corev1.PodSpec) { p.HostNetwork = true }, "hostNetwork"},
		"host-pid":      {func(p *corev1.PodSpec) { p.HostPID = true }, "hostPID"},
		"host-path": {func(p *corev1.PodSpec) {
			p.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}, "hostPath"},
		"privileged": {func(p *corev1.PodSpec) {
			p.InitContainers = []corev1.Container{{Name: "x", Image: "kolla/keystone:2026.1", SecurityContext: &corev1.SecurityContext{Privileged: &yes}}}
		}, "privileged"},
		"capability": {func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}
		}, "capability"},
		"other-image": {func(p *corev1.PodSpec) { p.Containers[0].Image = "evil.example/miner:1" }, "runs only images under kolla/"},
		"other-secret-volume": {func(p *corev1.PodSpec) {
			p.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "nova-db"}}}}
		}, "mounts only the Secrets keystone-db"},
		"other-secret-projected": {func(p *corev1.PodSpec) {
			p.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "nova-db"}}}}}}}}
		}, "mounts only the Secrets"},
		"other-secret-env": {func(p *corev1.PodSpec) {
			p.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "nova-db"}}}}
		}, "in its environment"},
	}
	// The policy takes effect once the API server has loaded it.
	eventually(t, "the policy in force", func() bool {
		_, err := stolen.BatchV1().Jobs(ns).Create(ctxT(t), job("probe", forged["host-path"].edit), metav1.CreateOptions{})
		return err != nil && strings.Contains(err.Error(), "hostPath")
	})
	for name, f := range forged {
		_, err := stolen.BatchV1().Jobs(ns).Create(ctxT(t), job(name, f.edit), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") || !strings.Contains(err.Error(), f.want) {
			t.Errorf("%s: a forged Job: %v, want the policy's refusal naming %q", name, err, f.want)
		}
	}
	if _, err := stolen.BatchV1().Jobs(ns).Create(ctxT(t), job("plain", nil), metav1.CreateOptions{}); err != nil {
		t.Errorf("a plain Job with a listed image and Secret: %v", err)
	}
	if _, err := admin.BatchV1().Jobs(ns).Create(ctxT(t), job("by-admin", forged["host-path"].edit), metav1.CreateOptions{}); err != nil {
		t.Errorf("an administrator's Job: %v (the policy judges the namespace's tokens only)", err)
	}

	// The agent's own Job, from its template, in create mode.
	cfg := bootstrapFiles(t, ns, "  mode: create\n  name: keystone-db-sync\n  command: keystone-manage db_sync\n  timeout: 2m\n", "")
	a := startAgent(t, append(env, "POD_NAME=keystone-api-0"), "--config", cfg, "init")
	name := waitJobs(t, ns, "keystone-db-sync", 1)[0]
	a.waitLog("waiting for job " + name)
	time.Sleep(100 * time.Millisecond)
}

// repoRoot is the module's root, where examples/ is.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
