package bootstrap

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Version is the content hash that names a version: 10 hex digits of a
// SHA-256 over the Job's manifest as the API would read it (so formatting
// and key order do not count) and over each input file's name and content.
// Anything that changes what the Job does (its image, command, environment,
// mounted config) changes the name, and so makes a new Job.
func Version(manifest []byte, inputs map[string][]byte) (string, error) {
	h := sha256.New()
	if len(manifest) > 0 {
		var obj any
		if err := yaml.Unmarshal(manifest, &obj); err != nil {
			return "", err
		}
		canon, err := json.Marshal(obj) // maps marshal with sorted keys
		if err != nil {
			return "", err
		}
		h.Write(canon)
	}
	names := make([]string, 0, len(inputs))
	for n := range inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(h, "\x00%s\x00%d\x00", n, len(inputs[n]))
		h.Write(inputs[n])
	}
	return hex.EncodeToString(h.Sum(nil))[:10], nil
}

// maxName is the longest object name that is also a valid label value (a
// Job's name becomes its pods' job-name label).
const maxName = 63

// JobName is <prefix>[-<phase>]-<version>[-r<attempt>], the prefix cut so
// that the whole fits in 63 characters. An explicit version that is not a
// hash is hashed to 10 hex digits here, keeping names short and valid.
func JobName(prefix string, s Step, attempt int) string {
	v := s.Version
	if !isHex10(v) {
		sum := sha256.Sum256([]byte(v))
		v = hex.EncodeToString(sum[:])[:10]
	}
	tail := "-" + v
	if attempt > 0 {
		tail += "-r" + strconv.Itoa(attempt)
	}
	// A phase too long to leave room for a character of the prefix is cut
	// too: the version and the attempt are what tell Jobs apart.
	if phase := s.Phase[:min(len(s.Phase), max(0, maxName-2-len(tail)))]; strings.TrimRight(phase, "-") != "" {
		tail = "-" + strings.TrimRight(phase, "-") + tail
	}
	if len(prefix)+len(tail) > maxName {
		prefix = prefix[:max(0, maxName-len(tail))]
		for len(prefix) > 0 && prefix[len(prefix)-1] == '-' {
			prefix = prefix[:len(prefix)-1]
		}
	}
	return prefix + tail
}

func isHex10(s string) bool {
	if len(s) != 10 {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// JobSpec is what create mode turns into a Job.
type JobSpec struct {
	// Manifest is the rendered template: a batch/v1 Job. Source names it in
	// errors (the template's path).
	Manifest []byte
	Source   string
	// PermanentExitCodes fail the Job at once (podFailurePolicy FailJob).
	PermanentExitCodes []int32
	// Allow is what the pod may ask for beyond a plain pod.
	Allow JobAllow
}

// defaultBackoffLimit is the Job API's own default, written out so that it
// shows in the manifest the agent created.
const defaultBackoffLimit = 6

// job builds the Job object of one attempt: the template's manifest with
// the agent's name, labels and defaults. Errors name the template and the
// field.
func (c *Coordinator) job(spec JobSpec, s Step, attempt int) (*unstructured.Unstructured, error) {
	var obj map[string]any
	if err := yaml.Unmarshal(spec.Manifest, &obj); err != nil {
		return nil, fmt.Errorf("%s: %v", spec.Source, err)
	}
	u := &unstructured.Unstructured{Object: obj}
	if u.GetAPIVersion() != "batch/v1" || u.GetKind() != "Job" {
		return nil, fmt.Errorf("%s: apiVersion/kind: %q/%q, want batch/v1 Job", spec.Source, u.GetAPIVersion(), u.GetKind())
	}
	if _, ok, _ := unstructured.NestedMap(obj, "spec", "template", "spec"); !ok {
		return nil, fmt.Errorf("%s: spec.template.spec: missing", spec.Source)
	}
	if cs, _, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", "containers"); len(cs) == 0 {
		return nil, fmt.Errorf("%s: spec.template.spec.containers: empty", spec.Source)
	}
	if err := checkJobPolicy(obj, spec.Source, spec.Allow); err != nil {
		return nil, err
	}
	labels, err := stringMap(obj, spec.Source, "metadata", "labels")
	if err != nil {
		return nil, err
	}
	u.SetName(JobName(c.cfg.Name, s, attempt))
	u.SetGenerateName("")
	u.SetNamespace(c.cfg.Namespace)
	for k, v := range c.labels(s) {
		labels[k] = v
	}
	labels[LabelAttempt] = strconv.Itoa(attempt)
	u.SetLabels(labels)
	ann, err := stringMap(obj, spec.Source, "metadata", "annotations")
	if err != nil {
		return nil, err
	}
	ann[AnnotationCreatedBy] = c.cfg.PodName
	u.SetAnnotations(ann)
	// The pods carry the bootstrap labels too: `kubectl logs -l` finds them.
	podLabels, err := stringMap(obj, spec.Source, "spec", "template", "metadata", "labels")
	if err != nil {
		return nil, err
	}
	for k, v := range c.labels(s) {
		podLabels[k] = v
	}
	if err := unstructured.SetNestedStringMap(obj, podLabels, "spec", "template", "metadata", "labels"); err != nil {
		return nil, fmt.Errorf("%s: spec.template.metadata.labels: %v", spec.Source, err)
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(obj, "spec", "backoffLimit"); !ok {
		_ = unstructured.SetNestedField(obj, int64(defaultBackoffLimit), "spec", "backoffLimit")
	}
	restart, ok, _ := unstructured.NestedString(obj, "spec", "template", "spec", "restartPolicy")
	if !ok {
		restart = "Never"
		_ = unstructured.SetNestedField(obj, restart, "spec", "template", "spec", "restartPolicy")
	}
	_, own, _ := unstructured.NestedFieldNoCopy(obj, "spec", "podFailurePolicy")
	switch {
	case len(spec.PermanentExitCodes) > 0 && restart != "Never":
		return nil, fmt.Errorf("%s: spec.template.spec.restartPolicy: %q, but a podFailurePolicy (bootstrap.permanentExitCodes) needs Never", spec.Source, restart)
	case len(spec.PermanentExitCodes) > 0 && own:
		return nil, fmt.Errorf("%s: spec.podFailurePolicy: the template has its own, so bootstrap.permanentExitCodes would be ignored: put the exit codes in it, or drop it", spec.Source)
	case !own && restart == "Never":
		_ = unstructured.SetNestedSlice(obj, failurePolicy(spec.PermanentExitCodes), "spec", "podFailurePolicy", "rules")
	}
	return u, nil
}

// stringMap reads a map of strings (labels, annotations), empty when absent;
// a value that is not a string is an error naming the field, not a silent
// loss of the whole map.
func stringMap(obj map[string]any, source string, fields ...string) (map[string]string, error) {
	raw, ok, _ := unstructured.NestedFieldNoCopy(obj, fields...)
	if !ok || raw == nil {
		return map[string]string{}, nil
	}
	m, isMap := raw.(map[string]any)
	if !isMap {
		return nil, fmt.Errorf("%s: %s: not a map", source, strings.Join(fields, "."))
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		str, isStr := v.(string)
		if !isStr {
			return nil, fmt.Errorf("%s: %s.%s: %v is not a string (quote it)", source, strings.Join(fields, "."), k, v)
		}
		out[k] = str
	}
	return out, nil
}

// failurePolicy: a pod disrupted (evicted, preempted, its node drained) is
// not the command's failure and does not count against backoffLimit; an
// exit code the config calls permanent fails the Job at once, where
// retrying would only fail again.
func failurePolicy(permanent []int32) []any {
	rules := []any{map[string]any{
		"action":          "Ignore",
		"onPodConditions": []any{map[string]any{"type": "DisruptionTarget"}},
	}}
	if len(permanent) > 0 {
		// The API wants the values sorted and unique.
		codes := slices.Clone(permanent)
		slices.Sort(codes)
		codes = slices.Compact(codes)
		values := make([]any, len(codes))
		for i, v := range codes {
			values[i] = int64(v)
		}
		rules = append(rules, map[string]any{
			"action":      "FailJob",
			"onExitCodes": map[string]any{"operator": "In", "values": values},
		})
	}
	return rules
}

// labels select one step's Jobs, every attempt.
func (c *Coordinator) labels(s Step) map[string]string {
	l := map[string]string{LabelName: c.cfg.Name, LabelVersion: s.Version} // config checks that a version is a label value
	if s.Phase != "" {
		l[LabelPhase] = s.Phase
	}
	return l
}

// JobAllow names what a Job template may ask for beyond a plain pod. The
// agent's ServiceAccount can create Jobs, and its token is within reach of
// the service it runs beside: without these checks a compromised service
// could have the agent (or the token) start a pod with another account's
// token, the node's filesystem or its namespaces. The API server's
// ValidatingAdmissionPolicy (examples/rbac/job-policy.yaml) holds the same
// line against a Job made with the token directly.
type JobAllow struct {
	// ServiceAccounts the Job's pod may run as (serviceAccountName); the
	// namespace's default account needs no entry.
	ServiceAccounts []string
	// HostPaths are hostPath volume paths the pod may mount.
	HostPaths []string
	// HostNamespaces the pod may share: network, pid, ipc.
	HostNamespaces []string
	// Privileged names the containers that may be privileged.
	Privileged []string
	// Capabilities may be added to any container.
	Capabilities []string
}

// checkJobPolicy refuses a pod spec that asks for what allow does not
// name, naming the template and the field.
func checkJobPolicy(obj map[string]any, source string, allow JobAllow) error {
	pod, _, _ := unstructured.NestedMap(obj, "spec", "template", "spec")
	at := "spec.template.spec."
	for _, f := range []string{"serviceAccountName", "serviceAccount"} {
		if sa, _ := pod[f].(string); sa != "" && sa != "default" && !slices.Contains(allow.ServiceAccounts, sa) {
			return fmt.Errorf("%s: %s%s: %q is not in bootstrap.allow.serviceAccounts: a bootstrap Job runs as the namespace's default account unless agent.yaml names another", source, at, f, sa)
		}
	}
	for f, ns := range map[string]string{"hostNetwork": "network", "hostPID": "pid", "hostIPC": "ipc"} {
		if on, _ := pod[f].(bool); on && !slices.Contains(allow.HostNamespaces, ns) {
			return fmt.Errorf("%s: %s%s: true, and %q is not in bootstrap.allow.hostNamespaces", source, at, f, ns)
		}
	}
	vols, _ := pod["volumes"].([]any)
	for i, v := range vols {
		vm, _ := v.(map[string]any)
		hp, ok := vm["hostPath"].(map[string]any)
		if !ok {
			continue
		}
		p, _ := hp["path"].(string)
		if !slices.Contains(allow.HostPaths, path.Clean(p)) {
			return fmt.Errorf("%s: %svolumes[%d].hostPath.path: %q is not in bootstrap.allow.hostPaths", source, at, i, p)
		}
	}
	for _, kind := range []string{"initContainers", "containers", "ephemeralContainers"} {
		cs, _ := pod[kind].([]any)
		for i, c := range cs {
			cm, _ := c.(map[string]any)
			name, _ := cm["name"].(string)
			sc, _ := cm["securityContext"].(map[string]any)
			field := fmt.Sprintf("%s%s[%d].securityContext", at, kind, i)
			if priv, _ := sc["privileged"].(bool); priv && !slices.Contains(allow.Privileged, name) {
				return fmt.Errorf("%s: %s.privileged: true, and container %q is not in bootstrap.allow.privileged", source, field, name)
			}
			caps, _ := sc["capabilities"].(map[string]any)
			add, _ := caps["add"].([]any)
			for _, a := range add {
				c, _ := a.(string)
				if !slices.Contains(allow.Capabilities, strings.TrimPrefix(strings.ToUpper(c), "CAP_")) {
					return fmt.Errorf("%s: %s.capabilities.add: %q is not in bootstrap.allow.capabilities", source, field, c)
				}
			}
		}
	}
	return nil
}
