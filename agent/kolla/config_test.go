package kolla

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/agent/render"
)

// Ids as kolla's images assign them.
const (
	kollaGID    = 42400
	keystoneID  = 42425
	glanceID    = 42415
	novaID      = 42436
	neutronID   = 42435
	mysqlID     = 42434
	rabbitmqID  = 42439
	memcachedID = 42457
	horizonID   = 42420
)

const ktPasswd = `root:x:0:0:root:/root:/bin/bash
# kolla service users
+nisuser::::::
keystone:x:42425:42425::/var/lib/keystone:/usr/sbin/nologin
glance:x:42415:42415::/var/lib/glance:/usr/sbin/nologin
nova:x:42436:42436::/var/lib/nova:/usr/sbin/nologin
neutron:x:42435:42435::/var/lib/neutron:/usr/sbin/nologin
mysql:x:42434:42434::/var/lib/mysql:/usr/sbin/nologin
rabbitmq:x:42439:42439::/var/lib/rabbitmq:/usr/sbin/nologin
memcached:x:42457:42457::/run/memcached:/usr/sbin/nologin
horizon:x:42420:42420::/var/lib/horizon:/usr/sbin/nologin
`

const ktGroup = `root:x:0:
kolla:x:42400:keystone,glance,nova,neutron,mysql,rabbitmq,memcached,horizon
keystone:x:42425:
glance:x:42415:
nova:x:42436:
neutron:x:42435:
mysql:x:42434:
rabbitmq:x:42439:
memcached:x:42457:
horizon:x:42420:
`

// ktRoot is a container's filesystem: parent/root, with parent/outside
// beside it for the escapes to aim at. It returns root.
func ktRoot(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the tests chown to the services' users")
	}
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	ktPut(t, root, "/etc/passwd", ktPasswd, 0o644, 0, 0)
	ktPut(t, root, "/etc/group", ktGroup, 0o644, 0, 0)
	ktPut(t, parent, "/outside/secret", "outside\n", 0o600, 0, 0)
	return root
}

func ktPut(t *testing.T, root, p, content string, mode fs.FileMode, uid, gid int) {
	t.Helper()
	h := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(h), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	ktAttrs(t, h, mode, uid, gid)
}

func ktDir(t *testing.T, root, p string, mode fs.FileMode, uid, gid int) {
	t.Helper()
	h := filepath.Join(root, p)
	if err := os.MkdirAll(h, 0o755); err != nil {
		t.Fatal(err)
	}
	ktAttrs(t, h, mode, uid, gid)
}

func ktLink(t *testing.T, root, p, target string) {
	t.Helper()
	h := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(h), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, h); err != nil {
		t.Fatal(err)
	}
}

func ktAttrs(t *testing.T, h string, mode fs.FileMode, uid, gid int) {
	t.Helper()
	if err := os.Chown(h, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(h, mode); err != nil {
		t.Fatal(err)
	}
}

// ktConfigMap lays files out the way the kubelet mounts a ConfigMap: the keys
// in a timestamped directory, ..data pointing at it, and a symlink per
// top-level name. A key with a "/" is an item with a path.
func ktConfigMap(t *testing.T, root string, files map[string]string) {
	t.Helper()
	dir := filepath.Join(root, ConfigDir)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	ts := fmt.Sprintf("..2024_05_01_12_00_00.%09d", time.Now().Nanosecond())
	top := map[string]bool{}
	for k, v := range files {
		ktPut(t, filepath.Join(dir, ts), k, v, 0o644, 0, 0)
		top[strings.SplitN(k, "/", 2)[0]] = true
	}
	ktLink(t, root, ConfigDir+"/..data", ts)
	for name := range top {
		ktLink(t, root, ConfigDir+"/"+name, "..data/"+name)
	}
}

// ktCMPath is a file's path inside the ConfigMap's current snapshot.
func ktCMPath(t *testing.T, root, key string) string {
	t.Helper()
	ts, err := os.Readlink(filepath.Join(root, ConfigDir, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, ConfigDir, ts, key)
}

func ktOptions(root, strategy string) Options {
	return Options{Root: root, Strategy: strategy}
}

// ktPlan loads the config the way the agent finds it and plans it.
func ktPlan(t *testing.T, root, strategy string) (*Config, *Plan, error) {
	t.Helper()
	path, err := Find(root)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		return nil, nil, err
	}
	p, err := NewPlan(cfg, ktOptions(root, strategy))
	return cfg, p, err
}

func ktApply(t *testing.T, root string) *Config {
	t.Helper()
	cfg, p, err := ktPlan(t, root, StrategyCopyAlways)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// ktWant is one path's expected state, byte for byte.
type ktWant struct {
	kind     string // file, dir, link, absent
	mode     fs.FileMode
	uid, gid int
	data     string // content, or a link's target
}

func ktFile(data string, mode fs.FileMode, uid, gid int) ktWant {
	return ktWant{"file", mode, uid, gid, data}
}
func ktWDir(mode fs.FileMode, uid, gid int) ktWant { return ktWant{"dir", mode, uid, gid, ""} }
func ktWLink(target string) ktWant                 { return ktWant{kind: "link", data: target} }

var ktAbsent = ktWant{kind: "absent"}

func ktCheckTree(t *testing.T, root string, wants map[string]ktWant) {
	t.Helper()
	paths := make([]string, 0, len(wants))
	for p := range wants {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		w := wants[p]
		got, ok := ktStat(t, filepath.Join(root, p))
		switch {
		case w.kind == "absent":
			if ok {
				t.Errorf("%s: want absent, got a %s", p, got.kind)
			}
			continue
		case !ok:
			t.Errorf("%s: missing, want a %s", p, w.kind)
			continue
		case got.kind != w.kind:
			t.Errorf("%s: a %s, want a %s", p, got.kind, w.kind)
			continue
		}
		if w.kind != "link" && got.mode != w.mode {
			t.Errorf("%s: mode %s, want %s", p, render.PermString(got.mode), render.PermString(w.mode))
		}
		if w.kind != "link" && (got.uid != w.uid || got.gid != w.gid) {
			t.Errorf("%s: owner %d:%d, want %d:%d", p, got.uid, got.gid, w.uid, w.gid)
		}
		if w.kind != "dir" && got.data != w.data {
			t.Errorf("%s: content %q, want %q", p, got.data, w.data)
		}
	}
}

// ktEntry is a snapshot of one path, mtime and inode included: "unchanged"
// means not even rewritten.
type ktEntry struct {
	kind     string
	mode     fs.FileMode
	uid, gid int
	data     string
	mtime    time.Time
	ino      uint64
}

func ktStat(t *testing.T, h string) (ktEntry, bool) {
	t.Helper()
	fi, err := os.Lstat(h)
	if errors.Is(err, fs.ErrNotExist) {
		return ktEntry{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	e := ktEntry{mode: fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky),
		uid: int(st.Uid), gid: int(st.Gid), mtime: fi.ModTime(), ino: st.Ino}
	switch {
	case fi.Mode().IsRegular():
		e.kind = "file"
		b, err := os.ReadFile(h)
		if err != nil {
			t.Fatal(err)
		}
		e.data = string(b)
	case fi.IsDir():
		e.kind = "dir"
	case fi.Mode()&fs.ModeSymlink != 0:
		e.kind = "link"
		if e.data, err = os.Readlink(h); err != nil {
			t.Fatal(err)
		}
	default:
		e.kind = "other"
	}
	return e, true
}

// ktSnapshot is the whole tree under dir.
func ktSnapshot(t *testing.T, dir string) map[string]ktEntry {
	t.Helper()
	out := map[string]ktEntry{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		e, _ := ktStat(t, p)
		out[p] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func ktSameTree(t *testing.T, before, after map[string]ktEntry) {
	t.Helper()
	if reflect.DeepEqual(before, after) {
		return
	}
	var keys []string
	for k := range before {
		keys = append(keys, k)
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		b, okb := before[k]
		a, oka := after[k]
		switch {
		case !okb:
			t.Errorf("tree changed: %s appeared (%s)", k, a.kind)
		case !oka:
			t.Errorf("tree changed: %s disappeared", k)
		case !reflect.DeepEqual(a, b):
			t.Errorf("tree changed: %s: %+v -> %+v", k, b, a)
		}
	}
}

func ktNoDiffs(t *testing.T, what string, d []render.Difference, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range d {
		t.Errorf("%s: unexpected difference: %s", what, x)
	}
}

// ktAfterApply checks what every service case must hold: the disk matches,
// and planning again finds nothing to change and changes nothing.
func ktAfterApply(t *testing.T, root string) {
	t.Helper()
	_, p, err := ktPlan(t, root, StrategyCopyAlways)
	if err != nil {
		t.Fatal(err)
	}
	d, err := p.Check()
	ktNoDiffs(t, "check after apply", d, err)
	d, err = p.Changes()
	ktNoDiffs(t, "changes after apply", d, err)
	before := ktSnapshot(t, filepath.Dir(root))
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	ktSameTree(t, before, ktSnapshot(t, filepath.Dir(root)))
}

const keystoneJSON = `{
    "command": "/usr/sbin/apache2 -DFOREGROUND",
    "config_files": [
        {
            "source": "/var/lib/kolla/config_files/keystone.conf",
            "dest": "/etc/keystone/keystone.conf",
            "owner": "keystone",
            "perm": "0600"
        },
        {
            "source": "/var/lib/kolla/config_files/keystone-paste.ini",
            "dest": "/etc/keystone/keystone-paste.ini",
            "owner": "keystone",
            "perm": "0600",
            "optional": true
        },
        {
            "source": "/var/lib/kolla/config_files/domains",
            "dest": "/etc/keystone/domains",
            "owner": "keystone",
            "perm": "0600",
            "optional": true
        },
        {
            "source": "/var/lib/kolla/config_files/policy.yaml",
            "dest": "/etc/keystone/policy.yaml",
            "owner": "keystone",
            "perm": "0600",
            "optional": true
        },
        {
            "source": "/var/lib/kolla/config_files/wsgi-keystone.conf",
            "dest": "/etc/apache2/conf-enabled/wsgi-keystone.conf",
            "owner": "keystone",
            "perm": "0600"
        }
    ],
    "permissions": [
        {
            "path": "/var/log/kolla",
            "owner": "keystone:kolla"
        },
        {
            "path": "/var/log/kolla/keystone/keystone.log",
            "owner": "keystone:keystone"
        },
        {
            "path": "/etc/keystone/fernet-keys",
            "owner": "keystone:keystone",
            "perm": "0770"
        },
        {
            "path": "/etc/keystone/domains",
            "owner": "keystone:keystone",
            "perm": "0700"
        }
    ]
}
`

const (
	keystoneConf  = "[DEFAULT]\ndebug = False\nlog_file = /var/log/kolla/keystone/keystone.log\n\n[database]\nconnection = mysql+pymysql://keystone:s3cret@mariadb:3306/keystone\n\n[token]\nprovider = fernet\n"
	keystonePaste = "[pipeline:public_api]\npipeline = cors sizelimit http_proxy_to_wsgi osprofiler url_normalize request_id build_auth_context json_body ec2_extension public_service\n"
	keystoneWSGI  = "Listen 10.0.0.10:5000\n<VirtualHost *:5000>\n    WSGIDaemonProcess keystone-public processes=5 threads=1 user=keystone group=keystone\n    WSGIScriptAlias / /usr/bin/keystone-wsgi-public\n</VirtualHost>\n"
	keystoneLDAP  = "[identity]\ndriver = ldap\n\n[ldap]\nurl = ldap://ldap.example.org\n"
)

// keystoneImage is the keystone image's filesystem with its ConfigMap.
func keystoneImage(t *testing.T) string {
	root := ktRoot(t)
	ktDir(t, root, "/etc/keystone", 0o755, 0, 0)
	ktPut(t, root, "/etc/keystone/keystone.conf", "# keystone.conf as packaged\n", 0o640, 0, keystoneID)
	ktDir(t, root, "/etc/keystone/fernet-keys", 0o755, 0, 0)
	ktDir(t, root, "/etc/apache2/conf-enabled", 0o755, 0, 0)
	ktDir(t, root, "/var/log/kolla/keystone", 0o755, 0, 0)
	ktPut(t, root, "/var/log/kolla/keystone/keystone.log", "earlier start\n", 0o644, 0, 0)
	ktConfigMap(t, root, map[string]string{
		"config.json":                   keystoneJSON,
		"keystone.conf":                 keystoneConf,
		"keystone-paste.ini":            keystonePaste,
		"wsgi-keystone.conf":            keystoneWSGI,
		"domains/keystone.example.conf": keystoneLDAP,
	})
	return root
}

func TestKollaKeystone(t *testing.T) {
	root := keystoneImage(t)
	cfg := ktApply(t, root)
	if cfg.Command != "/usr/sbin/apache2 -DFOREGROUND" {
		t.Errorf("command %q", cfg.Command)
	}
	k := keystoneID
	ktCheckTree(t, root, map[string]ktWant{
		"/etc/keystone":                                ktWDir(0o755, 0, 0),
		"/etc/keystone/keystone.conf":                  ktFile(keystoneConf, 0o600, k, k),
		"/etc/keystone/keystone-paste.ini":             ktFile(keystonePaste, 0o600, k, k),
		"/etc/keystone/domains":                        ktWDir(0o700, k, k),
		"/etc/keystone/domains/keystone.example.conf":  ktFile(keystoneLDAP, 0o600, k, k),
		"/etc/keystone/policy.yaml":                    ktAbsent,
		"/etc/keystone/fernet-keys":                    ktWDir(0o770, k, k),
		"/etc/apache2/conf-enabled/wsgi-keystone.conf": ktFile(keystoneWSGI, 0o600, k, k),
		"/var/log/kolla":                               ktWDir(0o755, k, kollaGID),
		"/var/log/kolla/keystone":                      ktWDir(0o755, 0, 0),
		"/var/log/kolla/keystone/keystone.log":         ktFile("earlier start\n", 0o644, k, k),
		// The image's default is saved; destinations it lacked are noted.
		"/var/lib/kolla-agent": ktWDir(0o700, 0, 0),
		"/var/lib/kolla-agent/defaults/etc/keystone/keystone.conf":      ktFile("# keystone.conf as packaged\n", 0o640, 0, k),
		"/var/lib/kolla-agent/defaults/etc/keystone/keystone-paste.ini": ktAbsent,
		"/var/lib/kolla-agent/state.json": ktFile(`{
  "version": 1,
  "defaults": {
    "/etc/apache2/conf-enabled/wsgi-keystone.conf": "absent",
    "/etc/keystone/domains": "absent",
    "/etc/keystone/keystone-paste.ini": "absent",
    "/etc/keystone/keystone.conf": "saved"
  }
}
`, 0o600, 0, 0),
		"/var/lib/kolla-agent/configured": ktAbsent,
	})
	// The ConfigMap is read, never written.
	if e, _ := ktStat(t, ktCMPath(t, root, "keystone.conf")); e.mode != 0o644 || e.uid != 0 {
		t.Errorf("ConfigMap file changed: %+v", e)
	}
	ktAfterApply(t, root)
}

const glanceJSON = `{
    "command": "glance-api",
    "config_files": [
        {
            "source": "/var/lib/kolla/config_files/glance-api.conf",
            "dest": "/etc/glance/glance-api.conf",
            "owner": "glance",
            "perm": "0600"
        },
        {
            "source": "/var/lib/kolla/config_files/glance-cache.conf",
            "dest": "/etc/glance/glance-cache.conf",
            "owner": "glance",
            "perm": "0600",
            "optional": true
        },
        {
            "source": "/var/lib/kolla/config_files/ceph.*",
            "dest": "/etc/ceph/",
            "owner": "glance",
            "perm": "0600",
            "optional": true
        },
        {
            "source": "/var/lib/kolla/config_files/certs",
            "dest": "/etc/glance/certs",
            "preserve_properties": true
        }
    ],
    "permissions": [
        {
            "path": "/var/lib/glance",
            "owner": "glance:glance",
            "recurse": true
        },
        {
            "path": "/var/log/kolla/glance",
            "owner": "glance:glance",
            "recurse": true
        }
    ]
}
`

const (
	glanceAPIConf = "[DEFAULT]\nbind_host = 10.0.0.10\nbind_port = 9292\nenabled_backends = rbd:rbd\n\n[database]\nconnection = mysql+pymysql://glance:pw@mariadb/glance\n"
	glanceCache   = "[DEFAULT]\nimage_cache_dir = /var/lib/glance/image-cache/\n"
	cephConf      = "[global]\nfsid = 4b5c8c0a-ff60-454b-a1b4-9747aa737d19\nmon_host = 10.0.0.21,10.0.0.22,10.0.0.23\n"
	cephKeyring   = "[client.glance]\n\tkey = AQBr2hVmAAAAABAAf5MMCUBmHi0Q0MPk4s3Wug==\n"
	caPEM         = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
)

func glanceImage(t *testing.T) string {
	root := ktRoot(t)
	ktDir(t, root, "/etc/glance", 0o755, 0, 0)
	ktPut(t, root, "/etc/glance/glance-api.conf", "# glance-api.conf as packaged\n", 0o640, 0, glanceID)
	ktPut(t, root, "/etc/glance/glance-cache.conf", "# glance-cache.conf as packaged\n", 0o644, 0, 0)
	ktDir(t, root, "/var/lib/glance/images", 0o755, 0, 0)
	ktPut(t, root, "/var/lib/glance/images/8a2e5ad6", "qcow2", 0o640, 0, 0)
	ktDir(t, root, "/var/log/kolla/glance", 0o755, 0, 0)
	ktPut(t, root, "/var/log/kolla/glance/glance-api.log", "", 0o644, 0, 0)
	ktConfigMap(t, root, map[string]string{
		"config.json":                glanceJSON,
		"glance-api.conf":            glanceAPIConf,
		"glance-cache.conf":          glanceCache,
		"ceph.conf":                  cephConf,
		"ceph.client.glance.keyring": cephKeyring,
		"certs/ca.pem":               caPEM,
	})
	// An item with its own mode, group-owned as a pod's fsGroup makes it.
	ktAttrs(t, ktCMPath(t, root, "certs/ca.pem"), 0o640, 0, glanceID)
	return root
}

func TestKollaGlanceAPI(t *testing.T) {
	root := glanceImage(t)
	ktApply(t, root)
	g := glanceID
	ktCheckTree(t, root, map[string]ktWant{
		"/etc/glance/glance-api.conf":                                ktFile(glanceAPIConf, 0o600, g, g),
		"/etc/glance/glance-cache.conf":                              ktFile(glanceCache, 0o600, g, g),
		"/etc/ceph":                                                  ktWDir(0o755, 0, 0),
		"/etc/ceph/ceph.conf":                                        ktFile(cephConf, 0o600, g, g),
		"/etc/ceph/ceph.client.glance.keyring":                       ktFile(cephKeyring, 0o600, g, g),
		"/etc/glance/certs":                                          ktWDir(0o755, 0, 0),
		"/etc/glance/certs/ca.pem":                                   ktFile(caPEM, 0o640, 0, g),
		"/var/lib/glance":                                            ktWDir(0o755, g, g),
		"/var/lib/glance/images":                                     ktWDir(0o755, g, g),
		"/var/lib/glance/images/8a2e5ad6":                            ktFile("qcow2", 0o640, g, g),
		"/var/log/kolla/glance/glance-api.log":                       ktFile("", 0o644, g, g),
		"/var/lib/kolla-agent/defaults/etc/glance/glance-cache.conf": ktFile("# glance-cache.conf as packaged\n", 0o644, 0, 0),
	})
	ktAfterApply(t, root)
}

const novaJSON = `{
    "command": "nova-api",
    "config_files": [
        {
            "source": "/var/lib/kolla/config_files/nova.conf",
            "dest": "/etc/nova/nova.conf",
            "owner": "nova",
            "perm": "0600"
        },
        {
            "source": "/var/lib/kolla/config_files/policy.yaml",
            "dest": "/etc/nova/policy.yaml",
            "owner": "nova",
            "perm": "600",
            "optional": true
        },
        {
            "source": "/var/lib/kolla/config_files/vendordata.json",
            "dest": "/etc/nova/vendordata.json",
            "owner": "nova",
            "perm": "0o600",
            "optional": true
        }
    ],
    "permissions": [
        {
            "path": "/var/lib/nova",
            "owner": "nova:nova",
            "recurse": true,
            "exclude": ["^/var/lib/nova/instances/", "^/var/lib/nova/mnt"]
        },
        {
            "path": "/var/log/kolla/nova",
            "owner": "nova:nova",
            "recurse": true
        }
    ]
}
`

const (
	novaConf   = "[DEFAULT]\nmy_ip = 10.0.0.10\ntransport_url = rabbit://openstack:pw@rabbitmq-0:5672//\n\n[api_database]\nconnection = mysql+pymysql://nova:pw@mariadb/nova_api\n"
	novaPolicy = "\"os_compute_api:servers:create\": \"rule:project_member_api\"\n"
)

func TestKollaNovaAPI(t *testing.T) {
	root := ktRoot(t)
	ktDir(t, root, "/etc/nova", 0o750, 0, novaID)
	ktPut(t, root, "/etc/shadow", "root:*:19000:0:99999:7:::\n", 0o600, 0, 0)
	ktDir(t, root, "/var/lib/nova/instances/7e1a", 0o755, 0, 0)
	ktPut(t, root, "/var/lib/nova/instances/7e1a/disk", "qcow2", 0o644, 0, 0)
	ktDir(t, root, "/var/lib/nova/mnt", 0o755, 0, 0)
	ktPut(t, root, "/var/lib/nova/mnt/share", "", 0o644, 0, 0)
	ktDir(t, root, "/var/lib/nova/buckets", 0o755, 0, 0)
	ktPut(t, root, "/var/lib/nova/buckets/b", "", 0o644, 0, 0)
	// A link in a recursively owned tree must not hand its target over.
	ktLink(t, root, "/var/lib/nova/shadow", "/etc/shadow")
	ktConfigMap(t, root, map[string]string{
		"config.json": novaJSON,
		"nova.conf":   novaConf,
		"policy.yaml": novaPolicy,
	})
	ktApply(t, root)
	n := novaID
	ktCheckTree(t, root, map[string]ktWant{
		"/etc/nova":                         ktWDir(0o750, 0, n),
		"/etc/nova/nova.conf":               ktFile(novaConf, 0o600, n, n),
		"/etc/nova/policy.yaml":             ktFile(novaPolicy, 0o600, n, n),
		"/etc/nova/vendordata.json":         ktAbsent,
		"/var/lib/nova":                     ktWDir(0o755, n, n),
		"/var/lib/nova/instances":           ktWDir(0o755, n, n), // the regex wants a "/" after it
		"/var/lib/nova/instances/7e1a":      ktWDir(0o755, 0, 0),
		"/var/lib/nova/instances/7e1a/disk": ktFile("qcow2", 0o644, 0, 0),
		"/var/lib/nova/mnt":                 ktWDir(0o755, 0, 0),
		"/var/lib/nova/mnt/share":           ktFile("", 0o644, 0, 0),
		"/var/lib/nova/buckets":             ktWDir(0o755, n, n),
		"/var/lib/nova/buckets/b":           ktFile("", 0o644, n, n),
		"/etc/shadow":                       ktFile("root:*:19000:0:99999:7:::\n", 0o600, 0, 0),
		"/var/lib/nova/shadow":              ktWLink("/etc/shadow"),
		"/var/log/kolla/nova":               ktAbsent,
	})
	if e, _ := ktStat(t, filepath.Join(root, "/var/lib/nova/shadow")); e.uid != n {
		t.Errorf("the link itself is owned by %d, want nova", e.uid)
	}
	ktAfterApply(t, root)
}

const neutronJSON = `{
    "command": "neutron-server --config-file /etc/neutron/neutron.conf --config-file /etc/neutron/plugins/ml2/ml2_conf.ini",
    "config_files": [
        {
            "source": "/var/lib/kolla/config_files/neutron.conf",
            "dest": "/etc/neutron/neutron.conf",
            "owner": "neutron",
            "perm": "0600"
        },
        {
            "source": "/var/lib/kolla/config_files/ml2_conf.ini",
            "dest": "/etc/neutron/plugins/ml2/ml2_conf.ini",
            "owner": "neutron",
            "perm": "0600"
        },
        {
            "source": "/var/lib/kolla/config_files/neutron_vpnaas.conf",
            "dest": "/etc/neutron/neutron_vpnaas.conf",
            "owner": "neutron",
            "perm": "0600",
            "optional": true
        }
    ],
    "permissions": [
        {
            "path": "/var/log/kolla/neutron",
            "owner": "neutron:neutron",
            "recurse": true
        }
    ]
}
`

const (
	neutronConf = "[DEFAULT]\ncore_plugin = ml2\nservice_plugins = router\n\n[database]\nconnection = mysql+pymysql://neutron:pw@mariadb/neutron\n"
	ml2Conf     = "[ml2]\ntype_drivers = flat,vlan,vxlan\ntenant_network_types = vxlan\nmechanism_drivers = openvswitch,l2population\n"
)

func TestKollaNeutronServer(t *testing.T) {
	root := ktRoot(t)
	ktDir(t, root, "/etc/neutron", 0o755, 0, 0)
	ktPut(t, root, "/etc/neutron/neutron.conf", "# neutron.conf as packaged\n", 0o640, 0, neutronID)
	ktDir(t, root, "/var/log/kolla/neutron", 0o755, 0, 0)
	ktPut(t, root, "/var/log/kolla/neutron/neutron-server.log", "x\n", 0o640, 0, 0)
	ktConfigMap(t, root, map[string]string{
		"config.json":  neutronJSON,
		"neutron.conf": neutronConf,
		"ml2_conf.ini": ml2Conf,
	})
	ktApply(t, root)
	n := neutronID
	ktCheckTree(t, root, map[string]ktWant{
		"/etc/neutron/neutron.conf":                 ktFile(neutronConf, 0o600, n, n),
		"/etc/neutron/plugins":                      ktWDir(0o755, 0, 0),
		"/etc/neutron/plugins/ml2":                  ktWDir(0o755, 0, 0),
		"/etc/neutron/plugins/ml2/ml2_conf.ini":     ktFile(ml2Conf, 0o600, n, n),
		"/etc/neutron/neutron_vpnaas.conf":          ktAbsent,
		"/var/log/kolla/neutron":                    ktWDir(0o755, n, n),
		"/var/log/kolla/neutron/neutron-server.log": ktFile("x\n", 0o640, n, n),
	})
	ktAfterApply(t, root)
}

const mariadbJSON = `{
    "command": "/usr/bin/mysqld_safe",
    "config_files": [
        {
            "source": "/var/lib/kolla/config_files/galera.cnf",
            "dest": "/etc/mysql/my.cnf",
            "owner": "mysql",
            "perm": "0600"
        }
    ],
    "directories": [
        {
            "path": "/var/run/mysqld",
            "owner": "mysql:mysql",
            "perm": "0755"
        }
    ],
    "permissions": [
        {
            "path": "/var/log/kolla/mariadb",
            "owner": "mysql:mysql",
            "recurse": true
        },
        {
            "path": "/var/lib/mysql",
            "owner": "mysql:mysql",
            "recurse": true
        }
    ]
}
`

const galeraCnf = "[mysqld]\nbind-address = 10.0.0.10\nwsrep_on = ON\nwsrep_cluster_address = gcomm://10.0.0.11,10.0.0.12,10.0.0.13\nwsrep_provider = /usr/lib/galera/libgalera_smm.so\n"

func TestKollaMariaDB(t *testing.T) {
	root := ktRoot(t)
	// Debian's alternatives: my.cnf is a link; the config replaces the
	// link and does not write through it.
	ktDir(t, root, "/etc/mysql", 0o755, 0, 0)
	ktPut(t, root, "/etc/mysql/mariadb.cnf", "# mariadb.cnf as packaged\n", 0o644, 0, 0)
	ktLink(t, root, "/etc/alternatives/my.cnf", "/etc/mysql/mariadb.cnf")
	ktLink(t, root, "/etc/mysql/my.cnf", "/etc/alternatives/my.cnf")
	// /var/run is an absolute link: it means <root>/run, not the host's.
	ktDir(t, root, "/run", 0o755, 0, 0)
	ktLink(t, root, "/var/run", "/run")
	ktDir(t, root, "/var/lib/mysql/mysql", 0o700, 0, 0)
	ktPut(t, root, "/var/lib/mysql/ibdata1", "data", 0o660, 0, 0)
	ktConfigMap(t, root, map[string]string{
		"config.json": mariadbJSON,
		"galera.cnf":  galeraCnf,
	})
	ktApply(t, root)
	m := mysqlID
	ktCheckTree(t, root, map[string]ktWant{
		"/etc/mysql/my.cnf":        ktFile(galeraCnf, 0o600, m, m),
		"/etc/mysql/mariadb.cnf":   ktFile("# mariadb.cnf as packaged\n", 0o644, 0, 0),
		"/etc/alternatives/my.cnf": ktWLink("/etc/mysql/mariadb.cnf"),
		"/var/run":                 ktWLink("/run"),
		"/run/mysqld":              ktWDir(0o755, m, m),
		"/var/lib/mysql":           ktWDir(0o755, m, m),
		"/var/lib/mysql/mysql":     ktWDir(0o700, m, m),
		"/var/lib/mysql/ibdata1":   ktFile("data", 0o660, m, m),
		"/var/lib/kolla-agent/defaults/etc/mysql/my.cnf": ktWLink("/etc/alternatives/my.cnf"),
	})
	ktAfterApply(t, root)
}

const rabbitmqYAML = `# config.yaml: the same schema as config.json
command: /usr/sbin/rabbitmq-server
config_files:
  - source: /var/lib/kolla/config_files/rabbitmq-env.conf
    dest: /etc/rabbitmq/rabbitmq-env.conf
    owner: rabbitmq
    perm: "0600"
  - source: /var/lib/kolla/config_files/rabbitmq.conf
    dest: /etc/rabbitmq/rabbitmq.conf
    owner: rabbitmq
    perm: "0600"
  - source: /var/lib/kolla/config_files/advanced.config
    dest: /etc/rabbitmq/advanced.config
    owner: rabbitmq
    perm: "0600"
  - source: /var/lib/kolla/config_files/definitions.json
    dest: /etc/rabbitmq/definitions.json
    owner: rabbitmq
    perm: "0600"
  - source: /var/lib/kolla/config_files/enabled_plugins
    dest: /etc/rabbitmq/enabled_plugins
    owner: rabbitmq
    perm: "0600"
files:
  - path: /var/lib/rabbitmq/.erlang.cookie
    owner: rabbitmq
    perm: "0400"
permissions:
  - path: /var/lib/rabbitmq
    owner: rabbitmq:rabbitmq
    recurse: true
  - path: /var/log/kolla/rabbitmq
    owner: rabbitmq:rabbitmq
    recurse: true
`

func TestKollaRabbitMQ(t *testing.T) {
	root := ktRoot(t)
	ktDir(t, root, "/etc/rabbitmq", 0o755, 0, 0)
	ktDir(t, root, "/var/lib/rabbitmq/mnesia", 0o755, 0, 0)
	ktDir(t, root, "/var/log/kolla/rabbitmq", 0o755, 0, 0)
	files := map[string]string{
		"config.yaml":       rabbitmqYAML,
		"rabbitmq-env.conf": "RABBITMQ_NODENAME=rabbit@rabbitmq-0\n",
		"rabbitmq.conf":     "listeners.tcp.1 = 10.0.0.10:5672\ncluster_formation.peer_discovery_backend = classic_config\n",
		"advanced.config":   "[\n  {kernel, [{inet_dist_listen_min, 25672}]}\n].\n",
		"definitions.json":  `{"vhosts":[{"name":"/"}],"users":[{"name":"openstack","tags":"administrator"}]}`,
		"enabled_plugins":   "[rabbitmq_management,rabbitmq_prometheus].\n",
	}
	ktConfigMap(t, root, files)
	cfg := ktApply(t, root)
	if cfg.Command != "/usr/sbin/rabbitmq-server" || !strings.HasSuffix(cfg.Name(), "config.yaml") {
		t.Errorf("loaded %q from %s", cfg.Command, cfg.Name())
	}
	r := rabbitmqID
	wants := map[string]ktWant{
		"/var/lib/rabbitmq":                ktWDir(0o755, r, r),
		"/var/lib/rabbitmq/.erlang.cookie": ktFile("", 0o400, r, r),
		"/var/lib/rabbitmq/mnesia":         ktWDir(0o755, r, r),
		"/var/log/kolla/rabbitmq":          ktWDir(0o755, r, r),
	}
	for k, v := range files {
		if k != "config.yaml" {
			wants["/etc/rabbitmq/"+k] = ktFile(v, 0o600, r, r)
		}
	}
	ktCheckTree(t, root, wants)
	ktAfterApply(t, root)
}

func TestKollaMemcached(t *testing.T) {
	// kolla's memcached config copies nothing: nothing may be written.
	root := ktRoot(t)
	const command = "/usr/bin/memcached -v -l 10.0.0.10 -p 11211 -c 5000 -U 0 -m 128"
	ktConfigMap(t, root, map[string]string{"config.json": `{"command": "` + command + `", "config_files": []}`})
	before := ktSnapshot(t, filepath.Dir(root))
	cfg := ktApply(t, root)
	if cfg.Command != command {
		t.Errorf("command %q", cfg.Command)
	}
	ktSameTree(t, before, ktSnapshot(t, filepath.Dir(root)))
	ktAfterApply(t, root)
}

const horizonJSON = `{
    "command": "/usr/sbin/apache2 -DFOREGROUND",
    "config_files": [
        {
            "source": "/var/lib/kolla/config_files/horizon.conf",
            "dest": "/etc/apache2/conf-enabled/000-default.conf",
            "owner": "horizon",
            "perm": "0600"
        },
        {
            "source": "/var/lib/kolla/config_files/local_settings",
            "dest": "/etc/openstack-dashboard/local_settings",
            "owner": "horizon",
            "perm": "0600"
        },
        {
            "source": "/var/lib/kolla/config_files/custom_local_settings",
            "dest": "/etc/openstack-dashboard/custom_local_settings",
            "owner": "horizon",
            "perm": "0600"
        },
        {
            "source": "/var/lib/kolla/config_files/policies",
            "dest": "/etc/openstack-dashboard",
            "owner": "horizon",
            "perm": "0600",
            "merge": true,
            "optional": true
        },
        {
            "source": "/var/lib/kolla/config_files/_9998-kolla-settings.py",
            "dest": "/etc/openstack-dashboard/local_settings.d/_9998-kolla-settings.py",
            "owner": "horizon",
            "perm": "0600",
            "optional": true
        }
    ],
    "permissions": [
        {
            "path": "/var/log/kolla/horizon",
            "owner": "horizon:horizon",
            "recurse": true
        }
    ]
}
`

const (
	horizonConf       = "Listen 10.0.0.10:80\n<VirtualHost *:80>\n    WSGIScriptAlias / /usr/share/openstack-dashboard/openstack_dashboard/wsgi.py\n</VirtualHost>\n"
	localSettings     = "DEBUG = False\nOPENSTACK_HOST = \"keystone.openstack.svc\"\n"
	customSettings    = "SESSION_TIMEOUT = 3600\n"
	novaPolicyYAML    = "\"os_compute_api:servers:index\": \"rule:admin_or_owner\"\n"
	keystonePolicyYML = "\"identity:list_users\": \"rule:admin_required\"\n"
	apiPolicy         = "\"os_compute_api:os-hypervisors:list\": \"rule:admin_api\"\n"
)

func horizonImage(t *testing.T) string {
	root := ktRoot(t)
	ktDir(t, root, "/etc/apache2/conf-enabled", 0o755, 0, 0)
	ktDir(t, root, "/etc/openstack-dashboard/local_settings.d", 0o755, 0, 0)
	ktPut(t, root, "/etc/openstack-dashboard/local_settings", "# local_settings as packaged\n", 0o644, 0, 0)
	ktPut(t, root, "/etc/openstack-dashboard/local_settings.d/_9999-default.py", "# packaged\n", 0o644, 0, 0)
	ktPut(t, root, "/etc/openstack-dashboard/nova_policy.yaml", "# packaged policy\n", 0o644, 0, 0)
	ktDir(t, root, "/var/log/kolla/horizon", 0o755, 0, 0)
	ktConfigMap(t, root, map[string]string{
		"config.json":                            horizonJSON,
		"horizon.conf":                           horizonConf,
		"local_settings":                         localSettings,
		"custom_local_settings":                  customSettings,
		"policies/nova_policy.yaml":              novaPolicyYAML,
		"policies/keystone_policy.yaml":          keystonePolicyYML,
		"policies/nova_policy.d/api-policy.yaml": apiPolicy,
	})
	return root
}

func TestKollaHorizon(t *testing.T) {
	root := horizonImage(t)
	ktApply(t, root)
	h := horizonID
	horizonTree := map[string]ktWant{
		"/etc/apache2/conf-enabled/000-default.conf": ktFile(horizonConf, 0o600, h, h),
		// merge: the directory takes the entry's owner and mode (with x
		// where r) and keeps what the image has.
		"/etc/openstack-dashboard":                                   ktWDir(0o700, h, h),
		"/etc/openstack-dashboard/local_settings":                    ktFile(localSettings, 0o600, h, h),
		"/etc/openstack-dashboard/custom_local_settings":             ktFile(customSettings, 0o600, h, h),
		"/etc/openstack-dashboard/local_settings.d":                  ktWDir(0o755, 0, 0),
		"/etc/openstack-dashboard/local_settings.d/_9999-default.py": ktFile("# packaged\n", 0o644, 0, 0),
		"/etc/openstack-dashboard/nova_policy.yaml":                  ktFile(novaPolicyYAML, 0o600, h, h),
		"/etc/openstack-dashboard/keystone_policy.yaml":              ktFile(keystonePolicyYML, 0o600, h, h),
		"/etc/openstack-dashboard/nova_policy.d":                     ktWDir(0o700, h, h),
		"/etc/openstack-dashboard/nova_policy.d/api-policy.yaml":     ktFile(apiPolicy, 0o600, h, h),
		"/var/log/kolla/horizon":                                     ktWDir(0o755, h, h),
	}
	ktCheckTree(t, root, horizonTree)
	ktAfterApply(t, root)

	// A policy dropped from the ConfigMap goes: kolla restores the image's
	// directory before merging, so the result never depends on the last
	// render.
	ktConfigMap(t, root, map[string]string{
		"config.json":                            horizonJSON,
		"horizon.conf":                           horizonConf,
		"local_settings":                         localSettings,
		"custom_local_settings":                  customSettings,
		"policies/nova_policy.yaml":              novaPolicyYAML,
		"policies/nova_policy.d/api-policy.yaml": apiPolicy,
	})
	ktApply(t, root)
	horizonTree["/etc/openstack-dashboard/keystone_policy.yaml"] = ktAbsent
	ktCheckTree(t, root, horizonTree)
	ktAfterApply(t, root)
}

func TestKollaCopyOnce(t *testing.T) {
	root := glanceImage(t)
	_, p, err := ktPlan(t, root, StrategyCopyOnce)
	if err != nil {
		t.Fatal(err)
	}
	if p.AlreadyConfigured() {
		t.Fatal("configured before the first start")
	}
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	ktCheckTree(t, root, map[string]ktWant{
		"/var/lib/kolla-agent/configured": ktFile("", 0o600, 0, 0),
		"/etc/glance/glance-api.conf":     ktFile(glanceAPIConf, 0o600, glanceID, glanceID),
	})

	// A new ConfigMap, a second start: nothing is copied.
	ktConfigMap(t, root, map[string]string{
		"config.json":                glanceJSON,
		"glance-api.conf":            "[DEFAULT]\nchanged = true\n",
		"ceph.conf":                  cephConf,
		"ceph.client.glance.keyring": cephKeyring,
		"certs/ca.pem":               caPEM,
	})
	ktAttrs(t, ktCMPath(t, root, "certs/ca.pem"), 0o640, 0, glanceID)
	before := ktSnapshot(t, filepath.Dir(root))
	_, p, err = ktPlan(t, root, StrategyCopyOnce)
	if err != nil {
		t.Fatal(err)
	}
	if !p.AlreadyConfigured() {
		t.Fatal("second start: not AlreadyConfigured")
	}
	d, err := p.Changes()
	ktNoDiffs(t, "changes on a second COPY_ONCE start", d, err)
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	ktSameTree(t, before, ktSnapshot(t, filepath.Dir(root)))
	// Check still compares with what the config says.
	d, _ = p.Check()
	if !ktHasDiff(d, "/etc/glance/glance-api.conf", "content") {
		t.Errorf("check after a COPY_ONCE skip: %v", d)
	}
}

func ktHasDiff(ds []render.Difference, path, what string) bool {
	for _, d := range ds {
		if d.Path == path && d.What == what {
			return true
		}
	}
	return false
}

func TestKollaBackupAndRestore(t *testing.T) {
	root := glanceImage(t)
	ktApply(t, root)
	g := glanceID
	ktCheckTree(t, root, map[string]ktWant{
		"/etc/glance/glance-cache.conf":                              ktFile(glanceCache, 0o600, g, g),
		"/var/lib/kolla-agent/defaults/etc/glance/glance-cache.conf": ktFile("# glance-cache.conf as packaged\n", 0o644, 0, 0),
	})

	// The next config no longer lists glance-cache.conf (its source is
	// gone) nor the ceph files, which the image did not have.
	ktConfigMap(t, root, map[string]string{
		"config.json":     glanceJSON,
		"glance-api.conf": glanceAPIConf,
		"certs/ca.pem":    caPEM,
	})
	ktAttrs(t, ktCMPath(t, root, "certs/ca.pem"), 0o640, 0, g)
	_, p, err := ktPlan(t, root, StrategyCopyAlways)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := p.Check()
	for _, w := range []struct{ path, what string }{
		{"/etc/glance/glance-cache.conf", "content"},
		{"/etc/glance/glance-cache.conf", "mode"},
		{"/etc/glance/glance-cache.conf", "owner"},
		{"/etc/ceph/ceph.conf", "extra"},
		{"/etc/ceph/ceph.client.glance.keyring", "extra"},
	} {
		if !ktHasDiff(d, w.path, w.what) {
			t.Errorf("check before the restore: no %s difference for %s in %v", w.what, w.path, d)
		}
	}
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	ktCheckTree(t, root, map[string]ktWant{
		"/etc/glance/glance-cache.conf":        ktFile("# glance-cache.conf as packaged\n", 0o644, 0, 0),
		"/etc/glance/glance-api.conf":          ktFile(glanceAPIConf, 0o600, g, g),
		"/etc/ceph/ceph.conf":                  ktAbsent,
		"/etc/ceph/ceph.client.glance.keyring": ktAbsent,
		"/etc/ceph":                            ktWDir(0o755, 0, 0),
	})
	ktAfterApply(t, root)
}

func TestKollaCheck(t *testing.T) {
	root := keystoneImage(t)
	_, p, err := ktPlan(t, root, StrategyCopyAlways)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := p.Check()
	if !ktHasDiff(d, "/etc/keystone/keystone.conf", "content") || !ktHasDiff(d, "/etc/keystone/keystone-paste.ini", "missing") {
		t.Errorf("check before apply: %v", d)
	}
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	ktAfterApply(t, root)

	// Drift: content, mode, owner, a file gone, a file added in a replaced
	// directory, and a path only permissions touch.
	k := filepath.Join(root, "etc/keystone")
	if err := os.WriteFile(filepath.Join(k, "keystone.conf"), []byte("edited\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ktAttrs(t, filepath.Join(k, "keystone-paste.ini"), 0o644, keystoneID, keystoneID)
	ktAttrs(t, filepath.Join(root, "etc/apache2/conf-enabled/wsgi-keystone.conf"), 0o600, 0, 0)
	if err := os.Remove(filepath.Join(k, "domains/keystone.example.conf")); err != nil {
		t.Fatal(err)
	}
	ktPut(t, root, "/etc/keystone/domains/stray.conf", "", 0o600, 0, 0)
	ktAttrs(t, filepath.Join(k, "fernet-keys"), 0o700, keystoneID, keystoneID)

	_, p, err = ktPlan(t, root, StrategyCopyAlways)
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Check()
	if err != nil {
		t.Fatal(err)
	}
	type pw struct{ path, what, want, got string }
	var gotPW []pw
	for _, x := range got {
		gotPW = append(gotPW, pw{x.Path, x.What, x.Want, x.Got})
	}
	wantPW := []pw{
		{"/etc/apache2/conf-enabled/wsgi-keystone.conf", "owner", "keystone:keystone (42425:42425)", "root:root (0:0)"},
		{"/etc/keystone/domains/keystone.example.conf", "missing", "", "absent"},
		{"/etc/keystone/domains/stray.conf", "extra", "absent", "file"},
		{"/etc/keystone/keystone-paste.ini", "mode", "0600", "0644"},
		{"/etc/keystone/keystone.conf", "content", "", ""},
	}
	if len(gotPW) != len(wantPW) {
		t.Fatalf("check found %d differences, want %d:\n%v", len(got), len(wantPW), got)
	}
	for i, w := range wantPW {
		g := gotPW[i]
		if g.path != w.path || g.what != w.what || (w.want != "" && g.want != w.want) || (w.got != "" && g.got != w.got) {
			t.Errorf("difference %d: %+v, want %+v", i, g, w)
		}
	}
	// The dry run also lists the permission-only path.
	ch, _ := p.Changes()
	if !ktHasDiff(ch, "/etc/keystone/fernet-keys", "mode") || len(ch) != len(got)+1 {
		t.Errorf("changes: %v", ch)
	}
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	ktAfterApply(t, root)
}

// TestKollaCheckWhereKollaIsWrong: kolla's --check reports these three as
// bad right after copying them.
func TestKollaCheckWhereKollaIsWrong(t *testing.T) {
	root := ktRoot(t)
	ktConfigMap(t, root, map[string]string{
		"config.json": `{
    "command": "svc",
    "config_files": [
        {"source": "/var/lib/kolla/config_files/a.conf", "dest": "/etc/svc/a.conf", "owner": "nova", "perm": "600"},
        {"source": "/var/lib/kolla/config_files/conf.d", "dest": "/etc/svc/conf.d", "owner": "nova:kolla", "perm": "0640"},
        {"source": "/var/lib/kolla/config_files/pp.conf", "dest": "/etc/svc/pp.conf", "preserve_properties": true}
    ]
}`,
		"a.conf":                "a\n",
		"conf.d/top.conf":       "top\n",
		"conf.d/sub/deep.conf":  "deep\n",
		"conf.d/sub/sub2/x.ini": "x\n",
		"pp.conf":               "pp\n",
	})
	ktAttrs(t, ktCMPath(t, root, "pp.conf"), 0o440, 0, glanceID)
	ktApply(t, root)
	n := novaID
	ktCheckTree(t, root, map[string]ktWant{
		"/etc/svc/a.conf":                ktFile("a\n", 0o600, n, n),
		"/etc/svc/conf.d":                ktWDir(0o750, n, kollaGID),
		"/etc/svc/conf.d/top.conf":       ktFile("top\n", 0o640, n, kollaGID),
		"/etc/svc/conf.d/sub":            ktWDir(0o750, n, kollaGID),
		"/etc/svc/conf.d/sub/deep.conf":  ktFile("deep\n", 0o640, n, kollaGID),
		"/etc/svc/conf.d/sub/sub2":       ktWDir(0o750, n, kollaGID),
		"/etc/svc/conf.d/sub/sub2/x.ini": ktFile("x\n", 0o640, n, kollaGID),
		"/etc/svc/pp.conf":               ktFile("pp\n", 0o440, 0, glanceID),
	})
	ktAfterApply(t, root)

	// And a real difference deep down is found.
	ktAttrs(t, filepath.Join(root, "etc/svc/conf.d/sub/sub2"), 0o755, n, kollaGID)
	_, p, err := ktPlan(t, root, StrategyCopyAlways)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := p.Check()
	if len(d) != 1 || d[0].Path != "/etc/svc/conf.d/sub/sub2" || d[0].What != "mode" || d[0].Want != "0750" {
		t.Errorf("check: %v", d)
	}
}

func TestKollaBadInput(t *testing.T) {
	good := `{"source": "/var/lib/kolla/config_files/keystone.conf", "dest": "/etc/keystone/keystone.conf", "owner": "keystone", "perm": "0600"},
        {"source": "/var/lib/kolla/config_files/wsgi-keystone.conf", "dest": "/etc/apache2/conf-enabled/wsgi-keystone.conf", "owner": "keystone", "perm": "0600"}`
	withEntry := func(e string) string {
		return `{"command": "keystone", "config_files": [` + good + `,
        ` + e + `]}`
	}
	cases := []struct {
		name   string
		config string
		setup  func(t *testing.T, root string)
		want   []string // substrings of the error
	}{
		{name: "bad JSON", config: `{"command": "keystone", "config_files": [` + good + `,]}`,
			want: []string{"config.json:2:", "invalid character ']'"}},
		{name: "trailing data", config: `{"command": "keystone"} {}`,
			want: []string{"config.json:1:", "after the top-level object"}},
		{name: "unknown field", config: withEntry(`{"source": "/var/lib/kolla/config_files/keystone.conf", "dest": "/etc/x", "owner": "keystone", "permm": "0600"}`),
			want: []string{`config_files[2]: unknown field "permm"`, "config_files[2].perm: missing"}},
		{name: "field of another case", config: withEntry(`{"Source": "/var/lib/kolla/config_files/keystone.conf", "dest": "/etc/x", "owner": "keystone", "perm": "0600"}`),
			want: []string{`config_files[2]: unknown field "Source"`}},
		{name: "unknown top-level field", config: `{"command": "keystone", "config_file": []}`,
			want: []string{`config.json: unknown field "config_file"`}},
		{name: "perm as a number", config: withEntry(`{"source": "/var/lib/kolla/config_files/keystone.conf", "dest": "/etc/x", "owner": "keystone", "perm": 600}`),
			want: []string{"config_files[2].perm: want a string, got a number 600"}},
		{name: "optional as a string", config: withEntry(`{"source": "/var/lib/kolla/config_files/x", "dest": "/etc/x", "owner": "keystone", "perm": "0600", "optional": "false"}`),
			want: []string{"config_files[2].optional: want true or false"}},
		{name: "no command", config: `{"config_files": []}`,
			want: []string{"command: missing or empty"}},
		{name: "unknown user", config: withEntry(`{"source": "/var/lib/kolla/config_files/keystone.conf", "dest": "/etc/x", "owner": "keystnoe", "perm": "0600"}`),
			want: []string{`config_files[2].owner: user "keystnoe" not found in /etc/passwd`}},
		{name: "unknown group", config: withEntry(`{"source": "/var/lib/kolla/config_files/keystone.conf", "dest": "/etc/x", "owner": "keystone:wheel", "perm": "0600"}`),
			want: []string{`config_files[2].owner: group "wheel" not found in /etc/group`}},
		{name: "unknown user in permissions", config: `{"command": "keystone", "config_files": [` + good + `], "permissions": [{"path": "/var/log/kolla", "owner": "keystone"}, {"path": "/var/log/kolla", "owner": "nobody:kolla"}]}`,
			want: []string{`permissions[1].owner: user "nobody"`}},
		{name: "bad perm", config: withEntry(`{"source": "/var/lib/kolla/config_files/keystone.conf", "dest": "/etc/x", "owner": "keystone", "perm": "0800"}`),
			want: []string{`config_files[2].perm: "0800" is not an octal mode`}},
		{name: "bad exclude", config: `{"command": "k", "permissions": [{"path": "/var/log/kolla", "owner": "keystone", "recurse": true, "exclude": ["(?<=x)"]}]}`,
			want: []string{"permissions[0].exclude[0]:"}},
		{name: "missing required source", config: withEntry(`{"source": "/var/lib/kolla/config_files/keystone.ini", "dest": "/etc/x", "owner": "keystone", "perm": "0600"}`),
			want: []string{`config_files[2].source: "/var/lib/kolla/config_files/keystone.ini" matches nothing`}},
		{name: "relative source", config: withEntry(`{"source": "keystone.conf", "dest": "/etc/x", "owner": "keystone", "perm": "0600"}`),
			want: []string{`config_files[2].source: "keystone.conf" is not an absolute path`}},
		{name: "dest escaping through ..", config: withEntry(`{"source": "/var/lib/kolla/config_files/keystone.conf", "dest": "/etc/keystone/../../../outside/secret", "owner": "keystone", "perm": "0600"}`),
			want: []string{`config_files[2].dest: "/etc/keystone/../../../outside/secret" escapes the root through ".."`}},
		{name: "dest escaping through a symlink",
			setup: func(t *testing.T, root string) {
				ktLink(t, root, "/etc/glance", "../../outside")
			},
			config: withEntry(`{"source": "/var/lib/kolla/config_files/keystone.conf", "dest": "/etc/glance/secret", "owner": "keystone", "perm": "0600"}`),
			want:   []string{`config_files[2].dest: "/etc/glance/secret" escapes the root through symlink /etc/glance -> ../../outside`}},
		{name: "source escaping through a symlink",
			setup: func(t *testing.T, root string) {
				ktLink(t, root, "/var/lib/kolla/config_files/escape", "../../../../../outside/secret")
			},
			config: withEntry(`{"source": "/var/lib/kolla/config_files/escape", "dest": "/etc/x", "owner": "keystone", "perm": "0600"}`),
			want:   []string{"config_files[2].source:", "escapes the root through symlink"}},
		{name: "dest over a directory's parent file",
			setup: func(t *testing.T, root string) {
				ktPut(t, root, "/etc/notadir", "", 0o644, 0, 0)
			},
			config: withEntry(`{"source": "/var/lib/kolla/config_files/keystone.conf", "dest": "/etc/notadir/x.conf", "owner": "keystone", "perm": "0600"}`),
			want:   []string{"config_files[2].dest:", "/etc/notadir exists and is a file, not a directory"}},
		{name: "several problems at once", config: `{"command": "keystone", "config_files": [
        {"source": "/var/lib/kolla/config_files/keystone.conf", "dest": "/etc/x", "owner": "ghost", "perm": "0600"},
        {"source": "/var/lib/kolla/config_files/none", "dest": "/etc/y", "owner": "keystone", "perm": "0600"}]}`,
			want: []string{`config_files[0].owner: user "ghost"`, `config_files[1].source:`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := keystoneImage(t)
			cm := map[string]string{
				"config.json":        c.config,
				"keystone.conf":      keystoneConf,
				"wsgi-keystone.conf": keystoneWSGI,
			}
			ktConfigMap(t, root, cm)
			if c.setup != nil {
				c.setup(t, root)
			}
			before := ktSnapshot(t, filepath.Dir(root))
			_, p, err := ktPlan(t, root, StrategyCopyAlways)
			if err == nil {
				err = p.Apply()
				t.Fatalf("no error; apply: %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
			ktSameTree(t, before, ktSnapshot(t, filepath.Dir(root)))
		})
	}
}

func TestKollaStrategy(t *testing.T) {
	root := keystoneImage(t)
	path, err := Find(root)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"", "COPY_SOMETIMES", "copy_always"} {
		if _, err := NewPlan(cfg, ktOptions(root, s)); err == nil || !strings.Contains(err.Error(), "KOLLA_CONFIG_STRATEGY") {
			t.Errorf("strategy %q: %v", s, err)
		}
	}
}

// TestKollaRollback: a step failing near the end undoes every change made
// before it: files rewritten, files and directories created, owners and
// modes changed.
func TestKollaRollback(t *testing.T) {
	root := keystoneImage(t)
	_, p, err := ktPlan(t, root, StrategyCopyAlways)
	if err != nil {
		t.Fatal(err)
	}
	// Owners and modes of directories come last, deepest first:
	// /var/log/kolla's owner changes, then fernet-keys', which is gone.
	if err := os.Remove(filepath.Join(root, "etc/keystone/fernet-keys")); err != nil {
		t.Fatal(err)
	}
	before := ktSnapshot(t, filepath.Dir(root))
	err = p.Apply()
	if err == nil || !strings.Contains(err.Error(), "every change was rolled back") {
		t.Fatalf("apply: %v", err)
	}
	after := ktSnapshot(t, filepath.Dir(root))
	// A directory's mtime records the entries that came and went.
	ktIgnoreDirMtimes(before, after)
	ktSameTree(t, before, after)
}

// TestKollaRollbackMidWrite: the state directory turns into a file between
// plan and apply, so the write phase fails after the service's files were
// replaced: they come back as they were, inode and all.
func TestKollaRollbackMidWrite(t *testing.T) {
	root := keystoneImage(t)
	ktApply(t, root)
	ktConfigMap(t, root, map[string]string{
		"config.json":                   keystoneJSON,
		"keystone.conf":                 keystoneConf + "\n[cache]\nenabled = true\n",
		"keystone-paste.ini":            keystonePaste,
		"wsgi-keystone.conf":            keystoneWSGI,
		"policy.yaml":                   "\"identity:get_user\": \"rule:admin_required\"\n",
		"domains/keystone.example.conf": keystoneLDAP,
	})
	_, p, err := ktPlan(t, root, StrategyCopyAlways)
	if err != nil {
		t.Fatal(err)
	}
	sd := filepath.Join(root, DefaultStateDir)
	if err := os.Rename(sd, sd+".moved"); err != nil {
		t.Fatal(err)
	}
	ktPut(t, root, DefaultStateDir, "", 0o600, 0, 0)
	before := ktSnapshot(t, filepath.Dir(root))
	err = p.Apply()
	if err == nil || !strings.Contains(err.Error(), "every change was rolled back") {
		t.Fatalf("apply: %v", err)
	}
	after := ktSnapshot(t, filepath.Dir(root))
	ktIgnoreDirMtimes(before, after)
	ktSameTree(t, before, after)
}

func ktIgnoreDirMtimes(trees ...map[string]ktEntry) {
	for _, m := range trees {
		for k, e := range m {
			if e.kind == "dir" {
				e.mtime = time.Time{}
				m[k] = e
			}
		}
	}
}

func TestKollaDotFilesAndKubeletInternals(t *testing.T) {
	root := ktRoot(t)
	ktConfigMap(t, root, map[string]string{
		"config.json": `{"command": "x", "config_files": [
            {"source": "/var/lib/kolla/config_files/*", "dest": "/etc/all/", "owner": "nova", "perm": "0600"},
            {"source": "/var/lib/kolla/config_files", "dest": "/etc/whole", "owner": "nova", "perm": "0600"}]}`,
		"a.conf":  "a",
		".hidden": "h",
	})
	ktApply(t, root)
	n := novaID
	ktCheckTree(t, root, map[string]ktWant{
		"/etc/all/a.conf":      ktFile("a", 0o600, n, n),
		"/etc/all/config.json": ktFile(ktRead(t, ktCMPath(t, root, "config.json")), 0o600, n, n),
		"/etc/all/.hidden":     ktAbsent, // Python's glob: "*" skips dot files
		"/etc/all/..data":      ktAbsent,
		"/etc/whole/a.conf":    ktFile("a", 0o600, n, n),
		"/etc/whole/.hidden":   ktFile("h", 0o600, n, n), // a directory copy takes them
		"/etc/whole/..data":    ktAbsent,                 // but not the kubelet's machinery
	})
	ents, err := os.ReadDir(filepath.Join(root, "etc/whole"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "..") {
			t.Errorf("copied the kubelet's %s", e.Name())
		}
	}
	ktAfterApply(t, root)
}

func ktRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFindKolla(t *testing.T) {
	root := t.TempDir()
	if _, err := Find(root); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("empty: %v", err)
	}
	dir := filepath.Join(root, ConfigDir)
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "config.yaml"), []byte("command: x\n"), 0o644)
	if p, err := Find(root); err != nil || filepath.Base(p) != "config.yaml" {
		t.Errorf("yaml: %q %v", p, err)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"command": "x"}`), 0o644)
	if _, err := Find(root); err == nil {
		t.Error("both config.json and config.yaml: no error")
	}
}

func TestParsePerm(t *testing.T) {
	good := map[string]fs.FileMode{
		"0600": 0o600, "600": 0o600, "0o600": 0o600, "0O600": 0o600, "00600": 0o600,
		"2775": fs.ModeSetgid | 0o775, "02775": fs.ModeSetgid | 0o775, "0o2775": fs.ModeSetgid | 0o775,
		"4755": fs.ModeSetuid | 0o755, "1777": fs.ModeSticky | 0o777, "0": 0, "7": 0o7,
		"7777": fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky | 0o777,
	}
	for s, w := range good {
		m, err := render.ParsePerm(s)
		if err != nil || m != w {
			t.Errorf("render.ParsePerm(%q) = %v, %v; want %v", s, m, err, w)
		}
	}
	for _, s := range []string{"", "0800", "8", "0o", "0x600", "-600", " 600", "600 ", "10000", "0o10000", "rw-------", "0o-1", "6OO"} {
		if m, err := render.ParsePerm(s); err == nil {
			t.Errorf("render.ParsePerm(%q) = %v, want an error", s, m)
		}
	}
}

func TestParseOwner(t *testing.T) {
	good := map[string][2]string{
		"nova": {"nova", "nova"}, "nova:": {"nova", "nova"}, "nova:kolla": {"nova", "kolla"},
		"42436": {"42436", "42436"}, "0:0": {"0", "0"},
	}
	for s, w := range good {
		u, g, err := render.ParseOwner(s)
		if err != nil || u != w[0] || g != w[1] {
			t.Errorf("render.ParseOwner(%q) = %q, %q, %v; want %v", s, u, g, err, w)
		}
	}
	for _, s := range []string{"", ":", ":kolla", "a:b:c", "no va", "nova:\tkolla", "a/b"} {
		if _, _, err := render.ParseOwner(s); err == nil {
			t.Errorf("render.ParseOwner(%q): no error", s)
		}
	}
}

func TestUserDB(t *testing.T) {
	root := t.TempDir()
	db, err := render.LoadOwners(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.Owner("nova"); err == nil || !strings.Contains(err.Error(), "no /etc/passwd") {
		t.Errorf("no passwd: %v", err)
	}
	if u, g, err := db.Owner("42:43"); err != nil || u != 42 || g != 43 {
		t.Errorf("numeric without files: %d %d %v", u, g, err)
	}
	ktPut(t, root, "/etc/passwd", ktPasswd+"nova:x:1:1::/:/bin/false\n", 0o644, os.Geteuid(), os.Getegid())
	ktPut(t, root, "/etc/group", ktGroup+"# trailing comment\n\n", 0o644, os.Geteuid(), os.Getegid())
	if db, err = render.LoadOwners(root); err != nil {
		t.Fatal(err)
	}
	if u, g, err := db.Owner("nova:kolla"); err != nil || u != novaID || g != kollaGID {
		t.Errorf("nova:kolla = %d:%d %v (the first entry wins)", u, g, err)
	}
	if s := db.Name(novaID, kollaGID); s != "nova:kolla (42436:42400)" {
		t.Errorf("ownerName: %s", s)
	}
	if s := db.Name(7, 8); s != "7:8 (7:8)" {
		t.Errorf("ownerName of unknown ids: %s", s)
	}
}

func TestKollaParseYAMLNumbers(t *testing.T) {
	// YAML reads an unquoted 0600 as the number 384: refused, not misread.
	_, err := Parse("config.yaml", []byte("command: x\nconfig_files:\n  - source: /a\n    dest: /b\n    owner: nova\n    perm: 0600\n"))
	if err == nil || !strings.Contains(err.Error(), "config_files[0].perm: want a string") {
		t.Errorf("unquoted YAML perm: %v", err)
	}
	_, err = Parse("config.yaml", []byte("command: x\ncommand: y\n"))
	if err == nil {
		t.Error("repeated YAML key: no error")
	}
	_, err = Parse("config.json", []byte(`{"command": "x", "command": "y"}`))
	if err == nil || !strings.Contains(err.Error(), "command: given twice") {
		t.Errorf("repeated JSON key: %v", err)
	}
}

func TestKollaGlobSegment(t *testing.T) {
	cases := []struct {
		pattern, name string
		match         bool
	}{
		{"*.conf", "a.conf", true},
		{"ceph.*", "ceph.client.glance.keyring", true},
		{"[!a]*", "b", true},
		{"[!a]*", "a", false},
		{"[a-]", "-", true},
		{"[-a]", "-", true},
		{"[^a]", "^", true},
		{"[^a]", "b", false},
		{"[]]", "]", true},
		{"a[", "a[", true},
		{`a\b`, `a\b`, true},
		{"?", "x", true},
	}
	for _, c := range cases {
		ok, err := ktMatch(c.pattern, c.name)
		if err != nil || ok != c.match {
			t.Errorf("%q ~ %q = %v, %v; want %v", c.pattern, c.name, ok, err, c.match)
		}
	}
}

func ktMatch(pattern, name string) (bool, error) {
	return path.Match(kollaGlobSegment(pattern), name)
}

// TestKollaApplyIsIdempotent: an unchanged config rewrites nothing.
func TestKollaApplyIsIdempotent(t *testing.T) {
	root := horizonImage(t)
	ktApply(t, root)
	before := ktSnapshot(t, filepath.Dir(root))
	time.Sleep(10 * time.Millisecond) // a rewrite would show in mtimes
	ktApply(t, root)
	ktSameTree(t, before, ktSnapshot(t, filepath.Dir(root)))
}

// TestKollaConfigBuiltInCode: NewPlan holds a config built or changed in
// code to the rules a loaded one meets.
func TestKollaConfigBuiltInCode(t *testing.T) {
	root := ktRoot(t)
	ktConfigMap(t, root, map[string]string{"nova.conf": novaConf})
	cfg := &Config{Command: "nova-api", ConfigFiles: []ConfigFile{{
		Source: "/var/lib/kolla/config_files/nova.conf", Dest: "/etc/nova/nova.conf", Owner: "nova", Perm: "0640",
	}}}
	p, err := NewPlan(cfg, ktOptions(root, StrategyCopyAlways))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	ktCheckTree(t, root, map[string]ktWant{"/etc/nova/nova.conf": ktFile(novaConf, 0o640, novaID, novaID)})

	cfg.ConfigFiles[0].Perm = "0999"
	cfg.Permissions = []Permission{{Path: "/var/log", Owner: "nova", Exclude: []string{"x"}}}
	_, err = NewPlan(cfg, ktOptions(root, StrategyCopyAlways))
	for _, w := range []string{`config.json: config_files[0].perm: "0999" is not an octal mode`, "permissions[0].exclude: only applies with recurse"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error does not say %q: %v", w, err)
		}
	}
}

// The service owns its log directory and can put anything in it. A
// permissions entry naming that directory, with recurse, must not follow a
// symlink planted at the entry's own path (kolla's os.chown does), nor one
// swapped in between the plan and the apply (a reload plans, validates,
// then applies): /etc/shadow keeps its owner and mode, the service's
// config is still written, and the swap is logged.
func TestKollaPermissionsNoSymlinkFollowed(t *testing.T) {
	const shadow = "root:*:19000:0:99999:7:::\n"
	json := `{"command": "nova-api", "config_files": [{"source": "/var/lib/kolla/config_files/nova.conf", "dest": "/etc/nova/nova.conf", "owner": "nova", "perm": "0600"}],
	  "permissions": [{"path": "/var/log/kolla/nova", "owner": "nova:nova", "perm": "0770", "recurse": true}]}`
	t.Run("planted at the entry", func(t *testing.T) {
		root := ktRoot(t)
		ktDir(t, root, "/etc/nova", 0o750, 0, 0)
		ktPut(t, root, "/etc/shadow", shadow, 0o600, 0, 0)
		ktLink(t, root, "/var/log/kolla/nova", "/etc")
		ktConfigMap(t, root, map[string]string{"config.json": json, "nova.conf": novaConf})
		ktApply(t, root)
		ktCheckTree(t, root, map[string]ktWant{
			"/etc/shadow":         ktFile(shadow, 0o600, 0, 0),
			"/etc/nova/nova.conf": ktFile(novaConf, 0o600, novaID, novaID),
			"/var/log/kolla/nova": ktWLink("/etc"),
		})
		if e, _ := ktStat(t, filepath.Join(root, "/etc")); e.uid != 0 || e.mode.Perm() != 0o755 {
			t.Errorf("/etc is now %v uid %d: the link was followed", e.mode, e.uid)
		}
	})
	t.Run("swapped after the plan", func(t *testing.T) {
		root := ktRoot(t)
		ktDir(t, root, "/etc/nova", 0o750, 0, 0)
		ktPut(t, root, "/etc/shadow", shadow, 0o600, 0, 0)
		ktDir(t, root, "/var/log/kolla/nova/sub", 0o755, 0, 0)
		ktPut(t, root, "/var/log/kolla/nova/nova-api.log", "x\n", 0o644, 0, 0)
		ktConfigMap(t, root, map[string]string{"config.json": json, "nova.conf": novaConf})
		_, p, err := ktPlan(t, root, StrategyCopyAlways)
		if err != nil {
			t.Fatal(err)
		}
		// Between plan and apply the service swaps a directory of its log
		// tree for a link to /etc, and a file for a link to /etc/shadow.
		sub := filepath.Join(root, "/var/log/kolla/nova/sub")
		if err := os.Rename(sub, sub+".old"); err != nil {
			t.Fatal(err)
		}
		ktLink(t, root, "/var/log/kolla/nova/sub", "/etc")
		log := filepath.Join(root, "/var/log/kolla/nova/nova-api.log")
		if err := os.Remove(log); err != nil {
			t.Fatal(err)
		}
		ktLink(t, root, "/var/log/kolla/nova/nova-api.log", "/etc/shadow")
		if err := p.Apply(); err != nil {
			t.Fatalf("Apply: %v (a swapped log path must be skipped, not fail the config)", err)
		}
		ktCheckTree(t, root, map[string]ktWant{
			"/etc/shadow":         ktFile(shadow, 0o600, 0, 0),
			"/etc/nova/nova.conf": ktFile(novaConf, 0o600, novaID, novaID),
			"/var/log/kolla/nova": ktWDir(0o770, novaID, novaID),
		})
		if e, _ := ktStat(t, filepath.Join(root, "/etc")); e.uid != 0 || e.mode.Perm() != 0o755 {
			t.Errorf("/etc is now %v uid %d: the swapped link was followed", e.mode, e.uid)
		}
	})
}
