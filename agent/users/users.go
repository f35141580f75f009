// Package users reads the users and groups of a container image: its
// /etc/passwd and /etc/group under a root directory.
//
// It exists because the agent is built with CGO off, where os/user reads
// the host's /etc/passwd and /etc/group and cannot be told to read another
// root; the owners of a kolla config and the user a service runs as name
// users of the image. render and supervise both need them, and read them
// here.
//
// Lookups follow glibc's "files" NSS backend: the first entry of a name or
// id wins; comments, blank lines and NIS "+"/"-" lines are skipped; so are
// malformed lines, unless a lookup names one, and then its error names the
// file and line. A number with no entry is taken as it is, as chown and
// container runtimes do.
package users

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The files, as the image names them.
const (
	Passwd = "/etc/passwd"
	Group  = "/etc/group"
)

// A User is an entry of /etc/passwd.
type User struct {
	Name     string
	UID, GID int // GID is -1 for a number with no entry: it has no primary group
	Home     string
}

// DB is one read of an image's /etc/passwd and /etc/group.
type DB struct {
	passwd, group file
}

type file struct {
	name    string // Passwd or Group
	path    string // on the host: name under the root
	missing bool
	entries []entry
}

// entry is one line that is not blank, a comment or a NIS line.
type entry struct {
	name    string
	id      int      // uid or gid
	gid     int      // passwd: the primary group
	home    string   // passwd
	members []string // group
	err     error    // what is wrong with the line, naming file:line; nil when well formed
}

// Load reads <root>/etc/passwd and <root>/etc/group ("" is "/"). A missing
// file is not an error until a name has to be looked up in it: numbers need
// neither file.
func Load(root string) (*DB, error) {
	if root == "" {
		root = "/"
	}
	db := &DB{}
	var err error
	if db.passwd, err = load(root, Passwd, "user", 7, parsePasswd); err != nil {
		return nil, err
	}
	if db.group, err = load(root, Group, "group", 4, parseGroup); err != nil {
		return nil, err
	}
	return db, nil
}

func load(root, name, kind string, nfields int, parse func(e *entry, f []string) (string, string)) (file, error) {
	fl := file{name: name, path: filepath.Join(root, name)}
	f, err := os.Open(fl.path)
	if errors.Is(err, fs.ErrNotExist) {
		fl.missing = true
		return fl, nil
	}
	if err != nil {
		return file{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20) // groups with many members make long lines
	for n := 1; sc.Scan(); n++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || s[0] == '#' || s[0] == '+' || s[0] == '-' {
			continue
		}
		f := strings.Split(s, ":")
		e := entry{name: f[0]}
		if len(f) != nfields {
			e.err = fmt.Errorf("%s:%d: entry %q has %d fields, want %d", fl.path, n, f[0], len(f), nfields)
		} else if field, v := parse(&e, f); field != "" {
			e.err = fmt.Errorf("%s:%d: %s %q: %s %q: not a number from 0 to 4294967294", fl.path, n, kind, f[0], field, v)
		}
		fl.entries = append(fl.entries, e)
	}
	if err := sc.Err(); err != nil {
		return file{}, fmt.Errorf("read %s: %w", fl.path, err)
	}
	return fl, nil
}

// parsePasswd reads name:password:uid:gid:gecos:home:shell into e, and
// returns the name and value of a bad field.
func parsePasswd(e *entry, f []string) (field, value string) {
	var ok bool
	if e.id, ok = parseID(f[2]); !ok {
		return "uid", f[2]
	}
	if e.gid, ok = parseID(f[3]); !ok {
		return "gid", f[3]
	}
	e.home = f[5]
	return "", ""
}

// parseGroup reads name:password:gid:members into e.
func parseGroup(e *entry, f []string) (field, value string) {
	var ok bool
	if e.id, ok = parseID(f[2]); !ok {
		return "gid", f[2]
	}
	if f[3] != "" {
		e.members = strings.Split(f[3], ",")
	}
	return "", ""
}

// parseID reads a decimal id from 0 to 4294967294: (uid_t)-1 means "leave
// unchanged" to setuid, setgid and chown.
func parseID(s string) (int, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 {
		return 0, false
	}
	return int(n), true
}

// byName is the first entry named name: well formed or not, it is the one
// asked for.
func (f *file) byName(name string) (entry, bool) {
	for _, e := range f.entries {
		if e.name == name && name != "" {
			return e, true
		}
	}
	return entry{}, false
}

// byID is the first well-formed entry with id.
func (f *file) byID(id int) (entry, bool) {
	for _, e := range f.entries {
		if e.err == nil && e.id == id {
			return e, true
		}
	}
	return entry{}, false
}

func (f *file) notFound(kind, name string) error {
	return &NotFoundError{Kind: kind, Name: name, File: f.name, Path: f.path, Missing: f.missing}
}

// User looks up a user name, or failing that a uid: getpwnam, then getpwuid.
// A uid with no entry is taken as it is, with Name the number as given,
// Home "/" and GID -1. A name with no entry is a *NotFoundError.
func (db *DB) User(nameOrUID string) (User, error) {
	e, ok := db.passwd.byName(nameOrUID)
	if !ok {
		uid, isID := parseID(nameOrUID)
		if !isID {
			return User{}, db.passwd.notFound("user", nameOrUID)
		}
		if e, ok = db.passwd.byID(uid); !ok {
			return User{Name: nameOrUID, UID: uid, GID: -1, Home: "/"}, nil
		}
	}
	if e.err != nil {
		return User{}, e.err
	}
	return User{Name: e.name, UID: e.id, GID: e.gid, Home: e.home}, nil
}

// Group looks up a group name, or failing that takes a gid as it is. A name
// with no entry is a *NotFoundError.
func (db *DB) Group(nameOrGID string) (int, error) {
	if e, ok := db.group.byName(nameOrGID); ok {
		return e.id, e.err
	}
	if gid, ok := parseID(nameOrGID); ok {
		return gid, nil
	}
	return 0, db.group.notFound("group", nameOrGID)
}

// Groups is getgrouplist(3): gid (unless it is negative), then the gid of
// every group that lists user as a member, each once, in the file's order.
func (db *DB) Groups(user string, gid int) []uint32 {
	var out []uint32
	add := func(id int) {
		if !slices.Contains(out, uint32(id)) {
			out = append(out, uint32(id))
		}
	}
	if gid >= 0 {
		add(gid)
	}
	for _, e := range db.group.entries {
		if e.err == nil && slices.Contains(e.members, user) {
			add(e.id)
		}
	}
	return out
}

// UserName is the name of the first user with uid, or the number.
func (db *DB) UserName(uid int) string {
	if e, ok := db.passwd.byID(uid); ok {
		return e.name
	}
	return strconv.Itoa(uid)
}

// GroupName is the name of the first group with gid, or the number.
func (db *DB) GroupName(gid int) string {
	if e, ok := db.group.byID(gid); ok {
		return e.name
	}
	return strconv.Itoa(gid)
}

// A NotFoundError is a name that no entry has and that is not a number.
type NotFoundError struct {
	Kind    string // "user" or "group"
	Name    string
	File    string // as the image names it: Passwd or Group
	Path    string // on the host: File under the root
	Missing bool   // the file does not exist
}

func (e *NotFoundError) Error() string {
	if e.Missing {
		return fmt.Sprintf("%s %q: not found: there is no %s", e.Kind, e.Name, e.Path)
	}
	return fmt.Sprintf("%s %q: not found in %s", e.Kind, e.Name, e.Path)
}
