package logs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// NotRegularError is a path under a glob that is not a regular file. The
// service can write its log directory, so it can put there a symlink to a
// secret (the agent would ship it), a FIFO (opening it would block the
// shipper for good) or a device: such a path is skipped, never opened
// through.
type NotRegularError struct {
	Path string
	What string // symlink, FIFO, socket, device, directory
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is a %s, not a regular file: not shipped", e.Path, e.What)
}

// openLog opens path for reading if it is a regular file: without
// following a symlink at its last component (O_NOFOLLOW), without blocking
// on a FIFO (O_NONBLOCK; cleared once the file is known to be regular), and
// judged on what was opened (fstat), not on what a stat before the open
// saw.
func openLog(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, &NotRegularError{Path: path, What: "symlink"}
	case errors.Is(err, unix.ENXIO):
		return nil, &NotRegularError{Path: path, What: "socket"} // a Unix socket cannot be opened
	case err != nil:
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &NotRegularError{Path: path, What: fileType(st.Mode)}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

func fileType(m uint32) string {
	switch m & unix.S_IFMT {
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "device"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "special file"
}

// birth is f's creation time (statx's btime), zero where the filesystem
// does not keep one, and for a compressed copy: logrotate creates it a
// rotation after the file held the path (delaycompress), so its birth
// would order it after newer files; its mtime is the file's (kept).
func birth(f logFile) time.Time {
	if _, gz := f.(*gzFile); gz {
		return time.Time{}
	}
	return created(f)
}

// created is the creation time of the file f reads (a compressed copy's
// own), zero where the filesystem keeps none.
func created(f logFile) time.Time {
	var stx unix.Statx_t
	c, err := f.SyscallConn()
	if err != nil {
		return time.Time{}
	}
	c.Control(func(fd uintptr) {
		err = unix.Statx(int(fd), "", unix.AT_EMPTY_PATH, unix.STATX_BTIME, &stx)
	})
	return btime(&stx, err)
}

func btime(stx *unix.Statx_t, err error) time.Time {
	if err != nil || stx.Mask&unix.STATX_BTIME == 0 {
		return time.Time{}
	}
	return time.Unix(stx.Btime.Sec, int64(stx.Btime.Nsec))
}
