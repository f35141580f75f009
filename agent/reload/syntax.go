package reload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/kolla-agent/kolla-agent/osloconf"
)

// CheckSyntax checks data (the content of the file called name, used for the
// file type and in errors) as the service will read it: INI as oslo.config
// reads it for .conf/.ini/.cfg names, JSON for .json, YAML for .yaml/.yml;
// nil for other names. The error names the file and the line:
// "keystone.conf:12: ...".
//
// Every .conf/.ini/.cfg name is held to oslo.config's rules, which other
// formats under those names break: Apache's, HAProxy's, keepalived's,
// RabbitMQ's sectionless rabbitmq.conf, a ceph.conf with indented keys. The
// reload pipeline therefore checks such a file only when its running
// version passes.
//
// Errors end up in events and logs, so an INI error never quotes an option's
// value, which may be a password: a line is quoted up to its first '=' or
// ':'. JSON and YAML errors are their parsers' words.
func CheckSyntax(name string, data []byte) error {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".conf", ".ini", ".cfg":
		return checkINI(name, data)
	case ".json":
		return checkJSON(name, data)
	case ".yaml", ".yml":
		return checkYAML(name, data)
	}
	return nil
}

// checkINI accepts what oslo.config's parser (oslo_config/iniparser.py,
// BaseParser.parse, with cfg.ConfigParser's rule for options outside a
// section) accepts, and nothing else: see osloconf.Parse, which the rpc
// check reads services' configs with too.
func checkINI(name string, data []byte) error {
	_, err := osloconf.Parse(name, data)
	return err
}

// checkJSON checks data as JSON (encoding/json's grammar, which is RFC 8259's).
// It is stricter than Python's json module in one way a config might meet:
// NaN and Infinity are refused.
func checkJSON(name string, data []byte) error {
	if err := syntaxUTF8(name, data); err != nil {
		return err
	}
	if bytes.HasPrefix(data, syntaxBOM) {
		return syntaxErr(name, 1, "starts with a UTF-8 byte order mark, which JSON does not allow")
	}
	var raw json.RawMessage // no numbers converted: only the syntax is checked
	err := json.Unmarshal(data, &raw)
	if err == nil {
		return nil
	}
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return syntaxErr(name, 1, "%v", err)
	}
	// Offset counts the bytes read, the offending one included.
	off := int(se.Offset) - 1
	line, col := syntaxPosition(data, off)
	return fmt.Errorf("%s:%d:%d: %s", name, line, col, se.Error())
}

// checkYAML checks data as YAML (sigs.k8s.io/yaml, which is go-yaml v2),
// as one document: PyYAML's safe_load, which OpenStack services read YAML
// with, refuses a second one, and go-yaml would not look at it.
func checkYAML(name string, data []byte) error {
	if err := syntaxUTF8(name, data); err != nil {
		return err
	}
	lineno := 0
	for rest := data; len(rest) > 0; {
		var raw []byte
		raw, rest = osloconf.NextLine(rest)
		lineno++
		for _, r := range string(raw) {
			if !yamlPrintable(r) {
				return syntaxErr(name, lineno, "control character %U is not allowed in YAML", r)
			}
		}
	}
	if _, err := yaml.YAMLToJSON(data); err != nil {
		line, msg := yamlErrorLine(data, err)
		return syntaxErr(name, line, "%s", msg)
	}
	return yamlOneDocument(name, data)
}

// yamlPrintable is YAML's set of characters a stream may hold.
func yamlPrintable(r rune) bool {
	switch {
	case r == '\t' || r == '\n' || r == '\r' || r == 0x85:
		return true
	case r >= 0x20 && r <= 0x7e, r >= 0xa0 && r <= 0xd7ff, r >= 0xe000 && r <= 0xfffd, r >= 0x10000 && r <= 0x10ffff:
		return true
	}
	return false
}

var (
	yamlLineRE   = regexp.MustCompile(`^(?s)line (\d+): (.*)$`)
	yamlAnchorRE = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)
)

// yamlErrorLine takes the line out of a go-yaml error ("yaml: line 3: ...").
// go-yaml v2 counts a scanner's line from 1 but a parser's from 0 (so it says
// line 2 for a problem on line 3), leaves the line out for a problem on the
// first, and has none for an unknown anchor, which is looked for here; any
// other error without a line is put on the first. The line stays within the
// file (go-yaml puts an unexpected end after the last line).
func yamlErrorLine(data []byte, err error) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = strings.TrimSpace(strings.TrimPrefix(msg, "unmarshal errors:\n"))
	last := max(1, syntaxLines(data))
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		if yamlParserProblems[m[2]] {
			n++
		}
		return min(max(n, 1), last), m[2]
	}
	if m := yamlAnchorRE.FindStringSubmatch(msg); m != nil {
		if i := bytes.Index(data, []byte("*"+m[1])); i >= 0 {
			line, _ := syntaxPosition(data, i)
			return line, msg
		}
	}
	return 1, msg
}

// yamlParserProblems are the problems go-yaml v2's parser (not its scanner)
// reports, with a line counted from 0.
var yamlParserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found duplicate %TAG directive":         true,
	"found undefined tag handle":             true,
}

// yamlOneDocument refuses a stream with a second document: a "---" line
// after the first document's content, or content after a "..." line.
func yamlOneDocument(name string, data []byte) error {
	marker := func(line []byte, m string) bool {
		return bytes.HasPrefix(line, []byte(m)) && (len(line) == 3 || line[3] == ' ' || line[3] == '\t')
	}
	started, ended := false, false
	lineno := 0
	for rest := bytes.TrimPrefix(data, syntaxBOM); len(rest) > 0; {
		var line []byte
		line, rest = osloconf.NextLine(rest)
		lineno++
		t := bytes.TrimLeft(line, " \t")
		content := len(t) > 0 && t[0] != '#'
		switch {
		case marker(line, "---"):
			if started || ended {
				return syntaxErr(name, lineno, "a second YAML document starts here; the service reads one")
			}
			started = true
		case marker(line, "..."):
			ended = started
		case ended && content:
			return syntaxErr(name, lineno, "content after the end of the YAML document (\"...\"); the service reads one document")
		case content && !(line[0] == '%' && !started):
			started = true
		}
	}
	return nil
}

// syntaxBOM is the UTF-8 byte order mark.
var syntaxBOM = []byte("\xef\xbb\xbf")

// syntaxErr is an error at name:line.
func syntaxErr(name string, line int, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", name, line, fmt.Sprintf(format, args...))
}

// syntaxUTF8 refuses data that is not UTF-8, as Python reading it as UTF-8
// text does (a surrogate or an overlong form included).
func syntaxUTF8(name string, data []byte) error {
	if utf8.Valid(data) {
		return nil
	}
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n == 1 {
			line, _ := syntaxPosition(data, i)
			return syntaxErr(name, line, "not UTF-8 (byte 0x%02x)", data[i])
		}
		i += n
	}
	return nil
}

// syntaxLines counts the lines of data as osloconf.NextLine splits them.
func syntaxLines(data []byte) int {
	n := 0
	for len(data) > 0 {
		_, data = osloconf.NextLine(data)
		n++
	}
	return n
}

// syntaxPosition is the line and column (in characters, both from 1) of the
// byte at off; an off past the end is the last byte.
func syntaxPosition(data []byte, off int) (line, col int) {
	off = min(off, len(data)-1)
	if off < 0 {
		return 1, 1
	}
	line, start := 1, 0
	for rest := data; ; line++ {
		l, r := osloconf.NextLine(rest)
		end := start + len(l) + (len(rest) - len(l) - len(r)) // the line and its break
		if off < end || len(r) == 0 {
			return line, utf8.RuneCount(data[start:min(off, start+len(l))]) + 1
		}
		start, rest = end, r
	}
}
