package render

import (
	"errors"
	"fmt"

	"github.com/kolla-agent/kolla-agent/agent/users"
)

// userDB is the image's users and groups (package users reads them under
// the root), with owners read and shown the way kolla configs write them.
type userDB struct{ db *users.DB }

func loadUserDB(root string) (*userDB, error) {
	db, err := users.Load(root)
	if err != nil {
		return nil, err
	}
	return &userDB{db}, nil
}

// owner resolves an owner string (see ParseOwner) to ids: a name, or a
// number when no entry has that name (chown's rule). Both a missing user
// and a missing group are reported.
func (u *userDB) owner(s string) (uid, gid int, err error) {
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

// ownerName shows ids the way an operator reads them: "nova:nova (42:42)".
func (u *userDB) ownerName(uid, gid int) string {
	return fmt.Sprintf("%s:%s (%d:%d)", u.db.UserName(uid), u.db.GroupName(gid), uid, gid)
}
