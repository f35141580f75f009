package supervise

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/kolla-agent/kolla-agent/agent/users"
)

// Identity is a user to run the service as: the credential the kernel needs,
// and the name and home directory `sudo -u` puts in USER, LOGNAME and HOME.
type Identity struct {
	Name       string
	Home       string
	Credential syscall.Credential
}

// LookupCredential resolves user and group the way `sudo -u user [-g group]`
// does, from <root>/etc/passwd and <root>/etc/group (see package users). An
// empty user and group mean "run as the agent runs": nil, and no error.
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
	db, err := users.Load(root)
	if err != nil {
		return nil, fmt.Errorf("supervise: %w", err)
	}
	u, err := db.User(user)
	if err != nil {
		return nil, fmt.Errorf("supervise: %w", err)
	}
	gid := u.GID
	switch {
	case group != "":
		if gid, err = db.Group(group); err != nil {
			return nil, fmt.Errorf("supervise: %w", err)
		}
	case u.GID < 0:
		if root == "" {
			root = "/"
		}
		return nil, fmt.Errorf("supervise: user %q is not in %s, so it has no primary group: give a group", user, filepath.Join(root, users.Passwd))
	}
	groups := []uint32{uint32(gid)}
	if u.GID >= 0 { // a uid with no entry has no name to be a member by
		for _, g := range db.Groups(u.Name, u.GID) {
			if !slices.Contains(groups, g) {
				groups = append(groups, g)
			}
		}
	}
	return &Identity{Name: u.Name, Home: u.Home, Credential: syscall.Credential{
		Uid: uint32(u.UID), Gid: uint32(gid), Groups: groups,
	}}, nil
}

// ChildEnv is the service's environment: environ (the container's) minus
// the agent's own variables (KOLLA_AGENT_*), with HOME, USER and LOGNAME of
// id when it runs as another user (what kolla's `sudo -u` gives it).
func ChildEnv(environ []string, id *Identity) []string {
	var env []string
	for _, kv := range environ {
		if strings.HasPrefix(kv, "KOLLA_AGENT_") {
			continue
		}
		if id != nil && (strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "USER=") || strings.HasPrefix(kv, "LOGNAME=")) {
			continue
		}
		env = append(env, kv)
	}
	if id != nil {
		env = append(env, "HOME="+id.Home, "USER="+id.Name, "LOGNAME="+id.Name)
	}
	return env
}

// Become makes this process id (its groups, then its gid, then its uid:
// the order in which each step is still allowed), before it execs the
// service; nil id keeps the agent's.
func Become(id *Identity) error {
	if id == nil {
		return nil
	}
	groups := make([]int, len(id.Credential.Groups))
	for i, g := range id.Credential.Groups {
		groups[i] = int(g)
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(int(id.Credential.Gid)); err != nil {
		return fmt.Errorf("setgid: %w", err)
	}
	if err := syscall.Setuid(int(id.Credential.Uid)); err != nil {
		return fmt.Errorf("setuid: %w", err)
	}
	return nil
}
