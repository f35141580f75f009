package discovery

import (
	"fmt"
	"github.com/kolla-agent/kolla-agent/redact"
	"reflect"
	"strings"
	"testing"
)

type parseCase struct {
	in      string
	want    Dependency
	wantErr string // substring of the error; empty means Parse must succeed
}

var parseCases = []parseCase{
	// dns
	{in: "dns:mariadb", want: Dependency{Kind: KindDNS, Name: "mariadb"}},
	{in: "dns:mariadb.openstack", want: Dependency{Kind: KindDNS, Name: "mariadb.openstack"}},
	{in: "dns:keystone-api.openstack.svc.cluster.local.", want: Dependency{Kind: KindDNS, Name: "keystone-api.openstack.svc.cluster.local."}},
	{in: "dns:_mysql._tcp.mariadb.openstack", want: Dependency{Kind: KindDNS, Name: "_mysql._tcp.mariadb.openstack"}},
	{in: "dns:", wantErr: `empty value after "dns:"`},
	{in: "dns:.", wantErr: "empty or longer than 253"},
	{in: "dns:a..b", wantErr: `bad label ""`},
	{in: "dns:a_b", wantErr: "bad character '_'"},
	{in: "dns:" + strings.Repeat("a", 64), wantErr: "bad label"},
	{in: "dns:" + strings.Repeat("a.", 127) + "aa", wantErr: "longer than 253"},

	// tcp
	{in: "tcp:mariadb:3306", want: Dependency{Kind: KindTCP, Address: "mariadb:3306"}},
	{in: "tcp:127.0.0.1:5672", want: Dependency{Kind: KindTCP, Address: "127.0.0.1:5672"}},
	{in: "tcp:[::1]:5672", want: Dependency{Kind: KindTCP, Address: "[::1]:5672"}},
	{in: "tcp:rabbitmq.openstack.svc:65535", want: Dependency{Kind: KindTCP, Address: "rabbitmq.openstack.svc:65535"}},
	{in: "tcp:mariadb", wantErr: "want tcp:HOST:PORT"},
	{in: "tcp::3306", wantErr: "empty host"},
	{in: "tcp:::1:5672", wantErr: "want tcp:HOST:PORT"},
	{in: "tcp:mariadb:0", wantErr: `port "0"`},
	{in: "tcp:mariadb:65536", wantErr: `port "65536"`},
	{in: "tcp:mariadb:mysql", wantErr: `port "mysql"`},
	{in: "tcp:mariadb:", wantErr: `port ""`},

	// http(s)
	{in: "http://keystone-api.openstack:5000/v3", want: Dependency{Kind: KindHTTP, URL: "http://keystone-api.openstack:5000/v3"}},
	{in: "https://[::1]:8443/healthz?verbose=1", want: Dependency{Kind: KindHTTP, URL: "https://[::1]:8443/healthz?verbose=1"}},
	{in: "http://", wantErr: "URL has no host"},
	{in: "https:///path", wantErr: "URL has no host"},
	{in: "http://:80/", wantErr: "URL has no host"},
	{in: "http://:#@", wantErr: "URL has no host"},
	{in: "http://h:#@", wantErr: "URL has an empty port"},
	{in: "http://[::1]:/x", wantErr: "URL has an empty port"},
	{in: "http://admin:S3cr#et@h/", wantErr: "bad URL: invalid port ... after host"},
	{in: "http://[u:p]:#x@h", wantErr: "bad URL"},
	{in: "http://[::1]/a@b", want: Dependency{Kind: KindHTTP, URL: "http://[::1]/a@b"}},
	{in: "http://host/%zz", wantErr: "bad URL"},
	{in: "http:keystone", wantErr: `unknown type "http"`},

	// file and socket
	{in: "file:/etc/keystone/keystone.conf", want: Dependency{Kind: KindFile, Path: "/etc/keystone/keystone.conf"}},
	{in: "file:relative/path with space", want: Dependency{Kind: KindFile, Path: "relative/path with space"}},
	{in: "socket:/var/run/openvswitch/db.sock", want: Dependency{Kind: KindSocket, Path: "/var/run/openvswitch/db.sock"}},
	{in: "socket:/run/a:b.sock", want: Dependency{Kind: KindSocket, Path: "/run/a:b.sock"}},
	{in: "file:", wantErr: `empty value after "file:"`},
	{in: "socket:", wantErr: `empty value after "socket:"`},

	// service
	{in: "service:mariadb", want: Dependency{Kind: KindService, Name: "mariadb"}},
	{in: "service:openstack/memcached", want: Dependency{Kind: KindService, Namespace: "openstack", Name: "memcached"}},
	{in: "service:openstack/", wantErr: `empty name after namespace "openstack"`},
	{in: "service:/mariadb", wantErr: `namespace ""`},
	{in: "service:Open_Stack/mariadb", wantErr: `namespace "Open_Stack"`},
	{in: "service:MariaDB", wantErr: `name "MariaDB"`},
	{in: "service:a/b/c", wantErr: `name "b/c"`},
	{in: "exposed:keystone", want: Dependency{Kind: KindExposed, Name: "keystone"}},
	{in: "exposed:openstack/keystone", want: Dependency{Kind: KindExposed, Namespace: "openstack", Name: "keystone"}},
	{in: "exposed:Keystone", wantErr: `name "Keystone"`},

	// job
	{in: "job:keystone-db-sync", want: Dependency{Kind: KindJob, Name: "keystone-db-sync"}},
	{in: "job:openstack/keystone-db-sync", want: Dependency{Kind: KindJob, Namespace: "openstack", Name: "keystone-db-sync"}},
	{in: "job:openstack/application=keystone,component=db-sync", want: Dependency{Kind: KindJob, Namespace: "openstack",
		Labels: map[string]string{"application": "keystone", "component": "db-sync"}}},
	{in: "job:application=keystone", want: Dependency{Kind: KindJob, Labels: map[string]string{"application": "keystone"}}},
	{in: "job:app.kubernetes.io/name=keystone", want: Dependency{Kind: KindJob,
		Labels: map[string]string{"app.kubernetes.io/name": "keystone"}}},
	{in: "job:openstack/app.kubernetes.io/name=keystone,app.kubernetes.io/component=db-sync", want: Dependency{Kind: KindJob,
		Namespace: "openstack", Labels: map[string]string{"app.kubernetes.io/name": "keystone", "app.kubernetes.io/component": "db-sync"}}},
	{in: "job:0/0=,x=", want: Dependency{Kind: KindJob, Namespace: "0", Labels: map[string]string{"0": "", "x": ""}}},
	{in: "job:openstack/x=,example/key=v", want: Dependency{Kind: KindJob, Namespace: "openstack",
		Labels: map[string]string{"x": "", "example/key": "v"}}},
	{in: "job:x=,0/0=", wantErr: `label "0/0": prefix "0" reads as a namespace`},
	{in: "job:openstack/application=", want: Dependency{Kind: KindJob, Namespace: "openstack", Labels: map[string]string{"application": ""}}},
	{in: "job:openstack/", wantErr: `empty name after namespace "openstack"`},
	{in: "job:Keystone", wantErr: `name "Keystone"`},
	{in: "job:application=keystone,application=glance", wantErr: `label "application" given twice`},
	{in: "job:application=keystone,component", wantErr: `label "component": want key=value`},
	{in: "job:=keystone", wantErr: "label selector"},
	{in: "job:application=key stone", wantErr: "label selector"},

	// daemonset
	{in: "daemonset:openvswitch-vswitchd", want: Dependency{Kind: KindDaemonSet, Name: "openvswitch-vswitchd"}},
	{in: "daemonset:openstack/libvirt", want: Dependency{Kind: KindDaemonSet, Namespace: "openstack", Name: "libvirt"}},
	{in: "daemonset:openstack/", wantErr: "empty name after namespace"},
	{in: "daemonset:-libvirt", wantErr: `name "-libvirt"`},

	// pod
	{in: "pod:app=mariadb", want: Dependency{Kind: KindPod, Labels: map[string]string{"app": "mariadb"}}},
	{in: "pod:app=mariadb@samenode", want: Dependency{Kind: KindPod, Labels: map[string]string{"app": "mariadb"}, SameNode: true}},
	{in: "pod:openstack/application=ovn,component=ovn-controller@samenode", want: Dependency{Kind: KindPod, Namespace: "openstack",
		Labels: map[string]string{"application": "ovn", "component": "ovn-controller"}, SameNode: true}},
	{in: "pod:app.kubernetes.io/name=mariadb", want: Dependency{Kind: KindPod,
		Labels: map[string]string{"app.kubernetes.io/name": "mariadb"}}},
	{in: "pod:example/app=mariadb", want: Dependency{Kind: KindPod, Namespace: "example", Labels: map[string]string{"app": "mariadb"}}},
	{in: "pod:tier=db,example/app=mariadb@samenode", wantErr: `label "example/app": prefix "example" reads as a namespace`},
	{in: "pod:@samenode", wantErr: "empty label selector"},
	{in: "pod:openstack/", wantErr: "empty"},
	{in: "pod:mariadb", wantErr: `label "mariadb": want key=value`},
	{in: "pod:app=mariadb@samenode@samenode", wantErr: "label selector"},
	{in: "pod:app=mariadb@othernode", wantErr: "label selector"},

	// container
	{in: "container:nova-libvirt", want: Dependency{Kind: KindContainer, Name: "nova-libvirt"}},
	{in: "container:openstack/nova-libvirt", wantErr: `container name "openstack/nova-libvirt"`},
	{in: "container:Nova", wantErr: `container name "Nova"`},
	{in: "container:a.b", wantErr: `container name "a.b"`},

	// resource
	{in: "resource:apps/v1/Deployment/openstack/keystone-api?status.readyReplicas=3&condition=Available", want: Dependency{
		Kind: KindResource, Namespace: "openstack", Name: "keystone-api", Resource: &ResourceRef{
			Group: "apps", Version: "v1", Kind: "Deployment",
			Fields:     []FieldMatch{{Path: "status.readyReplicas", Value: "3"}},
			Conditions: []ConditionMatch{{Type: "Available", Status: "True"}},
		}}},
	{in: "resource:core/v1/ConfigMap/x", want: Dependency{Kind: KindResource, Name: "x",
		Resource: &ResourceRef{Group: "", Version: "v1", Kind: "ConfigMap"}}},
	{in: "resource:mariadb.mmontes.io/v1alpha1/MariaDB/openstack/mariadb?condition=Ready=True", want: Dependency{
		Kind: KindResource, Namespace: "openstack", Name: "mariadb", Resource: &ResourceRef{
			Group: "mariadb.mmontes.io", Version: "v1alpha1", Kind: "MariaDB",
			Conditions: []ConditionMatch{{Type: "Ready", Status: "True"}},
		}}},
	{in: "resource:argoproj.io/v1alpha1/Workflow/default/wf-example?status.phase=Succeeded", want: Dependency{
		Kind: KindResource, Namespace: "default", Name: "wf-example", Resource: &ResourceRef{
			Group: "argoproj.io", Version: "v1alpha1", Kind: "Workflow",
			Fields: []FieldMatch{{Path: "status.phase", Value: "Succeeded"}},
		}}},
	{in: "resource:example.com/v1/Foo/x?condition=Degraded=False&spec.paused=false&spec.note=", want: Dependency{
		Kind: KindResource, Name: "x", Resource: &ResourceRef{
			Group: "example.com", Version: "v1", Kind: "Foo",
			Fields:     []FieldMatch{{Path: "spec.paused", Value: "false"}, {Path: "spec.note", Value: ""}},
			Conditions: []ConditionMatch{{Type: "Degraded", Status: "False"}},
		}}},
	{in: "resource:apps/v1/Deployment/keystone-api?", want: Dependency{Kind: KindResource, Name: "keystone-api",
		Resource: &ResourceRef{Group: "apps", Version: "v1", Kind: "Deployment"}}},
	{in: "resource:apps/v1/Deployment", wantErr: "want resource:GROUP/VERSION/KIND/[NS/]NAME"},
	{in: "resource:apps/v1/Deployment/a/b/c", wantErr: "want resource:GROUP/VERSION/KIND/[NS/]NAME"},
	{in: "resource:apps//Deployment/x", wantErr: "empty version or kind"},
	{in: "resource:apps/v1//x", wantErr: "empty version or kind"},
	{in: "resource:Apps/v1/Deployment/x", wantErr: `group "Apps"`},
	{in: "resource:apps/v1/Deployment//x", wantErr: `namespace ""`},
	{in: "resource:apps/v1/Deployment/x/", wantErr: `name ""`},
	{in: "resource:apps/v1/Deployment/x?status", wantErr: `query term "status"`},
	{in: "resource:apps/v1/Deployment/x?=3", wantErr: `query term "=3"`},
	{in: "resource:apps/v1/Deployment/x?a=1&&b=2", wantErr: `query term ""`},
	{in: "resource:apps/v1/Deployment/x?condition=", wantErr: "empty condition type"},
	{in: "resource:apps/v1/Deployment/x?.status.replicas=1", wantErr: "bad field path"},
	{in: "resource:apps/v1/Deployment/x?status..replicas=1", wantErr: "bad field path"},

	// not a dependency at all
	{in: "", wantErr: "want TYPE:VALUE"},
	{in: "mariadb", wantErr: "want TYPE:VALUE"},
	{in: "mysql:mariadb", wantErr: `unknown type "mysql"`},
	{in: "Service:mariadb", wantErr: `unknown type "Service"`},
	{in: ":mariadb", wantErr: `unknown type ""`},
}

func TestParseSpec(t *testing.T) {
	for _, tc := range parseCases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Parse(tc.in)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("Parse(%q) = %#v, want an error containing %q", tc.in, got, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Parse(%q) error = %q, want it to contain %q", tc.in, err, tc.wantErr)
				}
				in := tc.in
				if strings.Contains(in, "://") {
					in = redact.URL(in) // a URL is quoted with its credentials hidden
				}
				if quoted := fmt.Sprintf("%q", in); !strings.Contains(err.Error(), quoted) {
					t.Errorf("Parse(%q) error = %q, want it to quote the input %s", tc.in, err, quoted)
				}
				if !reflect.DeepEqual(got, Dependency{}) {
					t.Errorf("Parse(%q) returned %#v with its error, want the zero Dependency", tc.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.in, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parse(%q) =\n  %#v\nwant\n  %#v", tc.in, got, tc.want)
			}
			// Round trip: the rendering parses back to the same dependency.
			s := got.String()
			again, err := Parse(s)
			if err != nil {
				t.Fatalf("Parse(%q) (String of Parse(%q)): %v", s, tc.in, err)
			}
			if !reflect.DeepEqual(again, got) {
				t.Fatalf("Parse(String()) = %#v, want %#v (String() = %q)", again, got, s)
			}
		})
	}
}

func TestParseSpecCanonicalString(t *testing.T) {
	// String() renders in a canonical form: labels in key order, the core group
	// spelled "core", a default condition status left out.
	for in, want := range map[string]string{
		"job:openstack/component=db-sync,application=keystone":            "job:openstack/application=keystone,component=db-sync",
		"pod:b=2,a=1@samenode":                                            "pod:a=1,b=2@samenode",
		"resource:core/v1/ConfigMap/x":                                    "resource:core/v1/ConfigMap/x",
		"resource:example.com/v1/Foo/ns/x?condition=Ready=True&a.b=c":     "resource:example.com/v1/Foo/ns/x?a.b=c&condition=Ready",
		"resource:example.com/v1/Foo/x?condition=Ready=":                  "resource:example.com/v1/Foo/x?condition=Ready",
		"resource:mariadb.mmontes.io/v1alpha1/MariaDB/openstack/mariadb?": "resource:mariadb.mmontes.io/v1alpha1/MariaDB/openstack/mariadb",
		"tcp:[::1]:5672":                  "tcp:[::1]:5672",
		"https://keystone.example.com/v3": "https://keystone.example.com/v3",
		"service:openstack/mariadb":       "service:openstack/mariadb",
		"exposed:openstack/keystone":      "exposed:openstack/keystone",
		"resource:apps/v1/Deployment/keystone-api?condition=Progressing=False": "resource:apps/v1/Deployment/keystone-api?condition=Progressing=False",
	} {
		d, err := Parse(in)
		if err != nil {
			t.Errorf("Parse(%q): %v", in, err)
			continue
		}
		if got := d.String(); got != want {
			t.Errorf("Parse(%q).String() = %q, want %q", in, got, want)
		}
	}
}

func TestParseLabels(t *testing.T) {
	got, err := ParseLabels("application=keystone,component=api")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"application": "keystone", "component": "api"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ParseLabels = %v, want %v", got, want)
	}
	if s := FormatLabels(got); s != "application=keystone,component=api" {
		t.Errorf("FormatLabels = %q", s)
	}
	for in, wantErr := range map[string]string{
		"":                             "empty label selector",
		"a":                            `label "a": want key=value`,
		"a=1,a=2":                      `label "a" given twice`,
		"a=1,":                         `label "": want key=value`,
		"a b=1":                        "label selector",
		"a=" + "x!":                    "label selector",
		"-a=1":                         "label selector",
		"a/b/c=1":                      "label selector",
		"a=" + strings.Repeat("v", 64): "label selector",
	} {
		if _, err := ParseLabels(in); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ParseLabels(%q) error = %v, want one containing %q", in, err, wantErr)
		}
	}
	if err := ValidateLabels(nil); err == nil {
		t.Error("ValidateLabels(nil) = nil, want an error")
	}
}

// FuzzParse checks that Parse never panics and that whatever it accepts
// renders back (String) to text that parses to the same Dependency.
func FuzzParse(f *testing.F) {
	for _, tc := range parseCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		d, err := Parse(in)
		if err != nil {
			// A URL is quoted with its credentials hidden.
			quoted := in
			if strings.Contains(in, "://") {
				quoted = redact.URL(in)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", quoted)) {
				t.Fatalf("Parse(%q) error %q does not quote the input", in, err)
			}
			return
		}
		s := d.String()
		again, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(%q) = %#v, but Parse(its String() %q) fails: %v", in, d, s, err)
		}
		if d.Kind == KindHTTP {
			d.URL = redact.URL(d.URL) // String() hides a URL's credentials
		}
		if !reflect.DeepEqual(again, d) {
			t.Fatalf("Parse(%q) = %#v, but Parse(its String() %q) = %#v", in, d, s, again)
		}
		if s2 := again.String(); s2 != s {
			t.Fatalf("String() is not stable: %q then %q", s, s2)
		}
	})
}

// A URL's password is used to wait but never shown: String() names the
// dependency in logs, Events and metric labels, and a parse error quotes
// the input.
func TestSpecHidesURLPassword(t *testing.T) {
	d, err := Parse("http://admin:S3cretPW@127.0.0.1:9/v3?token=T0kenX")
	if err != nil {
		t.Fatal(err)
	}
	if d.URL != "http://admin:S3cretPW@127.0.0.1:9/v3?token=T0kenX" {
		t.Errorf("URL %q: the wait must use the credentials", d.URL)
	}
	if got := d.String(); got != "http://admin:***@127.0.0.1:9/v3?token=***" {
		t.Errorf("String() = %q", got)
	}
	_, err = Parse("http://admin:S3cretPW@[::1/x")
	if err == nil || strings.Contains(err.Error(), "S3cretPW") {
		t.Errorf("Parse error %v shows the password", err)
	}
}
