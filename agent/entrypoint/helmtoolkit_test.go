package entrypoint

import (
	"slices"
	"testing"
)

// What helm-toolkit's kubernetes_entrypoint_init_container snippet emits,
// case by case, from a chart's dependencies values: services as
// comma_joined_service_list ("NAMESPACE:NAME"), jobs as names or, when the
// values give objects, toJson of them (DEPENDENCY_JOBS_JSON), daemonsets
// and containers joined by commas, pods and custom resources through toJson
// as the values hold them (keys sorted, as Go's JSON writes a map; the
// template sets each custom resource's namespace; charts give "resource",
// the plural, for irregular kinds), and every variable present even when
// empty. Each case must parse, keys the agent does not read listed, not
// refused.
func TestHelmToolkitShapes(t *testing.T) {
	base := map[string]string{
		"POD_NAME": "neutron-ovs-agent-x", "NAMESPACE": "openstack", "INTERFACE_NAME": "eth0",
		"PATH":                       "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/",
		"DEPENDENCY_SERVICE":         "",
		"DEPENDENCY_DAEMONSET":       "",
		"DEPENDENCY_CONTAINER":       "",
		"DEPENDENCY_POD_JSON":        "",
		"DEPENDENCY_CUSTOM_RESOURCE": "",
	}
	for _, c := range []struct {
		name        string
		env         []string
		want        []string
		wantIgnored []string
	}{
		{"nothing", nil, nil, nil},
		{"services", []string{"DEPENDENCY_SERVICE", "openstack:mariadb,openstack:rabbitmq"},
			[]string{"service:openstack/mariadb", "service:openstack/rabbitmq"}, nil},
		{"jobs by name", []string{"DEPENDENCY_JOBS", "neutron-db-sync,neutron-ks-user"},
			[]string{"job:openstack/neutron-db-sync", "job:openstack/neutron-ks-user"}, nil},
		{"jobs as objects", []string{"DEPENDENCY_JOBS_JSON", `[{"labels":{"application":"neutron","component":"db-sync"}},{"description":"x","labels":{"application":"keystone"},"namespace":"openstack"}]`},
			[]string{"job:openstack/application=neutron,component=db-sync", "job:openstack/application=keystone"},
			[]string{`DEPENDENCY_JOBS_JSON item 2: key "description"`}},
		{"daemonsets and containers", []string{"DEPENDENCY_DAEMONSET", "openvswitch-vswitchd,libvirt", "DEPENDENCY_CONTAINER", "neutron-ovs-agent-init"},
			[]string{"daemonset:openstack/openvswitch-vswitchd", "daemonset:openstack/libvirt", "container:neutron-ovs-agent-init"}, nil},
		{"pods", []string{"DEPENDENCY_POD_JSON", `[{"labels":{"application":"openvswitch","component":"openvswitch-vswitchd"},"requireSameNode":true}]`},
			[]string{"pod:openstack/application=openvswitch,component=openvswitch-vswitchd@samenode"}, nil},
		{"custom resources", []string{"DEPENDENCY_CUSTOM_RESOURCE", `[{"apiVersion":"argoproj.io/v1alpha1","fields":[{"key":"status.phase","value":"Succeeded"}],"kind":"Workflow","name":"wf-example","namespace":"openstack"},{"apiVersion":"k8s.mariadb.com/v1alpha1","conditions":[{"status":"True","type":"Ready"}],"kind":"MariaDB","name":"mariadb","namespace":"openstack","resource":"mariadbs","x-note":"n"}]`},
			[]string{"resource:argoproj.io/v1alpha1/Workflow/openstack/wf-example?status.phase=Succeeded", "resource:k8s.mariadb.com/v1alpha1/MariaDB/openstack/mariadb?condition=Ready"},
			[]string{`DEPENDENCY_CUSTOM_RESOURCE item 2: key "x-note"`}},
		{"older charts' COMMAND", []string{"COMMAND", "echo done"}, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := with(base, c.env...)
			spec, err := Parse(lookupIn(env))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range spec.Dependencies {
				got = append(got, d.String())
			}
			if !slices.Equal(got, c.want) || !slices.Equal(spec.Ignored, c.wantIgnored) {
				t.Errorf("dependencies %q ignored %q, want %q and %q", got, spec.Ignored, c.want, c.wantIgnored)
			}
			for _, d := range spec.Dependencies {
				if d.Resource != nil && d.Name == "mariadb" && d.Resource.Plural != "mariadbs" {
					t.Errorf("%s: plural %q, want the values' resource mariadbs", d, d.Resource.Plural)
				}
			}
		})
	}
}
