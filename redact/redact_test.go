package redact

import (
	"bytes"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"rabbit://nova:secret@h:5672/":                         "rabbit://nova:***@h:5672/",
		"rabbit://a:s1@h1,b:s2@h2/vhost?ssl=1":                 "rabbit://a:***@h1,b:***@h2/vhost?ssl=1",
		"rabbit://h1,h2/":                                      "rabbit://h1,h2/",
		"rabbit://u:pa/ss@h/":                                  "rabbit://u:***@h/",
		"rabbit://u:pa?ss@h/":                                  "rabbit://u:***@h/",
		"rabbit://u:pa,ss@h/":                                  "rabbit://u:***,***@h/",
		"rabbit://u:p@ss@h/":                                   "rabbit://u:***@h/",
		"not a url":                                            "not a url",
		"u:secret@h":                                           "***",
		"rabbit://u@h/":                                        "rabbit://***@h/",
		"rabbit://u:secret@[::1]:5672,v:s@[::2]:5672/x":        "rabbit://u:***@[::1]:5672,v:***@[::2]:5672/x",
		"http://admin:S3cretPW@127.0.0.1:9/v3":                 "http://admin:***@127.0.0.1:9/v3",
		"https://h/v3?token=abc&limit=5":                       "https://h/v3?token=***&limit=5",
		"https://h/x?X-Amz-Signature=abc#frag":                 "https://h/x?X-Amz-Signature=***#frag",
		"https://h/x?api_key=abc&password=p&user=u":            "https://h/x?api_key=***&password=***&user=u",
		"https://h/healthz?verbose=1":                          "https://h/healthz?verbose=1",
		"mysql+pymysql://keystone:pw@mariadb/keystone":         "mysql+pymysql://keystone:***@mariadb/keystone",
		"git+https://opendev.org/openstack/nova@stable/2024.1": "git+https://opendev.org/openstack/nova@stable/2024.1",
		"http://h:8080/a@b":                                    "http://h:8080/a@b",
		"http://[::1]/a@b":                                     "http://[::1]/a@b",
		"http://[::1]:8080/a@b":                                "http://[::1]:8080/a@b",
		"http://h:#@x":                                         "http://h:***@x",
		"http://[u:pa]/ss@h/":                                  "http://[u:***@h/",
		"http://[u:p]:123/x@h":                                 "http://[u:***@h",
		"http://[fe80::1%25a]b]/x@y":                           "http://[fe80::1%25a]b]/x@y",
		"http://[fe80::1%25eth0]:8080/a@b":                     "http://[fe80::1%25eth0]:8080/a@b",
		"http://h/x?email=a@b&token=t":                         "http://h/x?email=a@b&token=***",
		"https://h/cb#access_token=t&state=1":                  "https://h/cb#access_token=***&state=1",
		"https://h/x;token=t":                                  "https://h/x;token=t",
		"https://h/x?a=1;sig=abc":                              "https://h/x?a=1;sig=***",
	} {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSecretName(t *testing.T) {
	for name, want := range map[string]bool{
		"DB_PASSWORD": true, "OS_TOKEN": true, "X-Auth-Token": true, "api_key": true,
		"sharedKey": true, "password": true, "PASSWD": true, "os_application_credential_secret": true,
		"\"password\"": true, "token": true,
		"DB_PASSWORD_FILE": false, "passes": false, "transport_url": false, "keystone": false,
		"monkey": false, "tokens_seen": false, "": false, "key_file": false,
		"DBPassword": true, "APIToken": true, "JWTSecret": true, "Authorization": true, "MONKEY": false, "--os-password": true,
	} {
		if got := SecretName(name); got != want {
			t.Errorf("SecretName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestText(t *testing.T) {
	for in, want := range map[string]string{
		`Get "http://admin:S3cretPW@127.0.0.1:9/v3": dial tcp: refused`: `Get "http://admin:***@127.0.0.1:9/v3": dial tcp: refused`,
		"exit 1: DB_PASSWORD=hunter2 DB_USER=keystone":                  "exit 1: DB_PASSWORD=*** DB_USER=keystone",
		`password: "two words" next`:                                    `password: *** next`,
		"token='abc', ok":                                               "token=***, ok",
		"3 of 3 passes: HTTP 200":                                       "3 of 3 passes: HTTP 200",
		"connection=mysql+pymysql://k:pw@db/k;x=1":                      "connection=mysql+pymysql://k:***@db/k;x=1",
		"no secrets here":                                               "no secrets here",
		"password = http://u:p@h/":                                      "password = ***",
		`{'password': 'se cret', 'user': 'u'}`:                          `{'password': ***, 'user': 'u'}`,
		`"{\"password\": \"x y\", \"u\": 1}"`:                           `"{\"password\": ***, \"u\": 1}"`,
		"Authorization: Bearer eyJhbGciOi.x.y\nnext":                    "Authorization: ***\nnext",
		"openstack --os-password hunter2 server list":                   "openstack --os-password *** server list",
		"--os-password --debug":                                         "--os-password --debug",
		"a password value":                                              "a password value",
		"DBPassword=x LDAPPassword: y monkey=z":                         "DBPassword=*** LDAPPassword: *** monkey=z",
		"WEBHOOK_SECRET=https://hooks.example/T0/B0/XXXX":               "WEBHOOK_SECRET=***",
		"last output:\nDB_PASSWORD=--password=x y":                      "last output:\nDB_PASSWORD=*** y",
		"x: DB_PASSWORD=foo":                                            "x: DB_PASSWORD=***",
		`{"password": "p w", "user": "u"}`:                              `{"password": ***, "user": "u"}`,
		"db-sync --password=hunter2 --debug":                            "db-sync --password=*** --debug",
		"X-Auth-Token: gAAAAB rest":                                     "X-Auth-Token: *** rest",
		"a=b token=":                                                    "a=b token=",
		"time=1 msg=x":                                                  "time=1 msg=x",
	} {
		if got := Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHandler(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(Handler(slog.NewTextHandler(&b, nil))).With("url", "http://u:hunter2@h/")
	log.Info("waiting for http://u:hunter2@h/x",
		"password", "hunter2",
		"error", errors.New("DB_PASSWORD=hunter2"),
		"command", []string{"sh", "-c", "TOKEN=hunter2 run"},
		"argv", []string{"keystone-manage", "bootstrap", "--bootstrap-password", "hunter2", "--port", "6379"},
		"body", []byte(`{"password": "hunter2"}`),
		"nilurl", (*url.URL)(nil),
		slog.Group("g", "OS_PASSWORD", "hunter2", "n", 3),
		"m", map[string]string{"a": "https://x:hunter2@h/"},
		"plain", "value")
	out := b.String()
	if strings.Contains(out, "hunter2") {
		t.Errorf("log shows the secret: %s", out)
	}
	for _, want := range []string{"plain=value", "g.n=3", "password=***", "http://u:***@h/x", "--port 6379", "nilurl=<nil>"} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %q", out, want)
		}
	}
}

// FuzzURL: the password Go's own parser finds in a URL never survives.
func FuzzURL(f *testing.F) {
	f.Add("rabbit://nova:secret@h:5672,nova:secret@h2/")
	f.Add("http://u:p%40ss@[::1]:5672/%2F?token=x")
	f.Add("http://u:pa/ss@h:x/")
	f.Add("http://h:8080/a@b")
	f.Fuzz(func(t *testing.T, raw string) {
		got := URL(raw)
		if Text(raw) == "" && raw != "" {
			t.Fatal("Text lost everything")
		}
		u, err := url.Parse(raw)
		if err != nil || u.User == nil {
			return
		}
		pass, ok := u.User.Password()
		if !ok || len(pass) < 4 || strings.Contains(u.Host+u.Scheme+u.User.Username(), pass) {
			return
		}
		// The password may also appear outside the userinfo: count there.
		ui := u.User.String() + "@"
		at := strings.Index(raw, ui)
		if at < 0 {
			return // written another way than Go writes it back
		}
		outside := raw[:at] + raw[at+len(ui):]
		if strings.Count(got, pass) > strings.Count(outside, pass) {
			t.Fatalf("URL(%q) = %q shows the password %q", raw, got, pass)
		}
	})
}

// FuzzText: whatever surrounds it, a NAME=value pair of a secret's name
// that starts a line loses its value, and Text never panics.
func FuzzText(f *testing.F) {
	f.Add("before ", " after")
	f.Add(`{"a": "`, `"}`)
	f.Add("http://u:p@h/ password:", "\n")
	f.Fuzz(func(t *testing.T, before, after string) {
		in := before + "\nDB_PASSWORD=Zq9SecretValue" + " " + after
		if strings.Contains(before+after, "Zq9SecretValue") {
			return
		}
		if got := Text(in); strings.Contains(got, "Zq9SecretValue") {
			t.Fatalf("Text(%q) = %q", in, got)
		}
	})
}

func TestParseError(t *testing.T) {
	for in, want := range map[string]string{
		"http://admin:S3cr#et@h/": "invalid port ... after host",
		"http://h/%zz":            "invalid URL escape ...",
		"http://[u:p]:#x@h":       "", // netip's ParseAddr("u:p"): quoted too
	} {
		_, err := url.Parse(in)
		if err == nil {
			t.Fatalf("url.Parse(%q) = nil error", in)
		}
		got := ParseError(err)
		if strings.Contains(got, "S3cr") || strings.Contains(got, "u:p") || strings.Contains(got, "http") {
			t.Errorf("ParseError(%q) = %q: it shows the URL or part of it", in, got)
		}
		if want != "" && got != want {
			t.Errorf("ParseError(%q) = %q, want %q", in, got, want)
		}
	}
}
