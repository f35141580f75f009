package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kolla-agent/kolla-agent/bootstrap"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

// What the agent costs the API server, from its audit log (counts, not
// times): never more requests than kubernetes-entrypoint, which GETs each
// dependency once when it is met and every 2 s while it is not.

// API cost, from the API server's audit log: at start exactly one LIST per
// collection: the Services' EndpointSlices are one (service-name in
// (a,b)), the Jobs named in the namespace another (its Jobs, in table
// form); then one WATCH, the Services', from its list's resourceVersion,
// and nothing while it waits. Once the Services are ready, the Jobs are
// listed again and watched from that LIST; once they are complete, the
// agent exits.
//
// The same on every etcd. The agent's own list-then-watch
// (discovery/kube.go) never asks for a watch-list (sendInitialEvents), the
// one kind of request whose outcome depends on etcd: the API server streams
// it on an etcd with on-demand progress requests (the default 3.6) and
// refuses it on Debian's 3.4, where client-go's reflector would spend one
// refused attempt per dependency before its LIST and WATCH. etcd only
// changes where the API server answers the LIST from (its watch cache on
// 3.6, etcd itself on 3.4). `make test` runs both tests on both etcds
// (TESTENV_ETCD=debian).
func TestAPIRequestsWhileWaiting(t *testing.T) {
	t.Logf("on %s", s.env.Etcd)
	ns := namespace(t)
	mkService(t, ns, "mariadb", false, map[string]string{"app": "mariadb"})
	mkService(t, ns, "memcached", false, map[string]string{"app": "memcached"})
	for _, j := range []string{"keystone-db-sync", "keystone-fernet-setup", "keystone-credential-setup"} {
		mkJob(t, ns, j, nil)
	}
	deps := []string{"service:mariadb", "service:memcached", "job:keystone-db-sync", "job:keystone-fernet-setup", "job:keystone-credential-setup"}
	start := time.Now()
	a := startAgent(t, agentEnv(t, ns), append([]string{"wait", "--timeout", "5m"}, deps...)...)
	for _, d := range deps {
		a.waitLog("dependency=" + d + " state=waiting")
	}
	time.Sleep(10 * time.Second) // the measurement window: the agent waits, the log counts
	a.running()
	// All of it is counted, from the agent's start to the window's end: a
	// dependency's WATCH can reach the server a moment after the agent
	// logged what its LIST showed, and any request while waiting is one
	// too many for the exact count.
	reqs := auditOf(t, ns, start)
	t.Logf("%d requests to sync %d dependencies and wait %v", len(reqs), len(deps), time.Since(start).Round(time.Second))
	colls := []string{
		slicesOf(ns, "kubernetes.io/service-name in (mariadb,memcached)"),
		"/apis/batch/v1/namespaces/" + ns + "/jobs?&",
	}
	var lists, watches []testenv.AuditRequest
	for _, r := range reqs {
		if r.Verb == "watch" {
			watches = append(watches, r)
		} else {
			lists = append(lists, r)
		}
	}
	wantOnePerCollection(t, lists, start, colls, "list")
	if len(watches) != 1 {
		t.Fatalf("%d WATCHes while both collections' dependencies wait, want 1:\n%s", len(watches), requestLines(reqs, start))
	}
	// The one WATCH is the Services': the Jobs a pod waits for need its
	// Services and are met after them, so they are watched last
	// (discovery/turn.go).
	wantOnePerCollection(t, watches, start, colls[:1], "watch")
	met := time.Now()
	for i, svc := range []string{"mariadb", "memcached"} {
		mkPod(t, ns, svc+"-0", map[string]string{"app": svc})
		setReady(t, ns, svc+"-0", fmt.Sprintf("10.10.8.%d", i+1), true)
	}
	// The turn is then the Jobs': they LIST again (what they listed is as
	// old as the wait) and, still unmet, WATCH from that LIST.
	wantOnePerCollection(t, settledRequests(t, ns, met, 2), met, colls[1:], "list", "watch")
	for _, j := range []string{"keystone-db-sync", "keystone-fernet-setup", "keystone-credential-setup"} {
		if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, j); err != nil {
			t.Fatal(err)
		}
	}
	a.wantExit(0)
	reqs = settledRequests(t, ns, start, 5)
	if len(reqs) != 5 {
		t.Errorf("%d requests in all, want 5 (a LIST each, the Services' WATCH, the Jobs' LIST and WATCH):\n%s", len(reqs), requestLines(reqs, start))
	}
	for _, r := range reqs {
		if r.Verb == "watch" && !strings.Contains(r.RequestURI, "resourceVersion=") {
			t.Errorf("a WATCH not from a LIST's resourceVersion: %s", r.RequestURI)
		}
	}
	// Jobs are read in the API server's Table form, rows without the
	// objects: a few hundred bytes a Job, not its 6-8 KB.
	for _, r := range reqs {
		if strings.Contains(r.RequestURI, "/jobs?") && !strings.Contains(r.RequestURI, "includeObject=None") {
			t.Errorf("a Jobs request not in Table form: %s", r.RequestURI)
		}
	}
}

func slicesOf(ns, sel string) string {
	return "/apis/discovery.k8s.io/v1/namespaces/" + ns + "/endpointslices?" + sel + "&"
}

func jobNamed(ns, name string) string {
	return "/apis/batch/v1/namespaces/" + ns + "/jobs?&metadata.name=" + name
}

// A pod restarting when everything is long ready, the commonest start of
// all: exactly one LIST per collection (both Services' slices in one), no
// WATCH, nothing else (the incumbent makes one GET per dependency); on
// every etcd, as above.
func TestAPIRequestsAllMet(t *testing.T) {
	t.Logf("on %s", s.env.Etcd)
	ns := namespace(t)
	deps := []string{"service:mariadb", "service:memcached", "job:keystone-db-sync", "job:application=keystone,component=setup"}
	for i, svc := range []string{"mariadb", "memcached"} {
		mkService(t, ns, svc, false, map[string]string{"app": svc})
		mkPod(t, ns, svc+"-0", map[string]string{"app": svc})
		setReady(t, ns, svc+"-0", fmt.Sprintf("10.10.7.%d", i+1), true)
	}
	mkJob(t, ns, "keystone-db-sync", nil)
	mkJob(t, ns, "keystone-fernet-setup", map[string]string{"application": "keystone", "component": "setup"})
	for _, j := range []string{"keystone-db-sync", "keystone-fernet-setup"} {
		if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, j); err != nil {
			t.Fatal(err)
		}
	}
	// Until one agent has seen them all met, the controllers may still be
	// writing; the second agent's start is the measured one.
	startAgent(t, agentEnv(t, ns), append([]string{"wait", "--timeout", "1m"}, deps...)...).wantExit(0)
	start := time.Now()
	startAgent(t, agentEnv(t, ns), append([]string{"wait", "--timeout", "1m"}, deps...)...).wantExit(0)
	// The audit log is written a moment after the responses: read it once
	// it holds what is expected, then once more after a second, so a late
	// extra request counts too.
	var reqs []testenv.AuditRequest
	colls := []string{
		slicesOf(ns, "kubernetes.io/service-name in (mariadb,memcached)"),
		jobNamed(ns, "keystone-db-sync"),
		"/apis/batch/v1/namespaces/" + ns + "/jobs?application=keystone,component=setup&",
	}
	for deadline := time.Now().Add(10 * time.Second); len(reqs) < len(colls) && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		reqs = auditOf(t, ns, start)
	}
	time.Sleep(time.Second)
	reqs = auditOf(t, ns, start)
	t.Logf("%d requests for %d dependencies already met", len(reqs), len(deps))
	wantOnePerCollection(t, reqs, start, colls, "list")
}

// The keystone pod's own shape (openstack-helm's: two Services and three
// named Jobs, the Jobs the size helm-toolkit renders), restarting with all
// of it met: 2 requests, one LIST of both Services' slices and one of the
// namespace's Jobs as table rows, against kubernetes-entrypoint's 5 GETs
// (docs/benchmarks.md's requests per start); on every etcd.
func TestAPIRequestsKeystoneShape(t *testing.T) {
	t.Logf("on %s", s.env.Etcd)
	ns := keystoneShape(t, true)
	for _, j := range keystoneJobs {
		if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, j); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{"wait", "--timeout", "1m"}, keystoneArgs()...)
	startAgent(t, agentEnv(t, ns), args...).wantExit(0) // the controllers' writes settled
	start := time.Now()
	startAgent(t, agentEnv(t, ns), args...).wantExit(0)
	colls := []string{
		slicesOf(ns, "kubernetes.io/service-name in (mariadb,memcached)"),
		"/apis/batch/v1/namespaces/" + ns + "/jobs?&",
	}
	var reqs []testenv.AuditRequest
	for deadline := time.Now().Add(10 * time.Second); len(reqs) < len(colls) && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		reqs = auditOf(t, ns, start)
	}
	time.Sleep(time.Second) // a late extra request counts too
	reqs = auditOf(t, ns, start)
	t.Logf("%d requests for %d dependencies already met", len(reqs), len(keystoneArgs()))
	wantOnePerCollection(t, reqs, start, colls, "list")
}

// wantOnePerCollection checks that reqs are exactly one request of each verb
// for each of the collections (a path, then its label and field selectors
// after ? and &), and no other request.
func wantOnePerCollection(t *testing.T, reqs []testenv.AuditRequest, start time.Time, colls []string, verbs ...string) {
	t.Helper()
	n := len(colls)
	count := map[string]map[string]int{} // verb -> collection -> requests
	for _, v := range verbs {
		count[v] = map[string]int{}
	}
	for _, r := range reqs {
		line := r.Verb + " " + r.RequestURI
		u, err := url.Parse(r.RequestURI)
		if err != nil {
			t.Errorf("request %s: %v", line, err)
			continue
		}
		q := u.Query()
		// The namespace's Jobs, two named or more, are one watch of them
		// all (rows of a table); everything else is narrowed.
		if q.Get("fieldSelector") == "" && q.Get("labelSelector") == "" && !(strings.HasSuffix(u.Path, "/jobs") && q.Get("includeObject") == "None") {
			t.Errorf("request not narrowed to its objects: %s", line)
		}
		byColl, ok := count[r.Verb]
		if !ok {
			t.Errorf("unexpected request %s", line)
			continue
		}
		byColl[u.Path+"?"+q.Get("labelSelector")+"&"+q.Get("fieldSelector")]++
	}
	for _, v := range verbs {
		total := 0
		for _, c := range count[v] {
			total += c
		}
		missing := slices.DeleteFunc(slices.Clone(colls), func(c string) bool { return count[v][c] == 1 })
		if len(count[v]) != n || total != n || len(missing) > 0 {
			t.Errorf("%d %s requests for %d collections, want exactly one for each of %d (not once: %q):\n%s", total, v, len(count[v]), n, missing, requestLines(reqs, start))
		}
	}
}

// requestLines lists reqs, each with when it came after start.
func requestLines(reqs []testenv.AuditRequest, start time.Time) string {
	lines := make([]string, len(reqs))
	for i, r := range reqs {
		lines[i] = fmt.Sprintf("+%v %s %s", r.Time.Sub(start).Round(time.Millisecond), r.Verb, r.RequestURI)
	}
	return strings.Join(lines, "\n")
}

func auditOf(t testing.TB, ns string, since time.Time) []testenv.AuditRequest {
	t.Helper()
	reqs, err := s.env.Requests("system:serviceaccount:"+ns+":kolla-agent", since)
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

// Every other lookup through the API, when what exists already settles it:
// one LIST per resource read and no WATCH. The same lookup started before
// it is settled goes on to exactly one WATCH per resource, from its list's
// resourceVersion, and nothing else.
func TestAPIRequestsPerLookup(t *testing.T) {
	t.Logf("on %s", s.env.Etcd)
	ns := namespace(t)
	env := exposureEnv(t, ns)
	if err := s.env.Kubelet().EnsureNode(ctxT(t), testenv.DefaultNode); err != nil {
		t.Fatal(err)
	}
	lb := mkExposedService(t, ns, "keystone", corev1.ServiceTypeLoadBalancer, nil)
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.30"}}
	if _, err := client().CoreV1().Services(ns).UpdateStatus(ctxT(t), lb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	mkExposedService(t, ns, "glance", corev1.ServiceTypeNodePort, nil)
	mkExposedService(t, ns, "placement", corev1.ServiceTypeClusterIP, nil)
	mkIngress(t, ns, "placement", "placement.example.org", "placement", false)

	const (
		services = "list /api/v1/namespaces/NS/services"
		nodes    = "list /api/v1/nodes"
	)
	byIngress := []string{services, "get /apis/route.openshift.io/v1", "list /apis/networking.k8s.io/v1/namespaces/NS/ingresses"}
	// Routes are looked up where the API serves them (another test may
	// have installed their CRD): one more LIST then.
	if _, err := client().Discovery().ServerResourcesForGroupVersion(testenv.RoutesGVR.GroupVersion().String()); err == nil {
		byIngress = append(byIngress, "list /apis/route.openshift.io/v1/namespaces/NS/routes")
	}
	dir := t.TempDir()
	render := func(tmpl string) []string {
		src, dest := filepath.Join(dir, "t.tmpl"), filepath.Join(dir, "t.conf")
		if err := os.WriteFile(src, []byte(tmpl), 0o644); err != nil {
			t.Fatal(err)
		}
		return []string{"--config", agentYAML(t, "render:\n  - {src: "+src+", dest: "+dest+"}\n"), "render"}
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"exposed LoadBalancer", []string{"wait", "exposed:keystone"}, []string{services}},
		{"exposed NodePort", []string{"wait", "exposed:glance"}, []string{services, nodes}},
		{"exposed by an Ingress", []string{"wait", "exposed:placement"}, byIngress},
		{"publicURL", render(`{{ publicURL "keystone" "/v3" }}`), []string{services}},
		{"internalURL", render(`{{ internalURL "glance" }}`), []string{services}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			since := time.Now()
			startAgent(t, env, tc.args...).wantExit(0)
			wantRequests(t, ns, since, tc.want)
		})
	}

	t.Run("exposed LoadBalancer, ingress later", func(t *testing.T) {
		svc := mkExposedService(t, ns, "nova", corev1.ServiceTypeLoadBalancer, nil)
		since := time.Now()
		a := startAgent(t, env, "--log-level", "debug", "wait", "--timeout", "1m", "exposed:nova")
		a.waitLog("LoadBalancer has no ingress yet")
		time.Sleep(3 * time.Second) // a poller would show here
		a.running()
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.31"}}
		if _, err := client().CoreV1().Services(ns).UpdateStatus(ctxT(t), svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		a.wantExit(0)
		wantRequests(t, ns, since, []string{services, "watch /api/v1/namespaces/NS/services"})
		// At debug level the agent says which requests it made.
		for _, want := range []string{`msg="API list" resource=services namespace=` + ns + ` labels="" fields="metadata.name=nova" items=1`, `msg="API watch" resource=services namespace=` + ns} {
			if !strings.Contains(a.out.String(), want) {
				t.Errorf("no %s in the debug log:\n%s", want, a.out.String())
			}
		}
	})
}

// wantRequests checks that the agent's requests since are exactly want
// (verb and path, the namespace written NS; any order), read once they
// settle (settledRequests), and returns them.
func wantRequests(t *testing.T, ns string, since time.Time, want []string) []testenv.AuditRequest {
	t.Helper()
	reqs := settledRequests(t, ns, since, len(want))
	checkRequests(t, ns, reqs, want)
	return reqs
}

// settledRequests reads the agent's requests since from the audit log
// until it holds at least n, and once more a second later, so a late extra
// request counts too.
func settledRequests(t *testing.T, ns string, since time.Time, n int) []testenv.AuditRequest {
	t.Helper()
	var reqs []testenv.AuditRequest
	for deadline := time.Now().Add(10 * time.Second); len(reqs) < n && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		reqs = auditOf(t, ns, since)
	}
	time.Sleep(time.Second)
	return auditOf(t, ns, since)
}

// checkRequests checks that reqs are exactly want (verb and path, the
// namespace written NS; any order).
func checkRequests(t *testing.T, ns string, reqs []testenv.AuditRequest, want []string) {
	t.Helper()
	var got []string
	for _, r := range reqs {
		u, err := url.Parse(r.RequestURI)
		if err != nil {
			t.Fatalf("request %s %s: %v", r.Verb, r.RequestURI, err)
		}
		got = append(got, r.Verb+" "+strings.Replace(u.Path, "/namespaces/"+ns+"/", "/namespaces/NS/", 1))
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Errorf("requests:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// Bootstrap, when the step is done: a replica reads the record (one GET)
// and touches no Job. With the record gone but the Job still there and
// complete, it creates nothing new (409), LISTs the step's Jobs once, records
// the success again (a GET and a create) and never WATCHes.
func TestAPIRequestsBootstrap(t *testing.T) {
	t.Logf("on %s", s.env.Etcd)
	ns := namespace(t)
	env := bootstrapEnv(t, ns, "create")
	cfg := bootstrapFiles(t, ns, "  mode: create\n  name: heat-db-sync\n  command: heat-manage db_sync\n  timeout: 2m\n", "")
	a := startAgent(t, withEnv(env, "POD_NAME=heat-api-0"), "--config", cfg, "init")
	name := waitJobs(t, ns, "heat-db-sync", 1)[0]
	if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, name); err != nil {
		t.Fatal(err)
	}
	a.wantExit(0)
	record := "/api/v1/namespaces/NS/configmaps/" + bootstrap.RecordName("heat-db-sync")

	since := time.Now()
	startAgent(t, withEnv(env, "POD_NAME=heat-api-1"), "--config", cfg, "init").wantExit(0)
	wantRequests(t, ns, since, []string{"get " + record})

	if err := client().CoreV1().ConfigMaps(ns).Delete(ctxT(t), bootstrap.RecordName("heat-db-sync"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	since = time.Now()
	startAgent(t, withEnv(env, "POD_NAME=heat-api-2"), "--config", cfg, "init").wantExit(0)
	wantRequests(t, ns, since, []string{
		"get " + record, // not recorded
		"create /apis/batch/v1/namespaces/NS/jobs",                 // 409: it exists
		"list /apis/batch/v1/namespaces/NS/jobs",                   // complete
		"get " + record, "create /api/v1/namespaces/NS/configmaps", // recorded again
	})
}

// Bootstrap in lease mode. The replica that runs the step: its pod (the
// version, from its images), the record (not done); then, side by side,
// one LIST and WATCH of the record (another's success ends the wait) and
// of the Lease, and the create that takes it; as the holder, the record
// again (a holder before may have just recorded it), the command, the
// BootstrapRunning Event (its pod reference: a GET of the pod), the record
// written (a read, then the create) and the Lease released (an update).
// One started after reads the record (and its pod, for the version) and
// touches no Lease.
func TestAPIRequestsBootstrapLease(t *testing.T) {
	t.Logf("on %s", s.env.Etcd)
	ns := namespace(t)
	env := bootstrapEnv(t, ns, "lease")
	// The command runs until both watches are in the audit log: a holder
	// quicker than its WATCHes would end them unmade, a count by timing.
	// A long Lease: no renewal while it runs.
	gate := filepath.Join(t.TempDir(), "go")
	command := fmt.Sprintf("sh -c 'while [ ! -e %s ]; do sleep 0.05; done'", gate)
	cfg := agentYAML(t, fmt.Sprintf("namespace: %s\nbootstrap:\n  mode: lease\n  name: heat-bootstrap\n  command: %q\n  leaseDuration: 60s\n  timeout: 1m\n", ns, command))
	for i := range 2 {
		mkPod(t, ns, fmt.Sprintf("heat-api-%d", i), nil)
	}
	const (
		configMaps = "/api/v1/namespaces/NS/configmaps"
		leases     = "/apis/coordination.k8s.io/v1/namespaces/NS/leases"
	)
	record := configMaps + "/" + bootstrap.RecordName("heat-bootstrap")
	since := time.Now()
	a := startAgent(t, withEnv(env, "POD_NAME=heat-api-0"), "--config", cfg, "init")
	watches := func() int {
		n := 0
		for _, r := range auditOf(t, ns, since) {
			if r.Verb == "watch" {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(30 * time.Second); watches() < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the holder's two watches never came:\n%s", requestLines(auditOf(t, ns, since), since))
		}
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a.wantExit(0)
	wantRequests(t, ns, since, []string{
		"get /api/v1/namespaces/NS/pods/heat-api-0", // the version
		"get " + record,                             // not done
		"list " + configMaps, "watch " + configMaps, // another's success
		"list " + leases, "watch " + leases, "create " + leases, // taken
		"get " + record, // as the holder
		"get /api/v1/namespaces/NS/pods/heat-api-0", "create /api/v1/namespaces/NS/events", // BootstrapRunning
		"get " + record, "create " + configMaps, // recorded
		"update " + leases + "/heat-bootstrap", // released
	})

	since = time.Now()
	startAgent(t, withEnv(env, "POD_NAME=heat-api-1"), "--config", cfg, "init").wantExit(0)
	wantRequests(t, ns, since, []string{"get /api/v1/namespaces/NS/pods/heat-api-1", "get " + record})
}

// The bootstrap's rollout gate, the phase after it (contract) of a
// Deployment's pod whose earlier phases (expand, migrate) are recorded.
// Rollout complete: a GET of the record per phase, the owner found once (a
// GET of the pod, then of its ReplicaSet), one LIST of the Deployment by
// name and no WATCH, then the contract Job's own requests (the record read
// again, the Job created and its Event posted, one LIST and WATCH of the
// step's Jobs, the success recorded). Rollout under way: the same up to the
// LIST, then one WATCH of the Deployment from that list's resourceVersion
// and nothing while it waits; the rollout done, the Job's requests as
// above, and the Deployment's WATCH closed: the gate is open for good.
func TestAPIRequestsRolloutGate(t *testing.T) {
	t.Logf("on %s", s.env.Etcd)
	ns := namespace(t)
	env := agentEnvWith(t, ns, []string{"examples/rbac/bootstrap-create.yaml", "examples/rbac/bootstrap-rollout.yaml"})
	// The new pod comes first; the old one goes once it is ready.
	deps := mkSurgeDeployment(t, ns, "heat-api", "kolla/heat-api:v1", 1)
	// podOf waits for the pod of image and returns it with its ReplicaSet.
	podOf := func(image string) (pod, rs string) {
		t.Helper()
		eventually(t, "the pod of "+image, func() bool {
			l, err := client().CoreV1().Pods(ns).List(ctxT(t), metav1.ListOptions{LabelSelector: "app=heat-api"})
			if err != nil {
				return false
			}
			for _, p := range l.Items {
				if p.DeletionTimestamp == nil && p.Spec.Containers[0].Image == image && len(p.OwnerReferences) == 1 {
					pod, rs = p.Name, p.OwnerReferences[0].Name
					return true
				}
			}
			return false
		})
		return pod, rs
	}
	rolledOut := func() bool {
		d, err := deps.Get(ctxT(t), "heat-api", metav1.GetOptions{})
		return err == nil && d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == 1 && d.Status.Replicas == 1 && d.Status.AvailableReplicas == 1
	}
	// settled waits until the controller has seen the Deployment's spec and
	// written its revision (a gate that read the revision before would
	// take the pod's for a newer one), and returns its resourceVersion: no
	// LIST after can return an older one.
	settled := func(revision string) string {
		t.Helper()
		var rv string
		eventually(t, "the deployment at revision "+revision, func() bool {
			d, err := deps.Get(ctxT(t), "heat-api", metav1.GetOptions{})
			if err != nil || d.Status.ObservedGeneration < d.Generation || d.Annotations["deployment.kubernetes.io/revision"] != revision {
				return false
			}
			rv = d.ResourceVersion
			return true
		})
		return rv
	}
	pod0, rs0 := podOf("kolla/heat-api:v1")
	setReady(t, ns, pod0, "10.10.12.1", true)
	eventually(t, "the v1 rollout", rolledOut)

	const name = "heat-db-sync"
	// recordEarly records the version's expand and migrate, as the pods
	// before did: the record's keys are <phase>.<version>.
	recordEarly := func(version string) {
		t.Helper()
		cms := client().CoreV1().ConfigMaps(ns)
		cm, err := cms.Get(ctxT(t), bootstrap.RecordName(name), metav1.GetOptions{})
		if err != nil {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: bootstrap.RecordName(name)}, Data: map[string]string{}}
		}
		for _, phase := range []string{"expand", "migrate"} {
			e, _ := json.Marshal(bootstrap.Entry{Version: version, Phase: phase, Job: name + "-" + phase, Finished: time.Now().UTC().Format(time.RFC3339)})
			cm.Data[phase+"."+version] = string(e)
		}
		if cm.ResourceVersion == "" {
			_, err = cms.Create(ctxT(t), cm, metav1.CreateOptions{})
		} else {
			_, err = cms.Update(ctxT(t), cm, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	start := func(pod, version string) *agentProc {
		cfg := bootstrapFiles(t, ns, fmt.Sprintf(`  mode: create
  name: %s
  version: %q
  command: heat-manage db_sync
  phases:
    - {name: expand, command: heat-manage db_sync --expand}
    - {name: migrate, command: heat-manage db_sync --migrate}
    - {name: contract, command: heat-manage db_sync --contract}
  timeout: 2m
`, name, version), "")
		return startAgent(t, withEnv(env, "POD_NAME="+pod), "--config", cfg, "run", "--", "sleep", "3600")
	}
	// contract waits for the agent's contract Job of version, then
	// completes it once the agent waits for it (so that it lists it
	// active and watches), until the agent has recorded it.
	contract := func(a *agentProc, version string) {
		t.Helper()
		var found []string
		eventually(t, "the contract job of "+version, func() bool {
			found = jobsLabelled(t, ns, bootstrap.LabelPhase+"=contract,"+bootstrap.LabelVersion+"="+version)
			return len(found) == 1
		})
		a.waitLog("waiting for job " + found[0])
		if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, found[0]); err != nil {
			t.Fatal(err)
		}
		a.waitLog("job " + found[0] + " complete")
	}
	const (
		deployments = "/apis/apps/v1/namespaces/NS/deployments"
		jobs        = "/apis/batch/v1/namespaces/NS/jobs"
	)
	record := "/api/v1/namespaces/NS/configmaps/" + bootstrap.RecordName(name)
	// gate is a start's requests up to the Deployment's LIST: the record
	// for each phase, the owner.
	gate := func(pod, rs string) []string {
		return []string{"get " + record, "get " + record, "get " + record,
			"get /api/v1/namespaces/NS/pods/" + pod, "get /apis/apps/v1/namespaces/NS/replicasets/" + rs,
			"list " + deployments}
	}
	// contractJob is the contract step's own requests.
	contractJob := func(pod string) []string {
		return append([]string{"get " + record, "create " + jobs, "list " + jobs, "watch " + jobs, "get " + record, "update " + record},
			eventRequests(pod)...) // BootstrapJobCreated
	}
	deploymentRequests := func(reqs []testenv.AuditRequest) []testenv.AuditRequest {
		var out []testenv.AuditRequest
		for _, r := range reqs {
			if strings.Contains(r.RequestURI, "/deployments") {
				out = append(out, r)
			}
		}
		return out
	}

	t.Run("rollout complete", func(t *testing.T) {
		recordEarly("1")
		from := settled("1")
		since := time.Now()
		a := start(pod0, "1")
		contract(a, "1")
		reqs := wantRequests(t, ns, since, slices.Concat(gate(pod0, rs0), contractJob(pod0)))
		narrowedTo(t, deploymentRequests(reqs), from, currentRV(t, ns))
		a.running()
		a.cmd.Process.Signal(syscall.SIGTERM) // the service goes with it
		a.wantExit(143)
	})

	t.Run("rollout under way", func(t *testing.T) {
		recordEarly("2")
		cur, err := deps.Get(ctxT(t), "heat-api", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Template.Spec.Containers[0].Image = "kolla/heat-api:v2"
		if _, err := deps.Update(ctxT(t), cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod1, rs1 := podOf("kolla/heat-api:v2")
		from := settled("2")
		since := time.Now()
		a := start(pod1, "2")
		a.waitLog("waiting for the rollout: deployment heat-api")
		waiting := slices.Concat(gate(pod1, rs1), []string{"watch " + deployments})
		reqs := wantRequests(t, ns, since, waiting)
		narrowedTo(t, deploymentRequests(reqs), from, currentRV(t, ns))

		// The new pod ready, the controller removes the old one: the
		// rollout is complete.
		setReady(t, ns, pod1, "10.10.12.2", true)
		a.waitLog("rollout complete")
		contract(a, "2")
		reqs = wantRequests(t, ns, since, slices.Concat(waiting, contractJob(pod1)))
		eventually(t, "the deployment's watch closed once the gate opened", func() bool {
			for _, r := range deploymentRequests(auditOf(t, ns, since)) {
				if r.Verb == "watch" && !r.Complete {
					return false
				}
			}
			return true
		})
		if t.Failed() {
			t.Logf("requests:\n%s", requestLines(reqs, since))
		}
		a.running()
		a.cmd.Process.Signal(syscall.SIGTERM)
		a.wantExit(143)
	})
}

// Under openstack-helm's entrypoint Role (helm-toolkit's
// kubernetes_pod_rbac_roles: get and list, no watch) the agent polls: a
// refused WATCH per dependency, then a LIST every 2-2.5 s, the WATCH tried
// again in a LIST's turn after 1 poll, then 2, ..., at most
// kubernetes-entrypoint's GET every 2 s; it sees the dependencies met and
// exits, and says once per resource why it polls. (REAL-PODS: it retried
// the refused watch for ever and never saw them.)
func TestAPIRequestsWatchRefused(t *testing.T) {
	ns := namespace(t)
	mkService(t, ns, "mariadb", false, map[string]string{"app": "mariadb"})
	mkJob(t, ns, "keystone-db-sync", nil)
	env := agentEnv(t, ns)
	// The Role as helm-toolkit renders it for services and jobs.
	setRole(t, ns, []rbacv1.PolicyRule{{
		APIGroups: []string{"", "extensions", "batch", "apps", "discovery.k8s.io"},
		Verbs:     []string{"get", "list"},
		Resources: []string{"jobs", "pods", "services", "endpoints", "endpointslices"},
	}}...)
	waitDenied(t, ns, "watch", "batch", "jobs")
	deps := []string{"service:mariadb", "job:keystone-db-sync"}
	start := time.Now()
	a := startAgent(t, env, append([]string{"wait", "--timeout", "5m"}, deps...)...)
	a.waitLog("API watch refused")
	time.Sleep(10 * time.Second) // the window: polling
	a.running()
	reqs := auditOf(t, ns, start)
	window := time.Since(start)
	lists, watches := map[string]int{}, map[string]int{}
	for _, r := range reqs {
		u, err := url.Parse(r.RequestURI)
		if err != nil {
			t.Fatal(err)
		}
		switch r.Verb {
		case "list":
			lists[u.Path]++
		case "watch":
			watches[u.Path]++
		case "create": // an Event
		default:
			t.Errorf("unexpected request %s %s", r.Verb, r.RequestURI)
		}
	}
	// kubernetes-entrypoint: a GET every 2 s per dependency. The agent: its
	// first LIST and WATCH together, then one request per poll, the WATCH
	// tried again after 1 poll and then 2 (the next try is past the window).
	incumbent := int(window/(2*time.Second)) + 1
	for path, n := range lists {
		if n+watches[path] > incumbent+1 {
			t.Errorf("%d LISTs and %d WATCHes of %s in %v: more than kubernetes-entrypoint's %d GETs and the first WATCH\n%s", n, watches[path], path, window.Round(time.Millisecond), incumbent, requestLines(reqs, start))
		}
		if n < 3 {
			t.Errorf("%d LISTs of %s in %v: not polling\n%s", n, path, window.Round(time.Millisecond), requestLines(reqs, start))
		}
	}
	if len(lists) != 2 {
		t.Errorf("LISTs of %d collections, want 2 (endpointslices, jobs)\n%s", len(lists), requestLines(reqs, start))
	}
	for path, n := range watches {
		if n < 2 || n > 3 {
			t.Errorf("%d WATCHes of %s in %v: want the refused one tried again after 1 poll, then 2\n%s", n, path, window.Round(time.Millisecond), requestLines(reqs, start))
		}
	}
	for _, res := range []string{"resource=endpointslices.discovery.k8s.io", "resource=jobs.batch"} {
		if n := strings.Count(a.out.String(), res); n < 1 || strings.Count(a.out.String(), "API watch refused") != 2 {
			t.Errorf("want one 'API watch refused' warning per resource (%s: %d):\n%s", res, n, a.out.String())
		}
	}
	// Met after the first LIST: the polls see it.
	mkPod(t, ns, "mariadb-0", map[string]string{"app": "mariadb"})
	setReady(t, ns, "mariadb-0", "10.10.0.5", true)
	if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, "keystone-db-sync"); err != nil {
		t.Fatal(err)
	}
	a.wantExit(0)
}

// The other dependency kinds under helm-toolkit's Role (get and list, no
// watch): a DaemonSet's pod on the agent's node, pods by label on the same
// node, a container of the agent's own pod. Each lookup polls with LIST at
// most at kubernetes-entrypoint's pace (one GET per dependency every 2 s),
// each refused WATCH is tried again after 1, 2, 4... polls in a poll's
// turn, and once all are met the agent exits.
func TestAPIRequestsWatchRefusedPodsDaemonSets(t *testing.T) {
	ns := namespace(t)
	mkPod(t, ns, "nova-compute-0", nil, "nova-compute", "libvirt-exporter")
	mkPod(t, ns, "libvirt-0", map[string]string{"application": "libvirt"})
	setReady(t, ns, "libvirt-0", "10.10.3.1", false)
	setReady(t, ns, "nova-compute-0", "10.10.3.2", false)
	labels := map[string]string{"app": "openvswitch"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "openvswitch", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "ovs", Image: "none"}}},
			},
		},
	}
	if _, err := client().AppsV1().DaemonSets(ns).Create(ctxT(t), ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ovs, err := s.env.Kubelet().WaitForPod(ctxT(t), ns, "app=openvswitch")
	if err != nil {
		t.Fatal(err)
	}
	setReady(t, ns, ovs.Name, "10.10.3.3", false)
	env := withEnv(agentEnv(t, ns), "POD_NAME=nova-compute-0")
	setRole(t, ns, []rbacv1.PolicyRule{{
		APIGroups: []string{"", "extensions", "batch", "apps", "discovery.k8s.io"},
		Verbs:     []string{"get", "list"},
		Resources: []string{"jobs", "pods", "services", "endpoints", "endpointslices", "daemonsets"},
	}}...)
	waitDenied(t, ns, "watch", "", "pods")
	waitDenied(t, ns, "watch", "apps", "daemonsets")
	deps := []string{"daemonset:openvswitch", "pod:application=libvirt@samenode", "container:libvirt-exporter"}
	start := time.Now()
	a := startAgent(t, env, append([]string{"wait", "--timeout", "5m"}, deps...)...)
	a.waitLog("API watch refused")
	time.Sleep(10 * time.Second) // the window: polling
	a.running()
	reqs := auditOf(t, ns, start)
	window := time.Since(start)
	// Per lookup: the path and its selectors.
	polls := map[string]int{}
	for _, r := range reqs {
		u, err := url.Parse(r.RequestURI)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		key := u.Path + "?" + q.Get("labelSelector") + "&" + q.Get("fieldSelector")
		switch r.Verb {
		case "list":
			polls[key]++
		case "get", "watch", "create": // its own pod, the refused watches, an Event
		default:
			t.Errorf("unexpected request %s %s", r.Verb, r.RequestURI)
		}
	}
	incumbent := int(window/(2*time.Second)) + 1
	for key, n := range polls {
		if n > incumbent {
			t.Errorf("%d LISTs of %s in %v: more than kubernetes-entrypoint's %d\n%s", n, key, window.Round(time.Millisecond), incumbent, requestLines(reqs, start))
		}
	}
	if len(polls) < 3 {
		t.Errorf("%d lookups polled, want one per dependency at least (%v)\n%s", len(polls), polls, requestLines(reqs, start))
	}
	// The DaemonSet exists at the first LIST: only its pods are watched.
	if out := a.out.String(); strings.Count(out, "API watch refused") != 1 || !strings.Contains(out, "resource=pods") || strings.Contains(out, "unhealthy") {
		t.Errorf("want one 'API watch refused' warning (pods) and no dependency made unhealthy by it:\n%s", out)
	}
	// Met after the first LISTs: the polls see it.
	setReady(t, ns, ovs.Name, "10.10.3.3", true)
	setReady(t, ns, "libvirt-0", "10.10.3.1", true)
	if err := s.env.Kubelet().SetContainerReady(ctxT(t), ns, "nova-compute-0", "libvirt-exporter", true); err != nil {
		t.Fatal(err)
	}
	a.wantExit(0)
}

// A custom resource under helm-toolkit's Role for DEPENDENCY_CUSTOM_RESOURCE
// (get only on the plural): the refused LIST turns into a GET of the one
// object by name every 2-2.5 s (the LIST tried again after 1, 2, 4... GETs
// in a GET's turn), no watch, at most kubernetes-entrypoint's GET every 2 s; the agent sees the object ready and exits, and says once,
// in the log and in a Warning Event on its pod (when the Role lets it
// create Events), which verb was refused and the rule that would fix it.
func TestAPIRequestsGetOnlyCustomResource(t *testing.T) {
	ns := namespace(t)
	dyn, gadgets := ensureCRD(t, "refusal.kolla-agent.dev", "gadgets", "Gadget")
	env := withEnv(agentEnv(t, ns), "POD_NAME=glance-api-0")
	mkPod(t, ns, "glance-api-0", nil)
	setRole(t, ns, []rbacv1.PolicyRule{
		{APIGroups: []string{"", "extensions", "batch", "apps", "discovery.k8s.io"}, Verbs: []string{"get", "list"}, Resources: []string{"jobs", "pods", "services", "endpoints", "endpointslices"}},
		{APIGroups: []string{gadgets.Group}, Verbs: []string{"get"}, Resources: []string{gadgets.Resource}},
		{APIGroups: []string{""}, Verbs: []string{"create"}, Resources: []string{"events"}}, // not helm-toolkit's: to see the Event
	}...)
	waitDenied(t, ns, "list", gadgets.Group, gadgets.Resource)
	start := time.Now()
	a := startAgent(t, env, "wait", "--timeout", "5m", "resource:refusal.kolla-agent.dev/v1/Gadget/"+ns+"/w1?spec.size=3")
	a.waitLog("API list refused")
	time.Sleep(10 * time.Second) // the window: polling a missing object
	a.running()
	reqs := auditOf(t, ns, start)
	window := time.Since(start)
	gets, lists := 0, 0
	for _, r := range reqs {
		u, err := url.Parse(r.RequestURI)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case r.Verb == "get" && strings.HasSuffix(u.Path, "/gadgets/w1"):
			gets++
		case r.Verb == "list" && strings.HasSuffix(u.Path, "/gadgets"): // refused, tried again
			lists++
		case r.Verb == "get" && u.Path == "/apis/refusal.kolla-agent.dev/v1": // API discovery: is Gadget served
		case r.Verb == "get" && strings.HasSuffix(u.Path, "/pods/glance-api-0"), r.Verb == "create" && strings.HasSuffix(u.Path, "/events"): // the Event
		default:
			t.Errorf("unexpected request %s %s", r.Verb, r.RequestURI)
		}
	}
	// The first LIST and GET together, then one request per poll: the
	// LIST tried again after 1 GET, then 2.
	if incumbent := int(window/(2*time.Second)) + 1; gets+lists > incumbent+1 || gets < 3 {
		t.Errorf("%d GETs and %d LISTs of the gadget in %v: want polling at most at kubernetes-entrypoint's pace (%d GETs)\n%s", gets, lists, window.Round(time.Millisecond), incumbent, requestLines(reqs, start))
	}
	if lists < 2 || lists > 3 {
		t.Errorf("%d LISTs of the gadgets in %v: want the refused one tried again after 1 GET, then 2\n%s", lists, window.Round(time.Millisecond), requestLines(reqs, start))
	}
	if n := strings.Count(a.out.String(), "API list refused"); n != 1 || !strings.Contains(a.out.String(), `verbs: [get, list, watch]`) {
		t.Errorf("want one 'API list refused' warning with the rule:\n%s", a.out.String())
	}
	eventually(t, "the APIVerbRefused Event", func() bool {
		evs, err := client().CoreV1().Events(ns).List(ctxT(t), metav1.ListOptions{FieldSelector: "reason=APIVerbRefused"})
		return err == nil && len(evs.Items) == 1 && evs.Items[0].InvolvedObject.Name == "glance-api-0" &&
			strings.Contains(evs.Items[0].Message, "polling with GET") && evs.Items[0].Type == "Warning"
	})
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "refusal.kolla-agent.dev/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": "w1", "namespace": ns},
		"spec":     map[string]any{"size": int64(3)},
	}}
	if _, err := dyn.Resource(gadgets).Namespace(ns).Create(ctxT(t), w, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.wantExit(0)
}

// setRole replaces the rules of the agent's Role in ns.
func setRole(t *testing.T, ns string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	role, err := client().RbacV1().Roles(ns).Get(ctxT(t), "kolla-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role.Rules = rules
	if _, err := client().RbacV1().Roles(ns).Update(ctxT(t), role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitDenied waits until the agent's ServiceAccount may no longer verb the
// resource: a Role's change reaches the authorizer a moment later.
func waitDenied(t *testing.T, ns, verb, group, resource string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sar, err := client().AuthorizationV1().SubjectAccessReviews().Create(ctxT(t), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               testenv.AgentUser(ns),
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !sar.Status.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s may still %s %s", testenv.AgentUser(ns), verb, resource)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The Jobs a pod names share one watch of the namespace's Jobs: as they
// complete, the wait goes on with no request of its own, and the agent
// exits when the last is met. Under a Role that names its Jobs (list and
// watch by resourceNames, as a hand-written one may), the namespace's
// LIST is refused once and each Job is watched by name: the wait still
// ends.
func TestAPIRequestsSharedJobs(t *testing.T) {
	jobs := []string{"keystone-db-sync", "keystone-fernet-setup", "keystone-credential-setup"}
	deps := []string{"job:" + jobs[0], "job:" + jobs[1], "job:" + jobs[2]}
	t.Run("narrows", func(t *testing.T) {
		ns := namespace(t)
		for _, j := range jobs {
			mkJob(t, ns, j, nil)
		}
		start := time.Now()
		a := startAgent(t, agentEnv(t, ns), append([]string{"wait", "--timeout", "5m"}, deps...)...)
		for _, d := range deps {
			a.waitLog("dependency=" + d + " state=waiting")
		}
		for _, j := range jobs[:2] {
			if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, j); err != nil {
				t.Fatal(err)
			}
			a.waitLog("dependency=job:" + j + " state=ready")
		}
		a.running()
		if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, jobs[2]); err != nil {
			t.Fatal(err)
		}
		a.wantExit(0)
		time.Sleep(time.Second) // the audit log is written a moment after
		reqs := auditOf(t, ns, start)
		if len(reqs) != 2 || reqs[0].Verb != "list" || reqs[1].Verb != "watch" || !strings.Contains(reqs[1].RequestURI, "/jobs?") {
			t.Errorf("want one LIST and one WATCH of the namespace's Jobs:\n%s", requestLines(reqs, start))
		}
	})
	t.Run("named Role", func(t *testing.T) {
		ns := namespace(t)
		for _, j := range jobs {
			mkJob(t, ns, j, nil)
		}
		env := agentEnv(t, ns)
		setRole(t, ns, rbacv1.PolicyRule{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, ResourceNames: jobs, Verbs: []string{"get", "list", "watch"}})
		waitDenied(t, ns, "list", "batch", "jobs")
		start := time.Now()
		a := startAgent(t, env, append([]string{"wait", "--timeout", "5m"}, deps...)...)
		for _, d := range deps {
			a.waitLog("dependency=" + d + " state=waiting")
		}
		for _, j := range jobs {
			if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, j); err != nil {
				t.Fatal(err)
			}
		}
		a.wantExit(0)
		time.Sleep(time.Second)
		refused := 0
		for _, r := range auditOf(t, ns, start) {
			if r.Code == 403 {
				refused++
				if r.Verb != "list" || strings.Contains(r.RequestURI, "fieldSelector") {
					t.Errorf("refused: %s %s", r.Verb, r.RequestURI)
				}
			}
		}
		if refused != 1 {
			t.Errorf("%d refused requests, want the namespace's one LIST", refused)
		}
	})
}
