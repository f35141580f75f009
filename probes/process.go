package probes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// defaultProcRoot is where procfs is mounted; tests may point checks elsewhere.
const defaultProcRoot = "/proc"

// ProcessCheck passes while the service's main process exists and is
// neither a zombie nor dead. It is the liveness floor: a service whose main
// process is gone is not alive whatever its ports say.
type ProcessCheck struct {
	src      PIDSource
	procRoot string // "" means defaultProcRoot
}

// NewProcess returns a check of the process src names.
func NewProcess(src PIDSource) *ProcessCheck {
	return &ProcessCheck{src: src}
}

// Check implements Checker.
func (c *ProcessCheck) Check(context.Context) (string, error) {
	pid := c.src.PID()
	if pid <= 0 {
		return "", errors.New("no service process")
	}
	st, err := readProcStat(orProcRoot(c.procRoot), pid)
	switch {
	case isGone(err):
		return "", fmt.Errorf("pid %d does not exist", pid)
	case err != nil:
		return "", fmt.Errorf("pid %d: %w", pid, err)
	case st.state == 'Z':
		return "", fmt.Errorf("pid %d is a zombie", pid)
	case st.state == 'X' || st.state == 'x':
		return "", fmt.Errorf("pid %d is dead", pid)
	}
	return fmt.Sprintf("pid %d (%s) state %c", pid, st.comm, st.state), nil
}

// procStat is the part of /proc/PID/stat the checks and the finder use.
type procStat struct {
	comm      string // as the kernel keeps it: at most 15 bytes
	state     byte   // R S D Z T t X I ...
	ppid      int
	startTime uint64 // clock ticks after boot: with the pid, names one process
}

// readProcStat reads and parses root/PID/stat. It never panics on odd
// content: a malformed file is an error naming it.
//
// It is read with one open, read and close: the finder and the connections
// check read the stat of every process in /proc on each scan, and
// os.ReadFile's extra fstat and end-of-file read would double the syscalls.
func readProcStat(root string, pid int) (procStat, error) {
	path := filepath.Join(root, strconv.Itoa(pid), "stat")
	var buf [1024]byte // a stat line is at most ~700 bytes
	b, err := readSmallFile(path, buf[:])
	if err != nil {
		return procStat{}, err
	}
	st, ok := parseProcStat(b)
	if !ok {
		return procStat{}, fmt.Errorf("%s: unexpected format", path)
	}
	return st, nil
}

// readSmallFile reads a /proc file that fits in buf with a single read (the
// kernel renders it whole on the first one); a larger one is read in full.
func readSmallFile(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	n, err := unix.Read(fd, buf)
	unix.Close(fd)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if n < len(buf) {
		return buf[:n], nil
	}
	return os.ReadFile(path)
}

// parseProcStat parses "pid (comm) state ppid ... starttime ...". comm may
// hold spaces and parentheses, so the fields start after the LAST ')'.
func parseProcStat(b []byte) (procStat, bool) {
	l := bytes.IndexByte(b, '(')
	r := bytes.LastIndexByte(b, ')')
	if l < 0 || r < l {
		return procStat{}, false
	}
	f := bytes.Fields(b[r+1:])
	// f[0] is field 3 (state), f[1] field 4 (ppid), f[19] field 22 (starttime).
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, false
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return procStat{}, false
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return procStat{}, false
	}
	return procStat{comm: string(b[l+1 : r]), state: f[0][0], ppid: ppid, startTime: start}, true
}

// isGone reports whether err means the process no longer exists: its /proc
// directory is gone, or it exited while being read (ESRCH).
func isGone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// isLiveState reports whether a process in this state still runs code.
func isLiveState(s byte) bool { return s != 'Z' && s != 'X' && s != 'x' }

func orProcRoot(root string) string {
	if root == "" {
		return defaultProcRoot
	}
	return root
}
