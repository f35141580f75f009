package render

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzRoot is a small image for plans of fuzzed configs: users, a
// ConfigMap, links that loop and escape. Plans never write, so one root
// serves every input.
func fuzzRoot(f *testing.F) string {
	root := f.TempDir()
	uid, gid := os.Geteuid(), os.Getegid()
	w := func(p, data string) {
		h := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(h), 0o755); err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(h, []byte(data), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	l := func(p, target string) {
		h := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(h), 0o755); err != nil {
			f.Fatal(err)
		}
		if err := os.Symlink(target, h); err != nil {
			f.Fatal(err)
		}
	}
	w("/etc/passwd", ktPasswd)
	w("/etc/group", ktGroup)
	cm := KollaConfigDir + "/..2024_05_01_12_00_00.1"
	w(cm+"/keystone.conf", keystoneConf)
	w(cm+"/policy.yaml", novaPolicy)
	w(cm+"/domains/a.conf", keystoneLDAP)
	w(cm+"/ceph.conf", cephConf)
	l(KollaConfigDir+"/..data", filepath.Base(cm))
	for _, n := range []string{"keystone.conf", "policy.yaml", "domains", "ceph.conf"} {
		l(KollaConfigDir+"/"+n, "..data/"+n)
	}
	l(KollaConfigDir+"/loop", ".")
	l(KollaConfigDir+"/escape", "../../../../../..")
	l("/etc/keystone", "../../..")
	w("/etc/nova/nova.conf", "packaged\n")
	w("/var/log/kolla/nova/nova-api.log", "")
	l("/var/run", "/run")
	if err := os.MkdirAll(filepath.Join(root, "run"), 0o755); err != nil {
		f.Fatal(err)
	}
	// Owners as on disk: the fuzzer runs as anyone.
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			os.Lchown(p, uid, gid)
		}
		return nil
	})
	return root
}

// FuzzLoadKolla: no input panics the parser or the planner; an accepted
// config plans or fails with an error that names the file.
func FuzzLoadKolla(f *testing.F) {
	for _, s := range []string{keystoneJSON, glanceJSON, novaJSON, neutronJSON, mariadbJSON, horizonJSON,
		`{"command": "memcached", "config_files": []}`,
		`{}`, `[]`, `null`, `{"command": ""}`,
		`{"command": "x", "config_files": [{"source": "/var/lib/kolla/config_files/*", "dest": "/etc/x/", "owner": "0", "perm": "0"}]}`,
		`{"command": "x", "config_files": [{"source": "/var/lib/kolla/config_files/loop", "dest": "/etc/x", "owner": "nova", "perm": "7777"}]}`,
		`{"command": "x", "config_files": [{"source": "/var/lib/kolla/config_files/domains", "dest": "/var/lib/kolla/config_files/domains/x", "owner": "nova", "perm": "0600", "merge": true, "preserve_properties": true}]}`,
		`{"command": "x", "permissions": [{"path": "/*/*/..", "owner": "nova:kolla", "perm": "2775", "recurse": true, "exclude": ["nova", "^/etc"]}]}`,
		`{"command": "x", "directories": [{"path": "/var/run/x", "owner": "nova", "perm": "0750"}], "files": [{"path": "/var/run/x/y", "owner": "0:0", "perm": "0o600"}]}`,
	} {
		f.Add([]byte(s), false)
	}
	f.Add([]byte(rabbitmqYAML), true)
	root := fuzzRoot(f)
	f.Fuzz(func(t *testing.T, data []byte, yaml bool) {
		name := "config.json"
		if yaml {
			name = "config.yaml"
		}
		cfg, err := ParseKolla(name, data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), name) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if strings.TrimSpace(cfg.Command) == "" {
			t.Fatal("accepted a config without a command")
		}
		p, err := PlanKolla(cfg, KollaOptions{Root: root, Strategy: StrategyCopyAlways})
		if err != nil {
			if !strings.HasPrefix(err.Error(), name+": ") {
				t.Fatalf("plan error does not name the file: %v", err)
			}
			return
		}
		if _, err := p.Check(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Changes(); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzParsePerm: an accepted mode has only permission and special bits and
// reads back the same from its display and with a 0o prefix.
func FuzzParsePerm(f *testing.F) {
	for _, s := range []string{"0600", "600", "2775", "0o600", "0O7777", "0800", "", "0o", "00000600", "-1", "0x1ff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParsePerm(s)
		if err != nil {
			return
		}
		if m&^(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
			t.Fatalf("ParsePerm(%q) = %v: bits beyond a mode", s, m)
		}
		for _, again := range []string{kollaPermString(m), "0o" + kollaPermString(m), strings.TrimLeft(kollaPermString(m), "0")} {
			if again == "" {
				again = "0"
			}
			if m2, err := ParsePerm(again); err != nil || m2 != m {
				t.Fatalf("ParsePerm(%q) = %v, but ParsePerm(%q) = %v, %v", s, m, again, m2, err)
			}
		}
	})
}

// FuzzParseOwner: an accepted owner has a user and a group without a colon,
// "user" means user:user, and user:group reads back the same.
func FuzzParseOwner(f *testing.F) {
	for _, s := range []string{"nova", "nova:", "nova:kolla", "42436:42400", ":", "a:b:c", "", "no va", "ü:ß"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, g, err := ParseOwner(s)
		if err != nil {
			return
		}
		if u == "" || g == "" || strings.Contains(u, ":") || strings.Contains(g, ":") {
			t.Fatalf("ParseOwner(%q) = %q, %q", s, u, g)
		}
		if !strings.Contains(s, ":") && g != u {
			t.Fatalf("ParseOwner(%q): group %q, want the user", s, g)
		}
		if u2, g2, err := ParseOwner(u + ":" + g); err != nil || u2 != u || g2 != g {
			t.Fatalf("ParseOwner(%q) = %q, %q, but %q:%q reads %q, %q, %v", s, u, g, u, g, u2, g2, err)
		}
	})
}
