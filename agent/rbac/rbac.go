// Package rbac derives from agent.yaml the least a Role must grant for the
// agent to do what it asks (`kolla-agent config rbac`).
package rbac

import (
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/bootstrap"
	"github.com/kolla-agent/kolla-agent/discovery"
)

// Rule is one rule of a Role, as rbac.authorization.k8s.io/v1 writes it.
type Rule struct {
	APIGroups     []string `json:"apiGroups"`
	Resources     []string `json:"resources"`
	Verbs         []string `json:"verbs"`
	ResourceNames []string `json:"resourceNames,omitempty"`
}

// Options is what agent.yaml does not say but the rules can name.
type Options struct {
	// Owner is the pod's workload, KIND/NAME (deployment/keystone-api):
	// reload's rollout and the rollout gate of later bootstrap phases then
	// reach that object only. Empty: bootstrap.owner, else any.
	Owner string
	// ConfigMaps are the ConfigMaps of the pod's volumes (reload source
	// api): watched by name. Empty: any.
	ConfigMaps []string
}

// Rules is the least a Role must grant for the agent to do what cfg
// asks, in the agent's own namespace: every rule on one object the agent
// knows by name carries resourceNames (a list or watch of one object is
// made with a metadata.name field selector, which RBAC authorises against
// resourceNames). What cannot be named is not: create (the name is not
// known to the authoriser), the pod itself (a Deployment's pods have random
// names), Jobs named by a content hash, objects selected by label.
// Dependencies in other namespaces than the agent's (namespace) need rules
// there (others).
func Rules(cfg *config.Config, namespace string, templates []string, o Options) (own []Rule, others map[string][]Rule) {
	r := set{}
	others = map[string][]Rule{}
	r.add("", "events", "create", "")
	r.add("events.k8s.io", "events", "create", "")
	r.add("", "pods", "get", "") // its own pod: the Event's object, its node
	var deps []discovery.Dependency
	var serviceRead [][2]string // Services read for their port alone (namespace, name)
	for _, d := range cfg.Dependencies.Wait {
		if dep, err := discovery.Parse(d.Wait); err == nil {
			deps = append(deps, dep)
		}
	}
	for _, c := range cfg.Probes.Checks {
		if c.Dependency != nil {
			if dep, err := discovery.Parse(c.Dependency.Wait); err == nil {
				deps = append(deps, dep)
			}
		}
	}
	for _, t := range templates {
		for _, m := range exposureCall.FindAllStringSubmatch(t, -1) {
			ns, name := bootstrap.ServiceRef(m[2], namespace)
			if m[1] == "internalURL" {
				// The Service's own port only.
				serviceRead = append(serviceRead, [2]string{ns, name})
				continue
			}
			deps = append(deps, discovery.Dependency{Kind: discovery.KindExposed, Namespace: ns, Name: name})
		}
	}
	elsewhere := map[string]set{}
	// in is the set of the Role in namespace ns ("" the agent's own).
	in := func(ns string) set {
		if ns == "" || ns == namespace {
			return r
		}
		if elsewhere[ns] == nil {
			elsewhere[ns] = set{}
		}
		return elsewhere[ns]
	}
	for _, d := range deps {
		dependencyRules(in(d.Namespace), d)
	}
	b := cfg.Bootstrap
	owner := o.Owner
	if owner == "" {
		owner = b.Owner
	}
	record := bootstrap.RecordName(b.Name)
	switch b.Mode {
	case config.BootstrapCreate:
		r.add("batch", "jobs", "create", "")
		r.watch("batch", "jobs", "")  // content-hashed names
		r.add("", "pods", "list", "") // a failed Job's pods, by its job-name label: why it failed
		r.add("", "configmaps", "create", "")
		r.add("", "configmaps", "get", record)
		r.add("", "configmaps", "update", record)
	case config.BootstrapWait:
		for _, j := range b.Jobs {
			if dep, err := discovery.Parse("job:" + j); err == nil {
				dependencyRules(in(dep.Namespace), dep)
			}
		}
		r.add("", "configmaps", "create", "")
		r.add("", "configmaps", "get", record)
		r.add("", "configmaps", "update", record)
	case config.BootstrapLease:
		r.add("coordination.k8s.io", "leases", "create", "")
		for _, v := range []string{"get", "update"} {
			r.add("coordination.k8s.io", "leases", v, b.Name)
			r.add("", "configmaps", v, record)
		}
		r.watch("coordination.k8s.io", "leases", b.Name)
		r.watch("", "configmaps", record)
		r.add("", "configmaps", "create", "")
	}
	kind, name, _ := strings.Cut(owner, "/")
	kinds := map[string]string{"deployment": "deployments", "statefulset": "statefulsets", "daemonset": "daemonsets"}
	if b.HasLater() {
		if res, ok := kinds[kind]; ok && res != "daemonsets" {
			r.watch("apps", res, name)
		} else {
			r.watch("apps", "deployments", "")
			r.watch("apps", "statefulsets", "")
		}
		r.add("apps", "replicasets", "get", "") // the pod's, to find its Deployment
	}
	if b.PodCondition {
		r.add("", "pods/status", "patch", "")
	}
	if e := b.Endpoints; e != nil {
		lease := bootstrap.LeaseName(e.Name)
		r.add("coordination.k8s.io", "leases", "create", "")
		for _, v := range []string{"get", "update"} {
			r.add("coordination.k8s.io", "leases", v, lease)
		}
		r.watch("coordination.k8s.io", "leases", lease)
		if ep := e.Public; ep != nil && ep.Service != "" {
			ns, name := bootstrap.ServiceRef(ep.Service, namespace)
			dependencyRules(in(ns), discovery.Dependency{Kind: discovery.KindExposed, Namespace: ns, Name: name})
		}
		for _, ep := range []*config.EndpointURL{e.Internal, e.Admin} {
			if ep != nil && ep.Service != "" {
				ns, name := bootstrap.ServiceRef(ep.Service, namespace)
				serviceRead = append(serviceRead, [2]string{ns, name})
			}
		}
	}
	if rl := cfg.Reload; rl != nil {
		if prefix := cfg.ReloadLease(); prefix != "" {
			r.add("coordination.k8s.io", "leases", "create", "")
			for i := range rl.MaxUnavailable {
				n := fmt.Sprintf("%s-%d", prefix, i)
				for _, v := range []string{"get", "update"} {
					r.add("coordination.k8s.io", "leases", v, n)
				}
				r.watch("coordination.k8s.io", "leases", n)
			}
		}
		if rl.Action == "rollout" || slices.ContainsFunc(rl.Actions, func(a config.ReloadAction) bool { return a.Action == "rollout" }) {
			if res, ok := kinds[kind]; ok {
				r.add("apps", res, "get", name)
				r.add("apps", res, "patch", name)
			} else {
				for _, res := range []string{"deployments", "statefulsets", "daemonsets"} {
					r.add("apps", res, "get", "")
					r.add("apps", res, "patch", "")
				}
			}
			r.add("apps", "replicasets", "get", "")
		}
		if rl.Source == "api" {
			if len(o.ConfigMaps) == 0 {
				r.watch("", "configmaps", "")
			}
			for _, cm := range o.ConfigMaps {
				r.watch("", "configmaps", cm)
			}
		}
	}
	for _, sv := range serviceRead {
		in(sv[0]).watch("", "services", sv[1])
	}
	shareJobs(r)
	for ns, set := range elsewhere {
		shareJobs(set)
		others[ns] = set.rules()
	}
	return r.rules(), others
}

// shareJobs grants list and watch on every Job of the namespace when two
// or more are waited for by name: the wait reads them with one shared
// watch of the namespace's Jobs (discovery/shared.go), in the API server's
// table form. The token can then list every Job there, which
// helm-toolkit's Roles already allow; a Role that names its Jobs instead
// costs one refused LIST per start, then a watch each.
func shareJobs(r set) {
	named := 0
	for k, verbs := range r {
		if k[0] == "batch" && k[1] == "jobs" && k[2] != "" && verbs["list"] {
			named++
		}
	}
	if named > 1 {
		r.watch("batch", "jobs", "")
	}
}

// exposureCall finds publicURL "svc[.ns]" and internalURL calls in a template.
var exposureCall = regexp.MustCompile(`\b(publicURL|internalURL)\s+"([a-z0-9.-]+)"`)

// dependencyRules adds what waiting for d reads.
func dependencyRules(r set, d discovery.Dependency) {
	switch d.Kind {
	case discovery.KindService:
		r.watch("discovery.k8s.io", "endpointslices", "") // by label
		r.watch("", "endpoints", d.Name)                  // the fallback, by name
	case discovery.KindJob:
		r.watch("batch", "jobs", d.Name)      // "" for jobs by label
		r.add("batch", "jobs", "get", d.Name) // a failed one, whole, for its reason
	case discovery.KindDaemonSet:
		r.watch("apps", "daemonsets", d.Name)
		r.watch("", "pods", "") // its pod on this node, by label
	case discovery.KindPod, discovery.KindContainer:
		r.watch("", "pods", "")
	case discovery.KindExposed:
		r.watch("", "services", d.Name)
		r.watch("networking.k8s.io", "ingresses", "")
		r.watch("route.openshift.io", "routes", "")
	case discovery.KindResource:
		// The plural comes from API discovery at run time: see
		// examples/rbac/kolla-agent.yaml for the rule to add.
	}
}

// set collects verbs per (group, resource, name); name "" is any.
type set map[[3]string]map[string]bool

func (r set) add(group, resource, verb, name string) {
	k := [3]string{group, resource, name}
	if r[k] == nil {
		r[k] = map[string]bool{}
	}
	r[k][verb] = true
}

func (r set) watch(group, resource, name string) {
	r.add(group, resource, "list", name)
	r.add(group, resource, "watch", name)
}

// rules merges the set into Role rules: a verb granted on any object makes
// the same verb on named ones redundant; rules with the same verbs on named
// objects of one resource share one rule.
func (r set) rules() []Rule {
	type key struct{ group, resource, verbs string }
	names := map[key][]string{}
	for k, verbs := range r {
		var vs []string
		for v := range verbs {
			if k[2] != "" && r[[3]string{k[0], k[1], ""}][v] {
				continue // granted on every object already
			}
			vs = append(vs, v)
		}
		if len(vs) == 0 {
			continue
		}
		slices.SortFunc(vs, verbOrder)
		kk := key{k[0], k[1], strings.Join(vs, ",")}
		names[kk] = append(names[kk], k[2])
	}
	var out []Rule
	for _, k := range slices.SortedFunc(maps.Keys(names), func(a, b key) int {
		return strings.Compare(a.group+"/"+a.resource+"/"+a.verbs, b.group+"/"+b.resource+"/"+b.verbs)
	}) {
		ns := names[k]
		rule := Rule{APIGroups: []string{k.group}, Resources: []string{k.resource}, Verbs: strings.Split(k.verbs, ",")}
		if !slices.Contains(ns, "") {
			slices.Sort(ns)
			rule.ResourceNames = ns
		}
		out = append(out, rule)
	}
	return out
}

// verbOrder is the order kubectl prints verbs in.
func verbOrder(a, b string) int {
	order := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	return slices.Index(order, a) - slices.Index(order, b)
}

// Subject is whom Write's Roles are for.
type Subject struct {
	Source         string // the config the rules come from, for the header
	ServiceAccount string // the RoleBindings' subject
	Namespace      string // the ServiceAccount's: the agent's own
}

// Write writes the Role (and its RoleBinding to the subject's
// ServiceAccount) that own and others grant, with a header naming the
// source and what the rules do not cover, as YAML.
func Write(w io.Writer, sub Subject, own []Rule, others map[string][]Rule) error {
	source, serviceAccount, namespace := sub.Source, sub.ServiceAccount, sub.Namespace
	fmt.Fprintf(w, `# The least the agent needs for %s, from kolla-agent config rbac.
# Not covered: the rule of a resource: dependency (its plural, see
# examples/rbac/kolla-agent.yaml), the nodes a NodePort Service without
# kolla.openstack.org/public-host needs (a ClusterRole:
# examples/rbac/exposure.yaml), and kubernetes-entrypoint's DEPENDENCY_*
# variables (they are not in agent.yaml).
`, source)
	name := serviceAccount + "-kolla-agent"
	docs := []any{role(name, "", own), binding(name, "", serviceAccount, namespace)}
	for _, ns := range slices.Sorted(maps.Keys(others)) {
		docs = append(docs, role(name, ns, others[ns]), binding(name, ns, serviceAccount, namespace))
	}
	for i, d := range docs {
		b, err := yaml.Marshal(d)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(w, "---")
		}
		w.Write(b)
	}
	return nil
}

func role(name, ns string, rules []Rule) map[string]any {
	md := map[string]any{"name": name}
	if ns != "" {
		md["namespace"] = ns
	}
	return map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": md, "rules": rules}
}

func binding(name, ns, sa, saNamespace string) map[string]any {
	md := map[string]any{"name": name}
	subject := map[string]any{"kind": "ServiceAccount", "name": sa}
	if ns != "" {
		md["namespace"] = ns
		subject["namespace"] = saNamespace
	}
	return map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": md,
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
		"subjects": []any{subject}}
}
