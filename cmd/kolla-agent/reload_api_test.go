package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kolla-agent/kolla-agent/internal/atomicwriter"
)

// reload.source: api on the real API server: a ConfigMap update is taken
// through the API watch while the volume (written here as the kubelet
// would, later) still holds the old data; when the volume shows data the
// API never delivered (updates missed while the API was unreachable), the
// volume is read again; an immutable ConfigMap is said to never reload.
// The RBAC is examples/rbac/reload-api.yaml.
func TestReloadFromAPI(t *testing.T) {
	ns := namespace(t)
	env := agentEnvWith(t, ns, []string{"examples/rbac/reload-api.yaml"})
	cms := client().CoreV1().ConfigMaps(ns)
	conf := func(v string) string { return "[DEFAULT]\nworkers = " + v + "\n" }
	if _, err := cms.Create(ctxT(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "glance-config"}, Data: map[string]string{"glance-api.conf": conf("1")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctxT(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "glance-policy"}, Data: map[string]string{"policy.yaml": "{}\n"}, Immutable: ptr.To(true)}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kw := atomicwriter.Start(t)
	dir := t.TempDir()
	vol, policy := filepath.Join(dir, "config"), filepath.Join(dir, "policy")
	if err := kw.Write(vol, map[string]string{"glance-api.conf": conf("1")}); err != nil {
		t.Fatal(err)
	}
	if err := kw.Write(policy, map[string]string{"policy.yaml": "{}\n"}); err != nil {
		t.Fatal(err)
	}
	cmVolume := func(name, cm string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}
	}
	if _, err := client().CoreV1().Pods(ns).Create(ctxT(t), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "glance-api-0"},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{cmVolume("config", "glance-config"), cmVolume("policy", "glance-policy")},
			Containers: []corev1.Container{{Name: "glance-api", Image: "kolla/glance-api", VolumeMounts: []corev1.VolumeMount{
				{Name: "config", MountPath: vol}, {Name: "policy", MountPath: policy},
			}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(dir, "glance-api.conf")
	cfg := agentYAML(t, fmt.Sprintf(`namespace: %s
render:
  - {src: %s/glance-api.conf, dest: %s}
reload:
  source: api
  watch: [%s, %s]
  quiet: 100ms
  action: none
  stateDir: %s/state
`, ns, vol, dest, vol, policy, dir))
	// At debug: a pass that finds nothing to do says so.
	a := startAgent(t, withEnv(env, "POD_NAME=glance-api-0"), "--log-level", "debug", "--config", cfg, "run", "--", "sleep", "300")
	a.waitLog("watching the ConfigMaps through the API")
	a.waitLog("the ConfigMap is immutable")
	live := func() string { b, _ := os.ReadFile(dest); return string(b) }

	cm, err := cms.Get(ctxT(t), "glance-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["glance-api.conf"] = conf("2")
	if _, err := cms.Update(ctxT(t), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the API's change applied", func() bool { return live() == conf("2") })
	a.waitLog(`msg="reload pass" outcome=applied`) // the pass line (with its why), not the outcome's own before it
	if b, _ := os.ReadFile(filepath.Join(vol, "glance-api.conf")); string(b) != conf("1") {
		t.Fatalf("the volume changed: %q", b)
	}
	if !strings.Contains(a.out.String(), "ConfigMap glance-config changed (API)") {
		t.Errorf("not taken from the API:\n%s", a.out.String())
	}

	// The kubelet catches up: nothing to do.
	n := strings.Count(a.out.String(), `msg="reload pass" outcome=applied`)
	unchanged := strings.Count(a.out.String(), `msg="reload pass" outcome=unchanged`)
	if err := kw.Write(vol, map[string]string{"glance-api.conf": conf("2")}); err != nil {
		t.Fatal(err)
	}
	waitLogCount(t, a, `msg="reload pass" outcome=unchanged`, unchanged+1) // the catch-up's pass, nothing to do
	// Data the API never gave (its updates were missed): the volume wins.
	if err := kw.Write(vol, map[string]string{"glance-api.conf": conf("3")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the volume's newer data applied", func() bool {
		return live() == conf("3") && strings.Count(a.out.String(), `msg="reload pass" outcome=applied`) > n
	})
	if !strings.Contains(a.out.String(), "the volume is newer than the ConfigMap the API gave") {
		t.Errorf("fallback not said:\n%s", a.out.String())
	}
	if got := strings.Count(a.out.String(), `msg="reload pass" outcome=applied`); got != n+1 {
		t.Errorf("%d applies after the API's change, want 1 (the volume's catch-up to the same data is no change)", got-n)
	}
	// And the API again.
	cm, _ = cms.Get(ctxT(t), "glance-config", metav1.GetOptions{})
	cm.Data["glance-api.conf"] = conf("4")
	if _, err := cms.Update(ctxT(t), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the API's next change applied", func() bool { return live() == conf("4") })

	// A config the service could not read: refused, said on the pod.
	cm, _ = cms.Get(ctxT(t), "glance-config", metav1.GetOptions{})
	cm.Data["glance-api.conf"] = "[DEFAULT]\nworkers 5\n"
	if _, err := cms.Update(ctxT(t), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	reasons := func() map[string]string {
		l, err := client().CoreV1().Events(ns).List(ctxT(t), metav1.ListOptions{FieldSelector: "involvedObject.name=glance-api-0"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, e := range l.Items {
			out[e.Reason] = e.Message
		}
		return out
	}
	eventually(t, "a ReloadRejected Event on the pod", func() bool { return reasons()["ReloadRejected"] != "" })
	if msg := reasons()["ReloadRejected"]; !strings.Contains(msg, "glance-api.conf:2: no '=' or ':'") {
		t.Errorf("ReloadRejected says %q", msg)
	}
	if reasons()["ReloadApplied"] == "" {
		t.Errorf("no ReloadApplied Event: %v", reasons())
	}
	if live() != conf("4") {
		t.Errorf("a rejected config reached the service: %q", live())
	}
	a.running()
}
