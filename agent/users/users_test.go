package users

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const testPasswd = `# kolla image users
root:x:0:0:root:/root:/bin/bash
+nisuser::::::
-baduser

nova:x:42436:42436::/var/lib/nova:/usr/sbin/nologin
keystone:x:42425:42425::/var/lib/keystone:/usr/sbin/nologin
nova:x:1:1::/:/bin/false
twin:x:42436:7::/twin:/bin/sh
crlf:x:500:500::/home/crlf:/bin/sh` + "\r" + `
broken:x:notanumber:1::/:/bin/sh
badgid:x:600:-1::/:/bin/sh
short:x:1
minus1:x:4294967295:1::/:/bin/sh
`

const testGroup = `root:x:0:
kolla:x:42400:nova,keystone
nova:x:42436:
keystone:x:42425:
libvirt:x:42473:nova
qemu:x:42427:novaish
kolla:x:1:nova
broken:x:x:nova
short:x:9
 # trailing comment

`

func testRoot(t *testing.T, passwd, group string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]string{Passwd: passwd, Group: group} {
		if s == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func loadDB(t *testing.T, root string) *DB {
	t.Helper()
	db, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func TestUser(t *testing.T) {
	root := testRoot(t, testPasswd, testGroup)
	db := loadDB(t, root)
	passwd := filepath.Join(root, Passwd)
	for _, tc := range []struct {
		name    string
		want    User
		wantErr string
	}{
		{name: "nova", want: User{"nova", 42436, 42436, "/var/lib/nova"}},          // the first entry wins
		{name: "42436", want: User{"nova", 42436, 42436, "/var/lib/nova"}},         // by uid: the first entry with it
		{name: "0", want: User{"root", 0, 0, "/root"}},                             // by uid
		{name: "1", want: User{"nova", 1, 1, "/"}},                                 // by uid: the second "nova"
		{name: "crlf", want: User{"crlf", 500, 500, "/home/crlf"}},                 // a CR before the newline is not part of the line
		{name: "1234", want: User{"1234", 1234, -1, "/"}},                          // no entry: the number as it is
		{name: "0042", want: User{"0042", 42, -1, "/"}},                            // leading zeros
		{name: "4294967294", want: User{"4294967294", 4294967294, -1, "/"}},        // the largest id
		{name: "glance", wantErr: `user "glance": not found in ` + passwd},         // no such name
		{name: "nisuser", wantErr: `user "nisuser": not found in ` + passwd},       // NIS lines are skipped
		{name: "+nisuser", wantErr: `user "+nisuser": not found in ` + passwd},     // even by their whole name
		{name: "", wantErr: `user "": not found in ` + passwd},                     // no name
		{name: "4294967295", wantErr: `user "4294967295": not found in ` + passwd}, // (uid_t)-1 is no uid
		{name: "-1", wantErr: `user "-1": not found in ` + passwd},                 // nor is a negative number
		{name: "broken", wantErr: passwd + `:11: user "broken": uid "notanumber": not a number from 0 to 4294967294`},
		{name: "badgid", wantErr: passwd + `:12: user "badgid": gid "-1": not a number`},
		{name: "short", wantErr: passwd + `:13: entry "short" has 3 fields, want 7`},
		{name: "minus1", wantErr: passwd + `:14: user "minus1": uid "4294967295": not a number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := db.User(tc.name)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("User(%q) = %+v, %v; want an error containing %q", tc.name, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("User(%q) = %+v, %v; want %+v", tc.name, got, err, tc.want)
			}
		})
	}
}

func TestGroup(t *testing.T) {
	root := testRoot(t, testPasswd, testGroup)
	db := loadDB(t, root)
	group := filepath.Join(root, Group)
	for _, tc := range []struct {
		name    string
		want    int
		wantErr string
	}{
		{name: "kolla", want: 42400}, // the first entry wins
		{name: "root", want: 0},
		{name: "5000", want: 5000},   // a number is taken as it is
		{name: "42400", want: 42400}, // with or without an entry
		{name: "wheel", wantErr: `group "wheel": not found in ` + group},
		{name: "4294967295", wantErr: `group "4294967295": not found in ` + group},
		{name: "broken", wantErr: group + `:8: group "broken": gid "x": not a number`},
		{name: "short", wantErr: group + `:9: entry "short" has 3 fields, want 4`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := db.Group(tc.name)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Group(%q) = %d, %v; want an error containing %q", tc.name, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Group(%q) = %d, %v; want %d", tc.name, got, err, tc.want)
			}
		})
	}
}

func TestGroups(t *testing.T) {
	db := loadDB(t, testRoot(t, testPasswd, testGroup))
	for _, tc := range []struct {
		user string
		gid  int
		want []uint32
	}{
		// The primary group first; kolla's second entry (gid 1) counts, the
		// malformed "broken" does not; "novaish" is not "nova".
		{"nova", 42436, []uint32{42436, 42400, 42473, 1}},
		{"nova", 42400, []uint32{42400, 42473, 1}}, // each once
		{"keystone", 42425, []uint32{42425, 42400}},
		{"root", 0, []uint32{0}},
		{"nobody", -1, nil}, // no primary group
	} {
		if got := db.Groups(tc.user, tc.gid); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Groups(%q, %d) = %v, want %v", tc.user, tc.gid, got, tc.want)
		}
	}
}

func TestNames(t *testing.T) {
	db := loadDB(t, testRoot(t, testPasswd, testGroup))
	for _, tc := range []struct {
		got, want string
	}{
		{db.UserName(42436), "nova"}, // the first entry with the uid
		{db.UserName(0), "root"},
		{db.UserName(7), "7"},
		{db.GroupName(42400), "kolla"},
		{db.GroupName(1), "kolla"},
		{db.GroupName(8), "8"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// Without the files numbers still work; a name is an error that says the
// file is missing.
func TestMissingFiles(t *testing.T) {
	root := testRoot(t, "", "")
	db := loadDB(t, root)
	if u, err := db.User("42"); err != nil || u != (User{"42", 42, -1, "/"}) {
		t.Errorf("User(42) = %+v, %v", u, err)
	}
	if g, err := db.Group("43"); err != nil || g != 43 {
		t.Errorf("Group(43) = %d, %v", g, err)
	}
	if g := db.Groups("nova", 43); !reflect.DeepEqual(g, []uint32{43}) {
		t.Errorf("Groups = %v", g)
	}
	if n := db.UserName(42) + ":" + db.GroupName(43); n != "42:43" {
		t.Errorf("names %s", n)
	}
	_, err := db.User("nova")
	var nf *NotFoundError
	if !errors.As(err, &nf) || *nf != (NotFoundError{"user", "nova", Passwd, filepath.Join(root, Passwd), true}) {
		t.Errorf("User(nova): %#v", err)
	}
	if want := "there is no " + filepath.Join(root, Passwd); !strings.Contains(err.Error(), want) {
		t.Errorf("User(nova): %v, want %q", err, want)
	}
	_, err = db.Group("nova")
	if !errors.As(err, &nf) || *nf != (NotFoundError{"group", "nova", Group, filepath.Join(root, Group), true}) {
		t.Errorf("Group(nova): %#v", err)
	}

	// Load("") is Load("/"): the host's own files, which may lack anything
	// in particular, but numbers work.
	db = loadDB(t, "")
	if u, err := db.User("4000000000"); err != nil || u.UID != 4000000000 {
		t.Errorf(`Load(""): User = %+v, %v`, u, err)
	}
}

// A file that cannot be read is an error of Load, not of a lookup.
func TestLoadError(t *testing.T) {
	root := testRoot(t, "", "")
	if err := os.Mkdir(filepath.Join(root, Group), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(root); err == nil || !strings.Contains(err.Error(), filepath.Join(root, Group)) {
		t.Errorf("group is a directory: %v", err)
	}
	root = testRoot(t, "a:x:1:1::/:/bin/sh\nb:x:2:2::/:"+strings.Repeat("x", 1<<20)+"\n", "")
	if _, err := Load(root); err == nil || !strings.Contains(err.Error(), filepath.Join(root, Passwd)) {
		t.Errorf("a line over 1 MiB: %v", err)
	}
}
