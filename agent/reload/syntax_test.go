package reload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
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

func TestCheckSyntaxINI(t *testing.T) {
	runSyntaxCases(t, "keystone.conf", []syntaxCase{
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
	})
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

// iniOsloCases are fed to oslo.config's own parser and to checkINI, which
// must agree (TestCheckSyntaxINIMatchesOslo); they seed FuzzCheckINI too.
var iniOsloCases = []string{
	"",
	"\n\n",
	"# only a comment\n",
	"[DEFAULT]\nfoo = bar\n",
	"[DEFAULT]\nfoo: bar\n",
	"[DEFAULT]\nfoo=bar",
	"[DEFAULT]\nfoo = \"quoted\"\nbar = '\nbaz = \"\n",
	"[DEFAULT]\nfoo bar\n",
	"[DEFAULT]\nfoo\n",
	"[DEFAULT]\nfoo =\n  bar\n\tbaz\n",
	"[DEFAULT]\nfoo = 1\n\n  bar\n",
	"[DEFAULT]\nfoo = 1\n# c\n  bar\n",
	"[DEFAULT]\nfoo = 1\n  # c\n",
	"[DEFAULT]\n  # c\n",
	"  [DEFAULT]\n",
	" \n\t\n[DEFAULT]\n",
	"[DEFAULT]\n; semi\n#hash\n#\n;\n",
	"[DEFAULT]\nfoo = a # inline\n",
	"[DEFAULT]\nurl = http://h:5000/v3\nurl2: http://h:5000/?a=b\n",
	"[DEFAULT]\nfoo = 1\n = x\n",
	"[DEFAULT]\n = x\n",
	"[DEFAULT]\n=1\n",
	"[DEFAULT]\n:=\n",
	"[DEFAULT]\n\t \f=1\n",
	"[DEFAULT]\n\f=1\n",
	"[DEFAULT]\na:b=c\n",
	"[DEFAULT]\n]=1\n",
	"[DEFAULT]\n\"\"=1\n",
	"[DEFAULT]\nfoo\t=\t1\t\n",
	"[DEFAULT]\n[\n",
	"[DEFAULT]\n[x\n",
	"[DEFAULT]\n[=1\n",
	"[DEFAULT]\n[x] \n[y]\t\n",
	"[DEFAULT] # x\n",
	"]\n",
	"[]\n",
	"[]\nfoo=1\n",
	"[ ]\nfoo=1\n",
	"[ DEFAULT ]\nfoo=1\n",
	"[a]b]\n[[c]]\n",
	"foo=1\n",
	"# c\nfoo=1\n[DEFAULT]\n",
	"# c\n[DEFAULT]\nfoo=1",
	"[DEFAULT]\r\nfoo=1\r\n\r\n  bar\r\n",
	"[DEFAULT]\r\nfoo=1\r\n  bar\r\n",
	"[DEFAULT]\rfoo=1\r  bar\r",
	"[DEFAULT]\nfoo=1\rbar\n",
	"[x]\r\r\n",
	"\r",
	"\ufeff[DEFAULT]\nfoo=1\n",
	"\ufeff",
	"[DEFAULT]\nfoo=\xff\n",
	"[DEFAULT]\nfoo=1\x85\n",
	"[DEFAULT]\n\xed\xa0\x80=1\n",
	"[DEFAULT]\n\xc0\xaf=1\n",
	"[DEFAULT]\n\xf4\x8f\xbf\xbf=1\n",
	"[DEFAULT]\n\xf4\x90\x80\x80=1\n",
	"[DEFAULT]\nfoo=1\n\xe2\x80\xa8 x\n",
	"[DEFAULT]\nfoo=1\n\xc2\x85 x\n",
	"[DEFAULT]\x00\n",
	"[DEFAULT]\nfoo=1\x00\n",
	"\x00\n",
	"[DEFAULT]\nfoo = 1\n\v bar\n",
	"[DEFAULT]\nfoo = 1\n\f bar\n",
	"[DEFAULT]\nfoo = 1\n \f bar\n",
	"[DEFAULT]\nbar = 1\n[database]\nconnection = mysql+pymysql://u:p@h/db?charset=utf8\n\n[keystone_authtoken]\nauth_url = http://k:5000\nmemcached_servers = a:11211,b:11211\n",
}

// iniSpaceCandidates: what Python's str.isspace says yes to, and neighbours
// that it says no to.
var iniSpaceCandidates = []rune{
	'\t', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x1f, ' ', 0x85, 0xa0, 0x1680, 0x2000, 0x2005, 0x200a,
	0x2028, 0x2029, 0x202f, 0x205f, 0x3000,
	0x1b, 0x7f, 0xad, 0x180e, 0x200b, 0x2060, 0xfeff, 0x3164,
}

// iniOsloAllCases is iniOsloCases and, for each of iniSpaceCandidates, a
// line of it alone, before a key and after a section header.
func iniOsloAllCases() []string {
	cases := append([]string(nil), iniOsloCases...)
	for _, r := range iniSpaceCandidates {
		s := string(r)
		cases = append(cases,
			"[s]\n"+s+"\nfoo=1\n",
			"[s]\n"+s+"=1\n",
			"[s]"+s+"\n",
			"[s]\nfoo=1\n"+s+"\n bar\n",
		)
	}
	return cases
}

// iniOsloScript parses each file named on stdin (a JSON list of contents) as
// an OpenStack service does: cfg.ConfigParser (BaseParser and its rule that
// an option needs a section) reading the file as the service opens it.
const iniOsloScript = `
import base64, json, os, sys, tempfile
from oslo_config import cfg, iniparser
out = []
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "case.conf")
    for c in json.load(sys.stdin):
        with open(path, "wb") as f:
            f.write(base64.b64decode(c))
        try:
            cfg.ConfigParser(path, {}).parse()
            out.append({"ok": True})
        except iniparser.ParseError as e:
            out.append({"ok": False, "line": e.lineno, "msg": e.msg})
        except UnicodeDecodeError as e:
            out.append({"ok": False, "line": 0, "msg": str(e)})
json.dump(out, sys.stdout)
`

// TestCheckSyntaxINIMatchesOslo runs oslo.config's parser on every case:
// checkINI must accept what it accepts and refuse the rest, at the same line
// (but for an option outside a section, which oslo.config finds only when the
// option ends, and for text that is not UTF-8). Debian's python3-oslo.config
// provides the parser; -X utf8 opens files as UTF-8, as in a container whose
// locale is C.UTF-8.
func TestCheckSyntaxINIMatchesOslo(t *testing.T) {
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-I", "-c", "import oslo_config.cfg").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import oslo_config (%v: %s); CI installs Debian's python3-oslo.config", python, err, bytes.TrimSpace(out))
	}
	cases := iniOsloAllCases()
	in := make([][]byte, len(cases))
	for i, c := range cases {
		in[i] = []byte(c) // JSON: base64
	}
	stdin, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-I", "-X", "utf8", "-c", iniOsloScript)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("oslo.config's parser: %v: %s", err, stderr.String())
	}
	var verdicts []struct {
		OK   bool   `json:"ok"`
		Line int    `json:"line"`
		Msg  string `json:"msg"`
	}
	if err := json.Unmarshal(stdout, &verdicts); err != nil || len(verdicts) != len(cases) {
		t.Fatalf("oslo.config's parser said %q (%v), for %d cases", stdout, err, len(cases))
	}
	for i, c := range cases {
		v := verdicts[i]
		err := CheckSyntax("case.conf", []byte(c))
		switch {
		case v.OK && err != nil:
			t.Errorf("%q: oslo.config accepts it, CheckSyntax says %v", c, err)
		case !v.OK && err == nil:
			t.Errorf("%q: oslo.config refuses it (line %d: %s), CheckSyntax accepts it", c, v.Line, v.Msg)
		case !v.OK && v.Line > 0 && !strings.Contains(v.Msg, "Section must be started") &&
			!strings.HasPrefix(err.Error(), fmt.Sprintf("case.conf:%d: ", v.Line)):
			t.Errorf("%q: oslo.config refuses line %d (%s), CheckSyntax says %v", c, v.Line, v.Msg, err)
		}
	}
	t.Logf("%d cases, oslo.config and CheckSyntax agree", len(cases))
}
