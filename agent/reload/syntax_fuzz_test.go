package reload

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
)

var syntaxErrPrefixRE = regexp.MustCompile(`^(.*?):(\d+):`)

// checkSyntaxError fails t unless err is nil or starts "name:LINE:" with LINE
// a line of data (the first, for empty data).
func checkSyntaxError(t *testing.T, name string, data []byte, err error) {
	t.Helper()
	if err == nil {
		return
	}
	m := syntaxErrPrefixRE.FindStringSubmatch(err.Error())
	if m == nil || m[1] != name {
		t.Fatalf("%q: the error does not start with %s:LINE: %v", data, name, err)
	}
	line, _ := strconv.Atoi(m[2])
	if last := max(1, syntaxLines(data)); line < 1 || line > last {
		t.Fatalf("%q: line %d of %d: %v", data, line, last, err)
	}
}

// FuzzCheckINI: checkINI never panics, its errors name the file and a line
// of the input, and how lines end ("\n", "\r\n", "\r") changes nothing.
// (osloconf's FuzzParse fuzzes the parser itself, from oslo.config's cases.)
func FuzzCheckINI(f *testing.F) {
	for _, c := range iniSyntaxCases {
		f.Add([]byte(c.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := checkINI("fuzz.conf", data)
		checkSyntaxError(t, "fuzz.conf", data, err)
		if bytes.IndexByte(data, '\r') >= 0 {
			return
		}
		for _, nl := range []string{"\r\n", "\r"} {
			other := bytes.ReplaceAll(data, []byte("\n"), []byte(nl))
			oerr := checkINI("fuzz.conf", other)
			if (err == nil) != (oerr == nil) {
				t.Fatalf("%q: %v; with %q line ends: %v", data, err, nl, oerr)
			}
			if err != nil {
				if a, b := syntaxErrPrefixRE.FindString(err.Error()), syntaxErrPrefixRE.FindString(oerr.Error()); a != b {
					t.Fatalf("%q: %v; with %q line ends: %v", data, err, nl, oerr)
				}
			}
		}
	})
}

// FuzzCheckSyntax: CheckSyntax never panics on any of its types, and its
// errors name the file and a line of the input.
func FuzzCheckSyntax(f *testing.F) {
	names := []string{"keystone.conf", "api-paste.ini", "x.cfg", "config.json", "policy.yaml", "rules.yml", "local_settings"}
	seeds := map[string][]string{
		"keystone.conf":  {"[DEFAULT]\ndebug = true\n  more\n", "foo = 1\n", "[x\n"},
		"config.json":    {`{"command": "keystone", "config_files": [{"source": "/a", "dest": "/b", "perm": "0600"}]}`, "{\n\"a\": 1,\n}", "[1, 2"},
		"policy.yaml":    {"\"identity:get_user\": \"rule:admin\"\n", "a:\n  b: [1, 2]\n  c: |\n    x\n", "a: 1\n---\nb: 2\n", "- a\nb: 1\n", "a: &x [*x]\n", "a: *y\n", "{a: 1}}\n"},
		"local_settings": {"DEBUG = False\n"},
	}
	for i, name := range names {
		for _, s := range seeds[name] {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		name := names[int(kind)%len(names)]
		err := CheckSyntax(name, data)
		if name == "local_settings" && err != nil {
			t.Fatalf("%q: no check for %s, got %v", data, name, err)
		}
		checkSyntaxError(t, name, data, err)
	})
}
