package supervise

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
	"syscall"
)

// Identity is a user to run the service as: the credential the kernel needs,
// and the name and home directory `sudo -u` puts in USER, LOGNAME and HOME.
type Identity struct {
	Name       string
	Home       string
	Credential syscall.Credential
}

// LookupCredential resolves user and group the way `sudo -u user [-g group]`
// does, from <root>/etc/passwd and <root>/etc/group: os/user cannot be told to
// read another root, and without cgo it reads only the host's files. An empty
// user and group mean "run as the agent runs": nil, and no error.
//
// user is a name or a numeric uid; group, when not empty, a name or a numeric
// gid, and otherwise the user's primary group from /etc/passwd. Groups holds
// the gid, the user's primary group and every group of /etc/group that lists
// the user as a member, each once. A number with no entry is taken as it is,
// with Home "/" as container runtimes do, but then group must be given
// (there is no primary group to use); the files may then be missing
// altogether. Malformed lines are skipped, as libc does, unless they are the
// one asked for.
func LookupCredential(root, user, group string) (*Identity, error) {
	if user == "" {
		if group != "" {
			return nil, fmt.Errorf("supervise: group %q without a user", group)
		}
		return nil, nil
	}
	if root == "" {
		root = "/"
	}
	passwdPath := filepath.Join(root, "etc", "passwd")
	groupPath := filepath.Join(root, "etc", "group")

	pw, found, err := findEntry(passwdPath, user, 7, 2)
	if err != nil {
		return nil, err
	}
	id := &Identity{Name: user, Home: "/"}
	var (
		primary    uint32
		hasPrimary bool
	)
	if found {
		id.Name, id.Home = pw.fields[0], pw.fields[5]
		if id.Credential.Uid, err = parseID(pw.fields[2]); err != nil {
			return nil, fmt.Errorf("supervise: %s:%d: user %q: uid %q: %v", passwdPath, pw.line, user, pw.fields[2], err)
		}
		if primary, err = parseID(pw.fields[3]); err != nil {
			return nil, fmt.Errorf("supervise: %s:%d: user %q: gid %q: %v", passwdPath, pw.line, user, pw.fields[3], err)
		}
		hasPrimary = true
	} else if id.Credential.Uid, err = parseID(user); err != nil {
		return nil, fmt.Errorf("supervise: user %q: not found in %s", user, passwdPath)
	}

	var gid uint32
	switch {
	case group != "":
		gr, found, err := findEntry(groupPath, group, 4, 2)
		if err != nil {
			return nil, err
		}
		if found {
			if gid, err = parseID(gr.fields[2]); err != nil {
				return nil, fmt.Errorf("supervise: %s:%d: group %q: gid %q: %v", groupPath, gr.line, group, gr.fields[2], err)
			}
		} else if gid, err = parseID(group); err != nil {
			return nil, fmt.Errorf("supervise: group %q: not found in %s", group, groupPath)
		}
	case hasPrimary:
		gid = primary
	default:
		return nil, fmt.Errorf("supervise: user %q is not in %s, so it has no primary group: give a group", user, passwdPath)
	}

	groups := []uint32{gid}
	if hasPrimary {
		groups = append(groups, primary)
		member, err := memberOf(groupPath, id.Name)
		if err != nil {
			return nil, err
		}
		groups = append(groups, member...)
	}
	id.Credential.Gid, id.Credential.Groups = gid, uniq(groups)
	return id, nil
}

type entry struct {
	fields []string
	line   int
}

// findEntry returns the line of an /etc/passwd-like file whose name (first
// field) is key or, failing that and when key is a number, the first whose id
// field is key: getpwnam first, then getpwuid. A missing file has no entries.
func findEntry(path, key string, nfields, idField int) (entry, bool, error) {
	var byName, byID *entry
	_, err := scan(path, func(fields []string, line int) bool {
		switch {
		case fields[0] == key:
			byName = &entry{fields, line}
			return true
		case byID == nil && len(fields) == nfields && fields[idField] == key:
			byID = &entry{fields, line}
		}
		return false
	})
	switch {
	case err != nil:
		return entry{}, false, err
	case byName != nil && len(byName.fields) != nfields:
		return entry{}, false, fmt.Errorf("supervise: %s:%d: entry %q has %d fields, want %d", path, byName.line, key, len(byName.fields), nfields)
	case byName != nil:
		return *byName, true, nil
	case byID != nil:
		if _, err := parseID(key); err == nil {
			return *byID, true, nil
		}
	}
	return entry{}, false, nil
}

// memberOf lists the gids of the groups whose member list names user.
func memberOf(path, user string) ([]uint32, error) {
	var gids []uint32
	_, err := scan(path, func(fields []string, _ int) bool {
		if len(fields) != 4 || !slices.Contains(strings.Split(fields[3], ","), user) {
			return false
		}
		if gid, err := parseID(fields[2]); err == nil {
			gids = append(gids, gid)
		}
		return false
	})
	return gids, err
}

// scan calls fn with the colon-separated fields of each line that is not
// blank, a comment or an NSS compat (+/-) line, until fn returns true.
func scan(path string, fn func(fields []string, line int) bool) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("supervise: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20) // groups with many members make long lines
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '+' || line[0] == '-' {
			continue
		}
		if fn(strings.Split(line, ":"), n) {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("supervise: read %s: %w", path, err)
	}
	return false, nil
}

// parseID accepts 0 to 4294967294: -1 as an unsigned 32-bit id means "leave
// unchanged" to setuid and setgid.
func parseID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 {
		return 0, errors.New("not a number from 0 to 4294967294")
	}
	return uint32(n), nil
}

func uniq(ids []uint32) []uint32 {
	out := ids[:0:0]
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}
