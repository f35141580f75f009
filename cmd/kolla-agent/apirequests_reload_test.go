package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/utils/ptr"

	"github.com/kolla-agent/kolla-agent/agent/reload"
	"github.com/kolla-agent/kolla-agent/internal/atomicwriter"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

// The reload's lookups through the API, from the audit log: the API
// source, the rollout and the Lease semaphore, each by a lone agent so the
// counts are exact.

// An Event on the agent's pod: it reads the pod (its uid), then posts.
func eventRequests(pod string) []string {
	return []string{"get /api/v1/namespaces/NS/pods/" + pod, "create /api/v1/namespaces/NS/events"}
}

// waitLogCount waits until the agent has logged s n times.
func waitLogCount(t *testing.T, a *agentProc, s string, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d × %q in the agent's log", n, s), func() bool { return strings.Count(a.out.String(), s) >= n })
}

// narrowedTo checks that every LIST and WATCH in reqs selects one object
// by name, and that every WATCH starts from a resourceVersion (a list's,
// not "" or "0", which would replay the objects) no older than from and no
// newer than to: the one its LIST returned, with nothing listed twice.
func narrowedTo(t *testing.T, reqs []testenv.AuditRequest, from, to string) {
	t.Helper()
	for _, r := range reqs {
		if r.Verb != "list" && r.Verb != "watch" {
			continue
		}
		u, err := url.Parse(r.RequestURI)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		if !strings.HasPrefix(q.Get("fieldSelector"), "metadata.name=") {
			t.Errorf("not narrowed to one object by name: %s %s", r.Verb, r.RequestURI)
		}
		if r.Verb != "watch" {
			continue
		}
		rv := q.Get("resourceVersion")
		if q.Get("sendInitialEvents") != "" || rv == "" || rv == "0" {
			t.Errorf("a WATCH not from its list's resourceVersion: %s", r.RequestURI)
			continue
		}
		older, err1 := resourceversion.CompareResourceVersion(rv, from)
		newer, err2 := resourceversion.CompareResourceVersion(rv, to)
		if err1 != nil || err2 != nil || older < 0 || newer > 0 {
			t.Errorf("a WATCH from resourceVersion %s, not between the objects' %s and %s after the LIST: %s", rv, from, to, r.RequestURI)
		}
	}
}

// currentRV is the resourceVersion of a LIST now (of the namespace's
// ConfigMaps, but resourceVersions are the whole store's): no LIST before
// this can have returned a newer one.
func currentRV(t *testing.T, ns string) string {
	t.Helper()
	l, err := client().CoreV1().ConfigMaps(ns).List(ctxT(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.ResourceVersion
}

// reload.source: api, a ConfigMap mounted twice (whole, and as items) and an
// immutable one: at the start one GET of the pod (its volumes) and one LIST
// per ConfigMap, narrowed to its name; one WATCH, of the mutable one only,
// from its LIST's resourceVersion (the kubelet watches no immutable
// ConfigMap either). An update through the API then costs nothing but the
// ReloadApplied Event: no polling, no second watch.
func TestAPIRequestsReloadFromAPI(t *testing.T) {
	t.Logf("on %s", s.env.Etcd)
	ns := namespace(t)
	env := agentEnvWith(t, ns, []string{"examples/rbac/reload-api.yaml"})
	cms := client().CoreV1().ConfigMaps(ns)
	conf := func(v string) string { return "[DEFAULT]\nworkers = " + v + "\n" }
	created, err := cms.Create(ctxT(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "glance-config"}, Data: map[string]string{"glance-api.conf": conf("1")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctxT(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "glance-policy"}, Data: map[string]string{"policy.yaml": "{}\n"}, Immutable: ptr.To(true)}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kw := atomicwriter.Start(t)
	dir := t.TempDir()
	vol, item, policy := filepath.Join(dir, "config"), filepath.Join(dir, "item"), filepath.Join(dir, "policy")
	for d, files := range map[string]map[string]string{
		vol:    {"glance-api.conf": conf("1")},
		item:   {"api.conf": conf("1")},
		policy: {"policy.yaml": "{}\n"},
	} {
		if err := kw.Write(d, files); err != nil {
			t.Fatal(err)
		}
	}
	cmVolume := func(name, cm string, items ...corev1.KeyToPath) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Items: items}}}
	}
	if _, err := client().CoreV1().Pods(ns).Create(ctxT(t), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "glance-api-0"},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{
				cmVolume("config", "glance-config"),
				cmVolume("item", "glance-config", corev1.KeyToPath{Key: "glance-api.conf", Path: "api.conf"}),
				cmVolume("policy", "glance-policy"),
			},
			Containers: []corev1.Container{{Name: "glance-api", Image: "kolla/glance-api", VolumeMounts: []corev1.VolumeMount{
				{Name: "config", MountPath: vol}, {Name: "item", MountPath: item}, {Name: "policy", MountPath: policy},
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
  watch: [%s, %s, %s]
  quiet: 100ms
  action: none
  stateDir: %s/state
`, ns, vol, dest, vol, item, policy, dir))

	since := time.Now()
	a := startAgent(t, withEnv(env, "POD_NAME=glance-api-0"), "--config", cfg, "run", "--", "sleep", "300")
	a.waitLog("watching the ConfigMaps through the API")
	a.waitLog("the ConfigMap is immutable")
	const (
		configMaps = "/api/v1/namespaces/NS/configmaps"
		pod        = "get /api/v1/namespaces/NS/pods/glance-api-0"
	)
	reqs := wantRequests(t, ns, since, []string{pod, "list " + configMaps, "list " + configMaps, "watch " + configMaps})
	narrowedTo(t, reqs, created.ResourceVersion, currentRV(t, ns))
	for _, r := range reqs {
		if r.Verb == "watch" && !strings.Contains(r.RequestURI, "metadata.name%3Dglance-config") {
			t.Errorf("a WATCH of another ConfigMap than the mutable one: %s", r.RequestURI)
		}
	}

	since = time.Now()
	cm, err := cms.Get(ctxT(t), "glance-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["glance-api.conf"] = conf("2")
	if _, err := cms.Update(ctxT(t), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the API's change applied", func() bool { b, _ := os.ReadFile(dest); return string(b) == conf("2") })
	a.waitLog(`msg="reload pass" outcome=applied`)
	wantRequests(t, ns, since, eventRequests("glance-api-0"))
	if strings.Contains(a.out.String(), "not usable") {
		t.Errorf("a copy not written (the items mount's):\n%s", a.out.String())
	}
	a.running()
}

// action rollout, per check: the first finds the pod's Deployment (a GET of
// the pod, then of its ReplicaSet), reads the Deployment and patches its pod
// template; a later one, its owner known, only reads the Deployment and
// patches it; one whose hash the template holds already only reads it.
// Each posts its ReloadApplied Event.
func TestAPIRequestsReloadRollout(t *testing.T) {
	t.Logf("on %s", s.env.Etcd)
	ns := namespace(t)
	env := agentEnvWith(t, ns, []string{"examples/rbac/reload-rollout.yaml"})
	// The old pod (no kubelet makes the new one ready) stays, and its
	// agent with it.
	deps := mkSurgeDeployment(t, ns, "glance-api", "kolla/glance-api:v1", 1)
	var pod, rs string
	eventually(t, "the pod", func() bool {
		l, err := client().CoreV1().Pods(ns).List(ctxT(t), metav1.ListOptions{LabelSelector: "app=glance-api"})
		if err != nil || len(l.Items) != 1 || len(l.Items[0].OwnerReferences) != 1 {
			return false
		}
		pod, rs = l.Items[0].Name, l.Items[0].OwnerReferences[0].Name
		return true
	})
	// Available, so that no rollout scales its ReplicaSet down (the
	// controller removes unavailable old pods first).
	setReady(t, ns, pod, "10.10.9.1", true)
	eventually(t, "the Deployment available", func() bool {
		d, err := deps.Get(ctxT(t), "glance-api", metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas == 1
	})

	kw := atomicwriter.Start(t)
	vol := filepath.Join(t.TempDir(), "config_files")
	files := func(v string) map[string]string {
		return map[string]string{"glance-api.conf": "[DEFAULT]\nworkers = " + v + "\n"}
	}
	write := func(v string) {
		t.Helper()
		if err := kw.Write(vol, files(v)); err != nil {
			t.Fatal(err)
		}
	}
	write("2")
	dir := t.TempDir()
	cfg := agentYAML(t, fmt.Sprintf(`namespace: %s
render:
  - {src: %s/glance-api.conf, dest: %s/glance-api.conf}
reload:
  quiet: 100ms
  action: rollout
  stateDir: %s/state
`, ns, vol, dir, dir))
	a := startAgent(t, withEnv(env, "POD_NAME="+pod), "--config", cfg, "run", "--", "sleep", "300")
	a.waitLog("reload: watching")
	const deployment = "/apis/apps/v1/namespaces/NS/deployments/glance-api"
	podGet, event := "get /api/v1/namespaces/NS/pods/"+pod, eventRequests(pod)
	applied := `msg="reload pass" outcome=applied`
	for i, tc := range []struct {
		name, v string
		patched bool // by the test, before the agent sees the change
		want    []string
	}{
		{"first", "4", false, []string{podGet, "get /apis/apps/v1/namespaces/NS/replicasets/" + rs, "get " + deployment, "patch " + deployment}},
		{"owner known", "8", false, []string{"get " + deployment, "patch " + deployment}},
		{"patched already", "16", true, []string{"get " + deployment}},
	} {
		if tc.patched {
			// The hash the agent will compute: the same file under a
			// directory of the same name.
			other := filepath.Join(t.TempDir(), filepath.Base(vol))
			if err := os.MkdirAll(other, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, body := range files(tc.v) {
				if err := os.WriteFile(filepath.Join(other, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			hash, err := reload.SourceHash([]string{other})
			if err != nil {
				t.Fatal(err)
			}
			patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, reload.ConfigHashAnnotation, hash)
			if _, err := deps.Patch(ctxT(t), "glance-api", "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		since := time.Now()
		write(tc.v)
		waitLogCount(t, a, applied, i+1)
		t.Run(tc.name, func(t *testing.T) { wantRequests(t, ns, since, append(tc.want, event...)) })
	}
	if n := strings.Count(a.out.String(), "the rollout to this config is under way already"); n != 1 {
		t.Errorf("%d rollouts found under way, want the last:\n%s", n, a.out.String())
	}
	a.running()
}

// reload.maxUnavailable, a lone replica: per turn one LIST of its Lease by
// name and one WATCH from that list's resourceVersion (so that a holder
// sees a takeover at once), the write that takes it (a create the first
// time, an update of the released Lease after), the renewals the Lease's
// duration asks for (every 5 s of the default 15 s, counted against the
// time it was held, none sooner) and the update that releases it; then
// nothing until the next change, but the ReloadApplied Event.
func TestAPIRequestsReloadLease(t *testing.T) {
	t.Logf("on %s", s.env.Etcd)
	ns := namespace(t)
	env := agentEnvWith(t, ns, []string{"examples/rbac/reload-lease.yaml"})
	mkPod(t, ns, "glance-api-0", nil)
	kw := atomicwriter.Start(t)
	vol := filepath.Join(t.TempDir(), "config_files")
	write := func(v string) {
		t.Helper()
		if err := kw.Write(vol, map[string]string{"svc.conf": "[DEFAULT]\nv = " + v + "\n"}); err != nil {
			t.Fatal(err)
		}
	}
	write("1")
	dir := t.TempDir()
	port := freePort(t)
	cfg := agentYAML(t, fmt.Sprintf(`namespace: %[1]s
render:
  - {src: %[2]s/svc.conf, dest: %[3]s/svc.conf}
reload:
  quiet: 100ms
  action: restart
  maxUnavailable: 1
  leaseName: glance-api
  verifyTimeout: 30s
  stateDir: %[3]s/state
probes:
  address: 127.0.0.1:%[4]d
  socket: off
  checks:
    - name: loaded
      exec: {command: ["cmp", "-s", "%[3]s/svc.conf", "%[3]s/loaded"]}
      probes: [readiness]
      period: 200ms
      timeout: 150ms
      failureThreshold: 1
`, ns, vol, dir, port))
	// The service takes 8 s to load its config: a turn spans a renewal,
	// with 3 s to spare for a renewal a loaded machine delays.
	script := fmt.Sprintf(`sleep 8; cp %[1]s/svc.conf %[1]s/loaded; trap 'exit 0' TERM; while :; do sleep 0.1; done`, dir)
	a := startAgent(t, withEnv(env, "POD_NAME=glance-api-0"), "--config", cfg, "run", "--", "/bin/sh", "-c", script)
	a.waitLog("reload: watching")
	waitStatus(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", port), 200, 30*time.Second)

	const (
		leases   = "/apis/coordination.k8s.io/v1/namespaces/NS/leases"
		lease    = leases + "/glance-api-0"
		duration = 15 * time.Second // the Lease's default duration
		renew    = duration / 3
	)
	applied := `msg="reload pass" outcome=applied`
	for i, take := range []string{"create " + leases, "update " + lease} {
		since := time.Now()
		write(fmt.Sprint(i + 2))
		waitLogCount(t, a, applied, i+1)
		reqs := settledRequests(t, ns, since, 6)
		// The writes in order: the take, the renewals, the release.
		var writes []time.Time
		for _, r := range reqs {
			if r.Verb == "create" && strings.HasSuffix(r.RequestURI, "/leases") || r.Verb == "update" {
				writes = append(writes, r.Time)
			}
		}
		want := []string{"list " + leases, "watch " + leases, take}
		for range max(len(writes)-2, 0) {
			want = append(want, "update "+lease)
		}
		want = append(append(want, "update "+lease), eventRequests("glance-api-0")...)
		t.Run(take, func(t *testing.T) {
			checkRequests(t, ns, reqs, want)
			narrowedTo(t, reqs, "1", currentRV(t, ns))
			m := turnLine.FindAllStringSubmatch(a.out.String(), -1)
			if len(m) != 2*(i+1) || len(writes) < 2 {
				t.Fatalf("want %d turns taken and released, and each a take and a release:\n%s", i+1, a.out.String())
			}
			from, _ := time.Parse(time.RFC3339Nano, m[2*i][1])
			to, _ := time.Parse(time.RFC3339Nano, m[2*i+1][1])
			// Each write renews, none before the renewal period (the
			// release may come at any time) and none so late that the
			// Lease expired: no more renewals than the turn's length calls
			// for. A loaded machine may delay a renewal, never hasten one,
			// so only the Lease's own bound is asserted on the late side.
			renewals := len(writes) - 2
			for k := 1; k < len(writes); k++ {
				gap := writes[k].Sub(writes[k-1])
				if gap < renew-100*time.Millisecond && k < len(writes)-1 || gap >= duration {
					t.Errorf("Lease writes %v apart (renewal %d of %d): want one every %v while held, and never %v without one", gap.Round(time.Millisecond), k, renewals, renew, duration)
				}
			}
			held := writes[len(writes)-1].Sub(writes[0])
			if renewals > int(held/(renew-100*time.Millisecond)) {
				t.Errorf("%d renewals in a turn of %v (agent: %v), want one every %v", renewals, held.Round(time.Millisecond), to.Sub(from).Round(time.Millisecond), renew)
			}
			if renewals < 1 {
				t.Errorf("no renewal in a turn of %v: the test's turn is too short to show them", held.Round(time.Millisecond))
			}
			t.Logf("turn of %v: %d renewals", held.Round(time.Millisecond), renewals)
		})
	}
	a.running()
}
