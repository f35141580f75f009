package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/image"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// helmToolkitRole is the Role helm-toolkit's kubernetes_pod_rbac_roles
// snippet renders for a pod whose dependencies are services and jobs: get
// and list, no watch.
func helmToolkitRole(ns, name string) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"", "extensions", "batch", "apps", "discovery.k8s.io"},
			Verbs:     []string{"get", "list"},
			Resources: []string{"jobs", "pods", "services", "endpoints", "endpointslices"},
		}},
	}
}

// TestEntrypointUnderHelmToolkitRole: openstack-helm's init container with
// only the image swapped for the agent's entrypoint image, under the Role
// helm-toolkit renders (no watch). Its Service has no ready endpoint and its
// Job does not exist at the first LIST; both come later. The init container
// must see them (REAL-PODS: it hung for ever, its watch refused) and the pod
// start.
func TestEntrypointUnderHelmToolkitRole(t *testing.T) {
	testenv.NeedNode(t, env)
	ns := env.Namespace(t)
	ctx := context.Background()
	c := env.Client()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "keystone-api", Namespace: ns}}
	role := helmToolkitRole(ns, "keystone-"+ns+"-keystone-api")
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: ns}},
	}
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "mariadb", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "mariadb"}, Ports: []corev1.ServicePort{{Port: 8095, TargetPort: intstr.FromInt(8095)}}},
	}
	if _, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// helm-toolkit's init container (_kubernetes_entrypoint_init_container.tpl):
	// the command kubernetes-entrypoint and the DEPENDENCY_* variables.
	env := func(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
	}
	init := corev1.Container{
		Name:            "init",
		Image:           image.EntrypointRef,
		ImagePullPolicy: corev1.PullNever,
		Command:         []string{"kubernetes-entrypoint"},
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), RunAsUser: ptr.To(int64(65534))},
		Env: []corev1.EnvVar{
			field("POD_NAME", "metadata.name"), field("NAMESPACE", "metadata.namespace"),
			env("INTERFACE_NAME", "eth0"), env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin/"),
			env("DEPENDENCY_SERVICE", ns+":mariadb"), env("DEPENDENCY_DAEMONSET", ""), env("DEPENDENCY_CONTAINER", ""),
			env("DEPENDENCY_POD_JSON", ""), env("DEPENDENCY_CUSTOM_RESOURCE", ""),
			env("DEPENDENCY_JOBS", "keystone-db-sync"), env("COMMAND", "echo done"),
		},
	}
	api := onePod(ns, "keystone-api", agentContainer("keystone-api", "wait", "--timeout", "1h", "tcp:127.0.0.1:1"))
	api.Spec.ServiceAccountName = sa.Name
	api.Spec.InitContainers = []corev1.Container{init}
	createPod(t, api)
	// The init container has listed both and found neither ready.
	waitPod(t, ns, "keystone-api", "initialising", 60*time.Second, func(p *corev1.Pod) bool {
		return len(p.Status.InitContainerStatuses) == 1 && p.Status.InitContainerStatuses[0].State.Running != nil
	})
	// Past its first LIST and the refused WATCH of each, as its log says
	// (before the database and the Job exist, or it would have nothing to
	// warn of).
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		logs, err := c.CoreV1().Pods(ns).GetLogs("keystone-api", &corev1.PodLogOptions{Container: "init"}).Do(ctx).Raw()
		if err == nil && refusals(logs, "endpointslices.discovery.k8s.io") > 0 && refusals(logs, "jobs.batch") > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the init container never said both watches were refused (%v):\n%s", err, logs)
		}
	}

	// The database: made Ready by the kubelet's own probe against the agent.
	agentConfigMap(t, ns, "probes:\n  address: \":8095\"\n  socket: \"off\"\n  checks:\n    - name: service\n      process: {}\n      probes: [readiness]\n      period: 1s\n")
	db := agentContainer("mariadb", "run", "--", "/usr/local/bin/kolla-agent", "wait", "--timeout", "1h", "tcp:127.0.0.1:1")
	db.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt(8095)}}, PeriodSeconds: 1}
	dbPod := withAgentConfig(onePod(ns, "mariadb", db))
	dbPod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	createPod(t, dbPod)
	// The Job, run by the kubelet to completion.
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "keystone-db-sync", Namespace: ns},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{agentContainer("db-sync", "wait", "--timeout", "30s", "tcp:10.96.0.10:53")},
		}}},
	}
	if _, err := c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, ns, "keystone-api", "Running (its init container done)", 90*time.Second, func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && len(p.Status.InitContainerStatuses) == 1 && p.Status.InitContainerStatuses[0].State.Terminated != nil
	})
	if term := p.Status.InitContainerStatuses[0].State.Terminated; term.ExitCode != 0 {
		t.Errorf("init container: exit %d: %s", term.ExitCode, term.Message)
	}
	logs, err := c.CoreV1().Pods(ns).GetLogs("keystone-api", &corev1.PodLogOptions{Container: "init"}).Do(ctx).Raw()
	if err != nil {
		t.Fatalf("init container's log: %v", err)
	}
	// It said once, per resource, why it polls and what would fix it.
	for _, res := range []string{"endpointslices.discovery.k8s.io", "jobs.batch"} {
		if n := refusals(logs, res); n != 1 {
			t.Errorf("init container's log has %d warnings of a refused watch of %s, want 1:\n%s", n, res, logs)
		}
	}
}

// refusals counts the lines of an agent's log that warn of a refused watch
// of resource res.
func refusals(logs []byte, res string) int {
	n := 0
	for l := range strings.SplitSeq(string(logs), "\n") {
		if strings.Contains(l, "API watch refused") && strings.Contains(l, res) {
			n++
		}
	}
	return n
}
