package probes

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"testing"
)

// The parsers of what the kernel hands the checks (/proc/PID/stat, fd link
// targets, sock_diag datagrams) never panic, and what they accept is sane.

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("42 (keystone-wsgi) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0"))
	f.Add([]byte("7 (a) b) (c) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 0"))
	f.Add([]byte("1 () R"))
	f.Add([]byte(")("))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, ok := parseProcStat(b)
		if !ok {
			return
		}
		if bytes.IndexByte(b, '(') < 0 || !bytes.Contains(b, []byte(st.comm+")")) {
			t.Fatalf("comm %q is not between the parentheses of %q", st.comm, b)
		}
		if st.state == ' ' || st.state == '\n' {
			t.Fatalf("blank state from %q", b)
		}
	})
}

func FuzzParseSocketLink(f *testing.F) {
	for _, s := range []string{"socket:[12345]", "socket:[]", "pipe:[1]", "socket:[18446744073709551615]", "socket:[99999999999999999999]", "/dev/null"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ino, ok := parseSocketLink(b)
		if !ok {
			return
		}
		if want := "socket:[" + strconv.FormatUint(ino, 10) + "]"; string(b) != want && !bytes.HasPrefix(b[8:], []byte("0")) {
			t.Fatalf("%q parsed as inode %d", b, ino)
		}
	})
}

func FuzzParseDiagMessages(f *testing.F) {
	// One established socket to port 5672, then NLMSG_DONE.
	msg := make([]byte, nlmsgHdrLen+inetDiagMsgLen)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], 20) // SOCK_DIAG_BY_FAMILY
	p := msg[nlmsgHdrLen:]
	p[diagMsgState] = tcpEstablished
	binary.BigEndian.PutUint16(p[diagMsgDPort:], 5672)
	binary.NativeEndian.PutUint32(p[diagMsgInode:], 777)
	done := make([]byte, nlmsgHdrLen+4)
	binary.NativeEndian.PutUint32(done[0:], uint32(len(done)))
	binary.NativeEndian.PutUint16(done[4:], 3) // NLMSG_DONE
	f.Add(append(append([]byte{}, msg...), done...))
	f.Add(msg[:10])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		parseDiagMessages(b, func(port, inode uint64) {
			n++
			if port > 65535 {
				t.Fatalf("port %d", port)
			}
		})
		if n > len(b)/(nlmsgHdrLen+inetDiagMsgLen)+1 {
			t.Fatalf("%d sockets from %d bytes", n, len(b))
		}
	})
}
