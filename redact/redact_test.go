package redact

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"rabbit://nova:secret@h:5672/":                  "rabbit://nova:***@h:5672/",
		"rabbit://a:s1@h1,b:s2@h2/vhost?ssl=1":          "rabbit://a:***@h1,b:***@h2/vhost?ssl=1",
		"rabbit://h1,h2/":                               "rabbit://h1,h2/",
		"rabbit://u:pa/ss@h/":                           "rabbit://u:***@h/",
		"rabbit://u:pa?ss@h/":                           "rabbit://u:***@h/",
		"rabbit://u:pa,ss@h/":                           "rabbit://u:***,***@h/",
		"rabbit://u:p@ss@h/":                            "rabbit://u:***@h/",
		"not a url":                                     "not a url",
		"u:secret@h":                                    "***",
		"rabbit://u@h/":                                 "rabbit://***@h/",
		"rabbit://u:secret@[::1]:5672,v:s@[::2]:5672/x": "rabbit://u:***@[::1]:5672,v:***@[::2]:5672/x",
		"http://admin:S3cretPW@127.0.0.1:9/v3":          "http://admin:***@127.0.0.1:9/v3",
		"https://h/v3?token=abc&limit=5":                "https://h/v3?token=***&limit=5",
		"https://h/x?X-Amz-Signature=abc#frag":          "https://h/x?X-Amz-Signature=***#frag",
		"https://h/x?api_key=abc&password=p&user=u":     "https://h/x?api_key=***&password=***&user=u",
		"https://h/healthz?verbose=1":                   "https://h/healthz?verbose=1",
		"mysql+pymysql://keystone:pw@mariadb/keystone":  "mysql+pymysql://keystone:***@mariadb/keystone",
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
		"password = http://u:p@h/":                                      "password = http://u:***@h/",
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
		slog.Group("g", "OS_PASSWORD", "hunter2", "n", 3),
		"m", map[string]string{"a": "https://x:hunter2@h/"},
		"plain", "value")
	out := b.String()
	if strings.Contains(out, "hunter2") {
		t.Errorf("log shows the secret: %s", out)
	}
	for _, want := range []string{"plain=value", "g.n=3", "password=***", "http://u:***@h/x"} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %q", out, want)
		}
	}
}

// FuzzURL: the password of a URL that Go's parser reads never survives.
func FuzzURL(f *testing.F) {
	f.Add("rabbit://nova:secret@h:5672,nova:secret@h2/")
	f.Add("http://u:p%40ss@[::1]:5672/%2F?token=x")
	f.Add("http://u:pa/ss@h:x/")
	f.Fuzz(func(t *testing.T, raw string) {
		got := URL(raw)
		if Text(raw) == "" && raw != "" {
			t.Fatal("Text lost everything")
		}
		i := strings.Index(raw, "://")
		at := strings.LastIndexByte(raw, '@')
		if i < 0 || at < i {
			return
		}
		user, pass, ok := strings.Cut(raw[i+3:at], ":")
		// The password may appear elsewhere in raw too (as the host): count.
		if ok && len(pass) >= 4 && !strings.Contains(user, pass) && !strings.ContainsAny(pass, "@/?#,") &&
			strings.Count(got, pass) > strings.Count(raw[:i+3]+raw[at:], pass) {
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
