package kolla

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
	cm := ConfigDir + "/..2024_05_01_12_00_00.1"
	w(cm+"/keystone.conf", keystoneConf)
	w(cm+"/policy.yaml", novaPolicy)
	w(cm+"/domains/a.conf", keystoneLDAP)
	w(cm+"/ceph.conf", cephConf)
	l(ConfigDir+"/..data", filepath.Base(cm))
	for _, n := range []string{"keystone.conf", "policy.yaml", "domains", "ceph.conf"} {
		l(ConfigDir+"/"+n, "..data/"+n)
	}
	l(ConfigDir+"/loop", ".")
	l(ConfigDir+"/escape", "../../../../../..")
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

// FuzzLoad: no input panics the parser or the planner; an accepted
// config plans or fails with an error that names the file.
func FuzzLoad(f *testing.F) {
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
		cfg, err := Parse(name, data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), name) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if strings.TrimSpace(cfg.Command) == "" {
			t.Fatal("accepted a config without a command")
		}
		p, err := NewPlan(cfg, Options{Root: root, Strategy: StrategyCopyAlways})
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
