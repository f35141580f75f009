package osloconf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"strings"
	"testing"
)

// osloCases are fed to oslo.config's own parser and to Parse, which must
// agree on what is accepted, the line of what is not, and every value
// (TestParseMatchesOslo); they seed FuzzParse too.
var osloCases = []string{
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

	// Values: quotes, continuations, whitespace, which assignment wins and
	// which sections are one group.
	"[DEFAULT]\na = \"x\"\nb = 'y'\nc = \"x'\nd = \"\"\ne = ''\nf = \"\"\"\ng = a \"b\" c\nh = \"a\" b\ni = '\"'\n",
	"[DEFAULT]\na = \"first\n  second\"\n\tthird\nb = 'x\n  '\n",
	"[DEFAULT]\na = 1\nb = 2\na = 3\n[g]\na = 4\n[DEFAULT]\na = 5\n",
	"[DEFAULT]\na = 1\n[default]\na = 2\n[Default]\nb = 3\n[G]\nx = 1\n[g]\nx = 2\n[G]\ny = 3\n",
	"[DEFAULT]\nx = a\n  b\n\n[g]\ny = c\n  d\n# e\nz: f\n  g\n",
	"[DEFAULT]\nk ey = v a l\n  k = v\nk2 :: v\nk3 == v\nk4 =: v\nk5 := v\n",
	"[DEFAULT]\na = x \u3000\n\t\u00a0b\u2003\nc\u3000=\u3000d\n\u2003e = f\n",
	"[DEFAULT]\na = \x1c x \x1f\nb\x1d= \x1e\n",
	"[DEFAULT]\na = $b ${c} \\$ $$\n",
	"[Ñova]\na = 1\n[ÑOVA]\nb = 2\n",
	"[s]\na = 1\n[S]\n[t]\n",
	"[DEFAULT]\na =\n\n\nb =  \n",
}

// spaceCandidates: what Python's str.isspace says yes to, and neighbours
// that it says no to.
var spaceCandidates = []rune{
	'\t', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x1f, ' ', 0x85, 0xa0, 0x1680, 0x2000, 0x2005, 0x200a,
	0x2028, 0x2029, 0x202f, 0x205f, 0x3000,
	0x1b, 0x7f, 0xad, 0x180e, 0x200b, 0x2060, 0xfeff, 0x3164,
}

// osloAllCases is osloCases and, for each of spaceCandidates, a line of it
// alone, before a key, after a section header, and around a value.
func osloAllCases() []string {
	cases := append([]string(nil), osloCases...)
	for _, r := range spaceCandidates {
		s := string(r)
		cases = append(cases,
			"[s]\n"+s+"\nfoo=1\n",
			"[s]\n"+s+"=1\n",
			"[s]"+s+"\n",
			"[s]\nfoo=1\n"+s+"\n bar\n",
			"[s]\nfoo="+s+"1"+s+"\n\t"+s+"2"+s+"\n",
		)
	}
	return cases
}

// substitutionCases are read by a service that registers a string option
// for every key they set: Substituted must agree with what the service gets.
// Every name they refer to is set, and none refers to itself.
var substitutionCases = []string{
	"[DEFAULT]\npassword = pa$$word\nother = \\$HOME\nboth = $$\\$$$\n",
	"[DEFAULT]\nstate_path = /var/lib/nova\nlog_dir = $state_path/log\nlock = ${state_path}/lock\n",
	"[DEFAULT]\nhost = a\n[g]\nhost = b\nx = $host\ny = ${g.host}\nw = $g.host\n[h]\nz = $host\nv = ${g.host}y\n",
	"[DEFAULT]\nkeep = 5$ and $1 and ${bad-name} and $-x and ${}\n",
	"[DEFAULT]\nhost = a\nx = $$$host\ny = \"$host\"\nz = $host\n  $host\n",
	"[DEFAULT]\na = $b\nb = $c\nc = end\n[g]\nx = $y\ny = $a\n",
	"[DEFAULT]\nHOST = up\nhost = low\nx = $HOST\ny = ${host}\n",
	"[DEFAULT]\nhost = a\n[G]\nhost = b\n[g]\nx = $host ${g.host}\n",
	"[DEFAULT]\ntransport_url = rabbit://nova:pa$$ss@rabbit-0:5672,nova:pa\\$ss@rabbit-1:5672/\ncontrol_exchange = $exchange\nexchange = nova\n",
}

// osloScript reads each case (stdin: a JSON list of {"data": contents,
// "subst": bool}) as an OpenStack service does: cfg.ConfigParser (BaseParser
// and its rule that an option needs a section) parses the file as the
// service opens it, and gives every key's last value in each group (by
// normalised name). For "subst", a ConfigOpts that registers a string option
// for every key then reads the file, and gives each value after
// substitution (null where that fails).
const osloScript = `
import base64, json, os, sys, tempfile
from oslo_config import cfg, iniparser
out = []
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "case.conf")
    for c in json.load(sys.stdin):
        with open(path, "wb") as f:
            f.write(base64.b64decode(c["data"]))
        normalized = {}
        parser = cfg.ConfigParser(path, {})
        parser._add_normalized(normalized)
        try:
            parser.parse()
        except iniparser.ParseError as e:
            out.append({"ok": False, "line": e.lineno, "msg": e.msg})
            continue
        except UnicodeDecodeError as e:
            out.append({"ok": False, "line": 0, "msg": str(e)})
            continue
        r = {"ok": True, "values": {g: {k: v[-1] for k, v in opts.items()} for g, opts in normalized.items()}}
        if c["subst"]:
            conf = cfg.ConfigOpts()
            for g, opts in normalized.items():
                conf.register_opts([cfg.StrOpt(k) for k in opts], group=None if g == "DEFAULT" else g)
            conf(args=[], project="case", default_config_files=[path], default_config_dirs=[])
            sub = {}
            for g, opts in normalized.items():
                sub[g] = {}
                for k in opts:
                    try:
                        sub[g][k] = conf[k] if g == "DEFAULT" else conf[g][k]
                    except Exception:
                        sub[g][k] = None
            r["substituted"] = sub
        out.append(r)
json.dump(out, sys.stdout)
`

// osloVerdict is what oslo.config made of one case.
type osloVerdict struct {
	OK          bool                          `json:"ok"`
	Line        int                           `json:"line"`
	Msg         string                        `json:"msg"`
	Values      map[string]map[string]string  `json:"values"`
	Substituted map[string]map[string]*string `json:"substituted"`
}

// runOslo runs oslo.config on the cases, or skips t when /usr/bin/python3
// cannot import it. Debian's python3-oslo.config provides it; -X utf8 opens
// files as UTF-8, as in a container whose locale is C.UTF-8, and the
// environment is emptied so that no OS_* variable sets an option.
func runOslo(t *testing.T, cases []string, subst bool) []osloVerdict {
	t.Helper()
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-I", "-c", "import oslo_config.cfg").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import oslo_config (%v: %s); CI installs Debian's python3-oslo.config", python, err, bytes.TrimSpace(out))
	}
	type input struct {
		Data  []byte `json:"data"` // JSON: base64
		Subst bool   `json:"subst"`
	}
	in := make([]input, len(cases))
	for i, c := range cases {
		in[i] = input{[]byte(c), subst}
	}
	stdin, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-I", "-X", "utf8", "-c", osloScript)
	cmd.Env = []string{}
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("oslo.config: %v: %s", err, stderr.String())
	}
	var verdicts []osloVerdict
	if err := json.Unmarshal(stdout, &verdicts); err != nil || len(verdicts) != len(cases) {
		t.Fatalf("oslo.config said %q (%v), for %d cases", stdout, err, len(cases))
	}
	return verdicts
}

// values is every key's value in f, by section, as Get gives it.
func values(f *File) map[string]map[string]string {
	all := map[string]map[string]string{}
	for _, s := range f.Sections() {
		all[s] = map[string]string{}
		for _, k := range f.Keys(s) {
			v, _, _ := f.Get(s, k)
			all[s][k] = v
		}
	}
	return all
}

// TestParseMatchesOslo runs oslo.config's parser on every case: Parse must
// accept what it accepts, with the same sections, keys and values, and refuse
// the rest at the same line (but for an option outside a section, which
// oslo.config finds only when the option ends, and for text that is not
// UTF-8, where it gives no line).
func TestParseMatchesOslo(t *testing.T) {
	cases := osloAllCases()
	verdicts := runOslo(t, cases, false)
	for i, c := range cases {
		v := verdicts[i]
		f, err := Parse("case.conf", []byte(c))
		switch {
		case v.OK && err != nil:
			t.Errorf("%q: oslo.config accepts it, Parse says %v", c, err)
		case !v.OK && err == nil:
			t.Errorf("%q: oslo.config refuses it (line %d: %s), Parse accepts it", c, v.Line, v.Msg)
		case !v.OK && v.Line > 0 && !strings.Contains(v.Msg, "Section must be started") &&
			!strings.HasPrefix(err.Error(), fmt.Sprintf("case.conf:%d: ", v.Line)):
			t.Errorf("%q: oslo.config refuses line %d (%s), Parse says %v", c, v.Line, v.Msg, err)
		case v.OK:
			if got := values(f); !maps.EqualFunc(got, v.Values, maps.Equal) {
				t.Errorf("%q:\n Parse:       %q\n oslo.config: %q", c, got, v.Values)
			}
		}
	}
	t.Logf("%d cases, oslo.config and Parse agree", len(cases))
}

// TestSubstitutedMatchesOslo: Substituted gives what a service gets for
// an option it registers.
func TestSubstitutedMatchesOslo(t *testing.T) {
	verdicts := runOslo(t, substitutionCases, true)
	n := 0
	for i, c := range substitutionCases {
		v := verdicts[i]
		if !v.OK {
			t.Errorf("%q: oslo.config refuses it (line %d: %s)", c, v.Line, v.Msg)
			continue
		}
		f := mustParse(t, "case.conf", c)
		for g, opts := range v.Substituted {
			for k, want := range opts {
				if want == nil {
					t.Errorf("%q: oslo.config cannot read [%s] %s", c, g, k)
					continue
				}
				n++
				if got, _, ok := f.Substituted(g, k); !ok || got != *want {
					t.Errorf("%q: [%s] %s = %q, %v; oslo.config: %q", c, g, k, got, ok, *want)
				}
			}
		}
	}
	t.Logf("%d options in %d cases, oslo.config and Substituted agree", n, len(substitutionCases))
}
