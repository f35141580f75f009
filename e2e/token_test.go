package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kolla-agent/kolla-agent/internal/slice"
)

// tokenPaths are where a container's ServiceAccount token is, seen from
// the host through /proc/PID/root: the kubelet mounts it at /var/run/...,
// which is /run/... in images where /var/run links there (an absolute
// symlink after /proc/PID/root resolves on the host, so both are tried).
var tokenPaths = []string{"/run/secrets/kubernetes.io/serviceaccount/token", "/var/run/secrets/kubernetes.io/serviceaccount/token"}

// serviceCannotReadToken: no process of the pod that runs as another user
// than root, other than the agent itself, can read a ServiceAccount token,
// in its own container or in any other of the pod (through /proc/PID/root
// of any process there, as a compromised service in a pod that shares its
// process namespace would). Each attempt is a real open, by a process with
// that process's uid, gid and groups. tokens says how many containers hold
// a token root can read there (the attempts go where the token is).
func serviceCannotReadToken(t *testing.T, pod corev1.Pod, tokens int) {
	t.Helper()
	type cred struct {
		uid, gid uint32
		groups   string
	}
	var attackers []cred
	seenCred := map[cred]bool{}
	var targets []int // one process per (mount namespace, uid, dumpable-ness): the ways in
	seenWay := map[string]bool{}
	withToken := map[string]bool{}
	for _, pid := range podPIDs(pod) {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		uid, gid, groups := statusCred(st)
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		mnt, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		agent := strings.TrimSpace(string(comm)) == "kolla-agent"
		way := fmt.Sprintf("%s %d %v", mnt, uid, agent)
		if !seenWay[way] {
			seenWay[way] = true
			targets = append(targets, pid)
		}
		for _, p := range tokenPaths {
			if _, err := os.ReadFile(fmt.Sprintf("/proc/%d/root%s", pid, p)); err == nil {
				withToken[mnt] = true
			}
		}
		c := cred{uid, gid, groups}
		if uid != 0 && !agent && !seenCred[c] {
			seenCred[c] = true
			attackers = append(attackers, c)
		}
	}
	if len(withToken) != tokens {
		t.Errorf("pod %s: %d containers hold a token, want %d", pod.Name, len(withToken), tokens)
	}
	if len(attackers) == 0 {
		t.Fatalf("pod %s: no process runs as a service user", pod.Name)
	}
	for _, a := range attackers {
		var groups []uint32
		for _, g := range strings.Fields(a.groups) {
			n, _ := strconv.Atoi(g)
			groups = append(groups, uint32(n))
		}
		for _, pid := range targets {
			for _, p := range tokenPaths {
				path := fmt.Sprintf("/proc/%d/root%s", pid, p)
				c := exec.Command("cat", path)
				c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: groups}}
				if out, err := c.Output(); err == nil {
					t.Errorf("pod %s: uid %d (gid %d, groups %s) read the token through %s (%d bytes)", pod.Name, a.uid, a.gid, a.groups, path, len(out))
				}
			}
		}
	}
	t.Logf("pod %s: %d service users tried %d ways to a token (%d containers hold one): none read it", pod.Name, len(attackers), len(targets), len(withToken))
}

// podPIDs are the host PIDs of every process of the pod.
func podPIDs(pod corev1.Pod) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if bytes.Contains(cg, []byte(string(pod.UID))) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// statusCred reads the real uid and gid and the supplementary groups of
// /proc/PID/status.
func statusCred(status []byte) (uid, gid uint32, groups string) {
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		switch {
		case k == "Uid" && len(f) > 0:
			n, _ := strconv.Atoi(f[0])
			uid = uint32(n)
		case k == "Gid" && len(f) > 0:
			n, _ := strconv.Atoi(f[0])
			gid = uint32(n)
		case k == "Groups":
			groups = strings.Join(f, " ")
		}
	}
	return uid, gid, groups
}

// enforceJobPolicy applies examples/rbac/job-policy.yaml as an operator
// would, to ns (the slice's namespace, labelled as the example says), with
// the slice's image prefix and the Secrets its Jobs read; removed at the
// end. The agents' own Jobs must pass it; a forged one must not.
func enforceJobPolicy(t *testing.T, ns string, secrets ...string) {
	t.Helper()
	policy, binding, params, err := slice.JobPolicy(repoRoot())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := env.Client()
	if _, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), policy.Name, metav1.DeleteOptions{})
	})
	params.Namespace = ns
	params.Data["images"] = "localhost/kolla-"
	params.Data["secrets"] = strings.Join(secrets, " ")
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, params, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nsObj, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range binding.Spec.MatchResources.NamespaceSelector.MatchLabels {
		nsObj.Labels[k] = v
	}
	if _, err := c.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// forgedJobRefused: a Job asking for the node's root, made with the token
// of a pod's agent (read from its container, as a compromised service
// that got hold of it would use it), is refused by the policy.
func forgedJobRefused(t *testing.T, ns string, agentPID int) {
	t.Helper()
	var tok []byte
	var err error
	for _, p := range tokenPaths {
		if tok, err = os.ReadFile(fmt.Sprintf("/proc/%d/root%s", agentPID, p)); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("the agent's token: %v", err)
	}
	rc := rest.AnonymousClientConfig(env.Admin())
	rc.BearerToken = string(tok)
	stolen := kubernetes.NewForConfigOrDie(rc)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "forged-", Namespace: ns},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "x", Image: "localhost/kolla-nova-conductor:dev", Command: []string{"cat", "/host/etc/shadow"}, VolumeMounts: []corev1.VolumeMount{{Name: "host", MountPath: "/host"}}}},
			Volumes:       []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
		}}},
	}
	// A new binding takes the API server a moment: a Job admitted before it
	// holds is taken back and tried again.
	var last error
	err = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		j, err := stolen.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
		if err == nil {
			// The binding not in force yet: take it back, try again.
			bg := metav1.DeletePropagationBackground
			env.Client().BatchV1().Jobs(ns).Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
			last = fmt.Errorf("job %s admitted", j.Name)
			return false, nil
		}
		last = err
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err), nil
	})
	if err != nil || !strings.Contains(last.Error(), "hostPath") {
		t.Errorf("a Job mounting the node's / made with the agent's token: %v; want refused by the policy naming hostPath", last)
	}
}
