package entrypoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"github.com/google/shlex"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kolla-agent/kolla-agent/discovery"
)

// The variables kubernetes-entrypoint reads.
const (
	envNamespace      = "NAMESPACE"
	envPodName        = "POD_NAME"
	envCommand        = "COMMAND"
	envService        = "DEPENDENCY_SERVICE"
	envJobs           = "DEPENDENCY_JOBS"
	envJobsJSON       = "DEPENDENCY_JOBS_JSON"
	envDaemonSet      = "DEPENDENCY_DAEMONSET"
	envContainer      = "DEPENDENCY_CONTAINER"
	envPodJSON        = "DEPENDENCY_POD_JSON"
	envCustomResource = "DEPENDENCY_CUSTOM_RESOURCE"
	envSocket         = "DEPENDENCY_SOCKET"
	// envConfig is kubernetes-entrypoint's config templating, which the agent
	// does not do; it is recognised so that it fails loudly.
	envConfig = "DEPENDENCY_CONFIG"

	defaultNamespace = "default"

	// maxErrors bounds the problems Parse lists; the rest are counted.
	maxErrors = 20
)

// dependencyVars are the DEPENDENCY_* variables, in the order Parse reads them.
var dependencyVars = []string{
	envService, envJobs, envJobsJSON, envDaemonSet, envContainer,
	envPodJSON, envCustomResource, envSocket, envConfig,
}

// Present reports whether any DEPENDENCY_* variable is set (even empty) or
// COMMAND is set.
func Present(lookup func(string) (string, bool)) bool {
	if lookup == nil {
		return false
	}
	for _, name := range dependencyVars {
		if _, ok := lookup(name); ok {
			return true
		}
	}
	_, ok := lookup(envCommand)
	return ok
}

// Spec is what the kubernetes-entrypoint variables ask for.
type Spec struct {
	Namespace    string // NAMESPACE, default "default"
	PodName      string // POD_NAME
	Dependencies []discovery.Dependency
	Command      []string // COMMAND split like a shell, nil if unset/empty
	// Ignored lists the keys of the JSON items that mean nothing here, one
	// "VARIABLE item N: key K" each: kubernetes-entrypoint ignores keys it
	// does not know, and helm-toolkit passes the chart's values through
	// toJson as they are, so they are accepted and only logged at debug.
	Ignored []string
}

// Parse reads the kubernetes-entrypoint variables. On error the Spec is zero
// and the error lists every problem found, one per line, each naming its
// variable (and item).
func Parse(lookup func(string) (string, bool)) (Spec, error) {
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	p := &parser{lookup: lookup, namespace: defaultNamespace}
	if ns, _ := lookup(envNamespace); ns != "" {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			p.errs = append(p.errs, fmt.Errorf("%s %q: %s", envNamespace, ns, strings.Join(msgs, "; ")))
		} else {
			p.namespace = ns
		}
	}
	p.podName, _ = lookup(envPodName)
	if p.podName != "" {
		if msgs := validation.IsDNS1123Subdomain(p.podName); len(msgs) > 0 {
			p.errs = append(p.errs, fmt.Errorf("%s %q: %s", envPodName, p.podName, strings.Join(msgs, "; ")))
		}
	}

	p.names(envService, discovery.KindService)
	if v, _ := lookup(envJobsJSON); strings.TrimSpace(v) != "" {
		p.jobsJSON(v)
	} else {
		p.names(envJobs, discovery.KindJob)
	}
	p.names(envDaemonSet, discovery.KindDaemonSet)
	p.containers()
	p.podsJSON()
	p.customResources()
	p.sockets()
	if v, _ := lookup(envConfig); strings.TrimSpace(v) != "" {
		p.errs = append(p.errs, fmt.Errorf("%s %q: config templating is not supported; render config files with the agent's render step", envConfig, v))
	}
	command, err := splitCommand(lookup)
	if err != nil {
		p.errs = append(p.errs, err)
	}

	if len(p.errs) > maxErrors {
		more := len(p.errs) - maxErrors
		p.errs = append(p.errs[:maxErrors], fmt.Errorf("and %d more problems", more))
	}
	if len(p.errs) > 0 {
		return Spec{}, errors.Join(p.errs...)
	}
	return Spec{Namespace: p.namespace, PodName: p.podName, Dependencies: p.deps, Command: command, Ignored: p.ignored}, nil
}

type parser struct {
	lookup    func(string) (string, bool)
	namespace string
	podName   string
	deps      []discovery.Dependency
	errs      []error
	ignored   []string // JSON item keys accepted but meaning nothing here
}

// itemError reports a problem with item i (0-based) of variable name; item is
// shown quoted.
func (p *parser) itemError(name string, i int, item string, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s item %d %q: %s", name, i+1, item, fmt.Sprintf(format, args...)))
}

// jsonItemError reports a problem with item i (0-based) of a JSON variable;
// the item is shown as compact JSON, shortened when long.
func (p *parser) jsonItemError(name string, i int, raw json.RawMessage, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s item %d %s: %s", name, i+1, showJSON(raw), fmt.Sprintf(format, args...)))
}

// add keeps d after the checks every dependency must pass: one that needs the
// agent's own pod needs POD_NAME, and its String() must parse back (which a
// mistake in the checks above would otherwise let through).
func (p *parser) add(d discovery.Dependency, fail func(format string, args ...any)) {
	if d.NeedsPod() && p.podName == "" {
		fail("needs %s (set it from the downward API, fieldRef metadata.name)", envPodName)
		return
	}
	if _, err := discovery.Parse(d.String()); err != nil {
		fail("cannot be expressed as a dependency: %v", err)
		return
	}
	p.deps = append(p.deps, d)
}

// list splits a comma-separated variable into trimmed items; an unset or
// blank variable has none.
func (p *parser) list(name string) []string {
	v, _ := p.lookup(name)
	if strings.TrimSpace(v) == "" {
		return nil
	}
	items := strings.Split(v, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
	}
	return items
}

var kindWord = map[discovery.Kind]string{
	discovery.KindService:   "service",
	discovery.KindJob:       "job",
	discovery.KindDaemonSet: "daemonset",
}

// names reads NAME or NS:NAME items (SERVICE, JOBS, DAEMONSET).
func (p *parser) names(name string, kind discovery.Kind) {
	word := kindWord[kind]
	for i, item := range p.list(name) {
		fail := func(format string, args ...any) { p.itemError(name, i, item, format, args...) }
		if item == "" {
			fail("empty item (want NAME or NAMESPACE:NAME)")
			continue
		}
		ns, obj := p.namespace, item
		if strings.Contains(item, ":") {
			parts := strings.Split(item, ":")
			if len(parts) != 2 {
				fail("too many colons (want NAME or NAMESPACE:NAME)")
				continue
			}
			ns, obj = parts[0], parts[1]
			if ns == "" {
				fail("empty namespace before %q", ":")
				continue
			}
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				fail("namespace %q: %s", ns, strings.Join(msgs, "; "))
				continue
			}
		}
		if obj == "" {
			fail("empty %s name", word)
			continue
		}
		var msgs []string
		if kind == discovery.KindService {
			msgs = validation.IsDNS1035Label(obj) // what the API server requires of a Service
		} else {
			msgs = validation.IsDNS1123Subdomain(obj)
		}
		if len(msgs) > 0 {
			fail("%s name %q: %s", word, obj, strings.Join(msgs, "; "))
			continue
		}
		p.add(discovery.Dependency{Kind: kind, Namespace: ns, Name: obj}, fail)
	}
}

func (p *parser) containers() {
	for i, item := range p.list(envContainer) {
		fail := func(format string, args ...any) { p.itemError(envContainer, i, item, format, args...) }
		switch {
		case item == "":
			fail("empty item (want a container name of this pod)")
		case strings.Contains(item, ":"):
			fail("a container of this pod takes no namespace")
		default:
			if msgs := validation.IsDNS1123Label(item); len(msgs) > 0 {
				fail("container name %q: %s", item, strings.Join(msgs, "; "))
				continue
			}
			p.add(discovery.Dependency{Kind: discovery.KindContainer, Namespace: p.namespace, Name: item}, fail)
		}
	}
}

func (p *parser) sockets() {
	for i, item := range p.list(envSocket) {
		fail := func(format string, args ...any) { p.itemError(envSocket, i, item, format, args...) }
		if item == "" {
			fail("empty item (want a socket path)")
			continue
		}
		p.add(discovery.Dependency{Kind: discovery.KindSocket, Path: item}, fail)
	}
}

// itemNamespace validates an item's "namespace", defaulting it to NAMESPACE.
func (p *parser) itemNamespace(ns string) (string, error) {
	if ns == "" {
		return p.namespace, nil
	}
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		return "", fmt.Errorf("namespace %q: %s", ns, strings.Join(msgs, "; "))
	}
	return ns, nil
}

type jobItem struct {
	Name      *string           `json:"name"`
	Labels    map[string]string `json:"labels"`
	Namespace string            `json:"namespace"`
}

func (p *parser) jobsJSON(v string) {
	eachJSONItem(p, envJobsJSON, v, func(it jobItem, fail func(string, ...any)) {
		ns, err := p.itemNamespace(it.Namespace)
		if err != nil {
			fail("%v", err)
			return
		}
		d := discovery.Dependency{Kind: discovery.KindJob, Namespace: ns}
		switch {
		case it.Name != nil && it.Labels != nil:
			fail(`give "name" or "labels", not both`)
			return
		case it.Name != nil:
			if *it.Name == "" {
				fail("empty job name")
				return
			}
			if msgs := validation.IsDNS1123Subdomain(*it.Name); len(msgs) > 0 {
				fail("job name %q: %s", *it.Name, strings.Join(msgs, "; "))
				return
			}
			d.Name = *it.Name
		case it.Labels != nil:
			if err := discovery.ValidateLabels(it.Labels); err != nil {
				fail("labels: %v", err)
				return
			}
			d.Labels = it.Labels
		default:
			fail(`want "name" or "labels"`)
			return
		}
		p.add(d, fail)
	})
}

// eachJSONItem decodes the variable as a JSON list and calls each with every
// item that decodes strictly, and a fail that names the variable and item.
func eachJSONItem[T any](p *parser, name, v string, each func(it T, fail func(string, ...any))) {
	items, err := decodeList(v)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s: %v", name, err))
		return
	}
	for i, raw := range items {
		fail := func(format string, args ...any) { p.jsonItemError(name, i, raw, format, args...) }
		var it T
		ignored, err := decodeItem(raw, &it)
		if err != nil {
			fail("%v", err)
			continue
		}
		for _, k := range ignored {
			p.ignored = append(p.ignored, fmt.Sprintf("%s item %d: key %q", name, i+1, k))
		}
		if len(ignored) > 0 {
			// A misspelt key is the likeliest cause of a failing item.
			fail = func(format string, args ...any) {
				p.jsonItemError(name, i, raw, format+" (keys not read here: %q)", append(args, ignored)...)
			}
		}
		each(it, fail)
	}
}

type podItem struct {
	Labels          map[string]string `json:"labels"`
	Namespace       string            `json:"namespace"`
	RequireSameNode bool              `json:"requireSameNode"`
}

func (p *parser) podsJSON() {
	v, _ := p.lookup(envPodJSON)
	eachJSONItem(p, envPodJSON, v, func(it podItem, fail func(string, ...any)) {
		ns, err := p.itemNamespace(it.Namespace)
		if err != nil {
			fail("%v", err)
			return
		}
		// An empty selector would match every pod: kubernetes-entrypoint then
		// resolves on any ready pod, which is never what was meant.
		if err := discovery.ValidateLabels(it.Labels); err != nil {
			fail("labels: %v", err)
			return
		}
		p.add(discovery.Dependency{Kind: discovery.KindPod, Namespace: ns, Labels: it.Labels, SameNode: it.RequireSameNode}, fail)
	})
}

type crItem struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Resource is the kind's plural, which helm-toolkit's values give for
	// kinds whose plural is irregular; the API's discovery is asked for
	// the resource of that name instead of the kind's.
	Resource   string        `json:"resource"`
	Name       string        `json:"name"`
	Namespace  string        `json:"namespace"`
	Fields     []crField     `json:"fields"`
	Conditions []crCondition `json:"conditions"`
}

type crField struct {
	Key string `json:"key"`
	// Value is a string in kubernetes-entrypoint; a JSON number or boolean is
	// accepted too, since the field is compared as its own type anyway.
	Value json.RawMessage `json:"value"`
}

type crCondition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
}

func (p *parser) customResources() {
	v, _ := p.lookup(envCustomResource)
	eachJSONItem(p, envCustomResource, v, func(it crItem, fail func(string, ...any)) {
		d, err := p.customResource(it)
		if err != nil {
			fail("%v", err)
			return
		}
		p.add(d, fail)
	})
}

func (p *parser) customResource(it crItem) (discovery.Dependency, error) {
	group, version, err := splitAPIVersion(it.APIVersion)
	if err != nil {
		return discovery.Dependency{}, err
	}
	if err := validKind(it.Kind); err != nil {
		return discovery.Dependency{}, err
	}
	if it.Name == "" {
		return discovery.Dependency{}, errors.New(`empty "name"`)
	}
	if msgs := validation.IsDNS1123Subdomain(it.Name); len(msgs) > 0 {
		return discovery.Dependency{}, fmt.Errorf("name %q: %s", it.Name, strings.Join(msgs, "; "))
	}
	ns, err := p.itemNamespace(it.Namespace)
	if err != nil {
		return discovery.Dependency{}, err
	}
	if it.Resource != "" {
		if msgs := validation.IsDNS1123Label(it.Resource); len(msgs) > 0 {
			return discovery.Dependency{}, fmt.Errorf("resource %q: %s", it.Resource, strings.Join(msgs, "; "))
		}
	}
	r := &discovery.ResourceRef{Group: group, Version: version, Kind: it.Kind, Plural: it.Resource}
	for j, f := range it.Fields {
		fm, err := fieldMatch(f)
		if err != nil {
			return discovery.Dependency{}, fmt.Errorf("fields[%d]: %v", j, err)
		}
		r.Fields = append(r.Fields, fm)
	}
	for j, c := range it.Conditions {
		cm, err := conditionMatch(c)
		if err != nil {
			return discovery.Dependency{}, fmt.Errorf("conditions[%d]: %v", j, err)
		}
		r.Conditions = append(r.Conditions, cm)
	}
	return discovery.Dependency{Kind: discovery.KindResource, Namespace: ns, Name: it.Name, Resource: r}, nil
}

// splitAPIVersion reads "v1" (the core group) or "GROUP/VERSION".
func splitAPIVersion(s string) (group, version string, err error) {
	if s == "" {
		return "", "", errors.New(`empty "apiVersion"`)
	}
	parts := strings.Split(s, "/")
	switch len(parts) {
	case 1:
		version = parts[0]
	case 2:
		group, version = parts[0], parts[1]
		if group == "" {
			return "", "", fmt.Errorf("apiVersion %q: empty group", s)
		}
		if group == "core" {
			return "", "", fmt.Errorf(`apiVersion %q: the core group is written "v1"`, s)
		}
		if msgs := validation.IsDNS1123Subdomain(group); len(msgs) > 0 {
			return "", "", fmt.Errorf("apiVersion %q: group %q: %s", s, group, strings.Join(msgs, "; "))
		}
	default:
		return "", "", fmt.Errorf(`apiVersion %q: want "v1" or "GROUP/VERSION"`, s)
	}
	if msgs := validation.IsDNS1123Label(version); len(msgs) > 0 {
		return "", "", fmt.Errorf("apiVersion %q: version %q: %s", s, version, strings.Join(msgs, "; "))
	}
	return group, version, nil
}

// validKind accepts a kind as Kubernetes spells them: a letter, then letters
// and digits ("Deployment", "MariaDB").
func validKind(kind string) error {
	if kind == "" {
		return errors.New(`empty "kind"`)
	}
	for i, c := range kind {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return fmt.Errorf("kind %q: want a letter followed by letters and digits, like MariaDB", kind)
		}
	}
	return nil
}

// fieldMatch checks one "fields" entry. The wait syntax carries it as
// KEY=VALUE joined by "&", so neither may contain "&" nor the key "=".
func fieldMatch(f crField) (discovery.FieldMatch, error) {
	if f.Key == "" {
		return discovery.FieldMatch{}, errors.New(`empty "key"`)
	}
	for _, seg := range strings.Split(f.Key, ".") {
		if seg == "" {
			return discovery.FieldMatch{}, fmt.Errorf("key %q: want a dotted path like status.phase", f.Key)
		}
	}
	if strings.ContainsAny(f.Key, "&=") {
		return discovery.FieldMatch{}, fmt.Errorf(`key %q: "&" and "=" are not supported in a key`, f.Key)
	}
	if f.Key == "condition" {
		return discovery.FieldMatch{}, fmt.Errorf(`key %q: use "conditions" for status conditions`, f.Key)
	}
	value, err := scalar(f.Value)
	if err != nil {
		return discovery.FieldMatch{}, fmt.Errorf("key %q: %v", f.Key, err)
	}
	if strings.Contains(value, "&") {
		return discovery.FieldMatch{}, fmt.Errorf(`key %q: value %q: "&" is not supported in a value`, f.Key, value)
	}
	return discovery.FieldMatch{Path: f.Key, Value: value}, nil
}

// scalar reads a field's "value": a string, number or boolean.
func scalar(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", errors.New(`no "value"`)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err == nil {
		switch v := v.(type) {
		case string:
			return v, nil
		case bool, float64:
			return string(raw), nil
		}
	}
	return "", fmt.Errorf(`"value" %s: want a string, number or boolean`, showJSON(raw))
}

func conditionMatch(c crCondition) (discovery.ConditionMatch, error) {
	if c.Type == "" {
		return discovery.ConditionMatch{}, errors.New(`empty "type"`)
	}
	// metav1.Condition's type is a qualified name ("Ready", "example.com/Synced").
	if msgs := validation.IsQualifiedName(c.Type); len(msgs) > 0 {
		return discovery.ConditionMatch{}, fmt.Errorf("type %q: %s", c.Type, strings.Join(msgs, "; "))
	}
	status := c.Status
	switch status {
	case "":
		status = "True"
	case "True", "False", "Unknown":
	default:
		return discovery.ConditionMatch{}, fmt.Errorf("type %q: status %q: want True, False or Unknown", c.Type, c.Status)
	}
	return discovery.ConditionMatch{Type: c.Type, Status: status}, nil
}

// decodeList reads a JSON list; a blank value, [] and null hold no items.
func decodeList(v string) ([]json.RawMessage, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	dec := json.NewDecoder(strings.NewReader(v))
	var items []json.RawMessage
	if err := dec.Decode(&items); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			return nil, fmt.Errorf("bad JSON at byte %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
		case errors.As(err, &typ):
			return nil, fmt.Errorf("want a JSON list of objects, not a JSON %s", typ.Value)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, errors.New("bad JSON: it ends too early")
		default:
			return nil, fmt.Errorf("bad JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("bad JSON: unexpected text after the list at byte %d", dec.InputOffset())
	}
	return items, nil
}

// decodeItem decodes one list item into dst: the item must be an object,
// and a known field of the wrong type is an error that names the field.
// Keys dst does not have are returned, sorted, not refused:
// kubernetes-entrypoint ignores them, and helm-toolkit passes whatever the
// chart's values hold.
func decodeItem(raw json.RawMessage, dst any) ([]string, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return nil, fmt.Errorf("want a JSON object")
	}
	err := json.Unmarshal(raw, dst)
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typ):
		if typ.Field == "" {
			return nil, fmt.Errorf("want a JSON object")
		}
		return nil, fmt.Errorf("field %q: want %s, not a JSON %s", typ.Field, jsonKind(typ.Type), typ.Value)
	case err != nil:
		return nil, errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	// encoding/json matches keys case-insensitively; so does this.
	known := map[string]bool{}
	t := reflect.TypeOf(dst).Elem()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		known[strings.ToLower(name)] = true
	}
	var ignored []string
	for k := range keys {
		if !known[strings.ToLower(k)] {
			ignored = append(ignored, k)
		}
	}
	slices.Sort(ignored)
	return ignored, nil
}

// jsonKind names a Go type the way the JSON it decodes from is written.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[json.RawMessage]() {
		return "a value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Map:
		return "an object of strings"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Struct:
		return "an object"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "a number"
	}
	return t.String()
}

// showJSON renders a JSON item compactly for an error message, cut short
// when long.
func showJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	s := string(raw)
	if json.Compact(&b, raw) == nil {
		s = b.String()
	}
	const max = 120
	if len(s) > max {
		s = strings.ToValidUTF8(s[:max], "") + "..."
	}
	return s
}

// splitCommand splits COMMAND like a POSIX shell: words separated by blanks,
// single quotes literal, double quotes and backslashes escaping, "#" at the
// start of a word beginning a comment. Unset, blank or comment-only is nil.
func splitCommand(lookup func(string) (string, bool)) ([]string, error) {
	v, _ := lookup(envCommand)
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	words, err := shlex.Split(v)
	if err != nil {
		msg := err.Error()
		switch {
		case strings.Contains(msg, "closing quote"):
			msg = "unbalanced quotes: a quote is never closed"
		case strings.Contains(msg, "escape character"):
			msg = "ends with a lone backslash"
		}
		return nil, fmt.Errorf("%s %q: %s", envCommand, v, msg)
	}
	if len(words) == 0 {
		return nil, nil
	}
	return words, nil
}
