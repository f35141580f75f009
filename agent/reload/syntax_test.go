package reload

import (
	"fmt"
	"strings"
	"testing"
)

// syntaxCase is one input: line 0 means accepted, else the error's line; in
// is a part of the error's text.
type syntaxCase struct {
	what string
	data string
	line int
	in   string
}

func runSyntaxCases(t *testing.T, name string, cases []syntaxCase) {
	t.Helper()
	for _, c := range cases {
		err := CheckSyntax(name, []byte(c.data))
		switch {
		case c.line == 0 && err != nil:
			t.Errorf("%s: %q: want accepted, got %v", c.what, c.data, err)
		case c.line == 0:
		case err == nil:
			t.Errorf("%s: %q: accepted, want an error on line %d", c.what, c.data, c.line)
		case !strings.HasPrefix(err.Error(), fmt.Sprintf("%s:%d: ", name, c.line)) &&
			!strings.HasPrefix(err.Error(), fmt.Sprintf("%s:%d:", name, c.line)):
			t.Errorf("%s: %q: want %s:%d: ..., got %v", c.what, c.data, name, c.line, err)
		case !strings.Contains(err.Error(), c.in):
			t.Errorf("%s: %q: want %q in the error, got %v", c.what, c.data, c.in, err)
		}
	}
}

// iniSyntaxCases are CheckSyntax's INI cases (osloconf.Parse's, which
// osloconf's tests hold to oslo.config's own parser); they seed FuzzCheckINI.
var iniSyntaxCases = []syntaxCase{
	{"empty", "", 0, ""},
	{"options", "[DEFAULT]\ndebug = true\nlog_dir: /var/log/keystone\n", 0, ""},
	{"comments", "# a\n; b\n[DEFAULT]\n#debug = true\n;x\n", 0, ""},
	{"continuation", "[DEFAULT]\nfoo = a\n  b\n\tc\n", 0, ""},
	{"indented comment continues a value", "[DEFAULT]\nfoo = a\n  # b\n", 0, ""},
	{"blank lines", "\n\n[DEFAULT]\n\n\nfoo = 1\n \n\t\n", 0, ""},
	{"quotes", "[DEFAULT]\na = \"x\"\nb = 'y'\nc = \"\nd = '\n", 0, ""},
	{"inline comment is value", "[DEFAULT]\nfoo = bar # baz\n", 0, ""},
	{"url", "[database]\nconnection = mysql+pymysql://k:p@db/k?charset=utf8\n", 0, ""},
	{"colon key", "[composite:main]\n/: public\n", 0, ""},
	{"empty value", "[DEFAULT]\nfoo =\nbar:\n", 0, ""},
	{"crlf", "[DEFAULT]\r\nfoo = 1\r\n  2\r\n", 0, ""},
	{"no final newline", "[DEFAULT]\nfoo = 1", 0, ""},
	{"space as section name", "[ ]\nfoo = 1\n", 0, ""},
	{"trailing whitespace after header", "[DEFAULT] \t\nfoo = 1\n", 0, ""},
	{"brackets inside header", "[a]b]\n[[c]]\n", 0, ""},
	{"form feed line is blank", "[DEFAULT]\n\f\nfoo = 1\n", 0, ""},

	{"no separator", "[DEFAULT]\nfoo = 1\n\n\n\n\nfoo bar\n", 7, `no '=' or ':' in "foo bar"`},
	{"empty key", "[DEFAULT]\n= 1\n", 2, `empty key in "= ..."`},
	{"blank key", "[DEFAULT]\n\f : 1\n", 2, "empty key"},
	{"header without ]", "[DEFAULT\nfoo = 1\n", 1, `does not end with ']' in "[DEFAULT"`},
	{"comment after header", "[DEFAULT]\nfoo = 1\n[database] # db\n", 3, "does not end with ']'"},
	{"empty section name", "[DEFAULT]\n[]\n", 2, "empty section name"},
	{"lone bracket", "[DEFAULT]\nfoo = 1\n[\n", 3, "does not end with ']'"},
	{"option before section", "# c\ndebug = true\n[DEFAULT]\n", 2, `option "debug" before any [section]`},
	{"continuation at start", "  [DEFAULT]\n", 1, "indented line"},
	{"continuation after header", "[DEFAULT]\n  foo = 1\n", 2, "indented line"},
	{"continuation after blank", "[DEFAULT]\nfoo = a\n\n  b\n", 4, "indented line"},
	{"continuation after comment", "[DEFAULT]\nfoo = a\n# c\n  b\n", 4, "indented line"},
	{"indented comment", "[DEFAULT]\n\n  # c\n", 3, "indented comment"},
	{"lone CR ends a line", "[DEFAULT]\rfoo\r", 2, "no '=' or ':'"},
	{"byte order mark", "\ufeff[DEFAULT]\nfoo = 1\n", 1, "byte order mark"},
	{"not UTF-8", "[DEFAULT]\nfoo = 1\nbar = \xff\n", 3, "not UTF-8 (byte 0xff)"},
	{"surrogate", "[DEFAULT]\n\xed\xa0\x80 = 1\n", 2, "not UTF-8"},
	{"vertical tab does not indent", "[DEFAULT]\nfoo = 1\n\v bar\n", 3, "no '=' or ':'"},
	{"long line cut", "[DEFAULT]\n" + strings.Repeat("x", 200) + "\n", 2, `"` + strings.Repeat("x", 77) + `..."`},
}

func TestCheckSyntaxINI(t *testing.T) {
	runSyntaxCases(t, "keystone.conf", iniSyntaxCases)
}

// TestCheckSyntaxINIKeepsValuesOut: an error never quotes an option's value,
// which may be a password.
func TestCheckSyntaxINIKeepsValuesOut(t *testing.T) {
	for _, data := range []string{
		"password = hunter2\n[DEFAULT]\n",
		"[DEFAULT]\n= hunter2\n",
		"[DEFAULT]\n: hunter2\n",
		"[DEFAULT]\n\n  hunter2\n",
		"[database] connection = mysql://k:hunter2@db/k\n",
	} {
		err := CheckSyntax("keystone.conf", []byte(data))
		if err == nil {
			t.Errorf("%q: accepted", data)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the error quotes the value: %v", data, err)
		}
	}
}

func TestCheckSyntaxJSON(t *testing.T) {
	runSyntaxCases(t, "config.json", []syntaxCase{
		{"object", `{"command": "keystone", "config_files": [{"source": "/a", "dest": "/b"}]}`, 0, ""},
		{"scalar", "1e999\n", 0, ""},
		{"whitespace", " \r\n\t[]\n\n", 0, ""},
		{"duplicate key", `{"a": 1, "a": 2}`, 0, ""},

		{"empty", "", 1, "unexpected end of JSON input"},
		{"unclosed", "{\n  \"a\": 1,\n", 2, "unexpected end of JSON input"},
		{"trailing comma", "{\n  \"a\": 1,\n}\n", 3, "invalid character '}'"},
		{"bad literal", "{\n  \"a\": 1,\n  \"b\": tru\n}\n", 3, "config.json:3:11: invalid character '\\n' in literal true"},
		{"column", "[1,\n  2,\n  x]\n", 3, "config.json:3:3: invalid character 'x'"},
		{"comment", "{\n  // no\n}\n", 2, "invalid character '/'"},
		{"trailing data", "{}\n{}\n", 2, "after top-level value"},
		{"newline in string", "{\"a\": \"x\ny\"}", 1, "in string literal"},
		{"NaN", "{\"a\": NaN}", 1, "invalid character 'N'"},
		{"not UTF-8", "{\n\"a\": \"\xc3\x28\"}", 2, "not UTF-8 (byte 0xc3)"},
		{"byte order mark", "\ufeff{}", 1, "byte order mark"},
	})
}

func TestCheckSyntaxYAML(t *testing.T) {
	runSyntaxCases(t, "policy.yaml", []syntaxCase{
		{"empty", "", 0, ""},
		{"rules", "\"identity:get_user\": \"rule:admin_or_owner\"\n\"admin_required\": \"role:admin\"\n", 0, ""},
		{"nested", "a:\n  b: [1, 2]\n  c: |\n    text\n    ---not a marker\n", 0, ""},
		{"explicit start and end", "%YAML 1.1\n---\na: 1\n...\n# c\n", 0, ""},
		{"start after comments", "# c\n\n--- # x\na: 1\n", 0, ""},
		{"byte order mark", "\ufeff---\na: 1\n", 0, ""},
		{"duplicate key", "a: 1\na: 2\n", 0, ""},

		{"tab indent", "a:\n\tb: 1\n", 2, "cannot start any token"},
		{"unclosed quote", "a: 1\nb: \"x\n", 2, "unexpected end of stream"},
		{"bad indent", "a: 1\n b: 2\n", 2, "mapping values are not allowed"},
		{"on the first line", "a: b: c\n", 1, "mapping values are not allowed"},
		// go-yaml's parser counts lines from 0: these are its errors.
		{"item after a mapping", "a: 1\n\n\n- b\n", 4, "did not find expected key"},
		{"key after a sequence", "- a\nb: 1\n", 2, "did not find expected '-' indicator"},
		{"block scalar dedent", "key: |\n  x\n y\n", 3, "did not find expected key"},
		{"unclosed flow", "x: 1\ny: [a, b\nz: 3\n", 3, "did not find expected ',' or ']'"},
		{"unclosed flow at the end", "a: [1, 2\n", 1, "did not find expected ',' or ']'"},
		{"duplicate directive", "%YAML 1.1\n%YAML 1.1\n---\na: 1\n", 2, "duplicate %YAML directive"},
		{"unknown anchor", "a: 1\nb: *x\n", 2, "unknown anchor 'x'"},
		{"control character", "a: 1\nb: \x01\n", 2, "control character U+0001"},
		{"not UTF-8", "a: 1\nb: \xff\n", 2, "not UTF-8"},
		{"second document", "a: 1\n---\nb: 2\n", 2, "second YAML document"},
		{"trailing marker", "a: 1\n--- \n", 2, "second YAML document"},
		{"content after end", "a: 1\n...\nb: 2\n", 3, "after the end of the YAML document"},
	})
	// The library's line, whatever it counts, stays within the file.
	err := CheckSyntax("policy.yml", []byte("a: \"x\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "policy.yml:1: ") {
		t.Errorf("unclosed quote on the last line: want policy.yml:1: ..., got %v", err)
	}
}

func TestCheckSyntaxNames(t *testing.T) {
	bad := []byte("[x\n{\n: : :\n")
	for _, name := range []string{"keystone.conf", "/etc/glance/glance-api.CONF", "api-paste.ini", "x.cfg", "config.json", "policy.yaml", "rules.YML"} {
		if err := CheckSyntax(name, bad); err == nil || !strings.HasPrefix(err.Error(), name+":") {
			t.Errorf("%s: want an error naming it, got %v", name, err)
		}
	}
	for _, name := range []string{"local_settings", "keystone.conf.j2", "run.sh", "fernet-keys/0", "README", ".conf.bak"} {
		if err := CheckSyntax(name, bad); err != nil {
			t.Errorf("%s: not a type with a check: got %v", name, err)
		}
	}
}
