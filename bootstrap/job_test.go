package bootstrap

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

var (
	hex10Re    = regexp.MustCompile(`^[0-9a-f]{10}$`)
	dnsLabelRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
)

const dbSyncJob = `apiVersion: batch/v1
kind: Job
metadata:
  name: keystone-db-sync
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: db-sync
          image: quay.io/openstack.kolla/keystone:2026.1
          command: [keystone-manage, db_sync]
          env:
            - name: OS_DEBUG
              value: "0"
`

func TestVersion(t *testing.T) {
	version := func(manifest string, inputs map[string][]byte) string {
		t.Helper()
		v, err := Version([]byte(manifest), inputs)
		if err != nil {
			t.Fatalf("Version: %v\n%s", err, manifest)
		}
		if !hex10Re.MatchString(v) {
			t.Fatalf("Version = %q, want 10 lower-case hex digits", v)
		}
		return v
	}
	conf := map[string][]byte{"/etc/keystone/keystone.conf": []byte("[database]\nconnection = mysql+pymysql://db/keystone\n")}
	base := version(dbSyncJob, conf)

	// The same manifest, keys reordered, flow style, other quoting, a
	// comment: the API reads the same object.
	reformatted := `# the db_sync Job
kind: "Job"
spec: {template: {spec: {containers: [{env: [{value: "0", name: OS_DEBUG}], command: ["keystone-manage", "db_sync"], name: db-sync, image: 'quay.io/openstack.kolla/keystone:2026.1'}], restartPolicy: Never}}}
metadata: {name: keystone-db-sync}
apiVersion: batch/v1
`
	if got := version(reformatted, conf); got != base {
		t.Errorf("reformatted manifest: version %s, want %s", got, base)
	}
	if got := version(dbSyncJob, conf); got != base {
		t.Errorf("not deterministic: %s then %s", base, got)
	}
	// A copy of the inputs map (another iteration order) hashes the same.
	two := map[string][]byte{"/a": []byte("1"), "/b": []byte("2"), "/c": []byte("3")}
	twoCopy := map[string][]byte{"/c": []byte("3"), "/a": []byte("1"), "/b": []byte("2")}
	if a, b := version(dbSyncJob, two), version(dbSyncJob, twoCopy); a != b {
		t.Errorf("same inputs: %s and %s", a, b)
	}

	for _, tc := range []struct{ name, old, new string }{
		{"image", "keystone:2026.1", "keystone:2026.2"},
		{"command", "[keystone-manage, db_sync]", "[keystone-manage, db_sync, --expand]"},
		{"env value", `value: "0"`, `value: "1"`},
		{"name", "name: keystone-db-sync", "name: keystone-db-sync2"},
	} {
		m := strings.Replace(dbSyncJob, tc.old, tc.new, 1)
		if m == dbSyncJob {
			t.Fatalf("%s: %q not in the manifest", tc.name, tc.old)
		}
		if got := version(m, conf); got == base {
			t.Errorf("changed %s: version still %s", tc.name, got)
		}
	}

	changedConf := map[string][]byte{"/etc/keystone/keystone.conf": []byte("[database]\nconnection = mysql+pymysql://db2/keystone\n")}
	if got := version(dbSyncJob, changedConf); got == base {
		t.Errorf("changed input content: version still %s", got)
	}
	renamed := map[string][]byte{"/etc/keystone/other.conf": conf["/etc/keystone/keystone.conf"]}
	if got := version(dbSyncJob, renamed); got == base {
		t.Errorf("renamed input: version still %s", got)
	}
	if got := version(dbSyncJob, nil); got == base {
		t.Errorf("no inputs: version still %s", got)
	}
	// Name and content are delimited: moving a byte across does not collide.
	if a, b := version("", map[string][]byte{"/ab": []byte("c")}), version("", map[string][]byte{"/a": []byte("bc")}); a == b {
		t.Errorf("/ab=c and /a=bc hash alike: %s", a)
	}
	// Inputs alone (lease mode: no manifest) give a version too.
	if a, b := version("", conf), version("", changedConf); a == b {
		t.Errorf("inputs without manifest: %s for both", a)
	}

	if _, err := Version([]byte("kind: [Job"), nil); err == nil {
		t.Error("a manifest that is not YAML gave no error")
	}
}

func TestJobName(t *testing.T) {
	const v = "3f9a1c2b7e"
	for _, tc := range []struct {
		prefix  string
		step    Step
		attempt int
		want    string
	}{
		{"keystone-db-sync", Step{Version: v}, 0, "keystone-db-sync-3f9a1c2b7e"},
		{"keystone-db-sync", Step{Phase: "expand", Version: v}, 0, "keystone-db-sync-expand-3f9a1c2b7e"},
		{"keystone-db-sync", Step{Version: v}, 2, "keystone-db-sync-3f9a1c2b7e-r2"},
		{"keystone-db-sync", Step{Phase: "contract", Version: v}, 10, "keystone-db-sync-contract-3f9a1c2b7e-r10"},
	} {
		got := JobName(tc.prefix, tc.step, tc.attempt)
		if got != tc.want {
			t.Errorf("JobName(%q, %+v, %d) = %q, want %q", tc.prefix, tc.step, tc.attempt, got, tc.want)
		}
		if !dnsLabelRe.MatchString(got) || len(got) > 63 {
			t.Errorf("%q is not a DNS label", got)
		}
	}

	// A 60-character prefix is cut; a cut that ends on '-' drops it.
	prefix := strings.Repeat("a", 41) + "-" + strings.Repeat("b", 18)
	if len(prefix) != 60 {
		t.Fatalf("prefix has %d characters", len(prefix))
	}
	// tail "-expand-3f9a1c2b7e-r2" is 21 characters: 42 are left, the 42nd a '-'.
	got := JobName(prefix, Step{Phase: "expand", Version: v}, 2)
	if want := strings.Repeat("a", 41) + "-expand-3f9a1c2b7e-r2"; got != want {
		t.Errorf("cut name %q (%d), want %q", got, len(got), want)
	}
	got = JobName(prefix, Step{Version: v}, 0)
	if want := prefix[:52] + "-" + v; got != want || len(got) != 63 {
		t.Errorf("cut name %q (%d), want %q (63)", got, len(got), want)
	}
	// Several dashes at the cut all go.
	dashes := strings.Repeat("a", 48) + "----" + strings.Repeat("b", 8)
	got = JobName(dashes, Step{Version: v}, 0)
	if want := strings.Repeat("a", 48) + "-" + v; got != want {
		t.Errorf("cut name %q, want %q", got, want)
	}

	// An explicit version that is not 10 hex digits is hashed to them.
	sum := sha256.Sum256([]byte("2026.1"))
	want := "keystone-db-sync-" + hex.EncodeToString(sum[:])[:10]
	if got := JobName("keystone-db-sync", Step{Version: "2026.1"}, 0); got != want {
		t.Errorf("explicit version: %q, want %q", got, want)
	}
	for _, ver := range []string{"2026.1", "3F9A1C2B7E", "3f9a1c2b7e0", "Caracal_2024.1", "3f9a1c2b7g", ""} {
		got := JobName("keystone-db-sync", Step{Phase: "migrate", Version: ver}, 1)
		h := strings.TrimSuffix(strings.TrimPrefix(got, "keystone-db-sync-migrate-"), "-r1")
		if !hex10Re.MatchString(h) || h == ver {
			t.Errorf("version %q: name %q, want it hashed to 10 hex digits", ver, got)
		}
		if !dnsLabelRe.MatchString(got) {
			t.Errorf("version %q: %q is not a DNS label", ver, got)
		}
	}

	// Whatever the config allows (a 63-character name, a 20-character
	// phase, retry 10), the result is a DNS label.
	long := strings.Repeat("k", 30) + "-" + strings.Repeat("d", 32)
	for _, p := range []string{"", "expand", strings.Repeat("p", 20)} {
		for _, a := range []int{0, 1, 10} {
			for _, ver := range []string{v, "2026.1"} {
				got := JobName(long, Step{Phase: p, Version: ver}, a)
				if len(got) > 63 || !dnsLabelRe.MatchString(got) {
					t.Errorf("JobName(%q, %q, %q, %d) = %q (%d), not a DNS label", long, p, ver, a, got, len(got))
				}
			}
		}
	}
}

// asJob converts the built Job to the typed API object, which is also a
// check that its shape is one the API reads.
func asJob(t *testing.T, u *unstructured.Unstructured) *batchv1.Job {
	t.Helper()
	// Through JSON, as the dynamic client sends it.
	b, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	var j batchv1.Job
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatalf("the Job does not decode: %v\n%s", err, b)
	}
	return &j
}

func TestJobDefaults(t *testing.T) {
	c := &Coordinator{cfg: Config{Name: "keystone-db-sync", Namespace: "ns", PodName: "p"}}
	const minimal = `apiVersion: batch/v1
kind: Job
metadata:
  generateName: db-sync-
  namespace: elsewhere
  labels: {app: keystone}
  annotations: {note: kept}
spec:
  template:
    metadata:
      labels: {app: keystone}
    spec:
      containers:
        - {name: db-sync, image: keystone}
`
	s := Step{Phase: "expand", Version: "3f9a1c2b7e"}
	u, err := c.job(JobSpec{Manifest: []byte(minimal), Source: "/etc/kolla-agent/job.yaml"}, s, 1)
	if err != nil {
		t.Fatal(err)
	}
	if u.GetName() != "keystone-db-sync-expand-3f9a1c2b7e-r1" || u.GetGenerateName() != "" || u.GetNamespace() != "ns" {
		t.Errorf("name %q generateName %q namespace %q", u.GetName(), u.GetGenerateName(), u.GetNamespace())
	}
	j := asJob(t, u)
	wantLabels := map[string]string{
		"app":        "keystone",
		LabelName:    "keystone-db-sync",
		LabelVersion: "3f9a1c2b7e",
		LabelPhase:   "expand",
		LabelAttempt: "1",
	}
	if !reflect.DeepEqual(j.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", j.Labels, wantLabels)
	}
	if want := map[string]string{"note": "kept", AnnotationCreatedBy: "p"}; !reflect.DeepEqual(j.Annotations, want) {
		t.Errorf("annotations %v, want %v", j.Annotations, want)
	}
	wantPod := map[string]string{"app": "keystone", LabelName: "keystone-db-sync", LabelVersion: "3f9a1c2b7e", LabelPhase: "expand"}
	if !reflect.DeepEqual(j.Spec.Template.Labels, wantPod) {
		t.Errorf("pod labels %v, want %v", j.Spec.Template.Labels, wantPod)
	}
	if j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit != 6 {
		t.Errorf("backoffLimit %v, want 6", j.Spec.BackoffLimit)
	}
	if j.Spec.Template.Spec.RestartPolicy != "Never" {
		t.Errorf("restartPolicy %q, want Never", j.Spec.Template.Spec.RestartPolicy)
	}
	ignoreDisruption := batchv1.PodFailurePolicyRule{
		Action:          batchv1.PodFailurePolicyActionIgnore,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: "DisruptionTarget"}},
	}
	if p := j.Spec.PodFailurePolicy; p == nil || !reflect.DeepEqual(p.Rules, []batchv1.PodFailurePolicyRule{ignoreDisruption}) {
		t.Errorf("podFailurePolicy %+v, want only the DisruptionTarget Ignore rule", p)
	}
	if len(j.Spec.Template.Spec.Containers) != 1 || j.Spec.Template.Spec.Containers[0].Image != "keystone" {
		t.Errorf("containers %+v", j.Spec.Template.Spec.Containers)
	}
	// No phase, attempt 0; permanent exit codes.
	u, err = c.job(JobSpec{Manifest: []byte(minimal), Source: "job.yaml", PermanentExitCodes: []int32{2, 3}}, Step{Version: "0123456789"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	j = asJob(t, u)
	if j.Name != "keystone-db-sync-0123456789" {
		t.Errorf("name %q", j.Name)
	}
	if _, ok := j.Labels[LabelPhase]; ok || j.Labels[LabelAttempt] != "0" || j.Labels[LabelVersion] != "0123456789" {
		t.Errorf("labels %v: want no phase, attempt 0", j.Labels)
	}
	if _, ok := j.Spec.Template.Labels[LabelPhase]; ok {
		t.Errorf("pod labels %v: want no phase", j.Spec.Template.Labels)
	}
	failJob := batchv1.PodFailurePolicyRule{
		Action:      batchv1.PodFailurePolicyActionFailJob,
		OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{2, 3}},
	}
	if p := j.Spec.PodFailurePolicy; p == nil || !reflect.DeepEqual(p.Rules, []batchv1.PodFailurePolicyRule{ignoreDisruption, failJob}) {
		t.Errorf("podFailurePolicy %+v, want Ignore DisruptionTarget, FailJob on 2, 3", p)
	}
	// The object survives a deep copy (the dynamic client copies it).
	if cp := u.DeepCopy(); !reflect.DeepEqual(cp.Object, u.Object) {
		t.Error("deep copy differs")
	}

	// The template's own backoffLimit, restartPolicy and podFailurePolicy
	// are kept.
	const own = `apiVersion: batch/v1
kind: Job
spec:
  backoffLimit: 2
  podFailurePolicy:
    rules:
      - action: Count
        onExitCodes: {operator: NotIn, values: [0]}
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: i}]
`
	u, err = c.job(JobSpec{Manifest: []byte(own), Source: "job.yaml"}, Step{Version: "0123456789"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	j = asJob(t, u)
	if j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit != 2 {
		t.Errorf("backoffLimit %v, want the template's 2", j.Spec.BackoffLimit)
	}
	if p := j.Spec.PodFailurePolicy; p == nil || len(p.Rules) != 1 || p.Rules[0].Action != batchv1.PodFailurePolicyActionCount ||
		p.Rules[0].OnExitCodes == nil || p.Rules[0].OnExitCodes.Operator != batchv1.PodFailurePolicyOnExitCodesOpNotIn {
		t.Errorf("podFailurePolicy %+v, want the template's", p)
	}

	// restartPolicy OnFailure: no podFailurePolicy (the API wants Never for one).
	onFailure := strings.Replace(own, "restartPolicy: Never", "restartPolicy: OnFailure", 1)
	onFailure = onFailure[:strings.Index(onFailure, "  podFailurePolicy:")] + onFailure[strings.Index(onFailure, "  template:"):]
	u, err = c.job(JobSpec{Manifest: []byte(onFailure), Source: "job.yaml"}, Step{Version: "0123456789"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	j = asJob(t, u)
	if j.Spec.Template.Spec.RestartPolicy != "OnFailure" || j.Spec.PodFailurePolicy != nil {
		t.Errorf("restartPolicy %q podFailurePolicy %+v, want OnFailure and none", j.Spec.Template.Spec.RestartPolicy, j.Spec.PodFailurePolicy)
	}
}

func TestJobBad(t *testing.T) {
	c := &Coordinator{cfg: Config{Name: "keystone-db-sync", Namespace: "ns", PodName: "p"}}
	const src = "/etc/kolla-agent/db-sync-job.yaml"
	for _, tc := range []struct {
		name, manifest string
		codes          []int32
		want           string
	}{
		{"not YAML", "apiVersion: [batch/v1\n", nil, ""},
		{"a list", "- apiVersion: batch/v1\n", nil, ""},
		{"wrong kind", "apiVersion: batch/v1\nkind: CronJob\nspec: {template: {spec: {containers: [{name: c}]}}}\n", nil, `apiVersion/kind: "batch/v1"/"CronJob", want batch/v1 Job`},
		{"wrong apiVersion", "apiVersion: batch/v1beta1\nkind: Job\nspec: {template: {spec: {containers: [{name: c}]}}}\n", nil, `apiVersion/kind: "batch/v1beta1"/"Job"`},
		{"no kind", "apiVersion: batch/v1\nspec: {template: {spec: {containers: [{name: c}]}}}\n", nil, "apiVersion/kind"},
		{"no template spec", "apiVersion: batch/v1\nkind: Job\nspec: {template: {metadata: {}}}\n", nil, "spec.template.spec: missing"},
		{"no spec", "apiVersion: batch/v1\nkind: Job\n", nil, "spec.template.spec: missing"},
		{"no containers", "apiVersion: batch/v1\nkind: Job\nspec: {template: {spec: {restartPolicy: Never}}}\n", nil, "spec.template.spec.containers: empty"},
		{"empty containers", "apiVersion: batch/v1\nkind: Job\nspec: {template: {spec: {containers: []}}}\n", nil, "spec.template.spec.containers: empty"},
		{"template metadata not a map", "apiVersion: batch/v1\nkind: Job\nspec: {template: {metadata: x, spec: {containers: [{name: c}]}}}\n", nil, "spec.template.metadata.labels"},
		{"own podFailurePolicy with exit codes", "apiVersion: batch/v1\nkind: Job\nspec: {podFailurePolicy: {rules: []}, template: {spec: {restartPolicy: Never, containers: [{name: c}]}}}\n", []int32{2}, "spec.podFailurePolicy: the template has its own"},
		{"a label that is not a string", "apiVersion: batch/v1\nkind: Job\nmetadata: {labels: {version: 1}}\nspec: {template: {spec: {containers: [{name: c}]}}}\n", nil, "metadata.labels.version: 1 is not a string"},
		{"a pod label that is not a string", "apiVersion: batch/v1\nkind: Job\nspec: {template: {metadata: {labels: {tier: true}}, spec: {containers: [{name: c}]}}}\n", nil, "spec.template.metadata.labels.tier: true is not a string"},
		{"OnFailure with exit codes", "apiVersion: batch/v1\nkind: Job\nspec: {template: {spec: {restartPolicy: OnFailure, containers: [{name: c}]}}}\n", []int32{2}, `spec.template.spec.restartPolicy: "OnFailure", but a podFailurePolicy (bootstrap.permanentExitCodes) needs Never`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := JobSpec{Manifest: []byte(tc.manifest), Source: src, PermanentExitCodes: tc.codes}
			u, err := c.job(spec, Step{Version: "0123456789"}, 0)
			if err == nil {
				t.Fatalf("no error; built %v", u)
			}
			if !strings.HasPrefix(err.Error(), src+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\nwant it to start with %q and contain %q", err, src+": ", tc.want)
			}
			err = c.CheckJob(spec, Step{Version: "0123456789"})
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), src) {
				t.Errorf("CheckJob: %v, want ErrInvalid naming %s", err, src)
			}
		})
	}
	if err := c.CheckJob(JobSpec{Manifest: []byte(dbSyncJob), Source: src}, Step{Version: "0123456789"}); err != nil {
		t.Errorf("CheckJob of a good Job: %v", err)
	}
}

// cond is a Job condition; status "" is True.
type cond struct{ typ, status, reason, message string }

func testJob(name string, attempt int, deleting bool, active int, conds ...cond) *unstructured.Unstructured {
	j := &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
			Labels: map[string]string{LabelName: "keystone-db-sync", LabelVersion: "0123456789", LabelAttempt: fmt.Sprint(attempt)},
		},
	}
	if deleting {
		now := metav1.NewTime(time.Now())
		j.DeletionTimestamp = &now
	}
	j.Status.Active = int32(active)
	for _, c := range conds {
		status := corev1.ConditionTrue
		if c.status != "" {
			status = corev1.ConditionStatus(c.status)
		}
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{
			Type: batchv1.JobConditionType(c.typ), Status: status, Reason: c.reason, Message: c.message,
		})
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(j)
	if err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

func TestDecide(t *testing.T) {
	name := func(j *jobView) string {
		if j == nil {
			return "<nil>"
		}
		return j.Name
	}
	for _, tc := range []struct {
		name              string
		set               []*unstructured.Unstructured
		succeeded, latest string
		failed, waiting   string // substrings; "" wants empty
	}{
		{
			name:      "complete",
			set:       []*unstructured.Unstructured{testJob("j", 0, false, 0, cond{typ: "Complete"})},
			succeeded: "j", latest: "j", waiting: "waiting for job j",
		},
		{
			name:      "success criteria met",
			set:       []*unstructured.Unstructured{testJob("j", 0, false, 1, cond{typ: "SuccessCriteriaMet", reason: "CompletionsReached"})},
			succeeded: "j", latest: "j", waiting: "waiting for job j",
		},
		{
			name:      "failed",
			set:       []*unstructured.Unstructured{testJob("j", 0, false, 0, cond{typ: "Failed", reason: "BackoffLimitExceeded", message: "Job has reached the specified backoff limit"})},
			succeeded: "<nil>", latest: "j", failed: "job j failed: BackoffLimitExceeded: Job has reached the specified backoff limit",
		},
		{
			name:      "failure target",
			set:       []*unstructured.Unstructured{testJob("j", 0, false, 1, cond{typ: "FailureTarget", reason: "PodFailurePolicy", message: "exit code 2"})},
			succeeded: "<nil>", latest: "j", failed: "job j failed: PodFailurePolicy: exit code 2",
		},
		{
			name:      "a condition that is False does not count",
			set:       []*unstructured.Unstructured{testJob("j", 0, false, 1, cond{typ: "Failed", status: "False", reason: "X"}, cond{typ: "Complete", status: "False"})},
			succeeded: "<nil>", latest: "j", waiting: "waiting for job j (active 1, failed 0)",
		},
		{
			name: "an old failure and a newer attempt running",
			set: []*unstructured.Unstructured{
				testJob("j-r1", 1, false, 1),
				testJob("j", 0, false, 0, cond{typ: "Failed", reason: "BackoffLimitExceeded"}),
			},
			succeeded: "<nil>", latest: "j-r1", waiting: "waiting for job j-r1 (active 1, failed 0)",
		},
		{
			name: "attempts sort as numbers",
			set: []*unstructured.Unstructured{
				testJob("j-r10", 10, false, 0, cond{typ: "Failed", reason: "DeadlineExceeded"}),
				testJob("j-r2", 2, false, 1),
				testJob("j-r9", 9, false, 1),
			},
			succeeded: "<nil>", latest: "j-r10", failed: "job j-r10 failed: DeadlineExceeded",
		},
		{
			name: "an older attempt completed",
			set: []*unstructured.Unstructured{
				testJob("j", 0, false, 0, cond{typ: "Complete"}),
				testJob("j-r1", 1, false, 0, cond{typ: "Failed", reason: "BackoffLimitExceeded"}),
			},
			succeeded: "j", latest: "j-r1", failed: "job j-r1 failed",
		},
		{
			name:      "empty",
			succeeded: "<nil>", latest: "<nil>",
		},
		{
			name:      "being deleted",
			set:       []*unstructured.Unstructured{testJob("j", 0, true, 1)},
			succeeded: "<nil>", latest: "j", waiting: "job j is being deleted",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := decide(tc.set)
			if got := name(v.succeeded); got != tc.succeeded {
				t.Errorf("succeeded %s, want %s", got, tc.succeeded)
			}
			if got := name(v.latest); got != tc.latest {
				t.Errorf("latest %s, want %s", got, tc.latest)
			}
			if (tc.failed == "") != (v.failed == "") || !strings.Contains(v.failed, tc.failed) {
				t.Errorf("failed %q, want %q", v.failed, tc.failed)
			}
			if (tc.waiting == "") != (v.waiting == "") || !strings.Contains(v.waiting, tc.waiting) {
				t.Errorf("waiting %q, want %q", v.waiting, tc.waiting)
			}
		})
	}
}

func TestPrune(t *testing.T) {
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	entries := func(n int) map[string]string {
		data := map[string]string{}
		for i := range n {
			e := Entry{Version: fmt.Sprintf("v%02d", i), Job: fmt.Sprintf("j%02d", i), Finished: base.Add(time.Duration(i) * time.Hour).Format(time.RFC3339)}
			b, _ := json.Marshal(e)
			data[key(Step{Version: e.Version})] = string(b)
		}
		return data
	}

	data := entries(40)
	prune(data)
	if len(data) != maxEntries || maxEntries != 32 {
		t.Fatalf("%d entries kept, want 32", len(data))
	}
	for i := range 40 {
		_, ok := data[key(Step{Version: fmt.Sprintf("v%02d", i)})]
		if ok != (i >= 8) {
			t.Errorf("v%02d kept %v, want %v (the newest 32)", i, ok, i >= 8)
		}
	}

	// 32 or fewer: nothing goes.
	data = entries(32)
	prune(data)
	if len(data) != 32 {
		t.Errorf("32 entries: %d kept", len(data))
	}

	// An unreadable entry goes first.
	data = entries(32)
	data["bootstrap.garbage"] = "{not json"
	prune(data)
	if _, ok := data["bootstrap.garbage"]; ok || len(data) != 32 || data[key(Step{Version: "v00"})] == "" {
		t.Errorf("unreadable entry kept or a good one dropped: %d entries", len(data))
	}
}

// FuzzJob: any template either is refused with an error or becomes a Job
// whose name is a DNS label of at most 63 characters, carrying the
// bootstrap's labels; its version never fails where the Job was built.
func FuzzJob(f *testing.F) {
	f.Add("apiVersion: batch/v1\nkind: Job\nspec: {template: {spec: {containers: [{name: c, image: i}]}}}\n", "expand", "2026.1", 2)
	f.Add("apiVersion: batch/v1\nkind: Job\nmetadata: {labels: {a: b}, annotations: {x: y}}\nspec: {backoffLimit: 1, template: {metadata: {labels: {p: q}}, spec: {restartPolicy: OnFailure, containers: [{name: c}]}}}\n", "", "0123456789", 0)
	f.Add("kind: Job\n", "contract", "", 1)
	f.Fuzz(func(t *testing.T, manifest, phase, version string, attempt int) {
		if attempt < 0 || attempt > 10 {
			return
		}
		c := &Coordinator{cfg: Config{Name: "keystone-db-sync", Namespace: "ns", PodName: "p"}}
		s := Step{Phase: phase, Version: version}
		u, err := c.job(JobSpec{Manifest: []byte(manifest), Source: "t.yaml", PermanentExitCodes: []int32{3}}, s, attempt)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "t.yaml: ") {
				t.Fatalf("error without the template's name: %v", err)
			}
			return
		}
		if phase == "" || dnsLabelRe.MatchString(phase) && len(phase) <= 20 {
			if n := u.GetName(); len(n) > 63 || !dnsLabelRe.MatchString(n) {
				t.Fatalf("job name %q is not a DNS label of at most 63", n)
			}
		}
		if u.GetLabels()[LabelName] != "keystone-db-sync" {
			t.Fatalf("labels %v", u.GetLabels())
		}
		if _, err := Version([]byte(manifest), nil); err != nil {
			t.Fatalf("a template that built a Job has no version: %v", err)
		}
	})
}

// A Job template asks for no more than a plain pod unless agent.yaml
// names it: another account, the node's namespaces or files, privilege,
// capabilities are refused with the field, and pass once allowed.
func TestJobPolicy(t *testing.T) {
	c := &Coordinator{cfg: Config{Name: "keystone-db-sync", Namespace: "ns", PodName: "p"}}
	const src = "/etc/kolla-agent/db-sync-job.yaml"
	job := func(pod string) string {
		return "apiVersion: batch/v1\nkind: Job\nspec: {template: {spec: {" + pod + "}}}\n"
	}
	const plain = "containers: [{name: db-sync, image: keystone}]"
	for _, tc := range []struct {
		name, pod string
		want      string
		allow     JobAllow
	}{
		{"another account", "serviceAccountName: cluster-admin-sa, " + plain, `spec.template.spec.serviceAccountName: "cluster-admin-sa" is not in bootstrap.allow.serviceAccounts`, JobAllow{ServiceAccounts: []string{"cluster-admin-sa"}}},
		{"the deprecated field", "serviceAccount: admin, " + plain, `spec.template.spec.serviceAccount: "admin"`, JobAllow{ServiceAccounts: []string{"admin"}}},
		{"host network", "hostNetwork: true, " + plain, `spec.template.spec.hostNetwork: true, and "network" is not in bootstrap.allow.hostNamespaces`, JobAllow{HostNamespaces: []string{"network"}}},
		{"host pid", "hostPID: true, " + plain, `hostPID: true, and "pid"`, JobAllow{HostNamespaces: []string{"pid"}}},
		{"host ipc", "hostIPC: true, " + plain, `hostIPC: true, and "ipc"`, JobAllow{HostNamespaces: []string{"ipc"}}},
		{"host path", "volumes: [{name: a, emptyDir: {}}, {name: root, hostPath: {path: /}}], " + plain, `spec.template.spec.volumes[1].hostPath.path: "/" is not in bootstrap.allow.hostPaths`, JobAllow{HostPaths: []string{"/"}}},
		{"privileged", "containers: [{name: db-sync, securityContext: {privileged: true}}]", `spec.template.spec.containers[0].securityContext.privileged: true, and container "db-sync" is not in bootstrap.allow.privileged`, JobAllow{Privileged: []string{"db-sync"}}},
		{"privileged init", "initContainers: [{name: init, securityContext: {privileged: true}}], " + plain, `spec.template.spec.initContainers[0].securityContext.privileged`, JobAllow{Privileged: []string{"init"}}},
		{"a capability", "containers: [{name: db-sync, securityContext: {capabilities: {add: [SYS_ADMIN]}}}]", `spec.template.spec.containers[0].securityContext.capabilities.add: "SYS_ADMIN" is not in bootstrap.allow.capabilities`, JobAllow{Capabilities: []string{"SYS_ADMIN"}}},
		{"CAP_ spelled", "containers: [{name: db-sync, securityContext: {capabilities: {add: [CAP_NET_ADMIN]}}}]", `"CAP_NET_ADMIN"`, JobAllow{Capabilities: []string{"NET_ADMIN"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.job(JobSpec{Manifest: []byte(job(tc.pod)), Source: src}, Step{Version: "0123456789"}, 0)
			if err == nil || !strings.HasPrefix(err.Error(), src+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant one naming %s and %q", err, src, tc.want)
			}
			if _, err := c.job(JobSpec{Manifest: []byte(job(tc.pod)), Source: src, Allow: tc.allow}, Step{Version: "0123456789"}, 0); err != nil {
				t.Errorf("allowed by name, still refused: %v", err)
			}
		})
	}
	for _, ok := range []string{plain, "serviceAccountName: default, " + plain, "hostNetwork: false, " + plain,
		"containers: [{name: db-sync, securityContext: {privileged: false, capabilities: {drop: [ALL]}, runAsNonRoot: true}}]"} {
		if _, err := c.job(JobSpec{Manifest: []byte(job(ok)), Source: src}, Step{Version: "0123456789"}, 0); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}
