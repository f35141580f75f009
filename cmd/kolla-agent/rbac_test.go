package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

// `kolla-agent config rbac` prints the Role an agent.yaml needs, with
// resourceNames on every object the agent knows by name. The agent then
// runs with that Role as its only rights on the real API server: it waits
// for a Job by name, holds the bootstrap Lease, runs the command and writes
// the record, two replicas side by side; no request of it is refused
// (audit log), and the same token may not read or write another service's
// record, Lease or Job.
func TestConfigRBACIsEnoughAndNoMore(t *testing.T) {
	ns := namespace(t)
	dir := t.TempDir()
	cfg := agentYAML(t, fmt.Sprintf(`namespace: %s
dependencies:
  wait: [job:keystone-fernet-setup]
bootstrap:
  mode: lease
  name: keystone-db-sync
  command: "sh -c 'echo synced > %s/synced-$POD_NAME'"
  leaseDuration: 2s
  timeout: 2m
`, ns, dir))
	out, err := exec.Command(s.bin, "config", "rbac", "--config", cfg).CombinedOutput()
	if err != nil {
		t.Fatalf("config rbac: %v\n%s", err, out)
	}
	docs := strings.Split(string(out), "\n---\n")
	var role rbacv1.Role
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &role); err != nil || role.Kind != "Role" {
		t.Fatalf("the first document is not a Role: %v\n%s", err, out)
	}
	named := map[string][]string{}
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			named[res] = append(named[res], r.ResourceNames...)
		}
	}
	for res, want := range map[string]string{"leases": "keystone-db-sync", "configmaps": "keystone-db-sync-bootstrap", "jobs": "keystone-fernet-setup"} {
		if !strings.Contains(strings.Join(named[res], " "), want) {
			t.Errorf("the Role names no %s %s:\n%s", res, want, out)
		}
	}

	env := agentEnv(t, ns)
	setRole(t, ns, role.Rules...)
	waitDenied(t, ns, "list", "", "pods") // the base Role's rules are gone
	mkJob(t, ns, "keystone-fernet-setup", nil)
	mkJob(t, ns, "glance-db-sync", nil)
	since := time.Now()
	var agents []*agentProc
	for i := range 2 {
		pod := fmt.Sprintf("keystone-api-%d", i)
		mkPod(t, ns, pod, nil)
		agents = append(agents, startAgent(t, append(env, "POD_NAME="+pod), "--config", cfg, "init"))
	}
	agents[0].waitLog("keystone-fernet-setup")
	if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, "keystone-fernet-setup"); err != nil {
		t.Fatal(err)
	}
	for _, a := range agents {
		a.wantExit(0)
	}
	reqs, err := s.env.Requests(testenv.AgentUser(ns), since)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if r.Code == 403 {
			t.Errorf("refused with the generated Role: %s %s", r.Verb, r.RequestURI)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "synced-*")); len(m) != 1 {
		t.Errorf("the command ran %d times, want once: %v", len(m), m)
	}
	// No more: the token reaches none of another service's objects.
	for _, c := range []struct{ verb, group, resource, name string }{
		{"get", "", "configmaps", "glance-db-sync-bootstrap"},
		{"update", "", "configmaps", "glance-db-sync-bootstrap"},
		{"update", "coordination.k8s.io", "leases", "glance-db-sync"},
		{"list", "batch", "jobs", "glance-db-sync"},
		{"list", "", "pods", ""},
		{"get", "", "secrets", "keystone-db"},
	} {
		if sarAllowed(t, ns, c.verb, c.group, c.resource, c.name) {
			t.Errorf("the generated Role lets the agent %s %s %q", c.verb, c.resource, c.name)
		}
	}
	// And the record exists: the bootstrap is done.
	if _, err := client().CoreV1().ConfigMaps(ns).Get(ctxT(t), "keystone-db-sync-bootstrap", metav1.GetOptions{}); err != nil {
		t.Errorf("the record: %v", err)
	}
}

// sarAllowed asks the API server whether the agent's ServiceAccount may
// verb the object (name "" for any).
func sarAllowed(t *testing.T, ns, verb, group, resource, name string) bool {
	t.Helper()
	sar, err := client().AuthorizationV1().SubjectAccessReviews().Create(ctxT(t), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               testenv.AgentUser(ns),
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource, Name: name},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}
