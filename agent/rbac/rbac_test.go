package rbac

import (
	"strings"
	"testing"

	"github.com/kolla-agent/kolla-agent/agent/config"
)

// Rules names every object the agent knows by name, grants what it
// cannot name without names, and merges a named verb into one already
// granted on every object.
func TestRBACRules(t *testing.T) {
	cfg, err := config.Parse("agent.yaml", []byte(`namespace: openstack
dependencies:
  wait: [service:mariadb, "job:keystone-fernet-setup", "daemonset:infra/ovs", "pod:app=x"]
bootstrap:
  mode: create
  name: keystone-db-sync
  job: /j.yaml
  phases:
    - {name: expand, command: a}
    - {name: contract, command: b}
  endpoints: {type: identity, name: keystone, public: {service: keystone}}
reload: {maxUnavailable: 2, action: rollout, source: api}
`))
	if err != nil {
		t.Fatal(err)
	}
	own, others := Rules(cfg, "openstack", []string{`url = {{ publicURL "glance.images" "/" }}`}, Options{Owner: "deployment/keystone-api", ConfigMaps: []string{"keystone", "keystone-agent"}})
	got := map[string]bool{}
	for _, r := range own {
		got[r.APIGroups[0]+"/"+r.Resources[0]+" "+strings.Join(r.Verbs, ",")+" "+strings.Join(r.ResourceNames, ",")] = true
	}
	for _, want := range []string{
		"/configmaps get,update keystone-db-sync-bootstrap",
		"/configmaps create ",
		"/configmaps list,watch keystone,keystone-agent",
		"/endpoints list,watch mariadb",
		"discovery.k8s.io/endpointslices list,watch ",
		"batch/jobs list,watch,create ", // create mode follows content-named Jobs: the named dependency is covered
		"/pods get,list,watch ",         // its own pod, and pods by label
		"apps/deployments get,list,watch,patch keystone-api",
		"apps/replicasets get ",
		"coordination.k8s.io/leases get,list,watch,update kolla-catalog-keystone,kolla-reload-keystone-db-sync-0,kolla-reload-keystone-db-sync-1",
		"coordination.k8s.io/leases create ",
		"/services list,watch keystone",
		"/events create ",
	} {
		if !got[want] {
			t.Errorf("no rule %q in\n%v", want, got)
		}
	}
	for k := range got {
		if strings.HasPrefix(k, "batch/jobs list,watch keystone") || strings.Contains(k, "secrets") || strings.HasPrefix(k, "apps/statefulsets") {
			t.Errorf("a rule it does not need: %q", k)
		}
	}
	in := func(ns string) map[string]bool {
		m := map[string]bool{}
		for _, r := range others[ns] {
			m[r.Resources[0]+" "+strings.Join(r.Verbs, ",")+" "+strings.Join(r.ResourceNames, ",")] = true
		}
		return m
	}
	if infra := in("infra"); !infra["daemonsets list,watch ovs"] || !infra["pods list,watch "] {
		t.Errorf("namespace infra: %v", infra)
	}
	if images := in("images"); !images["services list,watch glance"] {
		t.Errorf("namespace images (the template's publicURL): %v", images)
	}
}

// A Service named NAME.NAMESPACE is read in that namespace (not taken as
// NAMESPACE/NAME), a wait-mode Job of another namespace is watched there,
// and a Service read only for its port needs no Ingress or Route.
func TestRBACRulesNamespaces(t *testing.T) {
	cfg, err := config.Parse("agent.yaml", []byte(`bootstrap:
  mode: wait
  name: glance-db-sync
  jobs: [infra/db-ready]
  endpoints: {type: image, name: glance, public: {service: glance.openstack}, internal: {service: glance-internal}}
`))
	if err != nil {
		t.Fatal(err)
	}
	own, others := Rules(cfg, "openstack", []string{`{{ internalURL "keystone" "/v3" }}`}, Options{})
	flat := func(rules []Rule) string {
		var b strings.Builder
		for _, r := range rules {
			b.WriteString(r.APIGroups[0] + "/" + r.Resources[0] + " " + strings.Join(r.Verbs, ",") + " " + strings.Join(r.ResourceNames, ",") + "\n")
		}
		return b.String()
	}
	o := flat(own)
	for _, want := range []string{"/services list,watch glance,glance-internal,keystone\n", "networking.k8s.io/ingresses list,watch \n"} {
		if !strings.Contains(o, want) {
			t.Errorf("own Role lacks %q:\n%s", want, o)
		}
	}
	if strings.Contains(o, "batch/jobs") {
		t.Errorf("the Job of namespace infra is watched in the agent's own:\n%s", o)
	}
	if got := flat(others["infra"]); !strings.Contains(got, "batch/jobs get,list,watch db-ready") {
		t.Errorf("namespace infra: %s", got)
	}
	if _, ok := others["glance"]; ok {
		t.Errorf("glance.openstack read as namespace glance: %v", others)
	}
}

// Two Jobs or more waited for by name in one namespace are one watch of
// the namespace's Jobs: list and watch on all of them there, get on the
// named ones (a failed one is read whole); one Job stays named.
func TestRBACRulesSharedJobs(t *testing.T) {
	flat := func(rules []Rule) string {
		var b strings.Builder
		for _, r := range rules {
			if r.Resources[0] == "jobs" {
				b.WriteString(strings.Join(r.Verbs, ",") + " [" + strings.Join(r.ResourceNames, ",") + "] ")
			}
		}
		return b.String()
	}
	for _, c := range []struct{ wait, want string }{
		{"[job:keystone-db-sync, job:infra/db-ready]", "get,list,watch [keystone-db-sync] "},
		{"[job:keystone-db-sync, job:keystone-fernet-setup, job:infra/db-ready]", "get [keystone-db-sync,keystone-fernet-setup] list,watch [] "},
	} {
		cfg, err := config.Parse("agent.yaml", []byte("dependencies:\n  wait: "+c.wait+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		own, others := Rules(cfg, "openstack", nil, Options{})
		if got := flat(own); got != c.want {
			t.Errorf("%s: own Role's jobs rules %q, want %q", c.wait, got, c.want)
		}
		if got := flat(others["infra"]); got != "get,list,watch [db-ready] " {
			t.Errorf("%s: namespace infra: %q", c.wait, got)
		}
	}
}
