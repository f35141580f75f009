package supervise

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestLookupCredential(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "etc/passwd"), `# kolla image users
root:x:0:0:root:/root:/bin/bash
+nisuser

nova:x:42436:42436::/var/lib/nova:/usr/sbin/nologin
keystone:x:42425:42425::/var/lib/keystone:/usr/sbin/nologin
broken:x:notanumber:1::/:/bin/sh
short:x:1
`)
	writeFile(t, filepath.Join(root, "etc/group"), `root:x:0:
kolla:x:42400:nova,keystone
nova:x:42436:
keystone:x:42425:
libvirt:x:42473:nova
qemu:x:42427:novaish
numbers:x:7:1234
`)
	noFiles := t.TempDir()

	for _, tc := range []struct {
		name, root, user, group string
		want                    *Identity
		wantErr                 string
	}{
		{name: "name, primary group and memberships", root: root, user: "nova",
			want: id("nova", "/var/lib/nova", 42436, 42436, 42436, 42400, 42473)},
		{name: "explicit group by name", root: root, user: "nova", group: "kolla",
			want: id("nova", "/var/lib/nova", 42436, 42400, 42400, 42436, 42473)},
		{name: "explicit group by number", root: root, user: "keystone", group: "5000",
			want: id("keystone", "/var/lib/keystone", 42425, 5000, 5000, 42425, 42400)},
		{name: "uid of a known user", root: root, user: "42436",
			want: id("nova", "/var/lib/nova", 42436, 42436, 42436, 42400, 42473)},
		{name: "unknown uid with a group, no files", root: noFiles, user: "1234", group: "5678",
			want: id("1234", "/", 1234, 5678, 5678)},
		{name: "unknown uid is no member", root: root, user: "1234", group: "5678",
			want: id("1234", "/", 1234, 5678, 5678)},
		{name: "neither user nor group", root: root},

		{name: "group without user", root: root, group: "kolla", wantErr: `group "kolla" without a user`},
		{name: "unknown user", root: root, user: "glance", wantErr: `user "glance": not found in ` + filepath.Join(root, "etc/passwd")},
		{name: "unknown group", root: root, user: "nova", group: "wheel", wantErr: `group "wheel": not found in ` + filepath.Join(root, "etc/group")},
		{name: "unknown uid without group", root: noFiles, user: "1234", wantErr: "no primary group"},
		{name: "bad uid field", root: root, user: "broken", wantErr: filepath.Join(root, "etc/passwd") + `:7: user "broken": uid "notanumber"`},
		{name: "too few fields", root: root, user: "short", wantErr: filepath.Join(root, "etc/passwd") + `:8: entry "short" has 3 fields, want 7`},
		{name: "uid -1", root: noFiles, user: "4294967295", group: "1", wantErr: `user "4294967295": not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LookupCredential(tc.root, tc.user, tc.group)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func id(name, home string, uid, gid uint32, groups ...uint32) *Identity {
	i := &Identity{Name: name, Home: home}
	i.Credential.Uid, i.Credential.Gid, i.Credential.Groups = uid, gid, groups
	return i
}

func TestChildEnv(t *testing.T) {
	environ := []string{"PATH=/usr/bin", "KOLLA_AGENT_DNS_SERVER=1.2.3.4", "HOME=/root", "USER=root", "LOGNAME=root", "OS_CLOUD=x"}
	if got, want := ChildEnv(environ, nil), []string{"PATH=/usr/bin", "HOME=/root", "USER=root", "LOGNAME=root", "OS_CLOUD=x"}; !slices.Equal(got, want) {
		t.Errorf("as the agent: %q, want %q", got, want)
	}
	id := &Identity{Name: "keystone", Home: "/var/lib/keystone"}
	if got, want := ChildEnv(environ, id), []string{"PATH=/usr/bin", "OS_CLOUD=x", "HOME=/var/lib/keystone", "USER=keystone", "LOGNAME=keystone"}; !slices.Equal(got, want) {
		t.Errorf("as keystone: %q, want %q", got, want)
	}
}

func TestForwardedSignals(t *testing.T) {
	got := ForwardedSignals()
	if slices.Contains(got, os.Signal(syscall.SIGTERM)) || len(got) != len(DefaultSignals())-1 {
		t.Errorf("ForwardedSignals() = %v: want DefaultSignals() %v but SIGTERM", got, DefaultSignals())
	}
}

// Become is tried in a child of the test binary: it changes the calling
// process for good. Root is needed to change user; CI runs as root.
func TestBecome(t *testing.T) {
	if os.Getenv("SUPERVISE_BECOME_CHILD") == "1" {
		id := &Identity{Credential: syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{65534, 4}}}
		if err := Become(id); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		groups, _ := os.Getgroups()
		fmt.Printf("uid=%d euid=%d gid=%d groups=%v\n", os.Getuid(), os.Geteuid(), os.Getgid(), groups)
		os.Exit(0)
	}
	if err := Become(nil); err != nil {
		t.Errorf("Become(nil): %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("changing user needs root (CI runs as root)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBecome$")
	cmd.Env = append(os.Environ(), "SUPERVISE_BECOME_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := "uid=65534 euid=65534 gid=65534 groups=[4 65534]"; !strings.Contains(string(out), want) {
		t.Errorf("after Become: %s, want %s", out, want)
	}
}
