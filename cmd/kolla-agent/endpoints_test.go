package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kolla-agent/kolla-agent/internal/keystone"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

// catalog asks the real Keystone for the endpoints of the service named
// name, as interface -> URLs.
func catalog(t *testing.T, base, name string) map[string][]string {
	t.Helper()
	token, _ := keystoneToken(t, http.DefaultClient, base, projectScope)
	eps, err := keystone.Endpoints(http.DefaultClient, base, token, name)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, e := range eps {
		iface, rest, _ := strings.Cut(e, " ")
		out[iface] = append(out[iface], rest)
	}
	return out
}

// loadBalancerIP returns a function that writes the Service's LoadBalancer
// ingress IP through the status subresource, as a cloud controller would.
func loadBalancerIP(t *testing.T, svc *corev1.Service) func(ip string) {
	return func(ip string) {
		t.Helper()
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
		got, err := client().CoreV1().Services(svc.Namespace).UpdateStatus(ctxT(t), svc, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		*svc = *got
	}
}

// adminCredentials is the keystone-admin Secret's layout, mounted: one
// file per OS_* key, for the Keystone at url.
func adminCredentials(t *testing.T, url string) string {
	creds := t.TempDir()
	for k, v := range map[string]string{"OS_AUTH_URL": url + "/v3", "OS_USERNAME": keystone.AdminUser, "OS_PASSWORD": keystone.AdminPassword, "OS_PROJECT_NAME": keystone.AdminProject} {
		if err := os.WriteFile(filepath.Join(creds, k), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return creds
}

// Registration in the real Keystone: glance's public endpoint from its
// Service's LoadBalancer ingress, the internal one from its cluster name;
// a dry run changes nothing; the LoadBalancer's IP changes (written through
// the status subresource, as a cloud controller would) -> the public URL
// follows; a second run changes nothing; never a duplicate.
func TestEndpointsRegistration(t *testing.T) {
	inst, err := keystoneOnce()
	if err != nil {
		t.Fatalf("keystone: %v", err)
	}
	ks := inst.Start(t, 0)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(inst.LogFile)
			t.Logf("keystone log (end):\n%s", b[max(0, len(b)-4000):])
		}
	})
	if _, err := ks.WaitReady(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t)
	name := "glance-" + ns[len(ns)-5:] // the shared Keystone outlives the test
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "glance-api"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "glance"}, Ports: []corev1.ServicePort{{Name: "api", Port: 9292}}},
	}
	svc, err = client().CoreV1().Services(ns).Create(ctxT(t), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setLB := loadBalancerIP(t, svc)
	setLB("203.0.113.30")
	creds := adminCredentials(t, ks.URL)
	cfg := agentYAML(t, fmt.Sprintf(`namespace: %s
bootstrap:
  endpoints:
    credentials: %s
    type: image
    name: %s
    region: RegionOne
    public: {service: glance-api}
    internal: {service: glance-api}
`, ns, creds, name))
	env := exposureEnv(t, ns)
	internal := fmt.Sprintf("http://glance-api.%s.svc.%s:9292 RegionOne", ns, s.env.ClusterDomain)

	dry := startAgent(t, env, "--config", cfg, "endpoints", "--dry-run")
	dry.wantExit(0)
	if out := dry.out.String(); !strings.Contains(out, "would create public endpoint of "+name+" in RegionOne: http://203.0.113.30:9292") {
		t.Errorf("dry run:\n%s", out)
	}
	if got := catalog(t, ks.URL, name); len(got) != 0 {
		t.Fatalf("a dry run changed the catalog: %v", got)
	}

	// As the bootstrap's last step (no mode: the catalog alone).
	first := startAgent(t, env, "--config", cfg, "init")
	first.wantExit(0)
	got := catalog(t, ks.URL, name)
	if len(got["public"]) != 1 || got["public"][0] != "http://203.0.113.30:9292 RegionOne" || len(got["internal"]) != 1 || got["internal"][0] != internal {
		t.Fatalf("catalog %v, want one public http://203.0.113.30:9292 and one internal %s", got, internal)
	}

	setLB("203.0.113.31")
	moved := startAgent(t, env, "--config", cfg, "endpoints")
	moved.wantExit(0)
	if out := moved.out.String(); !strings.Contains(out, "update public endpoint of "+name+" in RegionOne: http://203.0.113.30:9292 -> http://203.0.113.31:9292") {
		t.Errorf("the moved LoadBalancer:\n%s", out)
	}
	got = catalog(t, ks.URL, name)
	if len(got["public"]) != 1 || got["public"][0] != "http://203.0.113.31:9292 RegionOne" || len(got["internal"]) != 1 {
		t.Fatalf("catalog after the move %v", got)
	}
	again := startAgent(t, env, "--config", cfg, "endpoints")
	again.wantExit(0)
	if out := again.out.String(); !strings.Contains(out, "the catalog is up to date") {
		t.Errorf("a second run changed something:\n%s", out)
	}

	// Beside the running service, the catalog follows the address: a new
	// LoadBalancer IP is in the catalog within seconds, with no restart.
	running := startAgent(t, env, "--config", cfg, "run", "--", "sleep", "300")
	running.waitLog("keystone catalog up to date")
	setLB("203.0.113.32")
	eventually(t, "the catalog following the new LoadBalancer IP", func() bool {
		got := catalog(t, ks.URL, name)
		return len(got["public"]) == 1 && got["public"][0] == "http://203.0.113.32:9292 RegionOne"
	})
	if got := catalog(t, ks.URL, name); len(got["internal"]) != 1 {
		t.Errorf("catalog %v", got)
	}
	running.cmd.Process.Signal(syscall.SIGTERM)
	running.wantExit(143)

	// Five replicas registering a new service at once: one service, one
	// endpoint per interface (the Lease lets one write at a time).
	name2 := name + "-b"
	cfg2 := agentYAML(t, strings.Replace(mustRead(t, cfg), "name: "+name, "name: "+name2, 1))
	var herd []*agentProc
	for i := range 5 {
		herd = append(herd, startAgent(t, withEnv(env, fmt.Sprintf("POD_NAME=glance-api-%d", i)), "--config", cfg2, "endpoints"))
	}
	for _, a := range herd {
		a.wantExit(0)
	}
	if got := catalog(t, ks.URL, name2); len(got["public"]) != 1 || len(got["internal"]) != 1 {
		t.Errorf("five replicas at once made %v, want one public and one internal endpoint", got)
	}

	// Bad input: a wrong password is a clear failure, exit 2.
	os.WriteFile(filepath.Join(creds, "OS_PASSWORD"), []byte("wrong"), 0o600)
	bad := startAgent(t, env, "--config", cfg, "endpoints")
	bad.wantExit(2)
	if out := bad.out.String(); !strings.Contains(out, "authenticating user admin") || !strings.Contains(out, "but got 401 instead") { // gophercloud's words for the answer's code
		t.Errorf("a wrong password:\n%s", out)
	}
	os.Remove(filepath.Join(creds, "OS_PASSWORD"))
	missing := startAgent(t, env, "--config", cfg, "endpoints")
	missing.wantExit(1)
	if out := missing.out.String(); !strings.Contains(out, "bootstrap.endpoints.credentials") || !strings.Contains(out, "OS_PASSWORD") {
		t.Errorf("a Secret without OS_PASSWORD:\n%s", out)
	}
}

// Keystone SIGKILLed while the agent follows the exposure beside the
// service: a LoadBalancer IP that moves during the outage is not lost. The
// duty reports the failure and retries, the service keeps running, and once
// Keystone is back on its port the catalog holds the new URL, once. A
// one-shot `kolla-agent endpoints` during the outage fails with exit 2,
// naming Keystone's URL.
func TestEndpointsSurviveKeystoneOutage(t *testing.T) {
	inst, err := keystoneOnce()
	if err != nil {
		t.Fatalf("keystone: %v", err)
	}
	ks := inst.Start(t, 0)
	if _, err := ks.WaitReady(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t)
	name := "glance-" + ns[len(ns)-5:]
	svc := mkExposedService(t, ns, "glance-api", corev1.ServiceTypeLoadBalancer, nil)
	setLB := loadBalancerIP(t, svc)
	setLB("203.0.113.40")
	creds := adminCredentials(t, ks.URL)
	cfg := agentYAML(t, fmt.Sprintf(`namespace: %s
bootstrap:
  endpoints:
    credentials: %s
    type: image
    name: %s
    public: {service: glance-api}
`, ns, creds, name))
	env := exposureEnv(t, ns)
	running := startAgent(t, env, "--config", cfg, "run", "--", "sleep", "300")
	running.waitLog("keystone catalog up to date")
	public := func() []string { return catalog(t, ks.URL, name)["public"] }
	if got := public(); len(got) != 1 || !strings.HasPrefix(got[0], "http://203.0.113.40:5000 ") {
		t.Fatalf("catalog before the outage: %v", got)
	}

	if err := ks.SignalGroup(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	setLB("203.0.113.41")
	running.waitLog(`duty=endpoints`)
	once := startAgent(t, env, "--config", cfg, "endpoints")
	once.wantExit(2)
	if out := once.out.String(); !strings.Contains(out, ks.URL) || !strings.Contains(out, "connection refused") {
		t.Errorf("endpoints with Keystone down:\n%s", out)
	}

	again := inst.Start(t, ks.Port)
	if _, err := again.WaitReady(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the catalog following the IP that moved during the outage", func() bool {
		got := public()
		return len(got) == 1 && strings.HasPrefix(got[0], "http://203.0.113.41:5000 ")
	})
	running.running()
	if out := running.out.String(); strings.Contains(out, "panic") {
		t.Errorf("the agent panicked:\n%s", out)
	}
	running.cmd.Process.Signal(syscall.SIGTERM)
	running.wantExit(143)
}

// keystone-manage bootstrap with the URLs the cluster gives: in lease mode
// the command is a template, so --bootstrap-public-url comes from the
// NodePort the real API server allocated (on a node's address) and
// --bootstrap-internal-url from the Service's cluster name. The real
// keystone-manage db_sync and bootstrap write them into the catalog.
func TestKeystoneBootstrapDiscoveredURLs(t *testing.T) {
	ns := namespace(t)
	conf, db, ksEnv := freshKeystoneDB(t)
	if err := s.env.Kubelet().EnsureNode(ctxT(t), testenv.DefaultNode); err != nil {
		t.Fatal(err)
	}
	svc := mkExposedService(t, ns, "keystone", corev1.ServiceTypeNodePort, nil)
	nodePort := svc.Spec.Ports[0].NodePort
	mkPod(t, ns, "keystone-0", nil, "keystone")
	manage := "/usr/bin/keystone-manage --config-file " + conf
	command := fmt.Sprintf(`bash -c '%s db_sync && %s bootstrap --bootstrap-password %s --bootstrap-username admin --bootstrap-project-name admin --bootstrap-region-id RegionOne --bootstrap-public-url {{ publicURL "keystone" "/v3" }} --bootstrap-internal-url {{ internalURL "keystone" "/v3" }}'`,
		manage, manage, keystone.AdminPassword)
	cfg := agentYAML(t, fmt.Sprintf("namespace: %s\nbootstrap:\n  mode: lease\n  name: keystone-bootstrap\n  command: %q\n  timeout: 3m\n", ns, command))
	env := withEnv(agentEnvWith(t, ns, []string{"examples/rbac/bootstrap-lease.yaml", "examples/rbac/exposure.yaml"}), ksEnv...)
	a := startAgent(t, withEnv(env, "POD_NAME=keystone-0"), "--config", cfg, "init")
	a.wantExit(0)
	out, err := exec.Command("/usr/bin/python3", "-c",
		"import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); [print(i, u) for i, u in c.execute('select interface, url from endpoint order by interface')]", db).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	internal := fmt.Sprintf("internal http://keystone.%s.svc.%s:5000/v3", ns, s.env.ClusterDomain)
	if len(lines) != 2 || lines[0] != internal || !strings.HasPrefix(lines[1], "public http://") || !strings.HasSuffix(lines[1], fmt.Sprintf(":%d/v3", nodePort)) {
		t.Errorf("keystone's catalog:\n%s\nwant %q and public http://NODE:%d/v3", out, internal, nodePort)
	}
}
