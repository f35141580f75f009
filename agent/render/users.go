package render

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/kolla-agent/kolla-agent/agent/users"
)

// Owners is the image's users and groups (package users reads them under
// the root), with owners read and shown the way kolla configs write them.
type Owners struct{ db *users.DB }

// LoadOwners reads the image's /etc/passwd and /etc/group under root.
func LoadOwners(root string) (*Owners, error) {
	db, err := users.Load(root)
	if err != nil {
		return nil, err
	}
	return &Owners{db}, nil
}

// Owner resolves an owner string (see ParseOwner) to ids: a name, or a
// number when no entry has that name (chown's rule). Both a missing user
// and a missing group are reported.
func (u *Owners) Owner(s string) (uid, gid int, err error) {
	user, group, err := ParseOwner(s)
	if err != nil {
		return 0, 0, err
	}
	usr, uerr := u.db.User(user)
	gid, gerr := u.db.Group(group)
	uerr, gerr = inImage(uerr), inImage(gerr)
	if uerr != nil && (gerr == nil || group == user) {
		return 0, 0, uerr
	}
	if gerr != nil {
		return 0, 0, errors.Join(uerr, gerr)
	}
	return usr.UID, gid, nil
}

// inImage names the file of a name not found the way the config's author
// sees it: inside the image.
func inImage(err error) error {
	var nf *users.NotFoundError
	switch {
	case !errors.As(err, &nf):
		return err
	case nf.Missing:
		return fmt.Errorf("%s %q: the image has no %s", nf.Kind, nf.Name, nf.File)
	}
	return fmt.Errorf("%s %q not found in %s", nf.Kind, nf.Name, nf.File)
}

// Name shows ids the way an operator reads them: "nova:nova (42:42)".
func (u *Owners) Name(uid, gid int) string {
	return fmt.Sprintf("%s:%s (%d:%d)", u.db.UserName(uid), u.db.GroupName(gid), uid, gid)
}

// ParseOwner splits an owner the way kolla does: "user" and "user:" mean
// user:user, "user:group" is both. Names may also be numeric ids. It checks
// the syntax only; Owners.Owner looks the names up in the image.
func ParseOwner(s string) (user, group string, err error) {
	if s == "" {
		return "", "", errors.New("empty owner (want \"user\" or \"user:group\")")
	}
	user, group, _ = strings.Cut(s, ":")
	if group == "" {
		group = user
	}
	if user == "" {
		return "", "", fmt.Errorf("%q: empty user name", s)
	}
	if strings.Contains(group, ":") {
		return "", "", fmt.Errorf("%q: more than one \":\" (want \"user:group\")", s)
	}
	for _, n := range []string{user, group} {
		if len(n) > 256 || strings.IndexFunc(n, func(r rune) bool {
			return unicode.IsSpace(r) || unicode.IsControl(r) || r == '/' || r == unicode.ReplacementChar
		}) >= 0 {
			return "", "", fmt.Errorf("%q: %q is not a user or group name", s, n)
		}
	}
	return user, group, nil
}
