package probes

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// tcpEstablished is the kernel's TCP_ESTABLISHED, the "st" of /proc/net/tcp.
const tcpEstablished = 1

// ConnectionsCheck passes when the service holds at least min ESTABLISHED
// TCP connections to each of the given remote ports (5672: its broker, 3306:
// its database). The connections of the whole process tree count: uWSGI,
// Apache and oslo.service fork workers, and it is the workers that hold the
// connections — openstack-helm's psutil check only looks at the parent and
// misses them.
//
// A look lists the socket inodes held open by the tree (/proc/PID/fd of each
// process, the tree from /proc/*/stat), then counts those that are
// ESTABLISHED to each port. The agent needs the service's uid or
// CAP_SYS_PTRACE to read another process's fds.
type ConnectionsCheck struct {
	src      PIDSource
	ports    []int
	min      int
	procRoot string // "" means defaultProcRoot
	// procNet skips sock_diag and reads /proc/PID/net/tcp{,6}: the fallback,
	// forced by tests.
	procNet bool
}

// NewConnections returns the check; min below 1 means 1.
func NewConnections(src PIDSource, ports []int, min int) *ConnectionsCheck {
	return &ConnectionsCheck{src: src, ports: append([]int(nil), ports...), min: max(min, 1)}
}

// Check implements Checker.
func (c *ConnectionsCheck) Check(ctx context.Context) (string, error) {
	if len(c.ports) == 0 {
		return "", errors.New("connections check: no ports to check")
	}
	pid := c.src.PID()
	if pid <= 0 {
		return "", errors.New("no service process")
	}
	root := orProcRoot(c.procRoot)
	pids, err := processTree(root, pid)
	if err != nil {
		return "", err
	}
	inodes := make(map[uint64]struct{})
	buf := make([]byte, 64)
	for i, p := range pids {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		err := socketInodes(root, p, inodes, buf)
		if i == 0 && isGone(err) {
			return "", fmt.Errorf("pid %d does not exist", pid)
		}
		// A worker that exited meanwhile has no connections left to count.
		if err != nil && !isGone(err) {
			return "", err
		}
	}
	counts, err := c.established(ctx, root, pid, inodes)
	if err != nil {
		return "", err
	}
	parts := make([]string, 0, len(c.ports))
	failed := false
	for _, port := range c.ports {
		n := counts[uint64(port)]
		if n < c.min {
			failed = true
			parts = append(parts, fmt.Sprintf("port %d: %d established connections (want >= %d)", port, n, c.min))
		} else {
			parts = append(parts, fmt.Sprintf("port %d: %d", port, n))
		}
	}
	if failed {
		return "", errors.New(strings.Join(parts, "; "))
	}
	return strings.Join(parts, "; ") + " established", nil
}

// established counts, per wanted remote port, the ESTABLISHED sockets among
// inodes, IPv4 then IPv6 (skipped when IPv4 already satisfies every port).
//
// Each family is asked from the kernel with sock_diag, filtered to
// ESTABLISHED: /proc/net/tcp makes the kernel walk its whole TCP hash table,
// sized by the node's memory, whatever the pod holds (about 4 ms per table
// on a small VM, 15 times the netlink dump). sock_diag answers for the
// agent's network namespace, which in a pod is the service's. Where it is
// unavailable (no inet_diag in the kernel) /proc/PID/net/tcp{,6}, the
// service's own tables, are read instead.
func (c *ConnectionsCheck) established(ctx context.Context, root string, pid int, inodes map[uint64]struct{}) (map[uint64]int, error) {
	want := make(map[uint64]bool, len(c.ports))
	for _, p := range c.ports {
		want[uint64(p)] = true
	}
	counts := make(map[uint64]int, len(c.ports))
	visit := func(remotePort, inode uint64) {
		if !want[remotePort] {
			return
		}
		if _, ok := inodes[inode]; ok {
			counts[remotePort]++
		}
	}
	if !c.procNet {
		err := c.eachFamily(ctx, counts, func(v6 bool) error { return diagEstablished(ctx, v6, visit) })
		if err == nil || ctx.Err() != nil {
			return counts, err
		}
		clear(counts) // the dump may have counted some before failing
	}
	err := c.eachFamily(ctx, counts, func(v6 bool) error { return procNetEstablished(root, pid, v6, visit) })
	return counts, err
}

// eachFamily calls read for IPv4, then for IPv6 unless counts already
// satisfy every port.
func (c *ConnectionsCheck) eachFamily(ctx context.Context, counts map[uint64]int, read func(v6 bool) error) error {
	for _, v6 := range []bool{false, true} {
		if v6 && c.satisfied(counts) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := read(v6); err != nil {
			return err
		}
	}
	return nil
}

func (c *ConnectionsCheck) satisfied(counts map[uint64]int) bool {
	for _, p := range c.ports {
		if counts[uint64(p)] < c.min {
			return false
		}
	}
	return true
}

// procNetEstablished calls visit for each ESTABLISHED socket of
// root/PID/net/tcp (or tcp6), parsed by procfs: a procfs.FS rooted at
// /proc/PID reads /proc/PID/net, the tables of pid's network namespace.
func procNetEstablished(root string, pid int, v6 bool, visit func(remotePort, inode uint64)) error {
	nfs, err := procfs.NewFS(filepath.Join(root, strconv.Itoa(pid)))
	if err != nil {
		return err
	}
	name, read := "tcp", nfs.NetTCP
	if v6 {
		name, read = "tcp6", nfs.NetTCP6
	}
	lines, err := read()
	if v6 && errors.Is(err, fs.ErrNotExist) {
		return nil // IPv6 disabled in the kernel
	}
	if err != nil {
		return fmt.Errorf("net/%s of pid %d: %w", name, pid, err)
	}
	for _, l := range lines {
		if l.St == tcpEstablished {
			visit(l.RemPort, l.Inode)
		}
	}
	return nil
}

// Layout of the sock_diag messages (linux/inet_diag.h); x/sys/unix has the
// constants but not these structures.
const (
	nlmsgHdrLen     = 16 // struct nlmsghdr
	inetDiagReqLen  = 56 // struct inet_diag_req_v2
	inetDiagMsgLen  = 72 // struct inet_diag_msg
	diagMsgState    = 1  // idiag_state
	diagMsgDPort    = 6  // id.idiag_dport, big-endian
	diagMsgInode    = 68 // idiag_inode
	diagRecvBufSize = 64 << 10
)

// diagEstablished dumps the ESTABLISHED TCP sockets of one family with
// sock_diag (what ss uses) and calls visit for each.
func diagEstablished(ctx context.Context, v6 bool, visit func(remotePort, inode uint64)) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	if dl, ok := ctx.Deadline(); ok {
		// The kernel answers a dump at once; this only bounds the unexpected.
		tv := unix.NsecToTimeval(max(time.Until(dl), time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return fmt.Errorf("sock_diag: %w", err)
		}
	}
	family := byte(unix.AF_INET)
	if v6 {
		family = unix.AF_INET6
	}
	req := make([]byte, nlmsgHdrLen+inetDiagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], 1) // seq: the socket is ours alone
	req[nlmsgHdrLen] = family
	req[nlmsgHdrLen+1] = unix.IPPROTO_TCP
	ne.PutUint32(req[nlmsgHdrLen+4:], 1<<tcpEstablished) // idiag_states
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("sock_diag: %w", err)
	}
	buf := make([]byte, diagRecvBufSize)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("sock_diag: %w", err)
		}
		done, err := parseDiagMessages(buf[:n], visit)
		if err != nil || done {
			return err
		}
	}
}

// parseDiagMessages walks one datagram of netlink messages; done is set at
// the end of the dump. Lengths are checked: a short or odd message is an
// error, never a panic.
func parseDiagMessages(b []byte, visit func(remotePort, inode uint64)) (done bool, err error) {
	ne := binary.NativeEndian
	for len(b) >= nlmsgHdrLen {
		l := int(ne.Uint32(b[0:]))
		if l < nlmsgHdrLen || l > len(b) {
			return false, fmt.Errorf("sock_diag: malformed message (length %d of %d)", l, len(b))
		}
		typ, payload := ne.Uint16(b[4:]), b[nlmsgHdrLen:l]
		switch typ {
		case unix.NLMSG_DONE:
			return true, nil
		case unix.NLMSG_ERROR:
			if len(payload) >= 4 {
				if errno := -int32(ne.Uint32(payload)); errno > 0 {
					return false, fmt.Errorf("sock_diag: %w", syscall.Errno(errno))
				}
			}
			return true, nil // an acknowledgement
		case unix.SOCK_DIAG_BY_FAMILY:
			if len(payload) < inetDiagMsgLen {
				return false, fmt.Errorf("sock_diag: short message (%d bytes)", len(payload))
			}
			if payload[diagMsgState] == tcpEstablished {
				visit(uint64(binary.BigEndian.Uint16(payload[diagMsgDPort:])), uint64(ne.Uint32(payload[diagMsgInode:])))
			}
		}
		l = (l + 3) &^ 3 // NLMSG_ALIGN
		if l >= len(b) {
			break
		}
		b = b[l:]
	}
	return false, nil
}

// processTree returns pid followed by all its descendants. Parents come from
// a scan of /proc/*/stat: /proc/PID/task/*/children would be cheaper but
// needs CONFIG_PROC_CHILDREN, which not every kernel has, and a pod's PID
// namespace holds few processes.
func processTree(root string, pid int) ([]int, error) {
	children := make(map[int][]int)
	err := eachProc(root, pid, func(p int, st procStat) { children[st.ppid] = append(children[st.ppid], p) })
	if err != nil {
		return nil, err
	}
	tree := []int{pid}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, children[tree[i]]...)
	}
	return tree, nil
}

// eachProc calls fn with every process of root (a /proc) but skip and its
// stat; one that exits meanwhile, or is unreadable, is not ours to judge.
func eachProc(root string, skip int, fn func(pid int, st procStat)) error {
	d, err := os.Open(root)
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("listing %s: %w", root, err)
	}
	for _, n := range names {
		p, err := strconv.Atoi(n)
		if err != nil || p == skip {
			continue
		}
		if st, err := readProcStat(root, p); err == nil {
			fn(p, st)
		}
	}
	return nil
}

// socketInodes adds the inodes of the sockets pid holds open to set; buf is
// scratch space for the link targets.
//
// Not procfs's FileDescriptorTargets: it resolves the full path
// /proc/PID/fd/N for every descriptor and allocates each target, which costs
// about 1.7 times a readlinkat relative to the open fd directory — and this
// loop is most of the check's own time for a service with many open files.
func socketInodes(root string, pid int, set map[uint64]struct{}, buf []byte) error {
	dir := filepath.Join(root, strconv.Itoa(pid), "fd")
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("listing %s: %w", dir, err)
	}
	dfd := int(d.Fd())
	for _, name := range names {
		n, err := unix.Readlinkat(dfd, name, buf)
		if err != nil {
			continue // closed meanwhile
		}
		if ino, ok := parseSocketLink(buf[:n]); ok {
			set[ino] = struct{}{}
		}
	}
	return nil
}

// parseSocketLink parses a descriptor's link target "socket:[12345]"; other
// targets (files, pipes, anon inodes) are not sockets. It does not allocate:
// it runs once per open descriptor.
func parseSocketLink(b []byte) (uint64, bool) {
	const prefix = "socket:["
	if len(b) < len(prefix)+2 || string(b[:len(prefix)]) != prefix || b[len(b)-1] != ']' {
		return 0, false
	}
	var ino uint64
	for _, ch := range b[len(prefix) : len(b)-1] {
		if ch < '0' || ch > '9' || ino > (1<<64-1)/10-1 {
			return 0, false
		}
		ino = ino*10 + uint64(ch-'0')
	}
	return ino, true
}
