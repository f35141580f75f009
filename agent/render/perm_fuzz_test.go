package render

import (
	"io/fs"
	"strings"
	"testing"
)

// FuzzParsePerm: an accepted mode has only permission and special bits and
// reads back the same from its display and with a 0o prefix.
func FuzzParsePerm(f *testing.F) {
	for _, s := range []string{"0600", "600", "2775", "0o600", "0O7777", "0800", "", "0o", "00000600", "-1", "0x1ff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParsePerm(s)
		if err != nil {
			return
		}
		if m&^(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
			t.Fatalf("ParsePerm(%q) = %v: bits beyond a mode", s, m)
		}
		for _, again := range []string{PermString(m), "0o" + PermString(m), strings.TrimLeft(PermString(m), "0")} {
			if again == "" {
				again = "0"
			}
			if m2, err := ParsePerm(again); err != nil || m2 != m {
				t.Fatalf("ParsePerm(%q) = %v, but ParsePerm(%q) = %v, %v", s, m, again, m2, err)
			}
		}
	})
}

// FuzzParseOwner: an accepted owner has a user and a group without a colon,
// "user" means user:user, and user:group reads back the same.
func FuzzParseOwner(f *testing.F) {
	for _, s := range []string{"nova", "nova:", "nova:kolla", "42436:42400", ":", "a:b:c", "", "no va", "ü:ß"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, g, err := ParseOwner(s)
		if err != nil {
			return
		}
		if u == "" || g == "" || strings.Contains(u, ":") || strings.Contains(g, ":") {
			t.Fatalf("ParseOwner(%q) = %q, %q", s, u, g)
		}
		if !strings.Contains(s, ":") && g != u {
			t.Fatalf("ParseOwner(%q): group %q, want the user", s, g)
		}
		if u2, g2, err := ParseOwner(u + ":" + g); err != nil || u2 != u || g2 != g {
			t.Fatalf("ParseOwner(%q) = %q, %q, but %q:%q reads %q, %q, %v", s, u, g, u, g, u2, g2, err)
		}
	})
}
