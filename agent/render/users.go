package render

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The agent is built with CGO off, where os/user reads the host's
// /etc/passwd and /etc/group and knows nothing of --root. Owners name users
// of the container's image, so the image's own files are read here, under
// the root, the way glibc's "files" NSS backend reads them: first entry wins,
// comments, blank lines and NIS "+"/"-" lines are skipped.

const (
	passwdPath = "/etc/passwd"
	groupPath  = "/etc/group"
	// maxID is the largest valid uid or gid: (uid_t)-1 means "no change".
	maxID = 1<<32 - 2
)

type idEntry struct {
	name string
	id   int
	gid  int // passwd only: the primary group
}

// userDB is one read of the image's passwd and group files.
type userDB struct {
	users, groups []idEntry
	// missing notes a file that is not there, for the error of a lookup that
	// needed it.
	noPasswd, noGroup bool
}

// loadUserDB reads <root>/etc/passwd and <root>/etc/group. A missing file is
// not an error until a name has to be looked up in it: numeric owners need
// neither.
func loadUserDB(root string) (*userDB, error) {
	db := &userDB{}
	var err error
	if db.users, err = readIDFile(root, passwdPath, parsePasswd); errors.Is(err, fs.ErrNotExist) {
		db.noPasswd = true
	} else if err != nil {
		return nil, err
	}
	if db.groups, err = readIDFile(root, groupPath, parseGroup); errors.Is(err, fs.ErrNotExist) {
		db.noGroup = true
	} else if err != nil {
		return nil, err
	}
	return db, nil
}

func readIDFile(root, path string, parse func([]byte) ([]idEntry, error)) ([]idEntry, error) {
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		return nil, err
	}
	e, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return e, nil
}

// parsePasswd reads name:password:uid:gid:gecos:home:shell lines.
func parsePasswd(b []byte) ([]idEntry, error) {
	return parseIDLines(b, 7, func(f []string) (idEntry, error) {
		uid, err := parseID(f[2])
		if err != nil {
			return idEntry{}, fmt.Errorf("uid: %w", err)
		}
		gid, err := parseID(f[3])
		if err != nil {
			return idEntry{}, fmt.Errorf("gid: %w", err)
		}
		return idEntry{name: f[0], id: uid, gid: gid}, nil
	})
}

// parseGroup reads name:password:gid:members lines.
func parseGroup(b []byte) ([]idEntry, error) {
	return parseIDLines(b, 4, func(f []string) (idEntry, error) {
		gid, err := parseID(f[2])
		if err != nil {
			return idEntry{}, fmt.Errorf("gid: %w", err)
		}
		return idEntry{name: f[0], id: gid}, nil
	})
}

func parseIDLines(b []byte, nfields int, entry func([]string) (idEntry, error)) ([]idEntry, error) {
	var out []idEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimRight(sc.Text(), "\r")
		if s == "" || s[0] == '#' || s[0] == '+' || s[0] == '-' {
			continue
		}
		f := strings.Split(s, ":")
		if len(f) != nfields || f[0] == "" {
			return nil, fmt.Errorf("line %d: want %d colon-separated fields", line, nfields)
		}
		e, err := entry(f)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// parseID reads a decimal uid or gid.
func parseID(s string) (int, error) {
	if s == "" || len(s) > 10 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > maxID {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return int(n), nil
}

func findIDEntry(list []idEntry, name string) (idEntry, bool) {
	for _, e := range list {
		if e.name == name {
			return e, true
		}
	}
	return idEntry{}, false
}

// uid resolves a user name, or a number when no user has that name
// (chown's rule).
func (db *userDB) uid(name string) (int, error) {
	if e, ok := findIDEntry(db.users, name); ok {
		return e.id, nil
	}
	if id, err := parseID(name); err == nil {
		return id, nil
	}
	if db.noPasswd {
		return 0, fmt.Errorf("user %q: the image has no %s", name, passwdPath)
	}
	return 0, fmt.Errorf("user %q not found in %s", name, passwdPath)
}

// gid resolves a group name, or a number when no group has that name.
func (db *userDB) gid(name string) (int, error) {
	if e, ok := findIDEntry(db.groups, name); ok {
		return e.id, nil
	}
	if id, err := parseID(name); err == nil {
		return id, nil
	}
	if db.noGroup {
		return 0, fmt.Errorf("group %q: the image has no %s", name, groupPath)
	}
	return 0, fmt.Errorf("group %q not found in %s", name, groupPath)
}

// owner resolves an owner string (see ParseOwner) to ids. Both a missing
// user and a missing group are reported.
func (db *userDB) owner(s string) (uid, gid int, err error) {
	u, g, err := ParseOwner(s)
	if err != nil {
		return 0, 0, err
	}
	uid, uerr := db.uid(u)
	gid, gerr := db.gid(g)
	if uerr != nil && (gerr == nil || g == u) {
		return 0, 0, uerr
	}
	if gerr != nil {
		return 0, 0, errors.Join(uerr, gerr)
	}
	return uid, gid, nil
}

// ownerName shows ids the way an operator reads them: "nova:nova (42:42)".
func (db *userDB) ownerName(uid, gid int) string {
	u, g := strconv.Itoa(uid), strconv.Itoa(gid)
	for _, e := range db.users {
		if e.id == uid {
			u = e.name
			break
		}
	}
	for _, e := range db.groups {
		if e.id == gid {
			g = e.name
			break
		}
	}
	return fmt.Sprintf("%s:%s (%d:%d)", u, g, uid, gid)
}
