package probes

import (
	"github.com/kolla-agent/kolla-agent/redact"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestOsloConfParse(t *testing.T) {
	const conf = `# rendered by kolla-agent
[DEFAULT]
debug = true
transport_url = rabbit://nova:pa$$ss@rabbit-0:5672,nova:pa$$ss@rabbit-1:5672/
; a comment
host: compute-1
control_exchange = "nova"
my_ip = 10.0.0.1
log_dir = $state_path/log
state_path = /var/lib/nova
unknown_ref = ${nosuch} and $ alone and \$HOME
cross = ${oslo_messaging_rabbit.ssl_ca_file}
multi = first
  second
	third
host = compute-2

[Oslo_Messaging_Rabbit]
ssl = True
ssl_ca_file = '/etc/ssl/ca.pem'
Key = case-sensitive
[default]
transport_url = not the DEFAULT section
`
	c, err := parseOsloConf("nova.conf", []byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		section, key, want string
		set                bool
	}{
		{"DEFAULT", "transport_url", "rabbit://nova:pa$ss@rabbit-0:5672,nova:pa$ss@rabbit-1:5672/", true},
		{"DEFAULT", "host", "compute-2", true}, // the last assignment wins; ':' separates too
		{"DEFAULT", "control_exchange", "nova", true},
		{"DEFAULT", "log_dir", "/var/lib/nova/log", true},
		{"DEFAULT", "unknown_ref", "${nosuch} and $ alone and $HOME", true},
		{"DEFAULT", "cross", "/etc/ssl/ca.pem", true},
		{"DEFAULT", "multi", "first\nsecond\nthird", true},
		{"DEFAULT", "Debug", "", false}, // keys are case-sensitive
		{"oslo_messaging_rabbit", "ssl", "True", true},
		{"OSLO_MESSAGING_RABBIT", "ssl_ca_file", "/etc/ssl/ca.pem", true},
		{"oslo_messaging_rabbit", "key", "", false},
		{"oslo_messaging_rabbit", "Key", "case-sensitive", true},
		{"default", "transport_url", "not the DEFAULT section", true},
		{"nosuch", "key", "", false},
	} {
		got, ok := c.get(tc.section, tc.key)
		if ok != tc.set || got != tc.want {
			t.Errorf("[%s] %s = %q, %v; want %q, %v", tc.section, tc.key, got, ok, tc.want, tc.set)
		}
	}
	if got, want := c.where("DEFAULT", "host"), "nova.conf:16: [DEFAULT] host"; got != want {
		t.Errorf("where = %q, want %q", got, want)
	}
	if got, want := c.where("DEFAULT", "nosuch"), "nova.conf: [DEFAULT] nosuch"; got != want {
		t.Errorf("where = %q, want %q", got, want)
	}
}

func TestOsloConfSubstitutionCycle(t *testing.T) {
	c, err := parseOsloConf("f", []byte("[DEFAULT]\na = x$b\nb = y$a\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := c.get("DEFAULT", "a")
	if !strings.HasPrefix(got, "xyxy") || len(got) > 100 {
		t.Errorf("a = %q: a cycle must stop, not loop", got)
	}
}

// TestOsloConfErrors: the parser's errors (osloconf's tests have its cases)
// reach the rpc check with file:line and without the line's value.
func TestOsloConfErrors(t *testing.T) {
	for _, tc := range []struct{ name, conf, want string }{
		{"continuation first", "  indented\n", "f:1: indented line with no option above it to continue"},
		{"no section", "transport_url = rabbit://u:secret@h/\n", `f:1: option "transport_url" before any [section]`},
		{"no separator", "[DEFAULT]\ntransport_url = rabbit://u:secret@h/\njust words\n", `f:3: no '=' or ':' in "just words"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseOsloConf("f", []byte(tc.conf))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q...", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error echoes the line: %v", err)
			}
		})
	}
}

func TestOsloBool(t *testing.T) {
	for in, want := range map[string]bool{"true": true, "True": true, "1": true, "on": true, "YES": true, "false": false, "0": false, "off": false, "no": false} {
		got, err := parseOsloBool(in)
		if err != nil || got != want {
			t.Errorf("parseOsloBool(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := parseOsloBool("maybe"); err == nil {
		t.Error("maybe parsed")
	}
}

func TestOsloTransportURL(t *testing.T) {
	for _, tc := range []struct {
		in    string
		hosts []amqpHost
		vhost string
		query map[string]string
	}{
		{"rabbit://nova:secret@rabbit:5672/", []amqpHost{{"rabbit", 5672, "nova", "secret"}}, "/", nil},
		{"rabbit://nova:secret@rabbit/", []amqpHost{{"rabbit", 5672, "nova", "secret"}}, "/", nil},
		{"rabbit://nova:secret@rabbit", []amqpHost{{"rabbit", 5672, "nova", "secret"}}, "/", nil},
		{"rabbit://a:p1@h1:5671,b:p2@h2:5672/nova?ssl=1&heartbeat_timeout_threshold=30",
			[]amqpHost{{"h1", 5671, "a", "p1"}, {"h2", 5672, "b", "p2"}}, "nova",
			map[string]string{"ssl": "1", "heartbeat_timeout_threshold": "30"}},
		{"rabbit://us%40er:p%40ss%3Aw%2Frd%25@h:1/%2F", []amqpHost{{"h", 1, "us@er", "p@ss:w/rd%"}}, "/", nil},
		{"rabbit://u:100%zz@h/", []amqpHost{{"h", 5672, "u", "100%zz"}}, "/", nil}, // invalid escape kept, as Python does
		{"rabbit://u:p@[::1]:5673,u:p@[fe80::1]/", []amqpHost{{"::1", 5673, "u", "p"}, {"fe80::1", 5672, "u", "p"}}, "/", nil},
		{"rabbit://u:p@h:/", []amqpHost{{"h", 5672, "u", "p"}}, "/", nil},
		{"rabbit://h1,,h2:5673//", []amqpHost{{"h1", 5672, "", ""}, {"h2", 5673, "", ""}}, "/", nil},
		{"rabbit://u:p:with:colons@h/", []amqpHost{{"h", 5672, "u", "p:with:colons"}}, "/", nil},
		{"rabbit:///", []amqpHost{{"localhost", 5672, "guest", "guest"}}, "/", nil},
		{"RABBIT://u:p@h/v#frag", []amqpHost{{"h", 5672, "u", "p"}}, "v", nil},
		{"kombu+rabbit://u:p@h/", []amqpHost{{"h", 5672, "u", "p"}}, "/", nil},
	} {
		u, err := parseTransportURL(tc.in)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if len(u.hosts) != len(tc.hosts) {
			t.Errorf("%s: hosts = %+v, want %+v", tc.in, u.hosts, tc.hosts)
			continue
		}
		for i := range u.hosts {
			if u.hosts[i] != tc.hosts[i] {
				t.Errorf("%s: host %d = %+v, want %+v", tc.in, i, u.hosts[i], tc.hosts[i])
			}
		}
		if u.vhost != tc.vhost {
			t.Errorf("%s: vhost = %q, want %q", tc.in, u.vhost, tc.vhost)
		}
		for k, v := range tc.query {
			if u.query[k] != v {
				t.Errorf("%s: query %s = %q, want %q", tc.in, k, u.query[k], v)
			}
		}
	}
}

func TestOsloTransportURLErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "no scheme"},
		{"localhost:5672", "scheme \"localhost\" is not supported"},
		{"amqp://u:hunter2@h/", `scheme "amqp" is not supported`},
		{"kafka://h/", `scheme "kafka" is not supported`},
		{"rabbit:u:hunter2@h", "no '//' after the scheme"},
		{"rabbit://u:hunter2@h:notaport/", "host 1: invalid port"},
		{"rabbit://u:hunter2@h:70000/", "host 1: invalid port"},
		{"rabbit://u:hunter2@:5672/", "host 1: no host name"},
		{"rabbit://a:b@h1,u:hunter2@[::1/", "host 2: invalid IPv6 address"},
		{"rabbit://u:hunter2@[::1]x/", "host 1: unexpected text after ']'"},
		{"rabbit://u:hunt/er2@h/", "host 1: invalid port"}, // '/' unescaped in a password
		{"rabbit://u:hunter2@h/?a=%zz", "invalid query string"},
	} {
		_, err := parseTransportURL(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.in, err, tc.want)
			continue
		}
		for _, secret := range []string{"hunter2", "hunt", "er2"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%q: error shows the password: %v", tc.in, err)
			}
		}
	}
}

// FuzzParseOsloConf: no panic, and a file that parses can be read back.
func FuzzParseOsloConf(f *testing.F) {
	f.Add([]byte("[DEFAULT]\ntransport_url = rabbit://u:p@h/\nhost: x\n  cont\n# c\n; c\n"))
	f.Add([]byte("[DEFAULT]\na = $b ${c} ${DEFAULT.a} $$ \\$\nb = $a\n"))
	f.Add([]byte("[x\n"))
	f.Add([]byte(" \n[]\n=\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseOsloConf("f", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f:") {
				t.Fatalf("error without file:line: %v", err)
			}
			return
		}
		for _, section := range c.f.Sections() {
			for _, key := range c.f.Keys(section) {
				c.get(section, key)
				c.where(section, key)
			}
		}
		if v, ok := c.get("DEFAULT", "transport_url"); ok {
			parseTransportURL(v)
		}
	})
}

// FuzzParseTransportURL: no panic; a parsed URL has hosts with ports in
// range; errors show the URL redacted, and the redacted form of a URL gives
// no password but "***" when parsed.
func FuzzParseTransportURL(f *testing.F) {
	f.Add("rabbit://nova:secret@h:5672,nova:secret@h2/")
	f.Add("rabbit://u:p%40ss@[::1]:5672/%2F?ssl=1")
	f.Add("rabbit:///")
	f.Add("rabbit://u:pa/ss@h:x/")
	f.Fuzz(func(t *testing.T, raw string) {
		redacted := redact.URL(raw)
		u, err := parseTransportURL(raw)
		if err != nil {
			if !strings.Contains(err.Error(), redacted) {
				t.Fatalf("error %q does not show the redacted URL %q", err, redacted)
			}
			return
		}
		if len(u.hosts) == 0 {
			t.Fatal("no hosts")
		}
		for _, h := range u.hosts {
			if h.port < 1 || h.port > 65535 || h.host == "" {
				t.Fatalf("bad host %+v", h)
			}
		}
		r, err := parseTransportURL(redacted)
		if err != nil {
			return // hiding more than the parser reads ('#...') can break the URL
		}
		for _, h := range r.hosts {
			if h.password != "" && h.password != "***" && h != (amqpHost{"localhost", 5672, "guest", "guest"}) {
				t.Fatalf("redacted %q of %q shows password %q", redacted, raw, h.password)
			}
		}
	})
}

// The service's --config-file and --config-dir arguments, in their order.
func TestOsloSources(t *testing.T) {
	argv := []string{"nova-conductor", "--config-file", "/etc/nova/nova.conf", "--config-dir=/etc/nova/nova.conf.d", "--debug", "--config-file=/etc/nova/extra.conf", "--config-dir"}
	got := OsloSources(argv)
	want := []OsloSource{{Path: "/etc/nova/nova.conf"}, {Path: "/etc/nova/nova.conf.d", Dir: true}, {Path: "/etc/nova/extra.conf"}}
	if !slices.Equal(got, want) {
		t.Errorf("OsloSources = %v, want %v (a trailing --config-dir without a value is ignored)", got, want)
	}
}

// As nova reads `--config-file nova.conf --config-dir nova.conf.d`: the
// directory's *.conf in name order after the file, a later value winning;
// an error names the file and line; a missing directory is an error.
func TestReadOsloConfs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("nova.conf", "[DEFAULT]\ntransport_url = rabbit://old\nhost = c1\n")
	write("nova.conf.d/90-last.conf", "[DEFAULT]\ntransport_url = rabbit://u:p@mq:5672/\n")
	write("nova.conf.d/10-first.conf", "[DEFAULT]\ntransport_url = rabbit://first\n[oslo_messaging_rabbit]\nssl = true\n")
	write("nova.conf.d/notes.txt", "[DEFAULT]\ntransport_url = never\n")
	c, err := readOsloConfs([]OsloSource{{Path: filepath.Join(dir, "nova.conf")}, {Path: filepath.Join(dir, "nova.conf.d"), Dir: true}})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := c.get("DEFAULT", "transport_url"); v != "rabbit://u:p@mq:5672/" {
		t.Errorf("transport_url %q, want 90-last.conf's", v)
	}
	if w := c.where("DEFAULT", "transport_url"); w != filepath.Join(dir, "nova.conf.d/90-last.conf")+":2: [DEFAULT] transport_url" {
		t.Errorf("where: %s", w)
	}
	if v, _ := c.get("oslo_messaging_rabbit", "ssl"); v != "true" {
		t.Errorf("a snippet's TLS setting: %q", v)
	}
	if v, _ := c.get("DEFAULT", "host"); v != "c1" {
		t.Errorf("host %q, from nova.conf", v)
	}
	write("nova.conf.d/50-bad.conf", "[DEFAULT\n")
	if _, err := readOsloConfs([]OsloSource{{Path: filepath.Join(dir, "nova.conf.d"), Dir: true}}); err == nil || !strings.Contains(err.Error(), "50-bad.conf:1") {
		t.Errorf("a bad snippet: %v", err)
	}
	if _, err := readOsloConfs([]OsloSource{{Path: filepath.Join(dir, "missing.d"), Dir: true}}); err == nil || !strings.Contains(err.Error(), "missing.d") {
		t.Errorf("a missing directory: %v", err)
	}
}

// OsloSources takes any command line as a reference reading does: each
// --config-file or --config-dir takes the next word unless that starts with
// "-", or its "=" value; empty values name nothing.
func FuzzOsloSources(f *testing.F) {
	f.Add("nova-conductor\x00--config-file\x00/etc/nova/nova.conf\x00--config-dir=/etc/nova/nova.conf.d")
	f.Add("--config-dir\x00--config-file")
	f.Add("0\x00--config-file\x00--config-dir=")
	f.Fuzz(func(t *testing.T, s string) {
		argv := strings.Split(s, "\x00")
		var want []OsloSource
		for i := 0; i < len(argv); i++ {
			w := argv[i]
			dir := w == "--config-dir" || strings.HasPrefix(w, "--config-dir=")
			if !dir && w != "--config-file" && !strings.HasPrefix(w, "--config-file=") {
				continue
			}
			v := ""
			if _, after, ok := strings.Cut(w, "="); ok {
				v = after
			} else if i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "-") {
				i++
				v = argv[i]
			}
			if v != "" {
				want = append(want, OsloSource{Path: v, Dir: dir})
			}
		}
		if got := OsloSources(argv); !slices.Equal(got, want) {
			t.Fatalf("%q: %v, want %v", argv, got, want)
		}
	})
}

// Where the command line names no config, oslo.config's defaults for the
// program's name: a Debian or kolla nova-conductor started bare reads
// /etc/nova/nova.conf and /etc/nova/nova.conf.d.
func TestOsloSourcesOfDefaults(t *testing.T) {
	have := map[string]bool{"/etc/nova/nova.conf": false, "/etc/nova/nova.conf.d": true, "/etc/nova/nova-conductor.conf": false, "/etc/glance.conf": false}
	exists := func(p string, dir bool) bool { d, ok := have[p]; return ok && d == dir }
	for _, tc := range []struct {
		argv []string
		want []OsloSource
	}{
		{[]string{"nova-conductor"}, []OsloSource{{Path: "/etc/nova/nova.conf"}, {Path: "/etc/nova/nova-conductor.conf"}, {Path: "/etc/nova/nova.conf.d", Dir: true}}},
		{[]string{"/usr/bin/python3", "/usr/bin/nova-conductor"}, []OsloSource{{Path: "/etc/nova/nova.conf"}, {Path: "/etc/nova/nova-conductor.conf"}, {Path: "/etc/nova/nova.conf.d", Dir: true}}},
		{[]string{"nova-conductor", "--config-file", "/x.conf"}, []OsloSource{{Path: "/x.conf"}, {Path: "/etc/nova/nova.conf.d", Dir: true}}},
		{[]string{"nova-conductor", "--config-dir", "/d"}, []OsloSource{{Path: "/etc/nova/nova.conf"}, {Path: "/etc/nova/nova-conductor.conf"}, {Path: "/d", Dir: true}}},
		{[]string{"nova-conductor", "--config-file=/a", "--config-dir=/d"}, []OsloSource{{Path: "/a"}, {Path: "/d", Dir: true}}},
		{[]string{"glance-api"}, []OsloSource{{Path: "/etc/glance.conf"}}},
		{[]string{"sleep", "100"}, nil},
		{nil, nil},
	} {
		if got := OsloSourcesOf(tc.argv, exists); !slices.Equal(got, tc.want) {
			t.Errorf("%q: %+v, want %+v", tc.argv, got, tc.want)
		}
	}
}
