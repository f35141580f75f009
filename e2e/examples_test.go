package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/bootstrap"
	"github.com/kolla-agent/kolla-agent/internal/keystone"
	"github.com/kolla-agent/kolla-agent/internal/pki"
	"github.com/kolla-agent/kolla-agent/internal/slice"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
	"github.com/kolla-agent/kolla-agent/probes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

var sliceOnce struct {
	sync.Once
	err error
}

// sliceImages builds (each Debian root cached by its recipe) and imports
// the kolla-style image of every service of the examples slice and the
// Fluent receiver, once per test binary: what `make images` builds.
func sliceImages(t *testing.T) {
	t.Helper()
	sliceOnce.Do(func() {
		imgs, err := slice.Images(repoRoot(), filepath.Join(testenv.CacheDir(), "images"))
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			_, err = env.ImportImages(ctx, env.Dir, imgs...)
		}
		sliceOnce.err = err
	})
	if sliceOnce.err != nil {
		t.Fatalf("the slice's images: %v", sliceOnce.err)
	}
}

// examplesSlice is slice.Build for the test, with the namespace allowing
// the receiver's host directory (receivedIn), which baseline refuses; the
// examples' pods are held to baseline by cmd/kolla-agent's server-side dry
// run, and warned of here.
func examplesSlice(t *testing.T, services ...string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := slice.Build(repoRoot(), services...)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			labels := o.GetLabels()
			labels["pod-security.kubernetes.io/warn"] = labels["pod-security.kubernetes.io/enforce"]
			labels["pod-security.kubernetes.io/enforce"] = "privileged"
			o.SetLabels(labels)
		}
	}
	return objs
}

func apply(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	if err := slice.Apply(context.Background(), env.Admin(), objs); err != nil {
		t.Fatal(err)
	}
}

// hostPathVolume makes a PersistentVolume for the claim ns/claim, on a
// directory of the test owned by uid: the StatefulSet's volumeClaimTemplate
// binds to it (the PersistentVolume binder runs with the node).
func hostPathVolume(t *testing.T, ns, claim string, uid int) {
	t.Helper()
	dir, err := os.MkdirTemp("", "kolla-agent-pv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o750)
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{GenerateName: claim + "-"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: claim},
		},
	}
	ctx := context.Background()
	pv, err = env.Client().CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		env.Client().CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
}

// waitReady waits until n pods match selector and all are Ready.
func waitReady(t *testing.T, ns, selector string, n int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(context.Context) (bool, error) {
		pods = listPods(t, ns, selector)
		ready := 0
		for i := range pods {
			if pods[i].DeletionTimestamp == nil && podReady(&pods[i]) {
				ready++
			}
		}
		return ready == n, nil
	})
	if err != nil {
		var b strings.Builder
		for i := range pods {
			p := &pods[i]
			b.WriteString(p.Name + ": " + describe(ns, p.Name, p))
			for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
				logs, _ := env.Client().CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: cs.Name, TailLines: ptr.To(int64(30))}).Do(context.Background()).Raw()
				fmt.Fprintf(&b, "  --- %s's last lines:\n%s\n", cs.Name, logs)
			}
		}
		t.Fatalf("%s in %s: not %d Ready within %s:\n%s", selector, ns, n, timeout, b.String())
	}
	return pods
}

// TestExamplesKeystoneSlice applies examples/ (kustomize, as `kubectl
// apply -k`) for mariadb, memcached and keystone to the real node, with the
// images swapped for kolla-style images of Debian's real packages, and
// proves from what the kubelet and the API server report:
//   - mariadb's StatefulSet gets its system tables (init container) and
//     runs as the example says (the agent as root, mysqld as mysql), Ready
//     by the kubelet's probe against the agent;
//   - keystone's two replicas wait for mariadb and memcached (real
//     EndpointSlices), create each bootstrap Job once (db_sync expand,
//     migrate, keystone-manage bootstrap), which the kubelet runs against
//     the real database, and start apache only after the last one
//     completed: kolla's config.json, the image's kolla_extend_start
//     (apache's environment), the agent's templates;
//   - keystone answers through its Service's ClusterIP (kube-proxy) and
//     issues a token to the admin the bootstrap Job created;
//   - the service users Job waits for keystone through CoreDNS and
//     kube-proxy and makes glance's user with the real openstack client;
//   - glance-api waits for all of it, runs db_sync under its Lease,
//     registers itself in the catalog (public from agent.yaml's exposure,
//     internal from its cluster name) and serves the image API through its
//     ClusterIP to a token keystonemiddleware checks as the glance user;
//   - keystone's and apache's log lines reach a Fluent forward receiver in
//     the pod's native sidecar (where fluent-bit is), and when a pod is
//     deleted the agent stops apache within the grace period and ships the
//     line of a request made just before.
func TestExamplesKeystoneSlice(t *testing.T) {
	testenv.NeedNode(t, env)
	sliceImages(t)
	const ns = slice.Namespace
	objs := examplesSlice(t, "mariadb", "memcached", "keystone")
	received, err := os.MkdirTemp("", "kolla-agent-received-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(received) })
	os.Chmod(received, 0o777)
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == "keystone" {
			// a host directory: what it received outlives the pod
			err := slice.ReplaceFluentBit(o, slice.Receiver{Image: slice.ReceiverRef, Volume: map[string]any{"hostPath": map[string]any{"path": received, "type": "Directory"}}})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	deleteAtEnd(t, ns)
	hostPathVolume(t, ns, "data-mariadb-0", 42434)
	start := time.Now()
	apply(t, objs)

	mpods := waitReady(t, ns, "application=mariadb", 1, 5*time.Minute)
	t.Logf("mariadb Ready %.1fs after the apply", time.Since(start).Seconds())
	cpods := waitReady(t, ns, "application=memcached", 1, 2*time.Minute)
	pods := waitReady(t, ns, "application=keystone,component=api", 2, 10*time.Minute)
	t.Logf("keystone's 2 replicas Ready %.1fs after the apply", time.Since(start).Seconds())
	// The API token: in the agent's container only, and closed to the
	// service's user there (mysqld as mysql, keystone's WSGI workers);
	// none at all where agent and service are one user (memcached).
	serviceCannotReadToken(t, mpods[0], 1)
	serviceCannotReadToken(t, cpods[0], 0)
	serviceCannotReadToken(t, pods[0], 1)

	// Each bootstrap step's Job once, run to completion by the kubelet;
	// contract too, once both replicas run the new version (after the
	// rollout); apache started after the steps before it.
	ctx := context.Background()
	phases := map[string]int{}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		jobs, err := env.Client().BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: "application=keystone,component=db-sync"})
		if err != nil {
			return false, nil
		}
		clear(phases)
		done := 0
		for _, j := range jobs.Items {
			phases[j.Labels[bootstrap.LabelPhase]]++
			if j.Status.Succeeded == 1 {
				done++
			}
		}
		return done == len(jobs.Items) && len(phases) == 4, nil
	})
	if err != nil {
		t.Fatalf("keystone's bootstrap Jobs did not all complete: %v", phases)
	}
	for _, ph := range []string{"expand", "migrate", "bootstrap", "contract"} {
		if phases[ph] != 1 {
			t.Errorf("phase %s: %d Jobs, want 1 for 2 replicas (all: %v)", ph, phases[ph], phases)
		}
	}
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running == nil || cs.RestartCount != 0 {
				t.Errorf("%s/%s: %s, %d restarts", p.Name, cs.Name, state(cs.State), cs.RestartCount)
			}
		}
		logs, _ := env.Client().CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "keystone"}).Do(ctx).Raw()
		done, started := bytes.Index(logs, []byte(`msg="bootstrap done"`)), bytes.Index(logs, []byte(`msg="service started"`))
		if done < 0 || started < done {
			t.Errorf("%s: apache did not start after the bootstrap (done at %d, started at %d in its log)", p.Name, done, started)
		}
	}

	// keystone serves through the Service's ClusterIP, with a token for the
	// admin the bootstrap Job made.
	svc, err := env.Client().CoreV1().Services(ns).Get(ctx, "keystone", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := env.Client().CoreV1().Secrets(ns).Get(ctx, "keystone-admin", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://%s:5000/v3/auth/tokens", svc.Spec.ClusterIP)
	body := fmt.Sprintf(`{"auth":{"identity":{"methods":["password"],"password":{"user":{"name":"admin","domain":{"name":"Default"},"password":%q}}},"scope":{"project":{"name":"admin","domain":{"name":"Default"}}}}}`, secret.Data["OS_PASSWORD"])
	var status int
	var got string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 60*time.Second, true, func(context.Context) (bool, error) {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
		resp, err := c.Post(url, "application/json", bytes.NewBufferString(body))
		if err != nil {
			got = err.Error()
			return false, nil
		}
		defer resp.Body.Close()
		status, got = resp.StatusCode, resp.Header.Get("X-Subject-Token")
		return status == http.StatusCreated && got != "", nil
	})
	if err != nil {
		t.Fatalf("no token from keystone at %s: %d %s", url, status, got)
	}

	// From a pod: the service users Job's init container (the agent's
	// image, no token) waits for keystone's cluster URL, through CoreDNS
	// and kube-proxy; its main container, the openstack client (kolla's
	// toolbox has it; here the glance-api image does), makes the service
	// project and the glance and nova users under enforce_scope, with the
	// admin of the keystone-admin Secret.
	jobs := examplesSlice(t, "keystone-service-users")
	for _, o := range jobs {
		if o.GetKind() != "Job" {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if len(cs) != 1 {
			t.Fatalf("keystone-service-users: %d containers, want its ks-user", len(cs))
		}
		cs[0].(map[string]any)["image"] = "localhost/kolla-glance-api:dev"
		unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers")
	}
	apply(t, jobs)
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		j, err := env.Client().BatchV1().Jobs(ns).Get(ctx, "keystone-service-users", metav1.GetOptions{})
		return err == nil && j.Status.Succeeded == 1, nil
	})
	if err != nil {
		var b strings.Builder
		for _, p := range listPods(t, ns, "component=ks-user") {
			b.WriteString(p.Name + ": " + describe(ns, p.Name, &p))
			for _, c := range []string{"wait-keystone", "ks-user"} {
				logs, _ := env.Client().CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c}).Do(ctx).Raw()
				fmt.Fprintf(&b, "\n%s:\n%s\n", c, lastLines(strings.Split(string(logs), "\n"), 20))
			}
		}
		t.Fatalf("the service users Job did not complete:\n%s", b.String())
	}

	// glance-api as a real pod: it waits for the database, the cache,
	// keystone and the users Job, renders its secrets, runs db_sync under
	// its Lease, registers glance in the catalog (its public URL from
	// agent.yaml's exposure, the internal one from the Service's cluster
	// name) and serves the image API through its ClusterIP, a token of the
	// admin checked by keystonemiddleware as the glance user the Job made.
	apply(t, examplesSlice(t, "glance"))
	gpods := waitReady(t, ns, "application=glance,component=api", 1, 10*time.Minute)
	t.Logf("glance-api Ready %.1fs after the apply", time.Since(start).Seconds())
	serviceCannotReadToken(t, gpods[0], 1)
	token := keystoneToken(t, fmt.Sprintf("http://%s:5000", svc.Spec.ClusterIP), string(secret.Data["OS_PASSWORD"]))
	eps := catalogOf(t, fmt.Sprintf("http://%s:5000", svc.Spec.ClusterIP), token, "glance")
	wantEps := []string{"internal http://glance-api.openstack.svc.cluster.local:9292 RegionOne", "public https://198.51.100.11 RegionOne"} // 443 is https's own
	if !slices.Equal(eps, wantEps) {
		t.Errorf("glance in the catalog: %q, want %q", eps, wantEps)
	}
	gsvc, err := env.Client().CoreV1().Services(ns).Get(ctx, "glance-api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var images string
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		images = getWith(fmt.Sprintf("http://%s:9292/v2/images", gsvc.Spec.ClusterIP), token)
		return strings.HasPrefix(images, `{"images": [`), nil
	})
	if err != nil {
		t.Errorf("glance's image list through its ClusterIP with an admin token: %s\n%s", images, describe(ns, gpods[0].Name, &gpods[0]))
	}
	if got := getWith(fmt.Sprintf("http://%s:9292/v2/images", gsvc.Spec.ClusterIP), "not-a-token"); !strings.HasPrefix(got, "401 ") { // getWith puts the status first
		t.Errorf("glance with a bad token answered %q, want 401 (keystonemiddleware checks tokens)", got)
	}

	// Logs: apache's access log line of a request, at the receiver.
	a := pods[0]
	receivedBy := func(pod, marker string) bool {
		return slices.ContainsFunc(receivedLines(t, filepath.Join(received, pod+".jsonl")), func(l string) bool { return strings.Contains(l, marker) })
	}
	marker := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	get(fmt.Sprintf("http://%s:5000/v3?%s", a.Status.PodIP, marker))
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return receivedBy(a.Name, marker), nil
	})
	if err != nil {
		t.Fatalf("the access log line of %s did not reach the receiver; it has:\n%s", marker, lastLines(receivedLines(t, filepath.Join(received, a.Name+".jsonl")), 20))
	}
	// keystone's own log: the token request logged at WARNING by the
	// replica that served it (behind the ClusterIP, either).
	var all []string
	for _, p := range pods {
		all = append(all, receivedLines(t, filepath.Join(received, p.Name+".jsonl"))...)
	}
	if !slices.ContainsFunc(all, func(l string) bool { return strings.HasPrefix(l, "kolla.keystone: ") }) {
		t.Errorf("no record tagged kolla.keystone (keystone.log) from either replica:\n%s", lastLines(all, 20))
	}

	// A service made unhealthy: apache stopped (SIGSTOP) in one replica
	// fails the agent's api check, the kubelet's readiness probe turns the
	// pod NotReady and its endpoint is no longer ready; resumed, it is
	// Ready again.
	stopped := podProcesses(t, a, "apache2")
	signalAll(t, stopped, syscall.SIGSTOP)
	t.Cleanup(func() { signalAll(t, stopped, syscall.SIGCONT) })
	waitPod(t, ns, a.Name, "NotReady with apache stopped", 2*time.Minute, func(p *corev1.Pod) bool { return !podReady(p) })
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		return endpointReady(ctx, ns, "keystone", a.Status.PodIP) == "not ready", nil
	})
	if err != nil {
		t.Errorf("keystone's EndpointSlice: %s's endpoint %s, want not ready", a.Name, endpointReady(ctx, ns, "keystone", a.Status.PodIP))
	}
	signalAll(t, stopped, syscall.SIGCONT)
	waitPod(t, ns, a.Name, "Ready again with apache resumed", 2*time.Minute, podReady)

	// Deletion: a request just before it; its line is shipped, apache
	// stopped by the agent within the grace period (no SIGKILL).
	b := pods[1]
	last := watchLast(t, ns, b.Name)
	marker = fmt.Sprintf("e2e-last-%d", time.Now().UnixNano())
	get(fmt.Sprintf("http://%s:5000/v3?%s", b.Status.PodIP, marker))
	deleted := time.Now()
	if err := env.Client().CoreV1().Pods(ns).Delete(ctx, b.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Readiness fails first: the agent's /readyz says stopping while the
	// pod still runs (apache is being stopped, the logs drained).
	var sawStopping bool
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if !sawStopping && strings.Contains(get(fmt.Sprintf("http://%s:8095/readyz?verbose", b.Status.PodIP)), "stopping") {
			sawStopping = true
		}
		_, err := env.Client().CoreV1().Pods(ns).Get(ctx, b.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("pod %s not gone 60 s after its deletion", b.Name)
	}
	gone := time.Since(deleted)
	if !sawStopping {
		t.Errorf("the deleted pod's /readyz never said stopping before the pod went")
	}
	if !receivedBy(b.Name, marker) {
		t.Errorf("the last request's line (%s) was not shipped before the pod went; the receiver has:\n%s", marker, lastLines(receivedLines(t, filepath.Join(received, b.Name+".jsonl")), 20))
	}
	p := last()
	if p == nil {
		t.Fatal("no status of the deleted pod")
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != "keystone" {
			continue
		}
		tm := cs.State.Terminated
		if tm == nil || tm.ExitCode == 137 {
			t.Errorf("keystone's container at its end: %s (want stopped by the agent, not killed)", state(cs.State))
			continue
		}
		// FinishedAt has whole seconds.
		t.Logf("pod deleted -> keystone's container ended (exit %d) within %.0fs, the pod gone in %.1fs (grace %ds)",
			tm.ExitCode, tm.FinishedAt.Sub(deleted.Truncate(time.Second)).Seconds()+1, gone.Seconds(), *p.Spec.TerminationGracePeriodSeconds)
	}
}

// deleteAtEnd deletes the namespace when the test ends and waits until it
// is gone, so that the next test can apply the slice again.
func deleteAtEnd(t *testing.T, ns string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		env.Client().CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := env.Client().CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	})
}

// The nova-conductor example beside RabbitMQ and mariadb, as real pods:
//   - RabbitMQ (the agent as its entrypoint, as the image's user) is Ready by
//     the kubelet's probe against the agent's tcp check on AMQP;
//   - nova-conductor's init container waits for mariadb and RabbitMQ, then
//     creates each db_sync phase's Job once (api_db, cells, db), run by the
//     kubelet against the real database;
//   - `kolla-agent sidecar` (a native sidecar, another user, the pod's
//     process namespace shared) finds nova-conductor in the main container
//     and answers the kubelet's probes with the rpc check: a real
//     oslo.messaging ping to the conductor topic through RabbitMQ;
//   - the service killed: the kubelet restarts its container, the sidecar
//     keeps running, follows the new process and the pod is Ready again.
func TestExamplesNovaSlice(t *testing.T) {
	testenv.NeedNode(t, env)
	sliceImages(t)
	const ns = slice.Namespace
	objs := examplesSlice(t, "mariadb", "rabbitmq", "nova-conductor")
	// The slice has neither keystone nor placement: nova-conductor's
	// placement client (made at its start) is given placement's URL, so
	// that it needs no discovery through keystone until it is used.
	// A private CA mounted where kolla mounts custom CAs: nova-conductor's
	// container runs as nova, and installs it with the image's
	// kolla_copy_cacerts through sudo, as kolla_start does.
	caDir := t.TempDir()
	if err := pki.WritePrivateCA(caDir, "e2e private CA", "example.test"); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(caDir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	objs = append(objs, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "kolla-ca", "namespace": ns},
		"data":     map[string]any{"e2e-ca.pem": string(caPEM)},
	}})
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && o.GetName() == "nova-conductor" {
			conf, _, _ := unstructured.NestedString(o.Object, "data", "nova.conf")
			conf = strings.Replace(conf, "[placement]\n", "[placement]\nendpoint_override = http://placement.openstack.svc.cluster.local:8778\n", 1)
			unstructured.SetNestedField(o.Object, conf, "data", "nova.conf")
		}
		if o.GetKind() == "Deployment" && o.GetName() == "nova-conductor" {
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			c := cs[0].(map[string]any)
			c["volumeMounts"] = append(c["volumeMounts"].([]any), map[string]any{"name": "kolla-ca", "mountPath": "/var/lib/kolla/share/ca-certificates", "readOnly": true})
			unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers")
			vs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
			vs = append(vs, map[string]any{"name": "kolla-ca", "configMap": map[string]any{"name": "kolla-ca"}})
			unstructured.SetNestedSlice(o.Object, vs, "spec", "template", "spec", "volumes")
		}
	}
	deleteAtEnd(t, ns)
	hostPathVolume(t, ns, "data-mariadb-0", 42434)
	hostPathVolume(t, ns, "data-rabbitmq-0", 42439)
	// examples/rbac/job-policy.yaml in force before the init container
	// creates nova's schema Jobs: they must pass it.
	var nsObjs []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			nsObjs = append(nsObjs, o)
		}
	}
	apply(t, nsObjs)
	enforceJobPolicy(t, ns, "nova-secrets")
	start := time.Now()
	apply(t, objs)
	rpods := waitReady(t, ns, "application=rabbitmq", 1, 5*time.Minute)
	t.Logf("rabbitmq Ready %.1fs after the apply", time.Since(start).Seconds())
	pods := waitReady(t, ns, "application=nova,component=conductor", 1, 10*time.Minute)
	t.Logf("nova-conductor Ready %.1fs after the apply", time.Since(start).Seconds())
	// The token only in the agent's sidecar (its init container used it
	// and is gone): nova-conductor, the sidecar's uid in a shared process
	// namespace, cannot reach it through the sidecar's /proc entries.
	serviceCannotReadToken(t, rpods[0], 0)
	serviceCannotReadToken(t, pods[0], 1)
	ctx := context.Background()

	jobs, err := env.Client().BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: "application=nova,component=db-sync"})
	if err != nil {
		t.Fatal(err)
	}
	phases := map[string]int{}
	for _, j := range jobs.Items {
		if j.Status.Succeeded == 1 {
			phases[j.Labels[bootstrap.LabelPhase]]++
		}
	}
	if !maps.Equal(phases, map[string]int{"api-db": 1, "cells": 1, "db": 1}) {
		t.Errorf("nova's completed db_sync Jobs by phase: %v, want one each of api-db, cells, db", phases)
	}
	p := pods[0]
	// From the node (as the kubelet asks) the answer names the checks and
	// their states, never a reason; over the sidecar's Unix socket (as
	// kolla-agent-probe and kubectl exec ask) the reason is there.
	public := get(fmt.Sprintf("http://%s:8095/readyz?verbose", p.Status.PodIP))
	if !strings.Contains(public, "[+]rpc pass") || strings.Contains(public, "dispatcher") {
		t.Errorf("the sidecar's /readyz?verbose from the node: want the rpc check passing, without its reason:\n%s", public)
	}
	var sidecar int
	for _, pid := range podProcesses(t, p, "kolla-agent") {
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); bytes.Contains(cmd, []byte("sidecar")) {
			sidecar = pid
		}
	}
	forgedJobRefused(t, ns, sidecar)
	verbose, _, err := probes.Ask(ctx, fmt.Sprintf("/proc/%d/root/run/kolla-agent/agent.sock", sidecar), probes.Readiness, true)
	if err != nil || !strings.Contains(verbose, "[+]rpc pass") || !strings.Contains(verbose, "its dispatcher is alive") {
		t.Errorf("the sidecar's readiness over its socket (pid %d): %v\n%s", sidecar, err, verbose)
	}

	// kolla's privilege model: the service's user, sudo for the CA step.
	procs := podProcesses(t, p, "nova-conductor")
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", procs[0]))
	if !regexp.MustCompile(`(?m)^Uid:\s+42436\s`).Match(status) {
		t.Errorf("nova-conductor does not run as nova (42436):\n%s", status)
	}
	installed, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/usr/local/share/ca-certificates/kolla-customca-e2e-ca.crt", procs[0]))
	if err != nil || !bytes.Equal(installed, caPEM) {
		t.Errorf("the CA in the container's trust store (kolla_copy_cacerts through sudo): %v", err)
	}
	bundle, _ := os.ReadFile(fmt.Sprintf("/proc/%d/root/etc/ssl/certs/ca-certificates.crt", procs[0]))
	if !bytes.Contains(bundle, bytes.TrimSpace(caPEM)) {
		t.Errorf("update-ca-certificates did not put the CA in the container's bundle")
	}

	// The service killed in its container: the sidecar follows the new one,
	// and the pod is not Ready again before the new process runs (the
	// sidecar starts startup and its checks over when the process goes:
	// without it, the old process's last pass made the pod Ready while
	// kolla_start was still at its sudo steps).
	signalAll(t, procs, syscall.SIGKILL)
	readyWithout := false
	waitPod(t, ns, p.Name, "nova-conductor restarted by the kubelet, running again, the pod Ready again", 5*time.Minute, func(p *corev1.Pod) bool {
		restarted := false
		for _, cs := range p.Status.ContainerStatuses {
			restarted = restarted || (cs.Name == "nova-conductor" && cs.RestartCount >= 1 && cs.State.Running != nil)
		}
		running := len(processesNamed(*p, "nova-conductor")) > 0
		readyWithout = readyWithout || restarted && podReady(p) && !running
		return restarted && podReady(p) && running
	})
	if readyWithout {
		t.Error("the pod was Ready again with no nova-conductor process running")
	}
	p2, err := env.Client().CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range p2.Status.InitContainerStatuses {
		if cs.Name == "kolla-agent" && (cs.RestartCount != 0 || cs.State.Running == nil) {
			t.Errorf("the sidecar: %s, %d restarts; want running throughout", state(cs.State), cs.RestartCount)
		}
	}
	if now := podProcesses(t, *p2, "nova-conductor"); slices.Equal(now, procs) {
		t.Errorf("nova-conductor's processes %v are the killed ones", now)
	}
}

// podProcesses lists the host PIDs of the pod's processes named comm: the
// node's processes are the host's, each in the pod's cgroup.
func podProcesses(t *testing.T, pod corev1.Pod, comm string) []int {
	t.Helper()
	pids := processesNamed(pod, comm)
	if len(pids) == 0 {
		t.Fatalf("no %s process of pod %s on the host", comm, pod.Name)
	}
	return pids
}

// processesNamed is podProcesses without the test: none may be found.
func processesNamed(pod corev1.Pod, comm string) []int {
	var pids []int
	for _, pid := range podPIDs(pod) {
		if c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(c)) == comm {
			pids = append(pids, pid)
		}
	}
	return pids
}

func signalAll(t *testing.T, pids []int, sig syscall.Signal) {
	for _, pid := range pids {
		syscall.Kill(pid, sig)
	}
}

// endpointReady says how the Service's EndpointSlices list ip: "ready",
// "not ready" or "absent".
func endpointReady(ctx context.Context, ns, service, ip string) string {
	l, err := env.Client().DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + service})
	if err != nil {
		return err.Error()
	}
	for _, s := range l.Items {
		for _, ep := range s.Endpoints {
			if slices.Contains(ep.Addresses, ip) {
				if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
					return "ready"
				}
				return "not ready"
			}
		}
	}
	return "absent"
}

func lastLines(lines []string, n int) string {
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// receivedLines reads the receiver's file: "TAG: MESSAGE" per entry (the
// agent sends a line's bytes as msgpack bin, which the receiver writes as
// {"$bin": base64}).
func receivedLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var e struct {
			Tag    string `json:"tag"`
			Record struct {
				Message json.RawMessage `json:"message"`
			} `json:"record"`
		}
		if err := json.Unmarshal(l, &e); err != nil {
			t.Fatalf("%s: %v: %s", path, err, l)
		}
		var msg string
		var bin struct {
			Bin []byte `json:"$bin"`
		}
		if json.Unmarshal(e.Record.Message, &msg) != nil && json.Unmarshal(e.Record.Message, &bin) == nil {
			msg = string(bin.Bin)
		}
		out = append(out, e.Tag+": "+msg)
	}
	return out
}

// watchLast watches a pod until the test ends; the function it returns is
// the last state seen (the kubelet's last status before the pod goes).
func watchLast(t *testing.T, ns, name string) func() *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := env.Client().CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var last *corev1.Pod
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				mu.Lock()
				last = p
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return func() *corev1.Pod {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// keystoneToken is a project-scoped token of the slice's admin.
func keystoneToken(t *testing.T, base, password string) string {
	t.Helper()
	token, _, _, err := keystone.Token(&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}, base, "admin", password,
		`{"project":{"name":"admin","domain":{"name":"Default"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// catalogOf lists the endpoints of the service named name as "interface
// URL region", sorted.
func catalogOf(t *testing.T, base, token, name string) []string {
	t.Helper()
	eps, err := keystone.Endpoints(&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}, base, token, name)
	if err != nil {
		t.Fatal(err)
	}
	return eps
}

// getWith GETs url with X-Auth-Token: the body, or the status and body when
// not 200.
func getWith(url, token string) string {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("X-Auth-Token", token)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := c.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return resp.Status + ": " + string(b)
	}
	return string(b)
}
