package entrypoint

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kolla-agent/kolla-agent/discovery"
)

func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

// helmToolkitEnv is what openstack-helm's helm-toolkit
// kubernetes_entrypoint_init_container snippet renders for keystone-api:
// every DEPENDENCY_* variable is always present, most of them empty.
func helmToolkitEnv() map[string]string {
	return map[string]string{
		"POD_NAME":                   "keystone-api-7d9f8b6c4-x2x9z",
		"NAMESPACE":                  "openstack",
		"INTERFACE_NAME":             "eth0",
		"PATH":                       "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/",
		"DEPENDENCY_SERVICE":         "openstack:memcached,openstack:mariadb",
		"DEPENDENCY_JOBS":            "keystone-db-sync,keystone-credential-setup",
		"DEPENDENCY_DAEMONSET":       "",
		"DEPENDENCY_CONTAINER":       "",
		"DEPENDENCY_POD_JSON":        "",
		"DEPENDENCY_CUSTOM_RESOURCE": "",
	}
}

func with(env map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

type envCase struct {
	name    string
	env     map[string]string
	want    Spec
	wantErr []string // substrings the error must contain; nil means success
}

func svc(ns, name string) discovery.Dependency {
	return discovery.Dependency{Kind: discovery.KindService, Namespace: ns, Name: name}
}

func job(ns, name string) discovery.Dependency {
	return discovery.Dependency{Kind: discovery.KindJob, Namespace: ns, Name: name}
}

const podName = "nova-compute-abcde"

var envCases = []envCase{
	{
		name: "nothing set",
		env:  map[string]string{},
		want: Spec{Namespace: "default"},
	},
	{
		name: "helm-toolkit keystone-api",
		env:  helmToolkitEnv(),
		want: Spec{Namespace: "openstack", PodName: "keystone-api-7d9f8b6c4-x2x9z", Dependencies: []discovery.Dependency{
			svc("openstack", "memcached"), svc("openstack", "mariadb"),
			job("openstack", "keystone-db-sync"), job("openstack", "keystone-credential-setup"),
		}},
	},
	{
		name: "helm-toolkit with COMMAND echo done",
		env:  with(helmToolkitEnv(), "COMMAND", "echo done", "DEPENDENCY_SERVICE", "", "DEPENDENCY_JOBS", ""),
		want: Spec{Namespace: "openstack", PodName: "keystone-api-7d9f8b6c4-x2x9z", Command: []string{"echo", "done"}},
	},
	{
		name: "names without namespace take default when NAMESPACE is unset",
		env:  map[string]string{"DEPENDENCY_JOBS": "keystone-db-sync,keystone-credential-setup"},
		want: Spec{Namespace: "default", Dependencies: []discovery.Dependency{
			job("default", "keystone-db-sync"), job("default", "keystone-credential-setup"),
		}},
	},
	{
		name: "empty NAMESPACE means default",
		env:  map[string]string{"NAMESPACE": "", "DEPENDENCY_SERVICE": "mariadb"},
		want: Spec{Namespace: "default", Dependencies: []discovery.Dependency{svc("default", "mariadb")}},
	},
	{
		name: "blanks around items are ignored",
		env:  map[string]string{"NAMESPACE": "openstack", "DEPENDENCY_SERVICE": " rabbitmq:rabbitmq , mariadb\n"},
		want: Spec{Namespace: "openstack", Dependencies: []discovery.Dependency{svc("rabbitmq", "rabbitmq"), svc("openstack", "mariadb")}},
	},
	{
		name: "blank values mean none",
		env: map[string]string{"DEPENDENCY_SERVICE": " ", "DEPENDENCY_JOBS": "\t", "DEPENDENCY_POD_JSON": " \n",
			"DEPENDENCY_CUSTOM_RESOURCE": "", "DEPENDENCY_SOCKET": "", "DEPENDENCY_CONFIG": "", "COMMAND": "  "},
		want: Spec{Namespace: "default"},
	},
	{
		name: "JSON [] and null mean none",
		env:  map[string]string{"DEPENDENCY_POD_JSON": "[]", "DEPENDENCY_CUSTOM_RESOURCE": "null", "DEPENDENCY_JOBS_JSON": " [ ] "},
		want: Spec{Namespace: "default"},
	},
	{
		name: "DEPENDENCY_JOBS_JSON wins over DEPENDENCY_JOBS",
		env: map[string]string{"NAMESPACE": "openstack", "DEPENDENCY_JOBS": "ignored-job,not:even:valid",
			"DEPENDENCY_JOBS_JSON": `[{"name":"nova-db-sync"},{"namespace":"neutron","labels":{"initializes":"neutron"}},` +
				`{"labels":{"application":"keystone","component":"db-sync"}}]`},
		want: Spec{Namespace: "openstack", Dependencies: []discovery.Dependency{
			job("openstack", "nova-db-sync"),
			{Kind: discovery.KindJob, Namespace: "neutron", Labels: map[string]string{"initializes": "neutron"}},
			{Kind: discovery.KindJob, Namespace: "openstack", Labels: map[string]string{"application": "keystone", "component": "db-sync"}},
		}},
	},
	{
		name: "blank DEPENDENCY_JOBS_JSON leaves DEPENDENCY_JOBS in force",
		env:  map[string]string{"DEPENDENCY_JOBS_JSON": "", "DEPENDENCY_JOBS": "openstack:nova-db-sync"},
		want: Spec{Namespace: "default", Dependencies: []discovery.Dependency{job("openstack", "nova-db-sync")}},
	},
	{
		name: "daemonset and container with POD_NAME",
		env: map[string]string{"NAMESPACE": "openstack", "POD_NAME": podName,
			"DEPENDENCY_DAEMONSET": "openstack:openvswitch-vswitchd,libvirt", "DEPENDENCY_CONTAINER": "nova-libvirt,virtlogd"},
		want: Spec{Namespace: "openstack", PodName: podName, Dependencies: []discovery.Dependency{
			{Kind: discovery.KindDaemonSet, Namespace: "openstack", Name: "openvswitch-vswitchd"},
			{Kind: discovery.KindDaemonSet, Namespace: "openstack", Name: "libvirt"},
			{Kind: discovery.KindContainer, Namespace: "openstack", Name: "nova-libvirt"},
			{Kind: discovery.KindContainer, Namespace: "openstack", Name: "virtlogd"},
		}},
	},
	{
		name: "pod JSON with requireSameNode",
		env: map[string]string{"NAMESPACE": "openstack", "POD_NAME": podName, "DEPENDENCY_POD_JSON": `[
  {"labels": {"application": "neutron", "component": "neutron-ovs-agent"}, "requireSameNode": true},
  {"namespace": "osh-infra", "labels": {"app.kubernetes.io/name": "mariadb"}, "requireSameNode": false}
]`},
		want: Spec{Namespace: "openstack", PodName: podName, Dependencies: []discovery.Dependency{
			{Kind: discovery.KindPod, Namespace: "openstack", Labels: map[string]string{"application": "neutron", "component": "neutron-ovs-agent"}, SameNode: true},
			{Kind: discovery.KindPod, Namespace: "osh-infra", Labels: map[string]string{"app.kubernetes.io/name": "mariadb"}},
		}},
	},
	{
		name: "pod JSON anywhere in the cluster needs no POD_NAME",
		env:  map[string]string{"DEPENDENCY_POD_JSON": `[{"labels":{"app":"rabbitmq"}}]`},
		want: Spec{Namespace: "default", Dependencies: []discovery.Dependency{
			{Kind: discovery.KindPod, Namespace: "default", Labels: map[string]string{"app": "rabbitmq"}},
		}},
	},
	{
		name: "custom resource: MariaDB with a Ready condition",
		env: map[string]string{"NAMESPACE": "openstack", "DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"k8s.mariadb.com/v1alpha1",` +
			`"kind":"MariaDB","name":"mariadb","conditions":[{"type":"Ready"}]}]`},
		want: Spec{Namespace: "openstack", Dependencies: []discovery.Dependency{{
			Kind: discovery.KindResource, Namespace: "openstack", Name: "mariadb", Resource: &discovery.ResourceRef{
				Group: "k8s.mariadb.com", Version: "v1alpha1", Kind: "MariaDB",
				Conditions: []discovery.ConditionMatch{{Type: "Ready", Status: "True"}},
			}}}},
	},
	{
		name: "custom resource: helm-toolkit Workflow fields, core v1, typed values, explicit status",
		env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[` +
			`{"apiVersion":"argoproj.io/v1alpha1","kind":"Workflow","namespace":"default","name":"wf-example","fields":[{"key":"status.phase","value":"Succeeded"}]},` +
			`{"apiVersion":"v1","kind":"ConfigMap","name":"keystone-etc","fields":[{"key":"data.ready","value":""}]},` +
			`{"apiVersion":"apps/v1","kind":"Deployment","namespace":"openstack","name":"keystone-api",` +
			`"fields":[{"key":"status.readyReplicas","value":3},{"key":"spec.paused","value":false}],` +
			`"conditions":[{"type":"Available","status":"True"},{"type":"Progressing","status":"Unknown"},{"type":"ReplicaFailure","status":"False"}]}]`},
		want: Spec{Namespace: "default", Dependencies: []discovery.Dependency{
			{Kind: discovery.KindResource, Namespace: "default", Name: "wf-example", Resource: &discovery.ResourceRef{
				Group: "argoproj.io", Version: "v1alpha1", Kind: "Workflow",
				Fields: []discovery.FieldMatch{{Path: "status.phase", Value: "Succeeded"}},
			}},
			{Kind: discovery.KindResource, Namespace: "default", Name: "keystone-etc", Resource: &discovery.ResourceRef{
				Version: "v1", Kind: "ConfigMap", Fields: []discovery.FieldMatch{{Path: "data.ready", Value: ""}},
			}},
			{Kind: discovery.KindResource, Namespace: "openstack", Name: "keystone-api", Resource: &discovery.ResourceRef{
				Group: "apps", Version: "v1", Kind: "Deployment",
				Fields: []discovery.FieldMatch{{Path: "status.readyReplicas", Value: "3"}, {Path: "spec.paused", Value: "false"}},
				Conditions: []discovery.ConditionMatch{{Type: "Available", Status: "True"}, {Type: "Progressing", Status: "Unknown"},
					{Type: "ReplicaFailure", Status: "False"}},
			}},
		}},
	},
	{
		name: "sockets",
		env:  map[string]string{"DEPENDENCY_SOCKET": "/var/run/openvswitch/db.sock, /run/libvirt/libvirt-sock,relative:colon.sock"},
		want: Spec{Namespace: "default", Dependencies: []discovery.Dependency{
			{Kind: discovery.KindSocket, Path: "/var/run/openvswitch/db.sock"},
			{Kind: discovery.KindSocket, Path: "/run/libvirt/libvirt-sock"},
			{Kind: discovery.KindSocket, Path: "relative:colon.sock"},
		}},
	},
	{
		name: "COMMAND split like a shell",
		env:  map[string]string{"COMMAND": "bash -c 'echo a b'"},
		want: Spec{Namespace: "default", Command: []string{"bash", "-c", "echo a b"}},
	},
	{
		name: "COMMAND with double quotes, escapes and repeated blanks",
		env:  map[string]string{"COMMAND": `  kolla_start   --config "/etc/my app/x.conf" a\ b  `},
		want: Spec{Namespace: "default", Command: []string{"kolla_start", "--config", "/etc/my app/x.conf", "a b"}},
	},
	{
		name: "all kinds at once keep variable order",
		env: map[string]string{"NAMESPACE": "openstack", "POD_NAME": podName,
			"DEPENDENCY_SOCKET": "/run/a.sock", "DEPENDENCY_SERVICE": "mariadb", "DEPENDENCY_JOBS": "db-sync",
			"DEPENDENCY_DAEMONSET": "ovs", "DEPENDENCY_CONTAINER": "sidecar",
			"DEPENDENCY_POD_JSON":        `[{"labels":{"a":"b"},"requireSameNode":true}]`,
			"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"v1","kind":"Secret","name":"s"}]`,
			"COMMAND":                    "sleep infinity"},
		want: Spec{Namespace: "openstack", PodName: podName, Command: []string{"sleep", "infinity"}, Dependencies: []discovery.Dependency{
			svc("openstack", "mariadb"), job("openstack", "db-sync"),
			{Kind: discovery.KindDaemonSet, Namespace: "openstack", Name: "ovs"},
			{Kind: discovery.KindContainer, Namespace: "openstack", Name: "sidecar"},
			{Kind: discovery.KindPod, Namespace: "openstack", Labels: map[string]string{"a": "b"}, SameNode: true},
			{Kind: discovery.KindResource, Namespace: "openstack", Name: "s", Resource: &discovery.ResourceRef{Version: "v1", Kind: "Secret"}},
			{Kind: discovery.KindSocket, Path: "/run/a.sock"},
		}},
	},

	// Bad forms: each error names the variable and the item.
	{name: "job ns: with empty name", env: map[string]string{"DEPENDENCY_JOBS": "keystone-db-sync,openstack:"},
		wantErr: []string{`DEPENDENCY_JOBS item 2 "openstack:": empty job name`}},
	{name: "service ns: with empty name", env: map[string]string{"DEPENDENCY_SERVICE": "openstack:"},
		wantErr: []string{`DEPENDENCY_SERVICE item 1 "openstack:": empty service name`}},
	{name: "empty namespace", env: map[string]string{"DEPENDENCY_SERVICE": ":mariadb"},
		wantErr: []string{`DEPENDENCY_SERVICE item 1 ":mariadb": empty namespace`}},
	{name: "too many colons", env: map[string]string{"DEPENDENCY_JOBS": "too:many:colons"},
		wantErr: []string{`DEPENDENCY_JOBS item 1 "too:many:colons": too many colons`}},
	{name: "empty item in the middle", env: map[string]string{"DEPENDENCY_SERVICE": "memcached,,mariadb"},
		wantErr: []string{`DEPENDENCY_SERVICE item 2 "": empty item`}},
	{name: "trailing comma", env: map[string]string{"DEPENDENCY_DAEMONSET": "ovs,", "POD_NAME": podName},
		wantErr: []string{`DEPENDENCY_DAEMONSET item 2 "": empty item`}},
	{name: "invalid namespace", env: map[string]string{"DEPENDENCY_SERVICE": "Open_Stack:mariadb"},
		wantErr: []string{`DEPENDENCY_SERVICE item 1 "Open_Stack:mariadb": namespace "Open_Stack"`}},
	{name: "invalid service name", env: map[string]string{"DEPENDENCY_SERVICE": "openstack:MariaDB"},
		wantErr: []string{`DEPENDENCY_SERVICE item 1 "openstack:MariaDB": service name "MariaDB"`}},
	{name: "service name must start with a letter", env: map[string]string{"DEPENDENCY_SERVICE": "1mariadb"},
		wantErr: []string{`DEPENDENCY_SERVICE item 1 "1mariadb": service name "1mariadb"`}},
	{name: "invalid job name", env: map[string]string{"DEPENDENCY_JOBS": "keystone_db_sync"},
		wantErr: []string{`DEPENDENCY_JOBS item 1 "keystone_db_sync": job name "keystone_db_sync"`}},
	{name: "name with a blank inside", env: map[string]string{"DEPENDENCY_JOBS": "keystone db-sync"},
		wantErr: []string{`DEPENDENCY_JOBS item 1 "keystone db-sync": job name`}},
	{name: "invalid daemonset name", env: map[string]string{"DEPENDENCY_DAEMONSET": "openstack:-ovs", "POD_NAME": podName},
		wantErr: []string{`DEPENDENCY_DAEMONSET item 1 "openstack:-ovs": daemonset name "-ovs"`}},
	{name: "daemonset without POD_NAME", env: map[string]string{"DEPENDENCY_DAEMONSET": "openvswitch-vswitchd"},
		wantErr: []string{`DEPENDENCY_DAEMONSET item 1 "openvswitch-vswitchd": needs POD_NAME`}},
	{name: "container without POD_NAME", env: map[string]string{"DEPENDENCY_CONTAINER": "nova-libvirt", "POD_NAME": ""},
		wantErr: []string{`DEPENDENCY_CONTAINER item 1 "nova-libvirt": needs POD_NAME`}},
	{name: "container with a namespace", env: map[string]string{"DEPENDENCY_CONTAINER": "openstack:nova-libvirt", "POD_NAME": podName},
		wantErr: []string{`DEPENDENCY_CONTAINER item 1 "openstack:nova-libvirt": a container of this pod takes no namespace`}},
	{name: "invalid container name", env: map[string]string{"DEPENDENCY_CONTAINER": "Nova.Libvirt", "POD_NAME": podName},
		wantErr: []string{`DEPENDENCY_CONTAINER item 1 "Nova.Libvirt": container name "Nova.Libvirt"`}},
	{name: "empty socket item", env: map[string]string{"DEPENDENCY_SOCKET": "/run/a.sock,,"},
		wantErr: []string{`DEPENDENCY_SOCKET item 2 "": empty item`, `DEPENDENCY_SOCKET item 3 "": empty item`}},
	{name: "same-node pod without POD_NAME", env: map[string]string{"DEPENDENCY_POD_JSON": `[{"labels":{"app":"ovs"},"requireSameNode":true}]`},
		wantErr: []string{`DEPENDENCY_POD_JSON item 1 {"labels":{"app":"ovs"},"requireSameNode":true}: needs POD_NAME`}},
	{name: "pod JSON does not parse", env: map[string]string{"DEPENDENCY_POD_JSON": `[{"labels":{"app":"ovs"}`},
		wantErr: []string{`DEPENDENCY_POD_JSON: bad JSON`}},
	{name: "pod JSON syntax error", env: map[string]string{"DEPENDENCY_POD_JSON": `[{"labels":{app:"ovs"}}]`},
		wantErr: []string{`DEPENDENCY_POD_JSON: bad JSON at byte`}},
	{name: "pod JSON not a list", env: map[string]string{"DEPENDENCY_POD_JSON": `{"labels":{"app":"ovs"}}`},
		wantErr: []string{`DEPENDENCY_POD_JSON: want a JSON list of objects, not a JSON object`}},
	{name: "pod JSON text after the list", env: map[string]string{"DEPENDENCY_POD_JSON": `[{"labels":{"app":"ovs"}}] []`},
		wantErr: []string{`DEPENDENCY_POD_JSON: bad JSON: unexpected text after the list`}},
	{name: "pod JSON unknown field", env: map[string]string{"DEPENDENCY_POD_JSON": `[{"labels":{"app":"ovs"}},{"label":{"app":"ovs"}}]`},
		wantErr: []string{`DEPENDENCY_POD_JSON item 2 {"label":{"app":"ovs"}}: labels: empty label selector (keys not read here: ["label"])`}},
	{name: "pod JSON empty labels", env: map[string]string{"DEPENDENCY_POD_JSON": `[{"labels":{}}]`},
		wantErr: []string{`DEPENDENCY_POD_JSON item 1 {"labels":{}}: labels: empty label selector`}},
	{name: "pod JSON no labels", env: map[string]string{"DEPENDENCY_POD_JSON": `[{"namespace":"openstack"}]`},
		wantErr: []string{`DEPENDENCY_POD_JSON item 1 {"namespace":"openstack"}: labels: empty label selector`}},
	{name: "pod JSON invalid label", env: map[string]string{"DEPENDENCY_POD_JSON": `[{"labels":{"app name":"ovs"}}]`},
		wantErr: []string{`DEPENDENCY_POD_JSON item 1 {"labels":{"app name":"ovs"}}: labels: label selector`}},
	{name: "pod JSON label value not a string", env: map[string]string{"DEPENDENCY_POD_JSON": `[{"labels":{"replicas":3}}]`},
		wantErr: []string{`DEPENDENCY_POD_JSON item 1 {"labels":{"replicas":3}}: field "labels": want a string, not a JSON number`}},
	{name: "pod JSON requireSameNode as a string", env: map[string]string{"POD_NAME": podName,
		"DEPENDENCY_POD_JSON": `[{"labels":{"app":"ovs"},"requireSameNode":"true"}]`},
		wantErr: []string{`DEPENDENCY_POD_JSON item 1`, `field "requireSameNode": want true or false, not a JSON string`}},
	{name: "pod JSON invalid namespace", env: map[string]string{"DEPENDENCY_POD_JSON": `[{"labels":{"app":"ovs"},"namespace":"Open Stack"}]`},
		wantErr: []string{`DEPENDENCY_POD_JSON item 1`, `namespace "Open Stack"`}},
	{name: "pod JSON null and non-object items", env: map[string]string{"DEPENDENCY_POD_JSON": `[null, 1, "x"]`},
		wantErr: []string{`DEPENDENCY_POD_JSON item 1 null: want a JSON object`, `DEPENDENCY_POD_JSON item 2 1: want a JSON object`,
			`DEPENDENCY_POD_JSON item 3 "x": want a JSON object`}},
	{name: "jobs JSON both name and labels", env: map[string]string{"DEPENDENCY_JOBS_JSON": `[{"name":"a","labels":{"b":"c"}}]`},
		wantErr: []string{`DEPENDENCY_JOBS_JSON item 1 {"name":"a","labels":{"b":"c"}}: give "name" or "labels", not both`}},
	{name: "jobs JSON neither name nor labels", env: map[string]string{"DEPENDENCY_JOBS_JSON": `[{"name":"a"},{"namespace":"openstack"}]`},
		wantErr: []string{`DEPENDENCY_JOBS_JSON item 2 {"namespace":"openstack"}: want "name" or "labels"`}},
	{name: "jobs JSON empty name", env: map[string]string{"DEPENDENCY_JOBS_JSON": `[{"name":""}]`},
		wantErr: []string{`DEPENDENCY_JOBS_JSON item 1 {"name":""}: empty job name`}},
	{name: "jobs JSON invalid name", env: map[string]string{"DEPENDENCY_JOBS_JSON": `[{"name":"Nova_DB"}]`},
		wantErr: []string{`DEPENDENCY_JOBS_JSON item 1 {"name":"Nova_DB"}: job name "Nova_DB"`}},
	{name: "jobs JSON empty labels", env: map[string]string{"DEPENDENCY_JOBS_JSON": `[{"labels":{}}]`},
		wantErr: []string{`DEPENDENCY_JOBS_JSON item 1 {"labels":{}}: labels: empty label selector`}},
	// kubernetes-entrypoint ignores keys it does not read, and helm-toolkit
	// passes the chart's values through toJson as they are: accepted, listed.
	{name: "jobs JSON unknown field", env: map[string]string{"DEPENDENCY_JOBS_JSON": `[{"name":"a","selector":{"b":"c"}}]`},
		want: Spec{Namespace: "default", Dependencies: []discovery.Dependency{{Kind: discovery.KindJob, Namespace: "default", Name: "a"}},
			Ignored: []string{`DEPENDENCY_JOBS_JSON item 1: key "selector"`}}},
	{name: "jobs JSON bad JSON is not replaced by DEPENDENCY_JOBS", env: map[string]string{"DEPENDENCY_JOBS_JSON": `[{"name":`, "DEPENDENCY_JOBS": "a"},
		wantErr: []string{`DEPENDENCY_JOBS_JSON: bad JSON`}},
	{name: "custom resource without apiVersion", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"kind":"MariaDB","name":"mariadb"}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1 {"kind":"MariaDB","name":"mariadb"}: empty "apiVersion"`}},
	{name: "custom resource apiVersion with too many slashes", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"a/b/c","kind":"K","name":"n"}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `apiVersion "a/b/c": want "v1" or "GROUP/VERSION"`}},
	{name: "custom resource core/v1", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"core/v1","kind":"ConfigMap","name":"n"}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `the core group is written "v1"`}},
	{name: "custom resource empty group", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"/v1","kind":"K","name":"n"}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `apiVersion "/v1": empty group`}},
	{name: "custom resource bad version", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"example.com/V1","kind":"K","name":"n"}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `version "V1"`}},
	{name: "custom resource bad kind", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"v1","kind":"Config/Map","name":"n"}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `kind "Config/Map"`}},
	{name: "custom resource without name", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"v1","kind":"ConfigMap"}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `empty "name"`}},
	{name: "custom resource invalid name", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"v1","kind":"ConfigMap","name":"My CM"}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `name "My CM"`}},
	{name: "custom resource field without value", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"v1","kind":"ConfigMap","name":"n","fields":[{"key":"data.x"}]}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `fields[0]: key "data.x": no "value"`}},
	{name: "custom resource field with object value", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"v1","kind":"ConfigMap","name":"n","fields":[{"key":"data","value":{"a":"b"}}]}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `fields[0]: key "data": "value" {"a":"b"}: want a string, number or boolean`}},
	{name: "custom resource field with null value", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"v1","kind":"ConfigMap","name":"n","fields":[{"key":"data","value":null}]}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `fields[0]: key "data"`}},
	{name: "custom resource field with empty key", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"v1","kind":"ConfigMap","name":"n","fields":[{"key":"","value":"x"}]}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `fields[0]: empty "key"`}},
	{name: "custom resource field with bad path", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"v1","kind":"ConfigMap","name":"n","fields":[{"key":"a.b","value":"x"},{"key":"status..phase","value":"x"}]}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `fields[1]: key "status..phase"`}},
	{name: "custom resource field value with &", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"v1","kind":"ConfigMap","name":"n","fields":[{"key":"data.x","value":"a&b"}]}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `value "a&b"`}},
	{name: "custom resource field unknown key", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"v1","kind":"ConfigMap","name":"n","fields":[{"key":"data.x","val":"y"}]}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `fields[0]: key "data.x": no "value"`}},
	{name: "custom resource fields not a list", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"v1","kind":"ConfigMap","name":"n","fields":{"key":"data.x","value":"y"}}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `field "fields": want a list, not a JSON object`}},
	{name: "custom resource condition status lower case", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"k8s.mariadb.com/v1alpha1","kind":"MariaDB","name":"mariadb","conditions":[{"type":"Ready","status":"true"}]}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `conditions[0]: type "Ready": status "true": want True, False or Unknown`}},
	{name: "custom resource condition without type", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"v1","kind":"Node","name":"n","conditions":[{"status":"True"}]}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `conditions[0]: empty "type"`}},
	{name: "custom resource condition with bad type", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"v1","kind":"Node","name":"n","conditions":[{"type":"Ready=True"}]}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1`, `conditions[0]: type "Ready=True"`}},
	{name: "long JSON item is shortened in the error", env: map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": `[{"apiVersion":"v1","kind":"ConfigMap","name":"` +
		strings.Repeat("x", 300) + `"}]`},
		wantErr: []string{`DEPENDENCY_CUSTOM_RESOURCE item 1 {"apiVersion":"v1"`, `...: name "xxx`}},
	{name: "COMMAND with unbalanced quotes", env: map[string]string{"COMMAND": "bash -c 'echo a b"},
		wantErr: []string{`COMMAND "bash -c 'echo a b": unbalanced quotes`}},
	{name: "COMMAND with unbalanced double quotes", env: map[string]string{"COMMAND": `echo "a`},
		wantErr: []string{`COMMAND "echo \"a": unbalanced quotes`}},
	{name: "COMMAND ending in a backslash", env: map[string]string{"COMMAND": `echo a\`},
		wantErr: []string{`COMMAND "echo a\\": ends with a lone backslash`}},
	{name: "invalid NAMESPACE", env: map[string]string{"NAMESPACE": "Open Stack", "DEPENDENCY_SERVICE": "mariadb"},
		wantErr: []string{`NAMESPACE "Open Stack"`}},
	{name: "invalid POD_NAME", env: map[string]string{"POD_NAME": "Nova Compute", "DEPENDENCY_CONTAINER": "nova"},
		wantErr: []string{`POD_NAME "Nova Compute"`}},
	{name: "config templating", env: map[string]string{"DEPENDENCY_CONFIG": "/etc/nova/nova.conf"},
		wantErr: []string{`DEPENDENCY_CONFIG "/etc/nova/nova.conf": config templating is not supported`}},
	{name: "every problem is reported at once", env: map[string]string{
		"DEPENDENCY_SERVICE": "ok,bad:", "DEPENDENCY_JOBS": "a:b:c", "DEPENDENCY_DAEMONSET": "ovs",
		"DEPENDENCY_POD_JSON": "[", "COMMAND": "'"},
		wantErr: []string{`DEPENDENCY_SERVICE item 2 "bad:"`, `DEPENDENCY_JOBS item 1 "a:b:c"`,
			`DEPENDENCY_DAEMONSET item 1 "ovs": needs POD_NAME`, `DEPENDENCY_POD_JSON: bad JSON`, `COMMAND "'"`}},
}

func TestParseEntrypointEnv(t *testing.T) {
	for _, tc := range envCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(lookupIn(tc.env))
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("Parse = %+v, want an error containing %q", got, tc.wantErr)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error\n  %s\nwant it to contain\n  %s", err, w)
					}
				}
				if !reflect.DeepEqual(got, Spec{}) {
					t.Errorf("Parse returned %+v with its error, want the zero Spec", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parse =\n  %#v\nwant\n  %#v", got, tc.want)
			}
			checkSpec(t, got)
		})
	}
}

// checkSpec checks what Parse promises of every Spec it returns.
func checkSpec(t *testing.T, s Spec) {
	t.Helper()
	if s.Namespace == "" {
		t.Errorf("empty Namespace")
	}
	if s.Command != nil && len(s.Command) == 0 {
		t.Errorf("Command is empty but not nil")
	}
	for _, d := range s.Dependencies {
		if d.Kind.NeedsAPI() && d.Namespace == "" {
			t.Errorf("%s: API dependency without a namespace", d)
		}
		if d.NeedsPod() && s.PodName == "" {
			t.Errorf("%s needs the pod, but POD_NAME is empty", d)
		}
		again, err := discovery.Parse(d.String())
		if err != nil {
			t.Errorf("discovery.Parse(%q) of %#v: %v", d.String(), d, err)
			continue
		}
		if d.Kind == discovery.KindContainer {
			// A container is always of the agent's own pod; its wait syntax
			// has no namespace.
			again.Namespace = d.Namespace
		}
		if !reflect.DeepEqual(again, d) {
			t.Errorf("discovery.Parse(%q) = %#v, want %#v", d.String(), again, d)
		}
	}
}

func TestParseEntrypointErrorsAreCapped(t *testing.T) {
	_, err := Parse(lookupIn(map[string]string{"DEPENDENCY_SOCKET": strings.Repeat(",", 99)}))
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxErrors+1 || lines[maxErrors] != "and 80 more problems" {
		t.Errorf("got %d lines ending %q, want %d ending %q", len(lines), lines[len(lines)-1], maxErrors+1, "and 80 more problems")
	}
}

func TestPresentEntrypoint(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"NAMESPACE": "openstack", "POD_NAME": podName, "KOLLA_CONFIG_STRATEGY": "COPY_ALWAYS"}, false},
		{map[string]string{"DEPENDENCY_SERVICE": ""}, true},
		{map[string]string{"DEPENDENCY_JOBS": "x"}, true},
		{map[string]string{"DEPENDENCY_JOBS_JSON": ""}, true},
		{map[string]string{"DEPENDENCY_DAEMONSET": ""}, true},
		{map[string]string{"DEPENDENCY_CONTAINER": ""}, true},
		{map[string]string{"DEPENDENCY_POD_JSON": ""}, true},
		{map[string]string{"DEPENDENCY_CUSTOM_RESOURCE": ""}, true},
		{map[string]string{"DEPENDENCY_SOCKET": ""}, true},
		{map[string]string{"DEPENDENCY_CONFIG": ""}, true},
		{map[string]string{"COMMAND": ""}, true},
		{helmToolkitEnv(), true},
	} {
		if got := Present(lookupIn(tc.env)); got != tc.want {
			t.Errorf("Present(%v) = %v, want %v", tc.env, got, tc.want)
		}
	}
	if Present(nil) {
		t.Error("Present(nil) = true")
	}
	if s, err := Parse(nil); err != nil || !reflect.DeepEqual(s, Spec{Namespace: "default"}) {
		t.Errorf("Parse(nil) = %+v, %v", s, err)
	}
}

// fuzzVars are the variables FuzzParseEnv gives one fuzzed value each, in the
// order of its arguments.
var fuzzVars = []string{
	"NAMESPACE", "POD_NAME", "DEPENDENCY_SERVICE", "DEPENDENCY_JOBS", "DEPENDENCY_JOBS_JSON",
	"DEPENDENCY_DAEMONSET", "DEPENDENCY_CONTAINER", "DEPENDENCY_POD_JSON",
	"DEPENDENCY_CUSTOM_RESOURCE", "DEPENDENCY_SOCKET", "COMMAND",
}

// FuzzParseEnv checks that Parse never panics, and that every Spec it returns
// keeps its promises (see checkSpec): above all, that every dependency's
// String() parses back with discovery.Parse.
func FuzzParseEnv(f *testing.F) {
	for _, tc := range envCases {
		v := make([]string, len(fuzzVars))
		for i, k := range fuzzVars {
			v[i] = tc.env[k]
		}
		f.Add(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10])
	}
	f.Fuzz(func(t *testing.T, namespace, podName, service, jobs, jobsJSON, daemonset, container, podJSON, customResource, socket, command string) {
		env := map[string]string{}
		for i, v := range []string{namespace, podName, service, jobs, jobsJSON, daemonset, container, podJSON, customResource, socket, command} {
			if v != "" {
				env[fuzzVars[i]] = v
			}
		}
		s, err := Parse(lookupIn(env))
		if err != nil {
			if !reflect.DeepEqual(s, Spec{}) {
				t.Fatalf("Parse returned %+v with its error %v", s, err)
			}
			return
		}
		checkSpec(t, s)
		if len(s.Dependencies) > 0 && !Present(lookupIn(env)) {
			t.Fatalf("dependencies %v but Present is false", s.Dependencies)
		}
	})
}
