// Command cluster is the driver of `make demo-cluster` (examples/demo/cluster.sh
// starts the control plane and runs it): the keystone example on the local
// control plane of hack/testenv (a real kube-apiserver, etcd,
// kube-controller-manager and CoreDNS on loopback), narrated step by step.
//
// There is no container runtime: this program stands in for the scheduler
// and the kubelet (internal/testenv's Kubelet). It binds the Deployment's
// pods to a node, runs each container's command on this machine (the
// agent's, with the environment the downward API would give, a
// ServiceAccount token of examples/rbac, and a directory standing in for the
// pod's filesystem), reports the pods' status, and probes the agent's
// readiness endpoint as the kubelet would. Everything else is the real
// thing: the Deployment and ReplicaSet controllers make the pods, the Job
// controller completes the Jobs, the EndpointSlice controller publishes the
// ready pods, CoreDNS serves the Services, and keystone (Debian's, under
// uWSGI) serves /v3.
//
// Usage: cluster TESTENV_DIR WORK_DIR KOLLA_AGENT_BINARY
package main

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/kolla-agent/kolla-agent/bootstrap"
	procfs "github.com/kolla-agent/kolla-agent/internal/proc"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

// The files of the ConfigMap keystone, and what the chart applies.
var (
	//go:embed chart.yaml
	chartYAML string
	//go:embed agent.yaml.in
	agentYAML string
	//go:embed db-sync-job.yaml
	dbSyncJobYAML string
	//go:embed config.json
	configJSON string
	//go:embed keystone.conf
	keystoneConf string
	//go:embed keystone-uwsgi.ini.tmpl
	uwsgiTmpl string
)

const (
	ns        = "openstack"
	container = "keystone-api"
	apiPort   = 18600 // keystone, on each pod's loopback address
	probePort = 18695 // the agent's probe server, likewise
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: cluster TESTENV_DIR WORK_DIR KOLLA_AGENT_BINARY")
		os.Exit(1)
	}
	d := &demo{work: os.Args[2], bin: os.Args[3]}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	err := d.run(ctx, os.Args[1])
	cancel()
	stop()
	d.cleanup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "\ndemo-cluster failed:", err)
		os.Exit(1)
	}
}

type demo struct {
	work, bin string
	env       *testenv.Env
	client    kubernetes.Interface
	kubelet   *testenv.Kubelet
	agentKC   string // the kolla-agent ServiceAccount's kubeconfig
	shared    string // the volumes the pods share (database, keys)

	mu     sync.Mutex // serialises output
	procs  []*proc
	pgids  *os.File // uWSGI process groups, for cluster.sh's cleanup
	began  time.Time
	prober sync.WaitGroup
}

// pod is one keystone-api pod as the stand-in kubelet runs it.
type pod struct {
	name, short string
	ip          string // in the API (status.podIP)
	listen      string // the loopback address its processes listen on
	root        string // its filesystem
	obj         *corev1.Pod
}

func (d *demo) run(ctx context.Context, testenvDir string) error {
	d.began = time.Now()
	var err error
	if d.env, err = testenv.Open(testenvDir); err != nil {
		return err
	}
	if err := d.env.Healthy(ctx); err != nil {
		return err
	}
	d.client = d.env.Client()
	d.kubelet = d.env.Kubelet()
	d.shared = filepath.Join(d.work, "shared")
	if d.pgids, err = os.Create(filepath.Join(d.work, "pgids")); err != nil {
		return err
	}

	// ---- 2. namespace, RBAC, token -------------------------------------
	d.say("2. The namespace openstack, the agent's ServiceAccount and RBAC from examples/rbac/, a token from the TokenRequest API")
	if _, err := d.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	manifests := []string{"examples/rbac/bootstrap-create.yaml", "examples/rbac/bootstrap-condition.yaml"}
	if d.agentKC, err = d.env.AgentKubeconfigWith(ctx, ns, manifests); err != nil {
		return err
	}
	d.out("applied %s, %s and %s: ServiceAccount kolla-agent, Roles kolla-agent, kolla-agent-bootstrap-create and -condition (podCondition)", testenv.RBACManifest, manifests[0], manifests[1])
	d.out("the agents authenticate as %s (kubeconfig %s)", testenv.AgentUser(ns), d.agentKC)
	if err := d.canI(ctx); err != nil {
		return err
	}

	// ---- 3. the chart ----------------------------------------------------
	d.say("3. The chart: Services mariadb and keystone-api, mariadb's pod, the key-setup Job (a Helm hook), the ConfigMap keystone, the Deployment keystone-api (2 replicas)")
	if err := d.prepareShared(); err != nil {
		return err
	}
	if err := d.applyChart(ctx); err != nil {
		return err
	}
	pods, err := d.waitDeploymentPods(ctx, 2)
	if err != nil {
		return err
	}
	d.out("the ReplicaSet controller made the pods; the stand-in scheduler binds them to node %s:", testenv.DefaultNode)
	for i, p := range pods {
		p.short = fmt.Sprintf("api-%d", i+1)
		p.ip = fmt.Sprintf("10.244.0.%d", 11+i)
		p.listen = fmt.Sprintf("127.0.0.%d", 11+i)
		p.root = filepath.Join(d.work, "pods", p.name)
		if err := d.kubelet.BindPod(ctx, ns, p.name, testenv.DefaultNode); err != nil {
			return err
		}
		if err := d.writePodFiles(p); err != nil {
			return err
		}
		d.out("  %s (%s): pod IP %s; here its processes listen on %s, its files are under %s", p.name, p.short, p.ip, p.listen, p.root)
	}

	// ---- 4. init containers wait -------------------------------------------
	d.say("4. The init containers start: `kolla-agent init` waits for service:mariadb and job:keystone-fernet-setup (one watch each, no polling)")
	initStart := time.Now()
	inits := make([]*proc, len(pods))
	for i, p := range pods {
		if inits[i], err = d.startContainer(ctx, p, p.obj.Spec.InitContainers[0]); err != nil {
			return err
		}
	}
	for _, a := range inits {
		if err := a.waitOutput(ctx, "waiting for dependencies"); err != nil {
			return err
		}
	}
	time.Sleep(1500 * time.Millisecond)
	d.out("meanwhile, the Job keystone-fernet-setup and mariadb-0 as the API has them:")
	if err := d.showJob(ctx, "keystone-fernet-setup"); err != nil {
		return err
	}
	if err := d.showPod(ctx, "mariadb-0"); err != nil {
		return err
	}

	// ---- 5. mariadb ready ----------------------------------------------------
	d.say("5. mariadb-0 is ready (the stand-in kubelet says so): the EndpointSlice controller publishes it, the agents see it at once")
	if err := d.kubelet.SetPodRunning(ctx, ns, "mariadb-0", "10.244.0.5", true); err != nil {
		return err
	}
	for _, a := range inits {
		if err := a.waitOutput(ctx, "dependency=service:mariadb state=ready"); err != nil {
			return err
		}
	}
	if err := d.showSlices(ctx, "mariadb"); err != nil {
		return err
	}

	// ---- 6. key setup Job ----------------------------------------------------
	d.say("6. The key-setup Job's pod runs (the stand-in kubelet runs its command here: keystone-manage fernet_setup, credential_setup); once the Job is Complete the init containers go on to the bootstrap")
	if err := d.runJobPod(ctx, "keystone-fernet-setup"); err != nil {
		return err
	}
	for _, a := range inits {
		if err := a.waitOutput(ctx, "dependency=job:keystone-fernet-setup state=ready"); err != nil {
			return err
		}
	}

	// ---- 7. the bootstrap Job -------------------------------------------------
	d.say("7. The bootstrap, create mode: both replicas tried to create the content-named db_sync Job; one got 201, the other 409; both watch it")
	jobName, err := d.waitBootstrapJob(ctx)
	if err != nil {
		return err
	}
	for _, a := range inits {
		if err := a.waitOutput(ctx, "waiting for job "+jobName); err != nil {
			return err
		}
	}
	if err := d.showBootstrapJob(ctx, jobName); err != nil {
		return err
	}
	if err := d.showCreates(ctx, initStart); err != nil {
		return err
	}
	d.say("8. The db_sync Job's pod runs (`kolla-agent bootstrap -- keystone-manage db_sync`, here on an empty SQLite database); the Job controller writes Complete")
	if err := d.runJobPod(ctx, jobName); err != nil {
		return err
	}
	succeeded := time.Now()
	if err := d.waitJobComplete(ctx, jobName); err != nil {
		return err
	}
	d.out("the Job controller wrote Complete %v after the pod's Succeeded (seen by a 20 ms poll)", time.Since(succeeded).Round(10*time.Millisecond))
	for _, a := range inits {
		code, err := a.wait(ctx, 30*time.Second)
		if err != nil {
			return err
		}
		d.out("%s: init container exited %d, %v after the pod's Succeeded", a.name, code, a.exited.Sub(succeeded).Round(time.Millisecond))
		if code != 0 {
			return fmt.Errorf("%s exited %d", a.name, code)
		}
	}
	if err := d.showRecord(ctx); err != nil {
		return err
	}
	if err := d.showRequests(ctx, initStart); err != nil {
		return err
	}

	// ---- 9. the service ---------------------------------------------------------
	d.say("9. The keystone-api containers start: `kolla-agent run` (the bootstrap is recorded: one GET) renders, runs uWSGI, serves probes")
	glance, err := d.startWait(ctx)
	if err != nil {
		return err
	}
	runs := make([]*proc, len(pods))
	for i, p := range pods {
		if err := d.kubelet.SetPodRunning(ctx, ns, p.name, p.ip, false); err != nil {
			return err
		}
		if p.obj, err = d.client.CoreV1().Pods(ns).Get(ctx, p.name, metav1.GetOptions{}); err != nil {
			return err
		}
		if runs[i], err = d.startContainer(ctx, p, p.obj.Spec.Containers[0]); err != nil {
			return err
		}
		d.probe(ctx, p, runs[i])
	}
	if err := d.showSlices(ctx, "keystone-api"); err != nil {
		return err
	}
	for _, p := range pods {
		if err := d.waitEndpointReady(ctx, "keystone-api", p.ip, true); err != nil {
			return err
		}
	}

	d.say("10. Ready: the kubelet's probes pass, the EndpointSlice controller marks both endpoints ready, and a waiting client proceeds")
	if err := d.showSlices(ctx, "keystone-api"); err != nil {
		return err
	}
	if err := d.showPod(ctx, pods[0].name); err != nil {
		return err
	}
	p := pods[0]
	d.out("$ curl http://%s:%d/readyz?verbose   (%s's agent, as the kubelet's httpGet probe)", p.listen, probePort, p.short)
	if body, err := get(fmt.Sprintf("http://%s:%d/readyz?verbose", p.listen, probePort)); err == nil {
		d.block(body)
	}
	d.out("$ kolla-agent probe readiness --verbose   (the same over the agent's Unix socket, as an exec probe)")
	out, _ := exec.CommandContext(ctx, d.bin, "probe", "readiness", "--verbose", "--socket", filepath.Join(p.root, "run/kolla-agent/agent.sock")).CombinedOutput()
	d.block(string(out))
	d.out("$ curl http://%s:%d/v3   (keystone itself)", p.listen, apiPort)
	if body, err := get(fmt.Sprintf("http://%s:%d/v3", p.listen, apiPort)); err == nil {
		d.block(body)
	}
	code, err := glance.wait(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	d.out("the glance-like init container (`kolla-agent wait service:keystone-api dns:keystone-api`) exited %d", code)
	if code != 0 {
		return fmt.Errorf("wait exited %d", code)
	}

	// ---- 11. stop ---------------------------------------------------------------
	d.say("11. kubectl scale deployment keystone-api --replicas=0: the ReplicaSet controller deletes the pods; the stand-in kubelet sends SIGTERM")
	scale, err := d.client.AppsV1().Deployments(ns).GetScale(ctx, "keystone-api", metav1.GetOptions{})
	if err != nil {
		return err
	}
	scale.Spec.Replicas = 0
	if _, err := d.client.AppsV1().Deployments(ns).UpdateScale(ctx, "keystone-api", scale, metav1.UpdateOptions{}); err != nil {
		return err
	}
	for _, p := range pods {
		if err := d.waitEndpoint(ctx, "keystone-api", p.ip, "terminating", func(c discoveryv1.EndpointConditions) bool { return deref(c.Terminating) }); err != nil {
			return err
		}
	}
	d.out("the pods are Terminating; their endpoints too, still serving until readiness fails:")
	if err := d.showSlices(ctx, "keystone-api"); err != nil {
		return err
	}
	for _, r := range runs {
		r.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range pods {
		if err := d.waitEndpoint(ctx, "keystone-api", p.ip, "not serving", func(c discoveryv1.EndpointConditions) bool { return !deref(c.Serving) }); err != nil {
			return err
		}
	}
	if err := d.showSlices(ctx, "keystone-api"); err != nil {
		return err
	}
	for i, r := range runs {
		code, err := r.wait(ctx, 45*time.Second)
		if err != nil {
			return err
		}
		d.out("%s: exit code %d (uWSGI's); the stand-in kubelet removes pod %s", r.name, code, pods[i].name)
		if code != 0 {
			return fmt.Errorf("%s exited %d", r.name, code)
		}
		// What the kubelet does once the containers have stopped.
		if err := d.client.CoreV1().Pods(ns).Delete(ctx, pods[i].name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			return err
		}
	}
	if err := d.waitNoEndpoints(ctx, "keystone-api"); err != nil {
		return err
	}
	if err := d.showSlices(ctx, "keystone-api"); err != nil {
		return err
	}
	d.prober.Wait()
	d.say(fmt.Sprintf("Done in %v: init, bootstrap Job, probes and endpoints, with kolla-agent against a real control plane.", time.Since(d.began).Round(100*time.Millisecond)))
	return nil
}

// ---- output ----------------------------------------------------------------

func (d *demo) say(s string) {
	time.Sleep(300 * time.Millisecond) // the agents' lines of the step before first
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Printf("\n\033[1m== %s\033[0m\n", s)
}

func (d *demo) out(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Printf("  "+format+"\n", args...)
}

func (d *demo) block(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		fmt.Printf("    %s\n", l)
	}
}

// logLine shortens the agent's text log lines for the narration:
// time=2026-...T12:00:00.123Z level=INFO msg="..." k=v -> 12:00:00.123 INFO ... k=v
var logLine = regexp.MustCompile(`^time=\S+T(\d\d:\d\d:\d\d\.\d+)Z level=(\w+) msg=("(?:[^"\\]|\\.)*"|\S+)(.*)$`)

func shorten(l string) string {
	m := logLine.FindStringSubmatch(l)
	if m == nil {
		return l
	}
	msg := m[3]
	if u, err := strconv.Unquote(msg); err == nil {
		msg = u
	}
	return m[1] + " " + m[2] + " " + msg + m[4]
}

// ---- the agents as containers ---------------------------------------------

// proc is a container's command the stand-in kubelet runs.
type proc struct {
	d      *demo
	name   string
	cmd    *exec.Cmd
	mu     sync.Mutex
	output strings.Builder
	done   chan struct{}
	code   int
	exited time.Time
}

// startContainer runs a container of p on this machine: its command with
// the agent binary for "kolla-agent" and --root for the pod's filesystem,
// the environment the pod spec and the downward API give it, and what a
// pod's ServiceAccount mount and resolv.conf give it (here a kubeconfig
// with the ServiceAccount's token, the cluster's DNS server and domain).
func (d *demo) startContainer(ctx context.Context, p *pod, c corev1.Container) (*proc, error) {
	if len(c.Command) == 0 || c.Command[0] != "kolla-agent" {
		return nil, fmt.Errorf("container %s: the stand-in runs kolla-agent only, not %q", c.Name, c.Command)
	}
	argv := append([]string{d.bin, "--root", p.root}, c.Command[1:]...)
	env := []string{
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1",
		"KUBECONFIG=" + d.agentKC,
		"KOLLA_AGENT_DNS_SERVER=" + d.env.DNSAddr,
		"CLUSTER_DOMAIN=" + d.env.ClusterDomain,
		"CONTAINER_NAME=" + c.Name,
		"DEMO_ROOT=" + p.root, "DEMO_LISTEN=" + p.listen,
	}
	for _, e := range c.Env {
		v := e.Value
		if f := e.ValueFrom; f != nil && f.FieldRef != nil {
			switch f.FieldRef.FieldPath {
			case "metadata.name":
				v = p.name
			case "metadata.namespace":
				v = ns
			case "status.podIP":
				v = p.ip
			default:
				return nil, fmt.Errorf("container %s: fieldRef %s: not in the stand-in", c.Name, f.FieldRef.FieldPath)
			}
		}
		env = append(env, e.Name+"="+v)
	}
	return d.start(ctx, p.short+" "+c.Name, argv, env, p.root, c.Name == container)
}

// start runs argv and streams its output, shortened, with a prefix.
func (d *demo) start(ctx context.Context, name string, argv, env []string, dir string, service bool) (*proc, error) {
	a := &proc{d: d, name: name, done: make(chan struct{})}
	a.cmd = exec.Command(argv[0], argv[1:]...)
	a.cmd.Env = env
	a.cmd.Dir = dir
	// The agent dies with this program; cluster.sh kills what it started.
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r, w := io.Pipe()
	a.cmd.Stdout, a.cmd.Stderr = w, w
	if err := a.cmd.Start(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.procs = append(d.procs, a)
	d.mu.Unlock()
	shown := 0
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			l := sc.Text()
			a.mu.Lock()
			a.output.WriteString(l + "\n")
			a.mu.Unlock()
			if skip(l) {
				continue
			}
			shown++
			d.mu.Lock()
			fmt.Printf("    [%s] %s\n", name, shorten(l))
			d.mu.Unlock()
		}
	}()
	go func() {
		err := a.cmd.Wait()
		w.Close()
		a.exited = time.Now()
		a.code = exitCode(err)
		close(a.done)
	}()
	if service {
		// uWSGI's process group, for the cleanup should this program die.
		go func() {
			for range 100 {
				if cs := procfs.Children(a.cmd.Process.Pid); len(cs) > 0 {
					fmt.Fprintln(d.pgids, cs[0])
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	return a, nil
}

// skip leaves out lines that say nothing new in the narration.
func skip(l string) bool {
	for _, s := range []string{`msg="check state changed" check=uwsgi`, `msg="serving probes"`, "msg=\"kolla: created directory\"", "msg=\"kolla: wrote\""} {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return -1
}

func (a *proc) waitOutput(ctx context.Context, s string) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		a.mu.Lock()
		ok := strings.Contains(a.output.String(), s)
		a.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-a.done:
			return fmt.Errorf("%s exited %d before saying %q", a.name, a.code, s)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not say %q", a.name, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (a *proc) wait(ctx context.Context, within time.Duration) (int, error) {
	select {
	case <-a.done:
		return a.code, nil
	case <-ctx.Done():
		return -1, ctx.Err()
	case <-time.After(within):
		return -1, fmt.Errorf("%s still running after %v", a.name, within)
	}
}

// cleanup stops every process still running: SIGTERM, then SIGKILL to it
// and its children's process groups (uWSGI).
func (d *demo) cleanup() {
	d.mu.Lock()
	procs := slices.Clone(d.procs)
	d.mu.Unlock()
	for _, a := range procs {
		select {
		case <-a.done:
		default:
			a.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, a := range procs {
		select {
		case <-a.done:
		case <-time.After(15 * time.Second):
			for _, c := range procfs.Children(a.cmd.Process.Pid) {
				syscall.Kill(-c, syscall.SIGKILL)
			}
			a.cmd.Process.Kill()
			<-a.done
		}
	}
	if d.pgids != nil {
		d.pgids.Close()
	}
}

// ---- the stand-in kubelet's probes ------------------------------------------

// probe does what the kubelet's readinessProbe (httpGet /readyz on the
// probes port, every second) does, and reports the result in the
// container's status, from which the pod's Ready condition follows.
func (d *demo) probe(ctx context.Context, p *pod, a *proc) {
	d.prober.Add(1)
	go func() {
		defer d.prober.Done()
		url := fmt.Sprintf("http://%s:%d/readyz", p.listen, probePort)
		ready := false
		for {
			select {
			case <-a.done:
				return
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			code := 0
			if resp, err := httpClient.Get(url); err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			}
			if now := code == 200; now != ready {
				ready = now
				d.out("kubelet: %s's readiness probe answers %d: container %s ready=%v", p.short, code, container, ready)
				if err := d.kubelet.SetContainerReady(ctx, ns, p.name, container, ready); err != nil && ctx.Err() == nil {
					d.out("kubelet: %v", err)
				}
			}
		}
	}()
}

var httpClient = &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

func get(url string) (string, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return fmt.Sprintf("HTTP %d\n%s", resp.StatusCode, b), err
}

// ---- the chart, the pods' files -----------------------------------------------

func (d *demo) fill(s string) string {
	u, _ := user.Current()
	g, _ := user.LookupGroupId(u.Gid)
	return strings.NewReplacer("@SHARED@", d.shared, "@USER@", u.Username, "@GROUP@", g.Name).Replace(s)
}

// prepareShared makes the directories the pods share: the database's and
// the key repositories (Secrets, in a cluster).
func (d *demo) prepareShared() error {
	for _, dir := range []string{"fernet-keys", "credential-keys", "keystone.conf.d", "domains"} {
		if err := os.MkdirAll(filepath.Join(d.shared, dir), 0o750); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(d.shared, "keystone.conf"), []byte(d.fill(keystoneConf)), 0o644)
}

func (d *demo) configMap() map[string]string {
	return map[string]string{
		"agent.yaml":              agentYAML,
		"config.json":             configJSON,
		"db-sync-job.yaml":        dbSyncJobYAML,
		"keystone.conf":           d.fill(keystoneConf),
		"keystone-uwsgi.ini.tmpl": uwsgiTmpl,
	}
}

func (d *demo) applyChart(ctx context.Context) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "keystone"}, Data: d.configMap()}
	if _, err := d.client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return err
	}
	d.out("configmap/keystone created: %s", strings.Join(slices.Sorted(maps.Keys(cm.Data)), ", "))
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(d.fill(chartYAML))))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return err
		}
		var name string
		switch tm.Kind {
		case "Service":
			var o corev1.Service
			if err = yaml.UnmarshalStrict(doc, &o); err == nil {
				_, err = d.client.CoreV1().Services(ns).Create(ctx, &o, metav1.CreateOptions{})
				name = o.Name
			}
		case "Pod":
			var o corev1.Pod
			if err = yaml.UnmarshalStrict(doc, &o); err == nil {
				_, err = d.client.CoreV1().Pods(ns).Create(ctx, &o, metav1.CreateOptions{})
				name = o.Name
			}
		case "Job":
			var o batchv1.Job
			if err = yaml.UnmarshalStrict(doc, &o); err == nil {
				_, err = d.client.BatchV1().Jobs(ns).Create(ctx, &o, metav1.CreateOptions{})
				name = o.Name
			}
		case "Deployment":
			var o appsv1.Deployment
			if err = yaml.UnmarshalStrict(doc, &o); err == nil {
				_, err = d.client.AppsV1().Deployments(ns).Create(ctx, &o, metav1.CreateOptions{})
				name = o.Name
			}
		default:
			err = fmt.Errorf("chart.yaml: unexpected kind %q", tm.Kind)
		}
		if err != nil {
			return fmt.Errorf("chart.yaml: %s %s: %w", tm.Kind, name, err)
		}
		d.out("%s/%s created", strings.ToLower(tm.Kind), name)
	}
}

func (d *demo) waitDeploymentPods(ctx context.Context, n int) ([]*pod, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		l, err := d.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "application=keystone,component=api"})
		if err != nil {
			return nil, err
		}
		if len(l.Items) >= n {
			slices.SortFunc(l.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
			var out []*pod
			for i := range l.Items[:n] {
				out = append(out, &pod{name: l.Items[i].Name, obj: &l.Items[i]})
			}
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the Deployment has %d of %d pods after a minute", len(l.Items), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writePodFiles lays out a pod's filesystem: the ConfigMap volumes as the
// kubelet writes them (..data and symlinks), passwd and group for kolla's
// owners, and resolv.conf as a pod in the namespace has it.
func (d *demo) writePodFiles(p *pod) error {
	files := map[string]string{
		"etc/passwd":      fmt.Sprintf("root:x:0:0:root:/root:/bin/sh\nkeystone:x:%d:%d::/var/lib/keystone:/bin/sh\n", os.Getuid(), os.Getgid()),
		"etc/group":       fmt.Sprintf("root:x:0:\nkeystone:x:%d:\n", os.Getgid()),
		"etc/resolv.conf": fmt.Sprintf("search %s.svc.%s svc.%s %s\nnameserver 10.96.0.10\noptions ndots:5\n", ns, d.env.ClusterDomain, d.env.ClusterDomain, d.env.ClusterDomain),
	}
	for f, content := range files {
		if err := writeFile(filepath.Join(p.root, f), content); err != nil {
			return err
		}
	}
	cm := d.configMap()
	strtr := strings.NewReplacer("@LISTEN@", p.listen, "@ROOT@", p.root, "@SHARED@", d.shared)
	cm["agent.yaml"] = strtr.Replace(cm["agent.yaml"])
	if err := volume(filepath.Join(p.root, "var/lib/kolla/config_files"), cm); err != nil {
		return err
	}
	if err := volume(filepath.Join(p.root, "etc/kolla-agent"), map[string]string{"agent.yaml": cm["agent.yaml"]}); err != nil {
		return err
	}
	return os.MkdirAll(filepath.Join(p.root, "run/kolla-agent"), 0o755)
}

// volume writes files as the kubelet's AtomicWriter lays out a ConfigMap
// volume: a timestamped directory, ..data pointing to it, a symlink per key.
func volume(dir string, files map[string]string) error {
	ts := "..2026_01_01_00_00_00.000000001"
	for name, content := range files {
		if err := writeFile(filepath.Join(dir, ts, name), content); err != nil {
			return err
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return os.Symlink(ts, filepath.Join(dir, "..data"))
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

// ---- Jobs ---------------------------------------------------------------------

// runJobPod stands in for the kubelet running a Job's pod: its container's
// command (`kolla-agent bootstrap -- ...`) runs here with the container's
// env, and the pod is reported Succeeded or Failed with its exit code.
func (d *demo) runJobPod(ctx context.Context, job string) error {
	var output string
	pod, code, err := d.kubelet.RunJobPod(ctx, ns, job, func(ctx context.Context, p *corev1.Pod) int32 {
		c := p.Spec.Containers[0]
		argv := slices.Clone(c.Command)
		if argv[0] == "kolla-agent" {
			argv[0] = d.bin
		}
		d.out("kubelet: pod %s, container %s: %s", p.Name, c.Name, strings.Join(c.Command[:4], " ")+" ...")
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + d.shared, "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"}
		for _, e := range c.Env {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
		cmd.Dir = d.shared
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		out, err := cmd.CombinedOutput()
		output = string(out)
		return int32(exitCode(err))
	})
	if err != nil {
		return err
	}
	d.block(excerpt(output, 4, 4))
	d.out("kubelet: pod %s terminated with exit code %d: %s", pod.Name, code, map[bool]string{true: "Succeeded", false: "Failed"}[code == 0])
	if code != 0 {
		return fmt.Errorf("job %s: its command exited %d", job, code)
	}
	return nil
}

// excerpt is the first and last lines of a command's output, the agent's
// log lines shortened, without terminal colours and without the harmless
// traceback keystone-manage's eventlet prints at interpreter exit.
func excerpt(s string, first, last int) string {
	s = ansi.ReplaceAllString(eventletNoise.ReplaceAllString(s, ""), "")
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		l = shorten(l)
		if len(l) > 170 {
			l = l[:167] + "..."
		}
		lines = append(lines, l)
	}
	if len(lines) > first+last+2 {
		lines = append(append(lines[:first:first], fmt.Sprintf("... (%d lines)", len(lines)-first-last)), lines[len(lines)-last:]...)
	}
	return strings.Join(lines, "\n")
}

var (
	eventletNoise = regexp.MustCompile(`(?m)^Exception ignored in: <function _removeHandlerRef[^\n]*\n(?:[ T][^\n]*\n)*?AttributeError: [^\n]*getcurrent[^\n]*\n?`)
	ansi          = regexp.MustCompile(`\x1b\[[0-9;]*m`)
)

func (d *demo) waitBootstrapJob(ctx context.Context) (string, error) {
	deadline := time.Now().Add(90 * time.Second)
	for {
		l, err := d.client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: bootstrap.LabelName + "=keystone-db-sync"})
		if err != nil {
			return "", err
		}
		if len(l.Items) > 0 {
			return l.Items[0].Name, nil
		}
		if time.Now().After(deadline) {
			return "", errors.New("no bootstrap Job after 90s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *demo) waitJobComplete(ctx context.Context, name string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		j, err := d.client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				d.out("job/%s: condition Complete (succeeded %d), written by the Job controller", name, j.Status.Succeeded)
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("job %s not Complete after 60s", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---- showing the API's side ------------------------------------------------

func (d *demo) showJob(ctx context.Context, name string) error {
	j, err := d.client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var conds []string
	for _, c := range j.Status.Conditions {
		conds = append(conds, string(c.Type)+"="+string(c.Status))
	}
	d.out("job/%s: active %d, succeeded %d, failed %d, conditions [%s]", name, j.Status.Active, j.Status.Succeeded, j.Status.Failed, strings.Join(conds, " "))
	return nil
}

func (d *demo) showPod(ctx context.Context, name string) error {
	p, err := d.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var conds []string
	for _, c := range p.Status.Conditions {
		conds = append(conds, string(c.Type)+"="+string(c.Status))
	}
	node := p.Spec.NodeName
	if node == "" {
		node = "(unscheduled)"
	}
	d.out("pod/%s: phase %s, node %s, IP %s, conditions [%s]", name, p.Status.Phase, node, orNone(p.Status.PodIP), strings.Join(conds, " "))
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func (d *demo) showSlices(ctx context.Context, svc string) error {
	l, err := d.client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return err
	}
	for _, s := range l.Items {
		var ports []string
		for _, p := range s.Ports {
			ports = append(ports, fmt.Sprintf("%s/%d", deref(p.Name), deref(p.Port)))
		}
		if len(ports) == 0 {
			ports = []string{"-"}
		}
		d.out("endpointslice/%s (service %s, ports %s):", s.Name, svc, strings.Join(ports, ","))
		if len(s.Endpoints) == 0 {
			d.out("  (no endpoints)")
		}
		for _, e := range s.Endpoints {
			target := ""
			if e.TargetRef != nil {
				target = e.TargetRef.Kind + "/" + e.TargetRef.Name
			}
			d.out("  %-12s %-32s ready=%v serving=%v terminating=%v", strings.Join(e.Addresses, ","), target,
				deref(e.Conditions.Ready), deref(e.Conditions.Serving), deref(e.Conditions.Terminating))
		}
	}
	return nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func (d *demo) waitEndpointReady(ctx context.Context, svc, ip string, want bool) error {
	return d.waitEndpoint(ctx, svc, ip, fmt.Sprintf("ready=%v", want), func(c discoveryv1.EndpointConditions) bool { return deref(c.Ready) == want })
}

// waitEndpoint waits until svc's EndpointSlices have an endpoint for ip
// whose conditions satisfy ok.
func (d *demo) waitEndpoint(ctx context.Context, svc, ip, what string, ok func(discoveryv1.EndpointConditions) bool) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		l, err := d.client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
		if err != nil {
			return err
		}
		for _, s := range l.Items {
			for _, e := range s.Endpoints {
				if slices.Contains(e.Addresses, ip) && ok(e.Conditions) {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("endpoint %s of %s not %s after 60s", ip, svc, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *demo) waitNoEndpoints(ctx context.Context, svc string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		l, err := d.client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
		if err != nil {
			return err
		}
		n := 0
		for _, s := range l.Items {
			n += len(s.Endpoints)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still has %d endpoints after 60s", svc, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *demo) showBootstrapJob(ctx context.Context, name string) error {
	j, err := d.client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var labels []string
	for k, v := range j.Labels {
		if strings.HasPrefix(k, "kolla.openstack.org/") {
			labels = append(labels, k+"="+v)
		}
	}
	slices.Sort(labels)
	c := j.Spec.Template.Spec.Containers[0]
	d.out("job/%s, created by %s:", name, j.Annotations["kolla.openstack.org/created-by"])
	d.out("  labels: %s", strings.Join(labels, " "))
	d.out("  command: %q", c.Command)
	d.out("  backoffLimit %d, restartPolicy %s, podFailurePolicy rules %d, ttlSecondsAfterFinished %d",
		deref(j.Spec.BackoffLimit), j.Spec.Template.Spec.RestartPolicy, len(deref(j.Spec.PodFailurePolicy).Rules), deref(j.Spec.TTLSecondsAfterFinished))
	return nil
}

// showCreates counts the agents' Job creations in the API server's audit
// log by response code: 201 for the first, 409 AlreadyExists for the other.
func (d *demo) showCreates(ctx context.Context, since time.Time) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		reqs, err := d.env.Requests(testenv.AgentUser(ns), since)
		if err != nil {
			return err
		}
		codes := map[int]int{}
		for _, r := range reqs {
			if r.Verb == "create" && strings.HasPrefix(r.RequestURI, "/apis/batch/v1/namespaces/"+ns+"/jobs") {
				codes[r.Code]++
			}
		}
		if codes[201]+codes[409] >= 2 || time.Now().After(deadline) {
			d.out("audit log: the agents' Job creations: %d answered 201 Created, %d answered 409 AlreadyExists", codes[201], codes[409])
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// showRequests sums up the agents' API requests since the init containers
// started: one list and one watch per thing waited for, nothing polled.
func (d *demo) showRequests(ctx context.Context, since time.Time) error {
	reqs, err := d.env.Requests(testenv.AgentUser(ns), since)
	if err != nil {
		return err
	}
	byVerb := map[string]int{}
	for _, r := range reqs {
		byVerb[r.Verb]++
	}
	var parts []string
	for _, v := range slices.Sorted(maps.Keys(byVerb)) {
		parts = append(parts, fmt.Sprintf("%s %d", v, byVerb[v]))
	}
	d.out("audit log: the two init containers made %d API requests in %v of waiting (%s): no polling",
		len(reqs), time.Since(since).Round(time.Second), strings.Join(parts, ", "))
	return nil
}

func (d *demo) showRecord(ctx context.Context) error {
	cm, err := d.client.CoreV1().ConfigMaps(ns).Get(ctx, bootstrap.RecordName("keystone-db-sync"), metav1.GetOptions{})
	if err != nil {
		return err
	}
	d.out("configmap/%s, the record that outlives the Job:", cm.Name)
	for k, v := range cm.Data {
		d.out("  %s: %s", k, v)
	}
	l, err := d.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "application=keystone,component=api"})
	if err != nil {
		return err
	}
	for _, p := range l.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == "kolla.openstack.org/bootstrapped" {
				d.out("pod/%s: condition %s=%s (%s: %s)", p.Name, c.Type, c.Status, c.Reason, c.Message)
			}
		}
	}
	return nil
}

// canI asks the API server what the agent's token may do.
func (d *demo) canI(ctx context.Context) error {
	cfg, err := testenv.LoadKubeconfig(d.agentKC)
	if err != nil {
		return err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, q := range []struct{ verb, group, resource string }{
		{"watch", "batch", "jobs"}, {"create", "batch", "jobs"}, {"watch", "discovery.k8s.io", "endpointslices"},
		{"update", "", "configmaps"}, {"get", "", "secrets"}, {"delete", "", "pods"},
	} {
		r, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: q.verb, Group: q.group, Resource: q.resource,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		res := q.resource
		if q.group != "" {
			res += "." + q.group
		}
		answer := "no"
		if r.Status.Allowed {
			answer = "yes"
		}
		d.out("  can the agent %s %s? %s", q.verb, res, answer)
	}
	return nil
}

// startWait starts what a glance pod's init container would run: a wait for
// keystone's Service to have a ready endpoint and its DNS name to resolve.
func (d *demo) startWait(ctx context.Context) (*proc, error) {
	root := filepath.Join(d.work, "pods", "glance-api-0")
	if err := writeFile(filepath.Join(root, "etc/resolv.conf"), fmt.Sprintf("search %s.svc.%s svc.%s %s\nnameserver 10.96.0.10\noptions ndots:5\n", ns, d.env.ClusterDomain, d.env.ClusterDomain, d.env.ClusterDomain)); err != nil {
		return nil, err
	}
	d.out("and a glance pod's init container waits for keystone: kolla-agent wait service:keystone-api dns:keystone-api")
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "KUBECONFIG=" + d.agentKC, "NAMESPACE=" + ns,
		"KOLLA_AGENT_DNS_SERVER=" + d.env.DNSAddr, "CLUSTER_DOMAIN=" + d.env.ClusterDomain}
	return d.start(ctx, "glance init", []string{d.bin, "--root", root, "wait", "--timeout", "2m", "service:keystone-api", "dns:keystone-api"}, env, root, false)
}
