package render

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// ParsePerm reads an octal mode the ways kolla configs write it: "0600",
// "600", "2775", "0o600" (or "0O600"). kolla itself reads "600" as the
// decimal 600 and fails on "2775"; here all are octal. The result carries
// fs.ModeSetuid, fs.ModeSetgid and fs.ModeSticky for 04000, 02000, 01000.
func ParsePerm(s string) (fs.FileMode, error) {
	digits := s
	if len(s) > 2 && s[0] == '0' && (s[1] == 'o' || s[1] == 'O') {
		digits = s[2:]
	}
	bad := func() (fs.FileMode, error) {
		return 0, fmt.Errorf("%q is not an octal mode (want e.g. \"0640\", \"640\", \"2775\" or \"0o640\")", s)
	}
	if digits == "" || len(digits) > 6 || strings.Trim(digits, "01234567") != "" {
		return bad()
	}
	n, err := strconv.ParseUint(digits, 8, 32)
	if err != nil {
		return bad()
	}
	if n > 0o7777 {
		return 0, fmt.Errorf("%q: mode above 07777", s)
	}
	return PermFromBits(uint32(n)), nil
}

// PermFromBits turns Unix mode bits into an fs.FileMode.
func PermFromBits(n uint32) fs.FileMode {
	m := fs.FileMode(n & 0o777)
	if n&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if n&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if n&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// PermString is PermFromBits's inverse, for display: "0640", "2775".
func PermString(m fs.FileMode) string {
	n := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		n |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		n |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		n |= 0o1000
	}
	return fmt.Sprintf("%04o", n)
}

// Digest names a content in a difference without printing it (config
// files hold passwords).
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return fmt.Sprintf("sha256:%x (%d bytes)", sum[:6], len(b))
}
