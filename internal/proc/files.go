package proc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// NewLines calls each for every complete line of path from offset from on
// (a test server's JSON-lines output, read as it grows) and returns the
// offset after the last one; a last line without its newline is still
// being written and is left for the next call.
func NewLines(path string, from int64, each func(line []byte) error) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return from, err
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return from, err
	}
	r := bufio.NewReaderSize(f, 256<<10)
	for {
		b, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: read it whole (b is only
			// valid until the next read).
			head := bytes.Clone(b)
			var rest []byte
			rest, err = r.ReadBytes('\n')
			b = append(head, rest...)
		}
		if errors.Is(err, io.EOF) {
			return from, nil
		}
		if err != nil {
			return from, err
		}
		if err := each(b); err != nil {
			return from, err
		}
		from += int64(len(b))
	}
}

// PortSockets lists the inodes of the sockets bound to port (listening TCP
// sockets, and with udp unconnected UDP ones too: a client's ephemeral port
// may equal ours on another address), and those of them pid has no
// descriptor for: the port is another process's.
func PortSockets(pid, port int, udp bool) (all, foreign []string, err error) {
	tables := []string{"/proc/net/tcp", "/proc/net/tcp6"}
	if udp {
		tables = append(tables, "/proc/net/udp", "/proc/net/udp6")
	}
	for _, t := range tables {
		in, err := socketInodes(t, port, strings.Contains(t, "tcp"))
		if err != nil {
			return nil, nil, err
		}
		all = append(all, in...)
	}
	if len(all) == 0 {
		return nil, nil, nil
	}
	fdDir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, nil, err
	}
	own := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(fdDir + "/" + fd.Name()); err == nil {
			own[l] = true
		}
	}
	for _, in := range all {
		if !own["socket:["+in+"]"] {
			foreign = append(foreign, in)
		}
	}
	return all, foreign, nil
}

// socketInodes lists the inodes of the sockets bound to port in one
// /proc/net table: for TCP only listeners, for UDP only unconnected ones.
func socketInodes(table string, port int, tcp bool) ([]string, error) {
	f, err := os.Open(table)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // no IPv6
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	var out []string
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || !strings.HasSuffix(fs[1], want) {
			continue
		}
		if tcp && fs[3] != "0A" { // TCP_LISTEN
			continue
		}
		if !tcp && !strings.HasSuffix(fs[2], ":0000") { // unconnected
			continue
		}
		out = append(out, fs[9])
	}
	return out, sc.Err()
}

// Children lists the processes whose parent is pid, from /proc.
func Children(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name in parentheses may hold spaces: fields start
		// after the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(string(b[i+1:])); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}
