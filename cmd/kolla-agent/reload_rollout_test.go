package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kolla-agent/kolla-agent/internal/atomicwriter"
)

// action rollout against the real deployment controller: a Deployment of
// three replicas whose three agents all see the same ConfigMap change patch
// its pod template with the same hash of the sources (each agent renders to
// its own path here, so the rendered files differ as a pod's IP would make
// them), and the controller makes exactly one new ReplicaSet. The RBAC is examples/rbac/reload-rollout.yaml
// and nothing more.
func TestReloadRollout(t *testing.T) {
	ns := namespace(t)
	env := agentEnvWith(t, ns, []string{"examples/rbac/reload-rollout.yaml"})
	deps := mkSurgeDeployment(t, ns, "glance-api", "kolla/glance-api:v1", 3)
	var pods []string
	eventually(t, "three pods", func() bool {
		l, err := client().CoreV1().Pods(ns).List(ctxT(t), metav1.ListOptions{LabelSelector: "app=glance-api"})
		pods = nil
		for _, p := range l.Items {
			pods = append(pods, p.Name)
		}
		return err == nil && len(pods) == 3
	})
	replicaSets := func() int {
		l, err := client().AppsV1().ReplicaSets(ns).List(ctxT(t), metav1.ListOptions{LabelSelector: "app=glance-api"})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}
	if n := replicaSets(); n != 1 {
		t.Fatalf("%d ReplicaSets before the change", n)
	}

	kw := atomicwriter.Start(t)
	vol := filepath.Join(t.TempDir(), "config_files")
	write := func(v string) {
		t.Helper()
		if err := kw.Write(vol, map[string]string{"glance-api.conf": "[DEFAULT]\nworkers = " + v + "\n"}); err != nil {
			t.Fatal(err)
		}
	}
	write("2")
	var agents []*agentProc
	for _, pod := range pods {
		dir := t.TempDir()
		cfg := agentYAML(t, fmt.Sprintf(`namespace: %s
render:
  - {src: %s/glance-api.conf, dest: %s/glance-api.conf}
reload:
  quiet: 100ms
  action: rollout
  stateDir: %s/state
`, ns, vol, dir, dir))
		agents = append(agents, startAgent(t, withEnv(env, "POD_NAME="+pod), "--config", cfg, "run", "--", "sleep", "300"))
	}
	for _, a := range agents {
		a.waitLog("reload: watching")
	}
	write("4")
	for _, a := range agents {
		a.waitLog("outcome=applied")
	}
	d, err := deps.Get(ctxT(t), "glance-api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hash := d.Spec.Template.Annotations["kolla.openstack.org/config-hash"]
	if hash == "" {
		t.Fatalf("the pod template has no config hash: %v", d.Spec.Template.Annotations)
	}
	// Every agent's pass is over (applied): one template change in all,
	// by the Deployment's generation (created 1, patched once 2), not by
	// waiting for a second rollout that could come late.
	if d.Generation != 2 {
		t.Errorf("the Deployment's generation is %d after three agents saw one change, want 2 (one patch)", d.Generation)
	}
	eventually(t, "the new ReplicaSet", func() bool { return replicaSets() == 2 })
	patched := 0
	for _, a := range agents {
		if !strings.Contains(a.out.String(), "sources="+hash) {
			t.Errorf("an agent rolled out another config than %s:\n%s", hash, a.out.String())
		}
		patched += strings.Count(a.out.String(), "rolling the pods out")
	}
	t.Logf("%d of 3 agents patched the template; the others found it patched", patched)
}
