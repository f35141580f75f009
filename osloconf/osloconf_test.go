package osloconf

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func mustParse(t *testing.T, name, data string) *File {
	t.Helper()
	f, err := Parse(name, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestParseValues(t *testing.T) {
	const conf = "# rendered\n" + // 1
		"[DEFAULT]\n" + // 2
		"debug = true\n" + // 3
		"; a comment\n" + // 4
		"host: compute-1\n" + // 5
		"control_exchange = \"nova\"\n" + // 6
		"single = 'x'\n" + // 7
		"mixed = \"x'\n" + // 8
		"lone = \"\n" + // 9
		"empty =\n" + // 10
		"inner = a \"b\" c\n" + // 11
		"comment = bar # not a comment\n" + // 12
		"multi = \"first\n" + // 13
		"  second\"\n" + // 14
		"\tthird\n" + // 15
		"url = http://h:5000/?a=b\n" + // 16
		"a:b=c\n" + // 17
		"sep = x = y : z\n" + // 18
		"  key with spaces\t=\t v \t\n" + // 19, a continuation of sep
		"host = compute-2\n" + // 20
		"spaces\u3000=\u3000ideographic\u3000\n" + // 21
		"cont = a\n" + // 22
		"\t\u00a0b\n" + // 23
		"\n" + // 24
		"[Oslo_Messaging_Rabbit]\n" + // 25
		"ssl = True\n" + // 26
		"Key = case-sensitive\n" + // 27
		"[default]\n" + // 28
		"transport_url = not the DEFAULT section\n" + // 29
		"[oslo_messaging_rabbit]\n" + // 30
		"ssl = False\n" + // 31
		"[ DEFAULT ]\n" + // 32
		"x = y\n" + // 33
		"[empty]\n" // 34
	f := mustParse(t, "nova.conf", conf)
	for _, tc := range []struct {
		section, key, want string
		line               int // 0: not set
	}{
		{"DEFAULT", "debug", "true", 3},
		{"DEFAULT", "Debug", "", 0}, // keys are case-sensitive
		{"DEFAULT", "host", "compute-2", 20},
		{"DEFAULT", "control_exchange", "nova", 6},
		{"DEFAULT", "single", "x", 7},
		{"DEFAULT", "mixed", "\"x'", 8},
		{"DEFAULT", "lone", "", 9},
		{"DEFAULT", "empty", "", 10},
		{"DEFAULT", "inner", "a \"b\" c", 11},
		{"DEFAULT", "comment", "bar # not a comment", 12},
		{"DEFAULT", "multi", "\"first\nsecond\"\nthird", 13}, // quotes only around the first line
		{"DEFAULT", "url", "http://h:5000/?a=b", 16},
		{"DEFAULT", "a", "b=c", 17},
		{"DEFAULT", "sep", "x = y : z\nkey with spaces\t=\t v", 18},
		{"DEFAULT", "spaces", "ideographic", 21},
		{"DEFAULT", "cont", "a\nb", 22},
		{"oslo_messaging_rabbit", "ssl", "False", 31}, // [Oslo_...] and [oslo_...] are one group
		{"OSLO_MESSAGING_RABBIT", "Key", "case-sensitive", 27},
		{"oslo_messaging_rabbit", "key", "", 0},
		{"default", "transport_url", "not the DEFAULT section", 29},
		{"Default", "transport_url", "not the DEFAULT section", 29},
		{"DEFAULT", "transport_url", "", 0},
		{" default ", "x", "y", 33},
		{"DEFAULT", "x", "", 0},
		{"nosuch", "key", "", 0},
	} {
		got, line, ok := f.Get(tc.section, tc.key)
		if ok != (tc.line != 0) || got != tc.want || line != tc.line {
			t.Errorf("[%s] %s = %q, line %d, %v; want %q, line %d", tc.section, tc.key, got, line, ok, tc.want, tc.line)
		}
	}
	if got, want := f.Sections(), []string{"DEFAULT", "oslo_messaging_rabbit", "default", " default ", "empty"}; !slices.Equal(got, want) {
		t.Errorf("Sections() = %q, want %q", got, want)
	}
	if got, want := f.Keys("oslo_messaging_rabbit"), []string{"ssl", "Key"}; !slices.Equal(got, want) {
		t.Errorf("Keys() = %q, want %q", got, want)
	}
	if got := f.Keys("empty"); len(got) != 0 {
		t.Errorf("Keys(empty) = %q", got)
	}
	if f.Name != "nova.conf" {
		t.Errorf("Name = %q", f.Name)
	}
	var nilFile *File
	if _, _, ok := nilFile.Get("DEFAULT", "x"); ok || nilFile.Sections() != nil || nilFile.Keys("DEFAULT") != nil {
		t.Error("a nil File has options")
	}
	if _, _, ok := nilFile.Substituted("DEFAULT", "x"); ok {
		t.Error("a nil File has options")
	}
}

func TestParseLineEnds(t *testing.T) {
	for _, nl := range []string{"\n", "\r\n", "\r"} {
		data := strings.ReplaceAll("[DEFAULT]\nfoo = 1\n  2\n\nbar = 3", "\n", nl)
		f := mustParse(t, "f", data)
		if v, line, _ := f.Get("DEFAULT", "foo"); v != "1\n2" || line != 2 {
			t.Errorf("%q: foo = %q at %d", data, v, line)
		}
		if v, line, _ := f.Get("DEFAULT", "bar"); v != "3" || line != 5 {
			t.Errorf("%q: bar = %q at %d", data, v, line)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ what, conf, want string }{
		{"continuation first", "  indented\n", "f:1: indented line with no option above it to continue"},
		{"continuation after section", "[DEFAULT]\n  indented\n", "f:2: indented line"},
		{"continuation after blank", "[DEFAULT]\nfoo = a\n\n  b\n", "f:4: indented line"},
		{"continuation after comment", "[DEFAULT]\nfoo = a\n# c\n  b\n", "f:4: indented line"},
		{"indented comment", "[DEFAULT]\n\n  # c\n", "f:3: indented comment"},
		{"no separator", "[DEFAULT]\nx = 1\njust words\n", `f:3: no '=' or ':' in "just words"`},
		{"empty key", "[DEFAULT]\n= value\n", `f:2: empty key in "= ..."`},
		{"blank key", "[DEFAULT]\n\f : 1\n", "f:2: empty key"},
		{"unclosed section", "[DEFAULT\n", `f:1: section header does not end with ']' in "[DEFAULT"`},
		{"comment after header", "[DEFAULT]\nfoo = 1\n[database] # db\n", "f:3: section header does not end with ']'"},
		{"empty section", "[]\n", `f:1: empty section name in "[]"`},
		{"no section", "# c\ntransport_url = rabbit://u:secret@h/\n", `f:2: option "transport_url" before any [section]`},
		{"lone CR ends a line", "[DEFAULT]\rfoo\r", "f:2: no '=' or ':'"},
		{"byte order mark", "\ufeff[DEFAULT]\nfoo = 1\n", "f:1: starts with a UTF-8 byte order mark"},
		{"not UTF-8", "[DEFAULT]\nfoo = 1\nbar = \xff\n", "f:3: not UTF-8 (byte 0xff)"},
		{"not UTF-8 after CRLF", "[DEFAULT]\r\nfoo = 1\r\rbar = \xff\n", "f:4: not UTF-8 (byte 0xff)"},
		{"surrogate", "[DEFAULT]\n\xed\xa0\x80 = 1\n", "f:2: not UTF-8"},
		{"vertical tab does not indent", "[DEFAULT]\nfoo = 1\n\v bar\n", "f:3: no '=' or ':'"},
		{"long line cut", "[DEFAULT]\n" + strings.Repeat("x", 200) + "\n", `f:2: no '=' or ':' in "` + strings.Repeat("x", 77) + `..."`},
	} {
		t.Run(tc.what, func(t *testing.T) {
			f, err := Parse("f", []byte(tc.conf))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q...", err, tc.want)
			}
			if f != nil {
				t.Errorf("a File with an error")
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Name != "f" || fmt.Sprintf("f:%d: %s", pe.Line, pe.Msg) != err.Error() {
				t.Errorf("not a *ParseError with its parts: %#v", err)
			}
		})
	}
}

// TestParseKeepsValuesOut: an error never quotes an option's value, which
// may be a password.
func TestParseKeepsValuesOut(t *testing.T) {
	for _, data := range []string{
		"password = hunter2\n[DEFAULT]\n",
		"password: hunter2\n[DEFAULT]\n",
		"[DEFAULT]\n= hunter2\n",
		"[DEFAULT]\n: hunter2\n",
		"[DEFAULT]\n\n  hunter2\n",
		"[DEFAULT]\n\n  # hunter2\n",
		"[database] connection = mysql://k:hunter2@db/k\n",
		"[database\nconnection = mysql://k:hunter2@db/k\n",
		"[DEFAULT]\nconnection = mysql://k:hunter2@db/k\n\xff\n",
		"\ufeffpassword = hunter2\n",
	} {
		_, err := Parse("keystone.conf", []byte(data))
		if err == nil {
			t.Errorf("%q: accepted", data)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the error quotes the value: %v", data, err)
		}
	}
}

func TestSubstituted(t *testing.T) {
	const conf = `[DEFAULT]
transport_url = rabbit://nova:pa$$ss@rabbit-0:5672,nova:pa\$ss@rabbit-1:5672/
log_dir = $state_path/log
lock_path = ${state_path}/lock
state_path = /var/lib/nova
unknown_ref = ${nosuch} and $ alone and \$HOME and $1 and ${bad-name} and 5$
cross = ${oslo_messaging_rabbit.ssl_ca_file}
dotted = $oslo_messaging_rabbit.ssl_ca_file.
host = a
quoted = "$host"
multi = $host
  $host

[Oslo_Messaging_Rabbit]
ssl_ca_file = '/etc/ssl/ca.pem'
host = b
own = $host
default_only = $state_path
chain = $own$own
`
	f := mustParse(t, "nova.conf", conf)
	for _, tc := range []struct{ section, key, want string }{
		{"DEFAULT", "transport_url", "rabbit://nova:pa$ss@rabbit-0:5672,nova:pa$ss@rabbit-1:5672/"},
		{"DEFAULT", "log_dir", "/var/lib/nova/log"},
		{"DEFAULT", "lock_path", "/var/lib/nova/lock"},
		{"DEFAULT", "unknown_ref", "${nosuch} and $ alone and $HOME and $1 and ${bad-name} and 5$"},
		{"DEFAULT", "cross", "/etc/ssl/ca.pem"},
		{"DEFAULT", "dotted", "$oslo_messaging_rabbit.ssl_ca_file."}, // the name takes the '.'
		{"DEFAULT", "quoted", "a"},
		{"DEFAULT", "multi", "a\na"},
		{"oslo_messaging_rabbit", "own", "b"},
		{"oslo_messaging_rabbit", "default_only", "/var/lib/nova"},
		{"oslo_messaging_rabbit", "chain", "bb"},
	} {
		got, _, ok := f.Substituted(tc.section, tc.key)
		if !ok || got != tc.want {
			t.Errorf("[%s] %s = %q, %v; want %q", tc.section, tc.key, got, ok, tc.want)
		}
	}
	if raw, _, _ := f.Get("DEFAULT", "log_dir"); raw != "$state_path/log" {
		t.Errorf("Get substitutes: %q", raw)
	}
	if _, line, ok := f.Substituted("DEFAULT", "state_path"); !ok || line != 5 {
		t.Errorf("state_path: line %d, %v", line, ok)
	}
	if _, _, ok := f.Substituted("DEFAULT", "nosuch"); ok {
		t.Error("nosuch is set")
	}
}

func TestSubstitutedCycle(t *testing.T) {
	f := mustParse(t, "f", "[DEFAULT]\na = x$b\nb = y$a\nc = $c\n")
	got, _, _ := f.Substituted("DEFAULT", "a")
	if !strings.HasPrefix(got, "xyxy") || len(got) > 100 {
		t.Errorf("a = %q: a cycle must stop, not loop", got)
	}
	if got, _, _ := f.Substituted("DEFAULT", "c"); got != "$c" {
		t.Errorf("c = %q", got)
	}
}

// TestSubstitutedBlowUp: placeholders that multiply at every level stop at
// the budget instead of taking the machine's memory or time.
func TestSubstitutedBlowUp(t *testing.T) {
	var b strings.Builder
	b.WriteString("[DEFAULT]\n")
	for _, k := range "abcdefghij" {
		next := string(k + 1)
		fmt.Fprintf(&b, "%c = %s\n", k, strings.Repeat("$"+next+"x", 40))
	}
	b.WriteString("k = end\n")
	f := mustParse(t, "f", b.String())
	got, _, _ := f.Substituted("DEFAULT", "a")
	if len(got) > 4*maxSubstitutionBudget {
		t.Errorf("a is %d bytes", len(got))
	}
	g := mustParse(t, "f", "[DEFAULT]\na = "+strings.Repeat("$b", 1000)+"\nb = "+strings.Repeat("$c", 1000)+"\nc = "+strings.Repeat("$d", 1000)+"\nd =\n")
	if got, _, _ := g.Substituted("DEFAULT", "a"); len(got) > 4*maxSubstitutionBudget {
		t.Errorf("a is %d bytes", len(got))
	}
}

// Merge is oslo.config's reading of several files: a later file's value
// wins, Where names the file that set an option, and substitution sees
// every file's options.
func TestMerge(t *testing.T) {
	a, err := Parse("nova.conf", []byte("[DEFAULT]\nmy_ip = 10.0.0.1\ntransport_url = rabbit://a\n[database]\nconnection = x\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("nova.conf.d/50-rabbit.conf", []byte("[DEFAULT]\ntransport_url = rabbit://u@$my_ip:5672/\n[Oslo_Messaging_Rabbit]\nssl = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := Merge(a, nil, b)
	if v, _, _ := m.Substituted("DEFAULT", "transport_url"); v != "rabbit://u@10.0.0.1:5672/" {
		t.Errorf("transport_url %q: want the later file's, substituted with the earlier file's my_ip", v)
	}
	if f, line, ok := m.Where("DEFAULT", "transport_url"); !ok || f != "nova.conf.d/50-rabbit.conf" || line != 2 {
		t.Errorf("Where transport_url: %s:%d %v", f, line, ok)
	}
	if f, line, ok := m.Where("database", "connection"); !ok || f != "nova.conf" || line != 5 {
		t.Errorf("Where connection: %s:%d %v", f, line, ok)
	}
	if v, _, ok := m.Get("oslo_messaging_rabbit", "ssl"); !ok || v != "true" {
		t.Errorf("a section only the later file has: %q %v", v, ok)
	}
	if m.Name != "nova.conf, nova.conf.d/50-rabbit.conf" {
		t.Errorf("Name %q", m.Name)
	}
	if f, _, _ := a.Where("DEFAULT", "my_ip"); f != "nova.conf" {
		t.Errorf("Where of a parsed file: %q", f)
	}
}
