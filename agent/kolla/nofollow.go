package kolla

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// errChanged is a path that is no longer what the plan saw: a symlink or
// another kind of file now stands where a directory or file stood. The
// service can write some of the directories permissions name (a log
// directory), so it may have planted it there.
var errChanged = errors.New("changed since it was planned")

// setOwnerModeAt changes the owner, then the mode (chown clears setuid and
// setgid), of p under root without following a symlink anywhere below root:
// every directory on the way is opened with O_NOFOLLOW from the one before,
// and the last component is held by an O_PATH descriptor whose kind must be
// want's. So a link planted after planning (var/log/kolla/keystone -> /etc)
// is refused, not followed to /etc/shadow. A symlink gets its own owner,
// never its target's, and no mode (links have none).
func setOwnerModeAt(root, p string, want kollaKind, uid, gid int, mode fs.FileMode) error {
	dir, fd, last, err := openNoFollow(root, p)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "fstat", Path: p, Err: err}
	}
	if got := kindOfMode(st.Mode); got != want {
		return &fs.PathError{Op: "chown", Path: p, Err: fmt.Errorf("%w: a %s, not the %s planned", errChanged, got, want)}
	}
	if want == kollaFile && st.Nlink > 1 {
		// A hard link the service made to a file it could not change
		// (where protected_hardlinks is off): its owner is not handed over.
		return &fs.PathError{Op: "chown", Path: p, Err: fmt.Errorf("%w: a file with %d links", errChanged, st.Nlink)}
	}
	if err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH); err != nil {
		return &fs.PathError{Op: "chown", Path: p, Err: err}
	}
	if want == kollaLink {
		return nil
	}
	perm := uint32(mode.Perm())
	for bit, m := range map[fs.FileMode]uint32{fs.ModeSetuid: unix.S_ISUID, fs.ModeSetgid: unix.S_ISGID, fs.ModeSticky: unix.S_ISVTX} {
		if mode&bit != 0 {
			perm |= m
		}
	}
	// chmod takes no O_PATH descriptor before Linux 6.6 (fchmodat2): go
	// through its /proc link, which names the inode the descriptor holds.
	err = unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), perm)
	if errors.Is(err, unix.ENOENT) && (want == kollaFile || want == kollaDir) {
		err = fchmodReopen(dir, last, &st, perm) // no /proc mounted
	}
	if err != nil {
		return &fs.PathError{Op: "chmod", Path: p, Err: err}
	}
	return nil
}

// openNoFollow opens p under root as an O_PATH descriptor of its last
// component (named last) itself, and of its directory, following no
// symlink below root and refusing "..".
func openNoFollow(root, p string) (dir, fd int, last string, err error) {
	if root == "" {
		root = "/"
	}
	parts := strings.FieldsFunc(p, func(r rune) bool { return r == '/' })
	if len(parts) == 0 || slices.Contains(parts, "..") {
		return -1, -1, "", &fs.PathError{Op: "open", Path: p, Err: errors.New("not a path below the root")}
	}
	if dir, err = unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return -1, -1, "", &fs.PathError{Op: "open", Path: root, Err: err}
	}
	for i, name := range parts {
		flags := unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC
		isLast := i == len(parts)-1
		if !isLast {
			flags |= unix.O_DIRECTORY
		}
		fd, err := unix.Openat(dir, name, flags, 0)
		if err != nil {
			unix.Close(dir)
			at := "/" + strings.Join(parts[:i+1], "/")
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				err = fmt.Errorf("%w: %s is not a directory any more (a symlink?)", errChanged, at)
			}
			return -1, -1, "", &fs.PathError{Op: "open", Path: at, Err: err}
		}
		if isLast {
			return dir, fd, name, nil
		}
		unix.Close(dir)
		dir = fd
	}
	panic("unreachable")
}

// fchmodReopen opens name in dir for real, without following a symlink
// and without blocking on a FIFO, and changes its mode if it is still the
// inode the O_PATH descriptor saw.
func fchmodReopen(dir int, name string, was *unix.Stat_t, perm uint32) error {
	f, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(f)
	var st unix.Stat_t
	if err := unix.Fstat(f, &st); err != nil {
		return err
	}
	if st.Dev != was.Dev || st.Ino != was.Ino {
		return errChanged
	}
	return unix.Fchmod(f, perm)
}

func kindOfMode(m uint32) kollaKind {
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		return kollaDir
	case unix.S_IFREG:
		return kollaFile
	case unix.S_IFLNK:
		return kollaLink
	}
	return kollaOther
}
