package render

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/goleak"

	"github.com/kolla-agent/kolla-agent/discovery"
	"github.com/kolla-agent/kolla-agent/internal/dnstest"
)

// tmplDNS is the shared loopback DNS server, counting the queries per name
// and type.
type tmplDNS struct {
	addr string
	mu   sync.Mutex
	seen map[string]int // "name TYPE" -> queries
}

func startTemplateDNS(t *testing.T, h func(q *dns.Msg, n int) *dns.Msg) *tmplDNS {
	t.Helper()
	// Registered first, so it runs after the server's shutdown.
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })
	s := &tmplDNS{seen: map[string]int{}}
	s.addr = dnstest.Start(t, func(q *dns.Msg, _ string) *dns.Msg {
		key := strings.ToLower(q.Question[0].Name) + " " + dns.TypeToString[q.Question[0].Qtype]
		s.mu.Lock()
		s.seen[key]++
		n := s.seen[key]
		s.mu.Unlock()
		return h(q, n)
	}).Addr
	return s
}

func (s *tmplDNS) queries(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[key]
}

func (s *tmplDNS) resolver(t *testing.T) *discovery.Resolver {
	t.Helper()
	r, err := discovery.NewResolver(discovery.DNSConfig{
		Servers:       []string{s.addr},
		Ndots:         5,
		ClusterDomain: "cluster.local",
		Namespace:     "openstack",
		Timeout:       time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tmplZone answers from "NAME TYPE" -> records in zone file syntax: a name
// without the type asked is NODATA, a name not there NXDOMAIN.
func tmplZone(t *testing.T, zone map[string][]string) func(*dns.Msg, int) *dns.Msg {
	return func(q *dns.Msg, _ int) *dns.Msg {
		name := strings.ToLower(q.Question[0].Name)
		found := false
		var rrs []dns.RR
		for k, v := range zone {
			n, typ, _ := strings.Cut(k, " ")
			if n != name {
				continue
			}
			found = true
			if typ == dns.TypeToString[q.Question[0].Qtype] {
				for _, s := range v {
					rr, err := dns.NewRR(s)
					if err != nil {
						t.Errorf("zone record %q: %v", s, err)
						continue
					}
					rrs = append(rrs, rr)
				}
			}
		}
		if !found {
			return dnstest.Reply(q, dns.RcodeNameError)
		}
		return dnstest.Reply(q, dns.RcodeSuccess, rrs...)
	}
}

// tmplOpenStackZone is a namespace as cluster DNS shows it: headless services
// for rabbitmq (a StatefulSet), memcached and mariadb (galera).
func tmplOpenStackZone(t *testing.T) func(*dns.Msg, int) *dns.Msg {
	const d = ".openstack.svc.cluster.local."
	return tmplZone(t, map[string][]string{
		"rabbitmq" + d + " A": {"rabbitmq" + d + " 5 IN A 10.244.2.11", "rabbitmq" + d + " 5 IN A 10.244.1.10", "rabbitmq" + d + " 5 IN A 10.244.3.12"},
		"_amqp._tcp.rabbitmq" + d + " SRV": {
			"_amqp._tcp.rabbitmq" + d + " 5 IN SRV 0 33 5672 rabbitmq-2.rabbitmq" + d,
			"_amqp._tcp.rabbitmq" + d + " 5 IN SRV 0 33 5672 rabbitmq-0.rabbitmq" + d,
			"_amqp._tcp.rabbitmq" + d + " 5 IN SRV 0 33 5672 rabbitmq-1.rabbitmq" + d,
		},
		"memcached" + d + " A":    {"memcached" + d + " 5 IN A 10.244.3.2", "memcached" + d + " 5 IN A 10.244.1.7", "memcached" + d + " 5 IN A 10.244.2.5"},
		"memcached" + d + " AAAA": {"memcached" + d + " 5 IN AAAA fd00:10:244::7"},
		"mariadb" + d + " A":      {"mariadb" + d + " 5 IN A 10.244.1.20", "mariadb" + d + " 5 IN A 10.244.3.22", "mariadb" + d + " 5 IN A 10.244.2.21"},
		"keystone" + d + " A":     {"keystone" + d + " 5 IN A 10.96.14.3"},
	})
}

// podEnv is what the downward API gives a pod.
func tmplPodEnv(extra ...string) func(string) (string, bool) {
	env := map[string]string{
		"POD_IP":    "10.244.1.31",
		"POD_NAME":  "nova-api-6d5f7c9b8-x2k4p",
		"NAMESPACE": "openstack",
		"NODE_NAME": "worker-1",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

// tmplVolume lays out a ConfigMap or Secret volume the way the kubelet's
// AtomicWriter does: the files in dir/..VERSION, dir/..data -> ..VERSION,
// and each name a link dir/NAME -> ..data/NAME. Called again with another
// version, it swaps ..data atomically (a new link renamed over it).
func tmplVolume(t *testing.T, dir, version string, files map[string]string) {
	t.Helper()
	data := filepath.Join(dir, ".."+version)
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(data, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); errors.Is(err, fs.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(".."+version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func tmplMkdirs(t *testing.T, root string, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTemplateErrors(t *testing.T) {
	root := t.TempDir()
	tmplMkdirs(t, root, "etc/nova/secrets", "etc/outside")
	tmplVolume(t, filepath.Join(root, "etc/nova/secrets"), "2024_05_01_10_00_00.1", map[string]string{"db-password": "s3cret\n"})
	if err := os.WriteFile(filepath.Join(root, "etc/outside/key"), []byte("private"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A link in the allowed directory that leads out of it.
	if err := os.Symlink("../../outside/key", filepath.Join(root, "etc/nova/secrets/escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "etc/outside/key"), filepath.Join(root, "etc/nova/secrets/absolute")); err != nil {
		t.Fatal(err)
	}
	base := TemplateOptions{
		LookupEnv:       tmplPodEnv(),
		ClusterDomain:   "cluster.local",
		AllowedFileDirs: []string{"/etc/nova/secrets"},
		Root:            root,
		Data:            map[string]any{"region": "RegionOne", "empty": nil, "db": map[string]any{"user": "nova"}},
	}
	tests := []struct {
		name string
		src  string
		opts func(*TemplateOptions)
		want string // the whole error
	}{
		{"missing key", "[database]\nconnection = mysql://{{ .db.password }}@db/nova\n", nil,
			`nova.conf.tmpl:2:28: at <.db.password>: map has no entry for key "password"`},
		{"missing top-level key", "[DEFAULT]\n\nregion_name = {{ .regoin }}\n", nil,
			`nova.conf.tmpl:3:18: at <.regoin>: map has no entry for key "regoin"`},
		{"missing key in a defined template", "{{ define \"db\" }}\n  user = {{ .db.usr }}\n{{ end }}{{ template \"db\" . }}", nil,
			`nova.conf.tmpl:2:16: executing "db" at <.db.usr>: map has no entry for key "usr"`},
		{"unknown function", "[DEFAULT]\nmy_ip = {{ podIp }}\n", nil,
			`nova.conf.tmpl:2:12: function "podIp" not defined`},
		{"unknown function in a pipeline", "a = {{ podIP | lowr }}\n", nil,
			`nova.conf.tmpl:1:16: function "lowr" not defined`},
		{"unknown function in a multi-line action", "a = {{ join \",\"\n  (endpoint \"memcached.openstack\") }}\n", nil,
			`nova.conf.tmpl:2:4: function "endpoint" not defined`},
		{"unclosed action", "a = 1\nb = {{ .x }\n", nil,
			`nova.conf.tmpl:2:11: unexpected "}" in operand`},
		{"if without end", "{{ if .region }}\nregion = {{ .region }}\n", nil,
			`nova.conf.tmpl:3:1: unexpected EOF`},
		{"bad argument count", "x = {{ env }}", nil,
			`nova.conf.tmpl:1:8: at <env>: wrong number of args for env: want at least 1 got 0`},
		{"env not set", "[oslo_messaging_rabbit]\npassword = {{ env \"RABBITMQ_PASSWORD\" }}\n", nil,
			`nova.conf.tmpl:2:15: at <env "RABBITMQ_PASSWORD">: error calling env: RABBITMQ_PASSWORD is not set (give a fallback: env "RABBITMQ_PASSWORD" "VALUE")`},
		{"podIP not set", "my_ip = {{ podIP }}", func(o *TemplateOptions) { o.LookupEnv = tmplPodEnv("POD_IP", "") },
			`nova.conf.tmpl:1:12: at <podIP>: error calling podIP: POD_IP is not set: give the pod's podIP through the downward API (fieldRef status.podIP)`},
		{"file outside the allowed directories", "{{ file \"/etc/passwd\" }}", nil,
			`nova.conf.tmpl:1:4: at <file "/etc/passwd">: error calling file: /etc/passwd: not under an allowed directory (/etc/nova/secrets)`},
		{"file through ..", "{{ file \"/etc/nova/secrets/../../outside/key\" }}", nil,
			`nova.conf.tmpl:1:4: at <file "/etc/nova/secrets/../../outside/key">: error calling file: /etc/nova/secrets/../../outside/key: not under an allowed directory (/etc/nova/secrets)`},
		{"secret through a symlink out", "{{ secret \"/etc/nova/secrets/escape\" }}", nil,
			`nova.conf.tmpl:1:4: at <secret "/etc/nova/secrets/escape">: error calling secret: /etc/nova/secrets/escape: path escapes from parent`},
		{"secret through an absolute symlink", "{{ secret \"/etc/nova/secrets/absolute\" }}", nil,
			`nova.conf.tmpl:1:4: at <secret "/etc/nova/secrets/absolute">: error calling secret: /etc/nova/secrets/absolute: path escapes from parent`},
		{"no file allowed", "{{ file \"/etc/nova/secrets/db-password\" }}", func(o *TemplateOptions) { o.AllowedFileDirs = nil },
			`nova.conf.tmpl:1:4: at <file "/etc/nova/secrets/db-password">: error calling file: /etc/nova/secrets/db-password: no directory is allowed to be read from`},
		{"relative file", "{{ file \"db-password\" }}", nil,
			`nova.conf.tmpl:1:4: at <file "db-password">: error calling file: "db-password": want an absolute path`},
		{"missing secret", "{{ secret \"/etc/nova/secrets/nope\" }}", nil,
			`nova.conf.tmpl:1:4: at <secret "/etc/nova/secrets/nope">: error calling secret: /etc/nova/secrets/nope: no such file or directory`},
		{"null value printed", "a = 1\nb = {{ .empty }}\n", nil,
			`nova.conf.tmpl: output line 2: <no value> printed: a key holds null or a missing key was indexed; use default for optional values`},
		{"index of a missing key", "x = {{ index .db \"password\" }}", nil,
			`nova.conf.tmpl: output line 1: <no value> printed: a key holds null or a missing key was indexed; use default for optional values`},
		{"service without a cluster domain", "{{ service \"keystone.openstack\" }}", func(o *TemplateOptions) { o.ClusterDomain = "" },
			`nova.conf.tmpl:1:4: at <service "keystone.openstack">: error calling service: keystone.openstack: the cluster domain is not known`},
		{"service name", "{{ service \"Keystone.openstack\" }}", nil,
			`nova.conf.tmpl:1:4: at <service "Keystone.openstack">: error calling service: "Keystone.openstack": "Keystone": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`},
		{"srv name", "{{ srv \"rabbitmq.openstack\" }}", nil,
			`nova.conf.tmpl:1:4: at <srv "rabbitmq.openstack">: error calling srv: "rabbitmq.openstack": want _PORT._PROTO.NAME.NAMESPACE`},
		{"no resolver", "{{ endpoints \"memcached.openstack\" }}", nil,
			`nova.conf.tmpl:1:4: at <endpoints "memcached.openstack">: error calling endpoints: memcached.openstack.svc.cluster.local.: no DNS resolver`},
		{"join of a non-list", "{{ join \",\" .db }}", nil,
			`nova.conf.tmpl:1:4: at <join "," .db>: error calling join: want a list, got map[string]interface {}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			if tc.opts != nil {
				tc.opts(&o)
			}
			out, err := RenderTemplate(context.Background(), "nova.conf.tmpl", []byte(tc.src), o)
			if err == nil {
				t.Fatalf("rendered %q, want an error", out)
			}
			if err.Error() != tc.want {
				t.Errorf("error\n got %s\nwant %s", err, tc.want)
			}
			var te *TemplateError
			if !errors.As(err, &te) || te.File != "nova.conf.tmpl" {
				t.Errorf("error %v is not a *TemplateError naming the file", err)
			}
			if out != nil {
				t.Errorf("output %q with the error", out)
			}
		})
	}
}

func TestTemplateFunctions(t *testing.T) {
	root := t.TempDir()
	tmplMkdirs(t, root, "etc/nova/secrets", "etc/nova/tls")
	tmplVolume(t, filepath.Join(root, "etc/nova/secrets"), "2024_05_01_10_00_00.1", map[string]string{"db-password": "s3cret\r\n", "motd": "line 1\nline 2\n"})
	if err := os.WriteFile(filepath.Join(root, "etc/nova/tls/ca.pem"), []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := TemplateOptions{
		LookupEnv:       tmplPodEnv("DEBUG", "", "LOG_LEVEL", "INFO"),
		ClusterDomain:   "cluster.local",
		AllowedFileDirs: []string{"/etc/nova/secrets", "/etc/nova/tls/"},
		Root:            root,
		Data: map[string]any{
			"region":  "RegionOne",
			"workers": float64(8), // as YAML decodes it
			"big":     float64(1e6),
			"debug":   false,
			"empty":   "",
			"hosts":   []any{"a", "b"},
			"policy":  map[string]any{"admin": "role:admin", "url": "<a&b>"},
		},
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ src, want string }{
		{`{{ podIP }} {{ podName }} {{ namespace }} {{ nodeName }}`, "10.244.1.31 nova-api-6d5f7c9b8-x2k4p openstack worker-1"},
		{`{{ hostname }}`, host},
		{`{{ env "LOG_LEVEL" }}|{{ env "DEBUG" }}|{{ env "UNSET" "fallback" }}`, "INFO||fallback"},
		{`{{ env "DEBUG" "" | default "false" }}`, "false"},
		{`{{ secret "/etc/nova/secrets/db-password" }}`, "s3cret"},
		{`{{ file "/etc/nova/secrets/motd" }}`, "line 1\nline 2\n"},
		{"ca: |\n{{ file \"/etc/nova/tls/ca.pem\" | indent 2 }}", "ca: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  -----END CERTIFICATE-----\n"},
		{"{{ indent 4 \"a\\n\\nb\" }}", "    a\n\n    b"},
		{`{{ service "keystone.openstack" }} {{ service "glance" }}`, "keystone.openstack.svc.cluster.local glance.openstack.svc.cluster.local"},
		{`{{ join "," (split ";" "a;b;c") }} {{ len (split "," "") }}`, "a,b,c 0"},
		{`{{ join " " .hosts }}`, "a b"},
		{`{{ quote .region }} {{ quote .workers }} {{ quote "a\"b" }}`, `"RegionOne" "8" "a\"b"`},
		{`{{ .workers }} {{ quote .big }}`, `8 "1000000"`},
		{`{{ default "x" .empty }} {{ default "x" .region }} {{ default true .debug }} {{ default "none" (index .policy "nope") }}`, "x RegionOne false none"},
		{`{{ toJSON .policy }} {{ toJSON .hosts }}`, `{"admin":"role:admin","url":"<a&b>"} ["a","b"]`},
		{`{{ replace "." "-" podIP }} {{ lower "ABC" }} {{ upper .region }}`, "10-244-1-31 abc REGIONONE"},
		{`{{ withPort 11211 "10.0.0.1" }} {{ withPort "11211" "fd00::1" }} {{ split "," "a,b" | withPort 80 | join "," }}`, "10.0.0.1:11211 [fd00::1]:11211 a:80,b:80"},
		{`{{ range $i, $h := .hosts }}{{ if $i }},{{ end }}{{ $h }}{{ end }}`, "a,b"},
		{"", ""},
	}
	for _, tc := range tests {
		out, err := RenderTemplate(context.Background(), "t.tmpl", []byte(tc.src), o)
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
			continue
		}
		if string(out) != tc.want {
			t.Errorf("%s\n got %q\nwant %q", tc.src, out, tc.want)
		}
	}
}

// The configs the issue names, with values from a real DNS server: the
// rabbitmq transport_url from a headless service's SRV records, memcached
// from all its endpoints, galera's cluster address, the pod's own IP.
func TestTemplateOpenStackConfigs(t *testing.T) {
	dnsSrv := startTemplateDNS(t, tmplOpenStackZone(t))
	root := t.TempDir()
	tmplMkdirs(t, root, "var/lib/kolla/config_files", "etc/nova/secrets", "etc/nova", "etc/mysql/conf.d")
	tmplVolume(t, filepath.Join(root, "etc/nova/secrets"), "2024_05_01_10_00_00.1", map[string]string{
		"rabbitmq-password": "r4bbit\n", "db-password": "n0va\n",
	})
	tmplVolume(t, filepath.Join(root, "var/lib/kolla/config_files"), "2024_05_01_10_00_00.2", map[string]string{
		"nova.conf.tmpl": `[DEFAULT]
my_ip = {{ podIP }}
host = {{ podName }}
transport_url = rabbit://{{ range $i, $h := srv "_amqp._tcp.rabbitmq.openstack" }}{{ if $i }},{{ end }}openstack:{{ secret "/etc/nova/secrets/rabbitmq-password" }}@{{ $h }}{{ end }}//

[database]
connection = mysql+pymysql://nova:{{ secret "/etc/nova/secrets/db-password" }}@{{ service "mariadb.openstack" }}:3306/nova

[keystone_authtoken]
www_authenticate_uri = http://{{ service "keystone" }}:5000
memcached_servers = {{ endpoints "memcached.openstack" | withPort 11211 | join "," }}

[cache]
backend = oslo_cache.memcache_pool
memcache_servers = {{ range $i, $a := endpoints "memcached.openstack" }}{{ if $i }},{{ end }}{{ $a }}:11211{{ end }}
`,
		"galera.cnf.tmpl": `[galera]
wsrep_cluster_address = gcomm://{{ endpoints "mariadb.openstack" | join "," }}
wsrep_node_address = {{ podIP }}:4567
wsrep_node_name = {{ podName }}
`,
		"rabbitmq.hosts.tmpl": `{{ range lookup "rabbitmq.openstack" }}{{ . }}
{{ end }}`,
	})
	o := TemplateOptions{
		LookupEnv:       tmplPodEnv("POD_NAME", "mariadb-0"),
		Resolver:        dnsSrv.resolver(t),
		ClusterDomain:   "cluster.local",
		AllowedFileDirs: []string{"/etc/nova/secrets"},
		Timeout:         10 * time.Second,
		Root:            root,
	}
	items := []TemplateItem{
		{Src: "/var/lib/kolla/config_files/nova.conf.tmpl", Dest: "/etc/nova/nova.conf", Perm: "0640"},
		{Src: "/var/lib/kolla/config_files/galera.cnf.tmpl", Dest: "/etc/mysql/conf.d/galera.cnf"},
		{Src: "/var/lib/kolla/config_files/rabbitmq.hosts.tmpl", Dest: "/etc/nova/rabbitmq.hosts"},
	}
	if err := applyTemplates(context.Background(), items, o); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"/etc/nova/nova.conf": `[DEFAULT]
my_ip = 10.244.1.31
host = mariadb-0
transport_url = rabbit://openstack:r4bbit@rabbitmq-0.rabbitmq.openstack.svc.cluster.local:5672,openstack:r4bbit@rabbitmq-1.rabbitmq.openstack.svc.cluster.local:5672,openstack:r4bbit@rabbitmq-2.rabbitmq.openstack.svc.cluster.local:5672//

[database]
connection = mysql+pymysql://nova:n0va@mariadb.openstack.svc.cluster.local:3306/nova

[keystone_authtoken]
www_authenticate_uri = http://keystone.openstack.svc.cluster.local:5000
memcached_servers = 10.244.1.7:11211,10.244.2.5:11211,10.244.3.2:11211,[fd00:10:244::7]:11211

[cache]
backend = oslo_cache.memcache_pool
memcache_servers = 10.244.1.7:11211,10.244.2.5:11211,10.244.3.2:11211,fd00:10:244::7:11211
`,
		"/etc/mysql/conf.d/galera.cnf": `[galera]
wsrep_cluster_address = gcomm://10.244.1.20,10.244.2.21,10.244.3.22
wsrep_node_address = 10.244.1.31:4567
wsrep_node_name = mariadb-0
`,
		"/etc/nova/rabbitmq.hosts": "10.244.1.10\n10.244.2.11\n10.244.3.12\n",
	}
	for dest, w := range want {
		got, err := os.ReadFile(filepath.Join(root, dest))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != w {
			t.Errorf("%s:\n got %s\nwant %s", dest, got, w)
		}
	}
	fi, err := os.Stat(filepath.Join(root, "/etc/nova/nova.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o640 {
		t.Errorf("nova.conf mode %v, want 0640", fi.Mode())
	}
	// One render asks each name once, however often the templates use it.
	if n := dnsSrv.queries("memcached.openstack.svc.cluster.local. A"); n != 1 {
		t.Errorf("memcached asked %d times, want 1", n)
	}
}

// A template that needs a dependency's value waits for it: the name does
// not exist for a few answers (a StatefulSet still starting), or DNS fails
// (CoreDNS restarting), then it answers.
func TestTemplateWaitsForDNS(t *testing.T) {
	const name = "rabbitmq.openstack.svc.cluster.local."
	a := func(q *dns.Msg, ip string) dns.RR {
		return &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.ParseIP(ip)}
	}
	for _, tc := range []struct {
		name    string
		notYet  int // answers before the records come
		failure int // rcode of those answers
	}{
		{"NXDOMAIN", 3, dns.RcodeNameError},
		{"NODATA", 2, dns.RcodeSuccess},
		{"SERVFAIL", 3, dns.RcodeServerFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startTemplateDNS(t, func(q *dns.Msg, n int) *dns.Msg {
				switch {
				case q.Question[0].Qtype != dns.TypeA:
					return dnstest.Reply(q, dns.RcodeSuccess)
				case n <= tc.notYet:
					return dnstest.Reply(q, tc.failure)
				}
				return dnstest.Reply(q, dns.RcodeSuccess, a(q, "10.244.1.10"), a(q, "10.244.2.11"))
			})
			o := TemplateOptions{Resolver: srv.resolver(t), ClusterDomain: "cluster.local", Timeout: 20 * time.Second}
			out, err := RenderTemplate(context.Background(), "t.tmpl", []byte(`hosts = {{ endpoints "rabbitmq.openstack" | join "," }}`), o)
			if err != nil {
				t.Fatal(err)
			}
			if want := "hosts = 10.244.1.10,10.244.2.11"; string(out) != want {
				t.Errorf("got %q, want %q", out, want)
			}
			if n := srv.queries(name + " A"); n != tc.notYet+1 {
				t.Errorf("%d A queries, want %d", n, tc.notYet+1)
			}
		})
	}
}

// A name that never resolves fails at the timeout, naming the name and the
// last answer, as a timeout (exit code 2), not a template error.
func TestTemplateWaitTimeout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rcode int
		src   string
		want  []string
	}{
		{"NXDOMAIN", dns.RcodeNameError, "[cache]\nmemcache_servers = {{ endpoints \"memcached.openstack\" | join \",\" }}\n",
			[]string{`t.tmpl:2:23: at <endpoints "memcached.openstack">: error calling endpoints: waiting for memcached.openstack.svc.cluster.local.: timed out after `,
				`(last: NXDOMAIN for memcached.openstack.svc.cluster.local.)`}},
		{"SERVFAIL", dns.RcodeServerFailure, "{{ srv \"_amqp._tcp.rabbitmq.openstack\" }}",
			[]string{`t.tmpl:1:4: at <srv "_amqp._tcp.rabbitmq.openstack">: error calling srv: waiting for _amqp._tcp.rabbitmq.openstack.svc.cluster.local.: timed out after `,
				`(last: DNS unhealthy: SERVFAIL from 127.0.0.1:`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startTemplateDNS(t, func(q *dns.Msg, _ int) *dns.Msg { return dnstest.Reply(q, tc.rcode) })
			// 2 s: long enough for several answers even on a loaded 2-core
			// machine, so the last state is the server's, not "no answer yet".
			o := TemplateOptions{Resolver: srv.resolver(t), ClusterDomain: "cluster.local", Timeout: 2 * time.Second}
			start := time.Now()
			_, err := RenderTemplate(context.Background(), "t.tmpl", []byte(tc.src), o)
			if err == nil {
				t.Fatal("rendered a name that never resolves")
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("gave up after %v, want about 2s", took)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			if !errors.Is(err, discovery.ErrTimeout) {
				t.Errorf("error %v is not discovery.ErrTimeout", err)
			}
		})
	}

	// Cancelled (SIGTERM), not timed out. The last state is any: on a
	// loaded machine the first answer may not be in within 100 ms (the
	// cases above check what it says); the deadline only bounds the test.
	srv := startTemplateDNS(t, func(q *dns.Msg, _ int) *dns.Msg { return dnstest.Reply(q, dns.RcodeNameError) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx, stop := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, stop)
	_, err := RenderTemplate(ctx, "t.tmpl", []byte(`{{ lookup "db.example.com" }}`), TemplateOptions{Resolver: srv.resolver(t), Timeout: time.Minute})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "waiting for db.example.com: context canceled (last: ") {
		t.Errorf("cancelled wait: %v", err)
	}
}

// The kubelet updates a ConfigMap volume by swapping ..data; a render that
// straddles the swap still reads one version.
func TestTemplateSnapshot(t *testing.T) {
	const dir = "/var/lib/kolla/config_files"
	setup := func(t *testing.T) (string, []TemplateItem) {
		root := t.TempDir()
		tmplMkdirs(t, root, dir, "etc/keystone")
		tmplVolume(t, filepath.Join(root, dir), "2024_05_01_10_00_00.1", map[string]string{
			"keystone.conf.tmpl": "version = 1\n", "wsgi-keystone.conf.tmpl": "version = 1\n",
		})
		return root, []TemplateItem{
			{Src: dir + "/keystone.conf.tmpl", Dest: "/etc/keystone/keystone.conf"},
			{Src: dir + "/wsgi-keystone.conf.tmpl", Dest: "/etc/keystone/wsgi-keystone.conf"},
		}
	}
	update := map[string]string{"keystone.conf.tmpl": "version = 2\n", "wsgi-keystone.conf.tmpl": "version = 2\n"}

	t.Run("swap between two sources", func(t *testing.T) {
		root, items := setup(t)
		swapped := 0
		o := TemplateOptions{Root: root, afterRead: func(src string) {
			if swapped++; swapped == 1 {
				tmplVolume(t, filepath.Join(root, dir), "2024_05_01_10_05_00.2", update)
			}
		}}
		files, err := RenderTemplates(context.Background(), items, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if string(f.Data) != "version = 1\n" {
				t.Errorf("%s rendered %q, want version 1 (the version of the render's start)", f.Item.Src, f.Data)
			}
		}
		// The swap did happen: reading the path now gives the new version.
		if b, _ := os.ReadFile(filepath.Join(root, items[1].Src)); string(b) != "version = 2\n" {
			t.Errorf("after the swap the volume shows %q", b)
		}
	})

	t.Run("old version deleted mid-render", func(t *testing.T) {
		root, items := setup(t)
		swapped := 0
		o := TemplateOptions{Root: root, afterRead: func(src string) {
			if swapped++; swapped == 1 {
				// What the kubelet does after the swap.
				tmplVolume(t, filepath.Join(root, dir), "2024_05_01_10_05_00.2", update)
				if err := os.RemoveAll(filepath.Join(root, dir, "..2024_05_01_10_00_00.1")); err != nil {
					t.Fatal(err)
				}
			}
		}}
		files, err := RenderTemplates(context.Background(), items, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if string(f.Data) != "version = 2\n" {
				t.Errorf("%s rendered %q, want version 2 (the render starts again)", f.Item.Src, f.Data)
			}
		}
	})
}

func TestSnapshot(t *testing.T) {
	dir := t.TempDir()
	if got, err := snapshot(dir); err != nil || got != dir {
		t.Errorf("plain directory: %q, %v; want itself", got, err)
	}
	tmplVolume(t, dir, "2024_05_01_10_00_00.1", map[string]string{"a": "1"})
	if got, err := snapshot(dir); err != nil || got != filepath.Join(dir, "..2024_05_01_10_00_00.1") {
		t.Errorf("volume: %q, %v", got, err)
	}
	if got, err := snapshot(filepath.Join(dir, "missing")); err != nil || got != filepath.Join(dir, "missing") {
		t.Errorf("missing directory: %q, %v", got, err)
	}
	out := t.TempDir()
	if err := os.Symlink(out, filepath.Join(out, "..data")); err != nil {
		t.Fatal(err)
	}
	if _, err := snapshot(out); err == nil || !strings.Contains(err.Error(), "outside the volume") {
		t.Errorf("..data pointing out: %v", err)
	}
}

func TestApplyTemplates(t *testing.T) {
	root := t.TempDir()
	tmplMkdirs(t, root, "templates", "etc/glance")
	for name, src := range map[string]string{
		"good.tmpl": "[DEFAULT]\nbind_host = {{ podIP }}\n",
		"bad.tmpl":  "[DEFAULT]\ntransport_url = {{ env \"TRANSPORT_URL\" }}\n",
	} {
		if err := os.WriteFile(filepath.Join(root, "templates", name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := TemplateOptions{LookupEnv: tmplPodEnv(), Root: root}
	ctx := context.Background()
	good := TemplateItem{Src: "/templates/good.tmpl", Dest: "/etc/glance/glance-api.conf"}

	// All or nothing: the bad template is the last; nothing is written.
	err := applyTemplates(ctx, []TemplateItem{good, {Src: "/templates/bad.tmpl", Dest: "/etc/glance/other.conf"}}, o)
	if err == nil || !strings.HasPrefix(err.Error(), "/templates/bad.tmpl:2:20: ") {
		t.Fatalf("error %v, want one at /templates/bad.tmpl:2:20", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "etc/glance")); len(entries) != 0 {
		t.Fatalf("a failed render left %v", entries)
	}

	// Bad fields fail before any template is rendered, naming the item.
	os.WriteFile(filepath.Join(root, "etc/glance/a-file"), nil, 0o644)
	defer os.Remove(filepath.Join(root, "etc/glance/a-file"))
	for _, tc := range []struct {
		items []TemplateItem
		want  string
	}{
		{[]TemplateItem{good, {Src: "/templates/good.tmpl", Dest: "/etc/glance/x", Perm: "0999"}}, `render[1].perm: "0999" is not an octal mode`},
		{[]TemplateItem{{Src: "/templates/good.tmpl", Dest: "/etc/glance/x", Owner: "no-such-user"}}, `render[0].owner: `},
		{[]TemplateItem{good, good}, `render[1].dest: /etc/glance/glance-api.conf is also render[0].dest`},
		{[]TemplateItem{{Src: "/templates/good.tmpl", Dest: "/etc/glance/a-file/sub/y"}}, `render[0].dest: /etc/glance/a-file/sub/y: /etc/glance/a-file is not a directory`},
		{[]TemplateItem{{Src: "templates/good.tmpl", Dest: "/etc/glance/x"}}, `render[0].src: "templates/good.tmpl": want an absolute path`},
		{[]TemplateItem{{Src: "/templates/missing.tmpl", Dest: "/etc/glance/x"}}, `render[0].src: /templates/missing.tmpl: no such file or directory`},
	} {
		if _, err := RenderTemplates(ctx, tc.items, o); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("error %v, want %s...", err, tc.want)
		}
	}

	// A destination's missing directories are made, as kolla makes them.
	deep := TemplateItem{Src: "/templates/good.tmpl", Dest: "/etc/glance/glance.conf.d/sub/x.conf"}
	if err := applyTemplates(ctx, []TemplateItem{deep}, o); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(root, "etc/glance/glance.conf.d/sub")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("the made directory: %v", err)
	}
	os.RemoveAll(filepath.Join(root, "etc/glance/glance.conf.d"))

	// Written with the mode and owner asked (our own ids: the test may not
	// be root).
	good.Perm, good.Owner = "0o640", fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	if err := applyTemplates(ctx, []TemplateItem{good}, o); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, good.Dest)
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "[DEFAULT]\nbind_host = 10.244.1.31\n" {
		t.Errorf("wrote %q, %v", b, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode() != 0o640 || int(st.Uid) != os.Getuid() || int(st.Gid) != os.Getgid() {
		t.Errorf("mode %v owner %d:%d", fi.Mode(), st.Uid, st.Gid)
	}
}

// FuzzRenderTemplate: no template text panics the loader or the renderer,
// every error names the template, and nothing rendered holds <no value>.
func FuzzRenderTemplate(f *testing.F) {
	for _, s := range []string{
		"my_ip = {{ podIP }}\n",
		"{{ .missing }}",
		"{{ if .x }}{{ end",
		"{{ podIp }}",
		`{{ env "X" }}{{ env "HOME" "h" }}`,
		`{{ file "/etc/passwd" }}`,
		`{{ endpoints "memcached.openstack" | withPort 11211 | join "," }}`,
		`{{ srv "_amqp._tcp.rabbitmq" }}`,
		`{{ define "a" }}{{ .b }}{{ end }}{{ template "a" . }}`,
		`{{ toJSON .m }}{{ indent 2 "a\nb" }}{{ replace "a" "b" "aaa" }}`,
		`{{ index .m "k" }}`,
		"{{/* c */}}{{- 1 -}}",
		"{{ % }}",
	} {
		f.Add(s)
	}
	o := TemplateOptions{
		LookupEnv:       tmplPodEnv(),
		ClusterDomain:   "cluster.local",
		AllowedFileDirs: []string{"/nonexistent"},
		Timeout:         time.Second,
		Data:            map[string]any{"m": map[string]any{"k": "v", "n": nil}, "l": []any{"a", 1.5}},
	}
	f.Fuzz(func(t *testing.T, src string) {
		// Loops nested or recursive run for ever without printing anything
		// the output cap would stop: not what this target is about.
		if strings.Count(src, "range")+strings.Count(src, "template")+strings.Count(src, "block") > 1 || len(src) > 4096 {
			t.Skip()
		}
		out, err := RenderTemplate(context.Background(), "fuzz.tmpl", []byte(src), o)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.tmpl:") {
				t.Fatalf("error %q does not name the template", err)
			}
			return
		}
		if strings.Contains(string(out), templateNoValue) {
			t.Fatalf("rendered %q", out)
		}
	})
}

// applyTemplates renders every item, then writes them: what `kolla-agent
// render` does.
func applyTemplates(ctx context.Context, items []TemplateItem, o TemplateOptions) error {
	files, err := RenderTemplates(ctx, items, o)
	if err != nil {
		return err
	}
	return WriteTemplates(files)
}

// fakeExposer stands in for the API in publicURL/internalURL's own rules
// (their API side is tested end to end against the real API server).
type fakeExposer struct{ asked []string }

func (f *fakeExposer) Exposure(_ context.Context, ns, name string) (discovery.Exposure, error) {
	f.asked = append(f.asked, ns+"/"+name)
	if name == "internal-only" {
		return discovery.Exposure{}, errors.New("service " + ns + "/" + name + " is of type ClusterIP")
	}
	return discovery.Exposure{Scheme: "https", Host: "keystone.example.org", Port: 443}, nil
}

func (f *fakeExposer) ServicePort(_ context.Context, ns, name string) (string, int, error) {
	f.asked = append(f.asked, ns+"/"+name)
	return "http", 5000, nil
}

func TestTemplatePublicAndInternalURL(t *testing.T) {
	env := func(k string) (string, bool) {
		if k == "NAMESPACE" {
			return "openstack", true
		}
		return "", false
	}
	for _, tc := range []struct {
		name, src, want, err string
		exposer              bool
		domain               string
	}{
		{"both", `{{ publicURL "keystone" "/v3" }} {{ internalURL "keystone.other" "/v3" }}`, "https://keystone.example.org/v3 http://keystone.other.svc.cluster.local:5000/v3", "", true, "cluster.local"},
		{"no path", `{{ publicURL "keystone.openstack" }}`, "https://keystone.example.org", "", true, ""},
		{"two paths", `{{ publicURL "keystone" "/v3" "/x" }}`, "", "got 2 paths", true, ""},
		{"bad name", `{{ publicURL "a.b.c" }}`, "", "want NAME.NAMESPACE", true, ""},
		{"no API", `{{ publicURL "keystone" }}`, "", "no Kubernetes API to ask", false, ""},
		{"no cluster domain", `{{ internalURL "keystone" }}`, "", "the cluster domain is unknown", true, ""},
		{"not exposed", `{{ publicURL "internal-only" }}`, "", "service openstack/internal-only is of type ClusterIP", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := TemplateOptions{LookupEnv: env, ClusterDomain: tc.domain}
			if tc.exposer {
				o.Exposer = &fakeExposer{}
			}
			out, err := RenderTemplate(context.Background(), "t.tmpl", []byte(tc.src), o)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "t.tmpl:1:") {
					t.Fatalf("error %v, want t.tmpl:1: and %q", err, tc.err)
				}
				return
			}
			if err != nil || string(out) != tc.want {
				t.Fatalf("got %q %v, want %q", out, err, tc.want)
			}
		})
	}
}

// A template that reads a Secret is written 0600 when its item gives no
// perm; one that does not stays 0644; a perm given wins.
func TestTemplateSecretPerm(t *testing.T) {
	root := t.TempDir()
	tmplMkdirs(t, root, "templates", "secrets", "etc/glance")
	for name, src := range map[string]string{
		"templates/with.tmpl":    "password = {{ secret \"/secrets/db\" }}\n",
		"templates/without.tmpl": "bind_host = {{ podIP }}\n",
		"secrets/db":             "hunter2\n",
	} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := TemplateOptions{LookupEnv: tmplPodEnv(), Root: root, AllowedFileDirs: []string{"/secrets"}}
	items := []TemplateItem{
		{Src: "/templates/with.tmpl", Dest: "/etc/glance/a.conf"},
		{Src: "/templates/without.tmpl", Dest: "/etc/glance/b.conf"},
		{Src: "/templates/with.tmpl", Dest: "/etc/glance/c.conf", Perm: "0640"},
	}
	if err := applyTemplates(context.Background(), items, o); err != nil {
		t.Fatal(err)
	}
	for dest, want := range map[string]os.FileMode{"a.conf": 0o600, "b.conf": 0o644, "c.conf": 0o640} {
		fi, err := os.Stat(filepath.Join(root, "etc/glance", dest))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want mode %v", dest, fi.Mode(), err, want)
		}
	}
}
