package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kolla-agent/kolla-agent/bootstrap"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

// bootstrapEnv is an agent's environment with the bootstrap mode's RBAC
// example applied on top of the base one.
func bootstrapEnv(t testing.TB, ns, mode string) []string {
	t.Helper()
	return agentEnvWith(t, ns, []string{"examples/rbac/bootstrap-" + mode + ".yaml"})
}

// jobTemplate is a bootstrap Job's template as a chart would ship it: the
// agent's own `bootstrap` command around the step's command.
const jobTemplate = `apiVersion: batch/v1
kind: Job
metadata:
  name: replaced-by-the-agent
  labels: {application: keystone}
spec:
  %s
  template:
    spec:
      containers:
        - name: db-sync
          image: kolla/keystone:2026.1
          command: ["kolla-agent", "bootstrap", "--", "bash", "-c", {{ printf "%%q" .Bootstrap.Command }}]
`

// bootstrapFiles writes agent.yaml with the bootstrap section and the Job
// template (spec holds extra Job spec lines); it returns the config's path.
func bootstrapFiles(t testing.TB, ns, section, spec string) string {
	t.Helper()
	dir := t.TempDir()
	job := filepath.Join(dir, "db-sync-job.yaml")
	if err := os.WriteFile(job, []byte(fmt.Sprintf(jobTemplate, spec)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "agent.yaml")
	body := fmt.Sprintf("namespace: %s\nbootstrap:\n  job: %s\n%s", ns, job, section)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// bootstrapJobs lists the Jobs of a bootstrap by its label.
func bootstrapJobs(t testing.TB, ns, name string) []string {
	t.Helper()
	return jobsLabelled(t, ns, bootstrap.LabelName+"="+name)
}

func jobsLabelled(t testing.TB, ns, selector string) []string {
	t.Helper()
	l, err := client().BatchV1().Jobs(ns).List(ctxT(t), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range l.Items {
		names = append(names, j.Name)
	}
	return names
}

// waitJobs waits until the bootstrap has n Jobs and returns their names.
func waitJobs(t testing.TB, ns, name string, n int) []string {
	t.Helper()
	var names []string
	eventually(t, fmt.Sprintf("%d bootstrap jobs", n), func() bool {
		names = bootstrapJobs(t, ns, name)
		return len(names) >= n
	})
	if len(names) != n {
		t.Fatalf("bootstrap jobs %v, want %d", names, n)
	}
	return names
}

// agentCreates counts the agent's job creations in the audit log by
// response code.
func agentCreates(t testing.TB, ns string, since time.Time) map[int]int {
	t.Helper()
	reqs, err := s.env.Requests(testenv.AgentUser(ns), since)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[int]int{}
	for _, r := range reqs {
		if r.Verb == "create" && strings.HasPrefix(r.RequestURI, "/apis/batch/v1/namespaces/"+ns+"/jobs") {
			codes[r.Code]++
		}
	}
	return codes
}

func recordEntries(t testing.TB, ns, name string) map[string]string {
	t.Helper()
	cm, err := client().CoreV1().ConfigMaps(ns).Get(ctxT(t), bootstrap.RecordName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the record: %v", err)
	}
	return cm.Data
}

// 20 replicas start at once in create mode: exactly one Job is created
// (the audit log shows one 201 and the rest 409), all wait, and all proceed
// once the real Job controller marks it Complete. The generated Job has the
// defaults; the success is recorded once.
func TestBootstrapCreateOnce(t *testing.T) {
	ns := namespace(t)
	env := bootstrapEnv(t, ns, "create")
	cfg := bootstrapFiles(t, ns, "  mode: create\n  name: keystone-db-sync\n  command: keystone-manage db_sync\n  timeout: 2m\n", "")
	since := time.Now()
	const replicas = 20
	agents := make([]*agentProc, replicas)
	for i := range agents {
		agents[i] = startAgent(t, append(env, fmt.Sprintf("POD_NAME=keystone-api-%d", i)), "--config", cfg, "init")
	}
	name := waitJobs(t, ns, "keystone-db-sync", 1)[0]
	if !strings.HasPrefix(name, "keystone-db-sync-") || len(name) != len("keystone-db-sync-")+10 {
		t.Errorf("job name %q, want keystone-db-sync-<10 hex>", name)
	}
	for _, a := range agents {
		a.waitLog("waiting for job " + name)
	}
	j, err := client().BatchV1().Jobs(ns).Get(ctxT(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit != 6 || j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever ||
		j.Spec.PodFailurePolicy == nil || len(j.Spec.PodFailurePolicy.Rules) != 1 {
		t.Errorf("generated job lacks the defaults: backoffLimit %v restartPolicy %q podFailurePolicy %+v", j.Spec.BackoffLimit, j.Spec.Template.Spec.RestartPolicy, j.Spec.PodFailurePolicy)
	}
	if c := j.Spec.Template.Spec.Containers[0].Command; len(c) != 6 || c[5] != "keystone-manage db_sync" {
		t.Errorf("rendered command %q", c)
	}
	if j.Labels["application"] != "keystone" || j.Labels[bootstrap.LabelName] != "keystone-db-sync" {
		t.Errorf("labels %v", j.Labels)
	}
	for _, a := range agents {
		a.running()
	}
	if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, name); err != nil {
		t.Fatal(err)
	}
	for _, a := range agents {
		a.wantExit(0)
	}
	var codes map[int]int
	eventually(t, "20 job creations in the audit log", func() bool {
		codes = agentCreates(t, ns, since)
		return codes[201]+codes[409] == replicas
	})
	if codes[201] != 1 || codes[409] != replicas-1 {
		t.Errorf("job creations by response code %v, want one 201 and %d 409", codes, replicas-1)
	}
	rec := recordEntries(t, ns, "keystone-db-sync")
	if len(rec) != 1 {
		t.Errorf("record %v, want one entry", rec)
	}
	for _, v := range rec {
		if !strings.Contains(v, name) || !strings.Contains(v, string(j.UID)) {
			t.Errorf("record entry %s does not name job %s (%s)", v, name, j.UID)
		}
	}
}

// A failed Job: the podFailurePolicy fails it at once on a permanent exit
// code; it is retried once under a new name; when that fails too, every
// waiting replica says why (readiness, a Warning Event), stays until the
// timeout (no crash loop re-running the failure), then exits 2 with the
// reason in the termination message.
func TestBootstrapFailedJob(t *testing.T) {
	ns := namespace(t)
	env := bootstrapEnv(t, ns, "create")
	const timeout = 20 * time.Second
	cfg := bootstrapFiles(t, ns, fmt.Sprintf("  mode: create\n  name: glance-db-sync\n  command: glance-manage db_sync\n  retries: 1\n  permanentExitCodes: [3]\n  timeout: %s\n", timeout), "")
	port := freePort(t)
	runCfg := agentYAML(t, fmt.Sprintf("%s\nprobes:\n  address: 127.0.0.1:%d\n  socket: off\n  checks:\n    - {name: service, process: {}}\n", mustRead(t, cfg), port))
	var agents []*agentProc
	var logs []string
	for i := range 3 {
		pod := fmt.Sprintf("glance-api-%d", i)
		mkPod(t, ns, pod, map[string]string{"app": "glance"}, "glance-api")
		logs = append(logs, filepath.Join(t.TempDir(), "termination-log"))
		args := []string{"--config", cfg, "--termination-log", logs[i], "init"}
		if i == 0 { // one replica as the service's entrypoint, with probes
			args = []string{"--config", runCfg, "--termination-log", logs[i], "run", "--", "sleep", "3600"}
		}
		agents = append(agents, startAgent(t, withEnv(env, "POD_NAME="+pod), args...))
	}
	first := waitJobs(t, ns, "glance-db-sync", 1)[0]
	started := time.Now()
	j, err := client().BatchV1().Jobs(ns).Get(ctxT(t), first, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rules := j.Spec.PodFailurePolicy.Rules
	if len(rules) != 2 || rules[1].OnExitCodes == nil || rules[1].OnExitCodes.Values[0] != 3 || rules[1].Action != "FailJob" {
		t.Errorf("podFailurePolicy %+v, want FailJob on exit code 3", j.Spec.PodFailurePolicy)
	}
	if _, _, err := s.env.Kubelet().RunJobPod(ctxT(t), ns, first, func(context.Context, *corev1.Pod) int32 { return 3 }); err != nil {
		t.Fatal(err)
	}
	retry := first + "-r1"
	for _, a := range agents {
		a.waitLog("retrying as " + retry)
	}
	waitJobs(t, ns, "glance-db-sync", 2)
	if _, _, err := s.env.Kubelet().RunJobPod(ctxT(t), ns, retry, func(context.Context, *corev1.Pod) int32 { return 3 }); err != nil {
		t.Fatal(err)
	}
	body := waitStatus(t, fmt.Sprintf("http://127.0.0.1:%d/readyz?verbose", port), 503, 30*time.Second)
	for !strings.Contains(body, "job "+retry+" failed: PodFailurePolicy") {
		if time.Since(started) > timeout {
			t.Fatalf("readiness never gave the failure:\n%s", body)
		}
		time.Sleep(50 * time.Millisecond)
		_, body = get(fmt.Sprintf("http://127.0.0.1:%d/readyz?verbose", port))
	}
	eventually(t, "BootstrapJobFailed events on the pods", func() bool {
		evs, err := client().CoreV1().Events(ns).List(ctxT(t), metav1.ListOptions{FieldSelector: "reason=BootstrapJobFailed"})
		return err == nil && len(evs.Items) == len(agents)
	})
	for _, a := range agents {
		a.running() // no crash loop: they stay until the timeout
	}
	for i, a := range agents {
		a.wantExit(2)
		msg, err := os.ReadFile(logs[i])
		if err != nil || !strings.Contains(string(msg), "job "+retry+" failed: PodFailurePolicy") {
			t.Errorf("termination message %q (%v), want the job's failure", msg, err)
		}
	}
	evs, err := client().CoreV1().Events(ns).List(ctxT(t), metav1.ListOptions{FieldSelector: "reason=BootstrapFailed"})
	if err != nil || len(evs.Items) != len(agents) {
		t.Errorf("BootstrapFailed events at exit: %d (%v), want %d", len(evs.Items), err, len(agents))
	}
	if names := bootstrapJobs(t, ns, "glance-db-sync"); len(names) != 2 {
		t.Errorf("jobs %v: a failed job past its retries must not be replaced", names)
	}
}

// An operator fixes what made the Job fail and deletes it: the waiting
// replicas create it again and proceed, without a restart.
func TestBootstrapFailedJobDeletedRecovers(t *testing.T) {
	ns := namespace(t)
	env := bootstrapEnv(t, ns, "create")
	cfg := bootstrapFiles(t, ns, "  mode: create\n  name: placement-db-sync\n  command: placement-manage db sync\n  timeout: 2m\n", "backoffLimit: 0")
	a := startAgent(t, withEnv(env, "POD_NAME=placement-api-0"), "--config", cfg, "init")
	name := waitJobs(t, ns, "placement-db-sync", 1)[0]
	if _, err := s.env.Kubelet().FailJobPod(ctxT(t), ns, name, 1); err != nil {
		t.Fatal(err)
	}
	a.waitLog("delete the job to run it again")
	bg := metav1.DeletePropagationBackground
	if err := client().BatchV1().Jobs(ns).Delete(ctxT(t), name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	a.waitLog("creating it again")
	eventually(t, "the job created again", func() bool {
		j, err := client().BatchV1().Jobs(ns).Get(ctxT(t), name, metav1.GetOptions{})
		return err == nil && j.DeletionTimestamp == nil && len(j.Status.Conditions) == 0
	})
	if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, name); err != nil {
		t.Fatal(err)
	}
	a.wantExit(0)
}

func mustRead(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The Job deleted after success (ttlSecondsAfterFinished: 0, by the real
// TTL controller): a replica that starts later proceeds from the record at
// once, without creating or watching a Job; kubernetes-entrypoint would wait
// for the deleted Job forever.
func TestBootstrapRecordOutlivesJob(t *testing.T) {
	ns := namespace(t)
	env := bootstrapEnv(t, ns, "create")
	cfg := bootstrapFiles(t, ns, "  mode: create\n  name: nova-db-sync\n  command: nova-manage db sync\n  timeout: 2m\n", "ttlSecondsAfterFinished: 0")
	a := startAgent(t, append(env, "POD_NAME=nova-conductor-0"), "--config", cfg, "init")
	name := waitJobs(t, ns, "nova-db-sync", 1)[0]
	if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, name); err != nil {
		t.Fatal(err)
	}
	a.wantExit(0)
	eventually(t, "the TTL controller deleting the job", func() bool { return len(bootstrapJobs(t, ns, "nova-db-sync")) == 0 })

	since := time.Now()
	b := startAgent(t, append(env, "POD_NAME=nova-conductor-1"), "--config", cfg, "init")
	b.wantExit(0)
	if !strings.Contains(b.out.String(), "recorded in configmap nova-db-sync-bootstrap") {
		t.Errorf("the second replica did not proceed from the record:\n%s", b.out.String())
	}
	reqs, err := s.env.Requests(testenv.AgentUser(ns), since)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if strings.Contains(r.RequestURI, "/jobs") {
			t.Errorf("a replica with a recorded bootstrap touched jobs: %s %s", r.Verb, r.RequestURI)
		}
	}
	if len(bootstrapJobs(t, ns, "nova-db-sync")) != 0 {
		t.Error("the job was created again")
	}
}

// freshKeystoneDB returns a keystone.conf like the shared instance's but
// with its own, empty sqlite database.
func freshKeystoneDB(t *testing.T) (conf, db string, env []string) {
	t.Helper()
	inst, err := keystoneOnce()
	if err != nil {
		t.Fatalf("keystone: %v", err)
	}
	b, err := os.ReadFile(inst.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	db = filepath.Join(dir, "keystone.db")
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "connection = sqlite:") {
			l = "connection = sqlite:///" + db
		}
		lines = append(lines, l)
	}
	conf = filepath.Join(dir, "keystone.conf")
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	return conf, db, inst.Env()
}

// keystoneTables lists the tables of a keystone sqlite database, with
// Debian's Python (the one with the sqlite3 module keystone uses).
func keystoneTables(t *testing.T, db string) string {
	t.Helper()
	out, err := exec.Command("/usr/bin/python3", "-c",
		"import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(' '.join(sorted(r[0] for r in c.execute(\"select name from sqlite_master where type='table'\"))))", db).CombinedOutput()
	if err != nil {
		t.Fatalf("reading %s: %v\n%s", db, err, out)
	}
	return string(out)
}

// withEnv is env with every variable of more replacing its namesake.
func withEnv(env []string, more ...string) []string {
	out := append([]string(nil), more...)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		replaced := false
		for _, m := range more {
			if strings.HasPrefix(m, k+"=") {
				replaced = true
			}
		}
		if !replaced {
			out = append(out, kv)
		}
	}
	return out
}

// The real Keystone, create mode: three replicas, one Job, whose container
// command the kubelet stand-in runs here: `kolla-agent bootstrap --
// keystone-manage db_sync` on an empty database. db_sync runs once; the
// replicas proceed; a replica that starts later runs nothing.
func TestBootstrapKeystoneDBSync(t *testing.T) {
	ns := namespace(t)
	conf, db, ksEnv := freshKeystoneDB(t)
	counter := filepath.Join(t.TempDir(), "db-sync-runs")
	env := withEnv(bootstrapEnv(t, ns, "create"), ksEnv...)
	command := fmt.Sprintf("echo run >> %s && exec /usr/bin/keystone-manage --config-file %s db_sync", counter, conf)
	cfg := bootstrapFiles(t, ns, fmt.Sprintf("  mode: create\n  name: keystone-db-sync\n  command: %q\n  timeout: 3m\n", command), "")
	var agents []*agentProc
	for i := range 3 {
		agents = append(agents, startAgent(t, withEnv(env, fmt.Sprintf("POD_NAME=keystone-%d", i)), "--config", cfg, "init"))
	}
	name := waitJobs(t, ns, "keystone-db-sync", 1)[0]
	var output string
	_, code, err := s.env.Kubelet().RunJobPod(ctxT(t), ns, name, func(ctx context.Context, p *corev1.Pod) int32 {
		argv := p.Spec.Containers[0].Command
		argv[0] = s.bin // the image's kolla-agent is the one under test
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = withEnv(ksEnv, "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
		out, err := cmd.CombinedOutput()
		output = string(out)
		if ee, ok := err.(*exec.ExitError); ok {
			return int32(ee.ExitCode())
		}
		if err != nil {
			return 127
		}
		return 0
	})
	if err != nil || code != 0 {
		t.Fatalf("the job's command exited %d (%v):\n%s", code, err, output)
	}
	for _, a := range agents {
		a.wantExit(0)
	}
	if tables := keystoneTables(t, db); !strings.Contains(tables, "alembic_version") || !strings.Contains(tables, "project") {
		t.Errorf("keystone's database was not migrated; tables: %s", tables)
	}
	late := startAgent(t, withEnv(env, "POD_NAME=keystone-3"), "--config", cfg, "init")
	late.wantExit(0)
	if runs, _ := os.ReadFile(counter); strings.Count(string(runs), "run") != 1 {
		t.Errorf("db_sync ran %d times, want once", strings.Count(string(runs), "run"))
	}
}

// Lease mode with the real Keystone: three replicas compete; the holder
// runs `keystone-manage db_sync` in its own pod. It is SIGKILLed (with its
// command) mid-bootstrap: its Lease expires, another replica takes over and
// runs db_sync again (idempotent), exactly one success is recorded, and all
// surviving replicas proceed.
func TestBootstrapLeaseHolderKilled(t *testing.T) {
	ns := namespace(t)
	conf, db, ksEnv := freshKeystoneDB(t)
	dir := t.TempDir()
	runs, gate := filepath.Join(dir, "runs"), filepath.Join(dir, "go")
	// Each run says who runs it, then waits for the test's go-ahead.
	command := fmt.Sprintf(`bash -c 'echo "$POD_NAME $$" >> %s; while [ ! -e %s ]; do sleep 0.05; done; exec /usr/bin/keystone-manage --config-file %s db_sync'`, runs, gate, conf)
	cfg := agentYAML(t, fmt.Sprintf("namespace: %s\nbootstrap:\n  mode: lease\n  name: keystone-bootstrap\n  command: %q\n  leaseDuration: 2s\n  timeout: 3m\n", ns, command))
	env := withEnv(bootstrapEnv(t, ns, "lease"), ksEnv...)
	agents := map[string]*agentProc{}
	for i := range 3 {
		pod := fmt.Sprintf("keystone-%d", i)
		mkPod(t, ns, pod, nil, "keystone") // its images make the version
		agents[pod] = startAgent(t, withEnv(env, "POD_NAME="+pod), "--config", cfg, "init")
	}
	holder, pid := waitRun(t, runs, 1)
	killed := time.Now()
	agents[holder].cmd.Process.Signal(syscall.SIGKILL)
	syscall.Kill(-pid, syscall.SIGKILL) // the container dies with its PID 1
	<-agents[holder].done
	second, _ := waitRun(t, runs, 2)
	if second == holder {
		t.Fatalf("the killed holder %s ran again", holder)
	}
	t.Logf("%s took over %v after %s was killed", second, time.Since(killed).Round(time.Millisecond), holder)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for pod, a := range agents {
		if pod != holder {
			a.wantExit(0)
		}
	}
	rec := recordEntries(t, ns, "keystone-bootstrap")
	if len(rec) != 1 {
		t.Fatalf("record %v, want exactly one entry", rec)
	}
	for _, v := range rec {
		if !strings.Contains(v, `"holder":"`+second+`"`) {
			t.Errorf("record entry %s does not name the holder that finished, %s", v, second)
		}
	}
	if tables := keystoneTables(t, db); !strings.Contains(tables, "alembic_version") {
		t.Errorf("keystone's database was not migrated; tables: %s", tables)
	}
	if b, _ := os.ReadFile(runs); strings.Count(string(b), "\n") != 2 {
		t.Errorf("runs:\n%s\nwant exactly two (the killed one and the one that finished)", b)
	}
}

// waitRun waits for the n-th line of the runs file and returns its pod and
// the command's pid.
func waitRun(t *testing.T, runs string, n int) (pod string, pid int) {
	t.Helper()
	eventually(t, fmt.Sprintf("run %d of the bootstrap command", n), func() bool {
		b, _ := os.ReadFile(runs)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) < n || lines[n-1] == "" {
			return false
		}
		_, err := fmt.Sscanf(lines[n-1], "%s %d", &pod, &pid)
		return err == nil
	})
	return pod, pid
}

// An upgrade with online schema migrations, against the real deployment
// controller: the new version's pods wait (not ready, saying why) for the
// expand and migrate Jobs while the old version's pods keep serving; the
// contract Job is created only once the rollout has finished, by one of
// the new pods, and every phase is recorded once.
func TestBootstrapUpgradePhases(t *testing.T) {
	ns := namespace(t)
	env := agentEnvWith(t, ns, []string{"examples/rbac/bootstrap-create.yaml", "examples/rbac/bootstrap-rollout.yaml"})
	kube := s.env.Kubelet()
	deps := mkSurgeDeployment(t, ns, "keystone-api", "kolla/keystone:v1", 2)
	// The old version: two pods that the stand-in reports ready.
	ready := map[string]bool{}
	podsOf := func(image string) []corev1.Pod {
		l, err := client().CoreV1().Pods(ns).List(ctxT(t), metav1.ListOptions{LabelSelector: "app=keystone-api"})
		if err != nil {
			t.Fatal(err)
		}
		var out []corev1.Pod
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil && p.Spec.Containers[0].Image == image {
				out = append(out, p)
			}
		}
		return out
	}
	setReadyPod := func(name string) {
		t.Helper()
		if err := kube.SetPodRunning(ctxT(t), ns, name, fmt.Sprintf("10.0.0.%d", len(ready)+1), true); err != nil {
			t.Fatal(err)
		}
		ready[name] = true
	}
	eventually(t, "two v1 pods", func() bool { return len(podsOf("kolla/keystone:v1")) == 2 })
	for _, p := range podsOf("kolla/keystone:v1") {
		setReadyPod(p.Name)
	}
	rolledOut := func() bool {
		d, err := deps.Get(ctxT(t), "keystone-api", metav1.GetOptions{})
		return err == nil && d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == 2 && d.Status.Replicas == 2 && d.Status.AvailableReplicas == 2
	}
	eventually(t, "the v1 rollout", rolledOut)

	// The upgrade.
	cur, err := deps.Get(ctxT(t), "keystone-api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Template.Spec.Containers[0].Image = "kolla/keystone:v2"
	if _, err := deps.Update(ctxT(t), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	section := `  mode: create
  name: keystone-db-sync
  version: "2026.1"
  command: keystone-manage db_sync
  phases:
    - {name: expand, command: keystone-manage db_sync --expand}
    - {name: migrate, command: keystone-manage db_sync --migrate}
    - {name: contract, command: keystone-manage db_sync --contract}
  timeout: 2m
`
	cfgFor := func(port int) string {
		c := bootstrapFiles(t, ns, section, "")
		b, _ := os.ReadFile(c)
		b = append(b, fmt.Sprintf("probes:\n  address: 127.0.0.1:%d\n  socket: off\n  checks:\n    - {name: service, process: {}, probes: [readiness], period: 200ms, timeout: 100ms}\n", port)...)
		if err := os.WriteFile(c, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return c
	}
	startNew := func(pod string) (*agentProc, string) {
		port := freePort(t)
		a := startAgent(t, withEnv(env, "POD_NAME="+pod), "--config", cfgFor(port), "run", "--", "sleep", "3600")
		return a, fmt.Sprintf("http://127.0.0.1:%d", port)
	}
	phaseJob := func(phase string) []string { return jobsLabelled(t, ns, bootstrap.LabelPhase+"="+phase) }
	eventually(t, "the surge pod of v2", func() bool { return len(podsOf("kolla/keystone:v2")) == 1 })
	p1 := podsOf("kolla/keystone:v2")[0].Name
	a1, url1 := startNew(p1)
	for _, phase := range []string{"expand", "migrate"} {
		eventually(t, "the "+phase+" job", func() bool { return len(phaseJob(phase)) == 1 })
		job := phaseJob(phase)[0]
		body := waitStatus(t, url1+"/readyz?verbose", 503, 30*time.Second)
		if !strings.Contains(body, phase) || !strings.Contains(body, "bootstrap") {
			t.Errorf("readiness of the waiting new pod does not say it waits for %s:\n%s", phase, body)
		}
		if old := podsOf("kolla/keystone:v1"); len(old) != 2 {
			t.Errorf("v1 pods %d while the new version waits for %s, want both serving", len(old), phase)
		}
		if _, err := kube.CompleteJobPod(ctxT(t), ns, job); err != nil {
			t.Fatal(err)
		}
	}
	waitStatus(t, url1+"/readyz", 200, 30*time.Second)
	if _, m := get(url1 + "/metrics"); !strings.Contains(m, `kolla_agent_bootstrap_state{name="keystone-db-sync",phase="migrate",state="done"} 1`) {
		t.Errorf("metrics lack the migrate phase done:\n%s", m)
	}
	setReadyPod(p1)
	// The controller replaces one old pod: the rollout is not finished.
	eventually(t, "the second v2 pod", func() bool { return len(podsOf("kolla/keystone:v2")) == 2 })
	if c := phaseJob("contract"); len(c) != 0 {
		t.Fatalf("contract job %v created while a v1 pod remains", c)
	}
	var p2 string
	for _, p := range podsOf("kolla/keystone:v2") {
		if p.Name != p1 {
			p2 = p.Name
		}
	}
	a2, url2 := startNew(p2)
	a2.waitLog("recorded in configmap keystone-db-sync-bootstrap")
	waitStatus(t, url2+"/readyz", 200, 30*time.Second)
	if c := phaseJob("contract"); len(c) != 0 {
		t.Fatalf("contract job %v created before the last new pod was ready", c)
	}
	setReadyPod(p2)
	eventually(t, "the v2 rollout", rolledOut)
	eventually(t, "the contract job", func() bool { return len(phaseJob("contract")) == 1 })
	if !strings.Contains(a1.out.String(), "waiting for the rollout: deployment keystone-api") {
		t.Errorf("the first new pod did not say it waited for the rollout:\n%s", a1.out.String())
	}
	if logs := a1.out.String() + a2.out.String(); !strings.Contains(logs, "rollout complete") {
		t.Errorf("no new pod saw the rollout complete:\n%s", logs)
	}
	// The first new pod's agent restarting now, the rollout complete: its
	// gate costs one LIST of the Deployment and no WATCH, then it waits
	// for the contract Job with the others.
	since := time.Now()
	a3, url3 := startNew(p1)
	a3.waitLog("waiting for job " + phaseJob("contract")[0])
	gate := map[string]int{}
	for _, r := range auditOf(t, ns, since) {
		if strings.HasPrefix(r.RequestURI, "/apis/apps/v1/namespaces/"+ns+"/deployments") {
			gate[r.Verb]++
		}
	}
	if gate["list"] != 1 || gate["watch"] != 0 {
		t.Errorf("a restarted pod's rollout gate made %v requests of the deployment, want one list and no watch", gate)
	}
	if _, err := kube.CompleteJobPod(ctxT(t), ns, phaseJob("contract")[0]); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the contract phase recorded", func() bool {
		cm, err := client().CoreV1().ConfigMaps(ns).Get(ctxT(t), bootstrap.RecordName("keystone-db-sync"), metav1.GetOptions{})
		return err == nil && len(cm.Data) == 3
	})
	// Each agent is past the phase (done in its metrics): none can create
	// a second contract Job after this.
	for _, url := range []string{url1, url2, url3} {
		eventually(t, "the contract phase done at "+url, func() bool {
			_, m := get(url + "/metrics")
			return strings.Contains(m, `kolla_agent_bootstrap_state{name="keystone-db-sync",phase="contract",state="done"} 1`)
		})
	}
	if c := phaseJob("contract"); len(c) != 1 {
		t.Errorf("contract jobs %v, want one", c)
	}
	for _, a := range []*agentProc{a1, a2, a3} {
		a.running()
		a.cmd.Process.Signal(syscall.SIGTERM) // the service goes with it
		a.wantExit(143)
	}
}

// A replica that waits for another's Job makes its few requests once (a
// GET of the record, a create answered 409, a list and a watch of the
// step's Jobs) and then nothing until the Job completes: no polling.
func TestBootstrapWaitingPodAPIRequests(t *testing.T) {
	ns := namespace(t)
	env := bootstrapEnv(t, ns, "create")
	cfg := bootstrapFiles(t, ns, "  mode: create\n  name: cinder-db-sync\n  command: cinder-manage db sync\n  timeout: 2m\n", "")
	first := startAgent(t, withEnv(env, "POD_NAME=cinder-api-0"), "--config", cfg, "init")
	name := waitJobs(t, ns, "cinder-db-sync", 1)[0]
	first.waitLog("waiting for job " + name)
	since := time.Now()
	second := startAgent(t, withEnv(env, "POD_NAME=cinder-api-1"), "--config", cfg, "init")
	second.waitLog("waiting for job " + name)
	count := func() []testenv.AuditRequest {
		reqs, err := s.env.Requests(testenv.AgentUser(ns), since)
		if err != nil {
			t.Fatal(err)
		}
		var mine []testenv.AuditRequest
		for _, r := range reqs {
			if r.ID != "" && !strings.Contains(r.RequestURI, "/events") {
				mine = append(mine, r)
			}
		}
		return mine
	}
	// Both replicas are waiting; their requests since the second started
	// are the second's, as the first only watches.
	var settled []testenv.AuditRequest
	eventually(t, "the second replica's requests in the audit log", func() bool {
		settled = count()
		return len(settled) >= 4
	})
	time.Sleep(3 * time.Second) // a poller would show here
	if now := count(); len(now) != len(settled) {
		t.Errorf("requests went from %d to %d while waiting:\n%v", len(settled), len(now), now[len(settled):])
	}
	kinds := map[string]int{}
	for _, r := range settled {
		res := "jobs"
		if strings.Contains(r.RequestURI, "/configmaps") {
			res = "configmaps"
		}
		kinds[r.Verb+" "+res]++
	}
	if kinds["get configmaps"] != 1 || kinds["create jobs"] != 1 || kinds["watch jobs"] < 1 || kinds["get jobs"] != 0 {
		t.Errorf("a waiting replica's requests %v, want one record GET, one create, then list+watch", kinds)
	}
	t.Logf("a waiting replica's API requests: %v", kinds)
	if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, name); err != nil {
		t.Fatal(err)
	}
	first.wantExit(0)
	second.wantExit(0)
}

// The API server SIGKILLed while replicas start and create the Job: they
// report the outage, keep trying, and once it is back exactly one Job is
// created and all proceed when it completes. Nothing panics.
func TestBootstrapSurvivesAPIServerKill(t *testing.T) {
	ns := namespace(t)
	env := bootstrapEnv(t, ns, "create")
	cfg := bootstrapFiles(t, ns, "  mode: create\n  name: heat-db-sync\n  command: heat-manage db_sync\n  timeout: 2m\n", "")
	if err := s.env.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() { // the other tests need it, whatever happens here
		if !restarted {
			s.env.StartAPIServer()
		}
	})
	var agents []*agentProc
	for i := range 3 {
		agents = append(agents, startAgent(t, withEnv(env, fmt.Sprintf("POD_NAME=heat-api-%d", i)), "--config", cfg, "init"))
	}
	for _, a := range agents {
		a.waitLog("cannot create job heat-db-sync-")
		a.running()
	}
	restarted = true
	if err := s.env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	name := waitJobs(t, ns, "heat-db-sync", 1)[0]
	for _, a := range agents {
		a.waitLog("waiting for job " + name)
	}
	if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, name); err != nil {
		t.Fatal(err)
	}
	for _, a := range agents {
		a.wantExit(0)
	}
	if jobs := bootstrapJobs(t, ns, "heat-db-sync"); len(jobs) != 1 {
		t.Errorf("jobs %v, want one", jobs)
	}
}

// Wait mode: another tool creates the Jobs (a Helm hook). The agent waits
// for them with the dependency machinery, records the success, and a pod
// that starts after the Jobs were deleted proceeds from the record; with
// podCondition the pod carries kolla.openstack.org/bootstrapped. A failed
// Job ends the wait at once with exit 2.
func TestBootstrapWaitMode(t *testing.T) {
	ns := namespace(t)
	env := agentEnvWith(t, ns, []string{"examples/rbac/bootstrap-wait.yaml", "examples/rbac/bootstrap-condition.yaml"})
	mkJob(t, ns, "neutron-db-sync", nil)
	mkJob(t, ns, "neutron-ks-user", map[string]string{"application": "neutron", "component": "ks-user"})
	cfg := agentYAML(t, fmt.Sprintf(`namespace: %s
bootstrap:
  mode: wait
  name: neutron-bootstrap
  version: "2026.1"
  jobs: [neutron-db-sync, "application=neutron,component=ks-user"]
  podCondition: true
  timeout: 2m
`, ns))
	mkPod(t, ns, "neutron-server-0", map[string]string{"app": "neutron"}, "neutron-server")
	a := startAgent(t, withEnv(env, "POD_NAME=neutron-server-0"), "--config", cfg, "init")
	a.waitLog("waiting for neutron-db-sync")
	for _, j := range []string{"neutron-db-sync", "neutron-ks-user"} {
		if _, err := s.env.Kubelet().CompleteJobPod(ctxT(t), ns, j); err != nil {
			t.Fatal(err)
		}
	}
	a.wantExit(0)
	pod, err := client().CoreV1().Pods(ns).Get(ctxT(t), "neutron-server-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range pod.Status.Conditions {
		if c.Type == bootstrap.ConditionBootstrapped && c.Status == corev1.ConditionTrue {
			found = true
		}
	}
	if !found {
		t.Errorf("pod conditions %+v lack %s=True", pod.Status.Conditions, bootstrap.ConditionBootstrapped)
	}
	for _, j := range []string{"neutron-db-sync", "neutron-ks-user"} {
		if err := client().BatchV1().Jobs(ns).Delete(ctxT(t), j, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	b := startAgent(t, withEnv(env, "POD_NAME=neutron-server-1"), "--config", cfg, "init")
	b.wantExit(0)
	if !strings.Contains(b.out.String(), "recorded in configmap neutron-bootstrap-bootstrap") {
		t.Errorf("the later pod did not proceed from the record:\n%s", b.out.String())
	}

	// A new version whose Job fails.
	cfg2 := agentYAML(t, fmt.Sprintf("namespace: %s\nbootstrap:\n  mode: wait\n  name: neutron-bootstrap\n  version: \"2026.2\"\n  jobs: [neutron-db-sync-2]\n  timeout: 10s\n", ns))
	mkJob(t, ns, "neutron-db-sync-2", nil)
	c := startAgent(t, withEnv(env, "POD_NAME=neutron-server-2"), "--config", cfg2, "init")
	c.waitLog("waiting for neutron-db-sync-2")
	if _, err := s.env.Kubelet().FailJobPod(ctxT(t), ns, "neutron-db-sync-2", 1); err != nil {
		t.Fatal(err)
	}
	c.waitLog("BackoffLimitExceeded") // at once, then it holds until the timeout
	c.running()
	c.wantExit(2)
	if !strings.Contains(c.out.String(), `msg="bootstrap failed"`) {
		t.Errorf("the exit does not say the bootstrap failed:\n%s", c.out.String())
	}
	if rec := recordEntries(t, ns, "neutron-bootstrap"); len(rec) != 1 {
		t.Errorf("record %v: the failed version must not be recorded", rec)
	}
}

// `kolla-agent bootstrap -- CMD`, the Job's container: the output passes
// through, the exit code is the command's, and on failure the termination
// message says why with the last lines of output.
func TestBootstrapCommand(t *testing.T) {
	term := filepath.Join(t.TempDir(), "termination-log")
	a := startAgent(t, plainEnv(), "--termination-log", term, "bootstrap", "--", "bash", "-c", "echo migrating; echo 'sqlite3.OperationalError: database is locked' >&2; exit 3")
	a.wantExit(3)
	if out := a.out.String(); !strings.Contains(out, "migrating") || !strings.Contains(out, "database is locked") {
		t.Errorf("the command's output did not pass through:\n%s", out)
	}
	msg, err := os.ReadFile(term)
	if err != nil || !strings.Contains(string(msg), "exited with 3") || !strings.Contains(string(msg), "database is locked") {
		t.Errorf("termination message %q (%v)", msg, err)
	}
	ok := startAgent(t, plainEnv(), "--termination-log", term+"2", "bootstrap", "--", "true")
	ok.wantExit(0)
	if _, err := os.Stat(term + "2"); err == nil {
		t.Error("a successful command left a termination message")
	}
	missing := startAgent(t, plainEnv(), "bootstrap", "--", "/nonexistent/db-sync")
	missing.wantExit(127)
}

// Lease mode, a command that fails once (a transient error): its holder
// says so and hands the Lease on; the next replica runs it and succeeds;
// the first proceeds from the record instead of crash-looping.
func TestBootstrapLeaseCommandFailsOnce(t *testing.T) {
	ns := namespace(t)
	marker := filepath.Join(t.TempDir(), "failed-once")
	command := fmt.Sprintf(`bash -c 'if [ -e %[1]s ]; then echo "$POD_NAME" >> %[1]s.ok; else echo "$POD_NAME" > %[1]s; exit 5; fi'`, marker)
	cfg := agentYAML(t, fmt.Sprintf("namespace: %s\nbootstrap:\n  mode: lease\n  name: barbican-bootstrap\n  command: %q\n  leaseDuration: 2s\n  timeout: 1m\n", ns, command))
	env := bootstrapEnv(t, ns, "lease")
	// No version, and no pod whose images would make one: bad input.
	noPod := startAgent(t, withEnv(env, "POD_NAME=barbican-9"), "--config", cfg, "init")
	noPod.wantExit(1)
	if !strings.Contains(noPod.out.String(), "set bootstrap.version or POD_NAME") {
		t.Errorf("no version and no pod: %s", noPod.out.String())
	}
	mkPod(t, ns, "barbican-0", nil, "barbican-api")
	mkPod(t, ns, "barbican-1", nil, "barbican-api")
	a := startAgent(t, withEnv(env, "POD_NAME=barbican-0"), "--config", cfg, "init")
	b := startAgent(t, withEnv(env, "POD_NAME=barbican-1"), "--config", cfg, "init")
	a.wantExit(0)
	b.wantExit(0)
	failedBy, _ := os.ReadFile(marker)
	okBy, _ := os.ReadFile(marker + ".ok")
	if len(failedBy) == 0 || len(okBy) == 0 || string(failedBy) == string(okBy) {
		t.Fatalf("failed by %q, succeeded by %q: want two different replicas", failedBy, okBy)
	}
	loser := map[string]*agentProc{"barbican-0": a, "barbican-1": b}[strings.TrimSpace(string(failedBy))]
	if out := loser.out.String(); !strings.Contains(out, "exited with 5") || !strings.Contains(out, "recorded in configmap barbican-bootstrap-bootstrap") {
		t.Errorf("the replica whose command failed did not say so and then proceed from the record:\n%s", out)
	}
	if rec := recordEntries(t, ns, "barbican-bootstrap"); len(rec) != 1 {
		t.Errorf("record %v, want one entry", rec)
	}
}
