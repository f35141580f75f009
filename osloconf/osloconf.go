// Package osloconf reads an OpenStack service's configuration file (nova.conf,
// keystone.conf, api-paste.ini, ...) as oslo.config reads it: its INI dialect
// (oslo_config/iniparser.py's BaseParser with cfg.ConfigParser's rules) with
// continuation lines, quotes, DEFAULT's case-sensitive name and the last
// assignment of an option winning, and its `$name` substitution.
//
// Parse accepts what oslo.config accepts and refuses the rest, at the same
// line; a test runs oslo.config's own parser to hold it to that. Its errors
// end up in events and logs, so they never quote an option's value, which may
// be a password.
package osloconf

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// File is one parsed configuration file.
type File struct {
	// Name is the name Parse was given, used in errors and by Where.
	Name string

	sections map[string]*section // by normalised name
	order    []string            // normalised names, in the order first seen
}

// section is the options of every header with one normalised name.
type section struct {
	options map[string]option
	keys    []string // in the order first assigned
}

// option is the last assignment of a key; line is the line of its key,
// file the name of the file it is in when that is not File.Name (Merge).
type option struct {
	value string
	line  int
	file  string
}

// ParseError is a line that oslo.config refuses (or a file it cannot read
// as UTF-8 text). Its message never quotes an option's value.
type ParseError struct {
	Name string // the name given to Parse
	Line int    // from 1
	Msg  string
}

func (e *ParseError) Error() string { return fmt.Sprintf("%s:%d: %s", e.Name, e.Line, e.Msg) }

func parseErr(name string, line int, format string, args ...any) error {
	return &ParseError{Name: name, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// Parse parses data, the content of the file called name (used in errors
// only), as oslo.config does. The service opens the file as UTF-8 text with
// universal newlines ("\n", "\r\n" and "\r" end a line) and reads every line
// before parsing any, then, line by line:
//   - trailing whitespace is dropped (Python's str.rstrip, so every Unicode
//     space and U+001C..U+001F too); what is left empty is a blank line,
//     which ends the option above it;
//   - a line starting with a space or tab continues the value of the option
//     above it, and is an error when there is none: after a blank line, a
//     comment, a section header or at the start of the file; the line joins
//     the value after a "\n", without its leading whitespace;
//   - any other line ends the option above it, then:
//   - '[' starts a section header, which must end with ']' (so no comment
//     after it) and have something between the brackets, even a space;
//   - '#' or ';' starts a comment, at the start of the line only;
//   - otherwise the line is "key = value" or "key: value", split at whichever
//     of '=' and ':' comes first; a line with neither is an error, and so is
//     a key that is empty once stripped of whitespace; the value is stripped
//     of whitespace, then of one pair of matching quotes (double or single)
//     around it, and may be anything else, inline comments and all;
//   - an option before the first section header is an error (oslo.config
//     finds it only where the option ends: Parse puts it on the key's line);
//   - keys are case-sensitive, section names other than DEFAULT are not (see
//     Get), and the last assignment of a key wins.
//
// A file starting with a byte order mark is refused: oslo.config reads the
// mark as text, and no first line starting with it is a header, a comment or
// an option in a section. Errors are *ParseError; a line is quoted up to its
// first '=' or ':', never further.
func Parse(name string, data []byte) (*File, error) {
	if err := checkUTF8(name, data); err != nil {
		return nil, err
	}
	if bytes.HasPrefix(data, utf8BOM) {
		return nil, parseErr(name, 1, "starts with a UTF-8 byte order mark, which oslo.config reads as text: the first line is neither a section nor an option")
	}
	f := &File{Name: name, sections: map[string]*section{}}
	var (
		cur      *section // nil before the first header
		key      string   // the option being read, when inOption
		keyLine  int
		value    []string
		inOption bool // its value may continue on the next line
	)
	endOption := func() {
		if inOption {
			cur.set(key, strings.Join(value, "\n"), keyLine)
			key, value, inOption = "", nil, false
		}
	}
	lineno := 0
	for rest := data; len(rest) > 0; {
		var raw []byte
		raw, rest = NextLine(rest)
		lineno++
		line := strings.TrimRightFunc(string(raw), isSpace)
		switch {
		case line == "":
			endOption()
			continue
		case line[0] == ' ' || line[0] == '\t':
			if !inOption {
				if t := strings.TrimLeft(line, " \t"); t != "" && (t[0] == '#' || t[0] == ';') {
					return nil, parseErr(name, lineno, "indented comment with no option above it to continue ('#' and ';' start a comment only at the start of a line)")
				}
				return nil, parseErr(name, lineno, "indented line with no option above it to continue (a blank line, comment or section header ends an option)")
			}
			value = append(value, strings.TrimLeftFunc(line, isSpace))
			continue
		}
		endOption()
		switch line[0] {
		case '[':
			if !strings.HasSuffix(line, "]") {
				return nil, parseErr(name, lineno, "section header does not end with ']' in %s", quoteLine(line))
			}
			if line == "[]" {
				return nil, parseErr(name, lineno, "empty section name in \"[]\"")
			}
			cur = f.section(normalizeSection(line[1 : len(line)-1]))
		case '#', ';':
		default:
			sep := strings.IndexAny(line, "=:")
			if sep < 0 {
				return nil, parseErr(name, lineno, "no '=' or ':' in %s", quoteLine(line))
			}
			k := strings.TrimFunc(line[:sep], isSpace)
			if k == "" {
				return nil, parseErr(name, lineno, "empty key in %s", quoteLine(line))
			}
			if cur == nil {
				return nil, parseErr(name, lineno, "option %s before any [section]", quoteLine(k))
			}
			key, keyLine, value, inOption = k, lineno, []string{unquote(strings.TrimFunc(line[sep+1:], isSpace))}, true
		}
	}
	endOption()
	return f, nil
}

// section returns the section called name (normalised), adding it if new.
func (f *File) section(name string) *section {
	s := f.sections[name]
	if s == nil {
		s = &section{options: map[string]option{}}
		f.sections[name] = s
		f.order = append(f.order, name)
	}
	return s
}

func (s *section) set(key, value string, line int) {
	if _, ok := s.options[key]; !ok {
		s.keys = append(s.keys, key)
	}
	s.options[key] = option{value: value, line: line}
}

// Merge is what oslo.config reads from several files, in the order given
// (its --config-file list, then each --config-dir's *.conf sorted by name):
// an option the later files set again takes their value, and substitution
// sees the merged options. Where names the file each option comes from.
func Merge(files ...*File) *File {
	var names []string
	m := &File{sections: map[string]*section{}}
	for _, f := range files {
		if f == nil {
			continue
		}
		names = append(names, f.Name)
		for _, n := range f.order {
			dst := m.section(n)
			src := f.sections[n]
			for _, k := range src.keys {
				o := src.options[k]
				if o.file == "" {
					o.file = f.Name
				}
				if _, ok := dst.options[k]; !ok {
					dst.keys = append(dst.keys, k)
				}
				dst.options[k] = o
			}
		}
	}
	m.Name = strings.Join(names, ", ")
	return m
}

// Where returns the file and line that set key in section: for a merged
// File the file among those merged, else the File's own Name.
func (f *File) Where(section, key string) (file string, line int, ok bool) {
	o, ok := f.lookup(normalizeSection(section), key)
	if !ok {
		return "", 0, false
	}
	if o.file == "" {
		return f.Name, o.line, true
	}
	return o.file, o.line, true
}

// unquote removes one pair of matching quotes around a value, as
// oslo.config does: a lone quote is an empty value.
func unquote(v string) string {
	if v != "" && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		if len(v) == 1 {
			return ""
		}
		return v[1 : len(v)-1]
	}
	return v
}

// normalizeSection is oslo.config's rule for group names: DEFAULT is matched
// exactly, every other name case-insensitively (lowercased: Go's simple case
// mapping, which differs from Python's str.lower only for U+0130 and a final
// capital sigma).
func normalizeSection(name string) string {
	if name == "DEFAULT" {
		return name
	}
	return strings.ToLower(name)
}

// Get returns the value of key in section as written (the last assignment;
// no substitution, see Substituted) and the line of its key. section is
// matched as oslo.config matches group names: "DEFAULT" exactly (a section
// "[default]" is another group), any other name case-insensitively; key is
// case-sensitive. A nil File has no options.
func (f *File) Get(section, key string) (value string, line int, ok bool) {
	o, ok := f.lookup(normalizeSection(section), key)
	return o.value, o.line, ok
}

func (f *File) lookup(normalized, key string) (option, bool) {
	if f == nil {
		return option{}, false
	}
	s := f.sections[normalized]
	if s == nil {
		return option{}, false
	}
	o, ok := s.options[key]
	return o, ok
}

// Sections returns the file's section names, normalised (DEFAULT as is,
// others lowercased), in the order they first appear; a header without
// options counts.
func (f *File) Sections() []string {
	if f == nil {
		return nil
	}
	return append([]string(nil), f.order...)
}

// Keys returns the keys set in section (matched as Get matches it), in the
// order they are first assigned.
func (f *File) Keys(section string) []string {
	if f == nil {
		return nil
	}
	s := f.sections[normalizeSection(section)]
	if s == nil {
		return nil
	}
	return append([]string(nil), s.keys...)
}

// isSpace is Python's str.isspace for one character: Go's unicode.IsSpace
// and the four ASCII separators U+001C..U+001F.
func isSpace(r rune) bool {
	return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f
}

// quoteLine quotes a line for an error: up to its first '=' or ':', with
// "..." for the value after it, and cut at 80 characters.
func quoteLine(line string) string {
	if i := strings.IndexAny(line, "=:"); i >= 0 && strings.TrimSpace(line[i+1:]) != "" {
		line = line[:i+1] + " ..."
	}
	if utf8.RuneCountInString(line) > 80 {
		n := 0
		for i := range line {
			if n == 77 {
				line = line[:i] + "..."
				break
			}
			n++
		}
	}
	return strconv.Quote(line)
}

var utf8BOM = []byte("\xef\xbb\xbf")

// checkUTF8 refuses data that is not UTF-8, as Python reading it as UTF-8
// text does (a surrogate or an overlong form included).
func checkUTF8(name string, data []byte) error {
	if utf8.Valid(data) {
		return nil
	}
	line := 1
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n == 1 {
			return parseErr(name, line, "not UTF-8 (byte 0x%02x)", data[i])
		}
		// A line ends at "\n", "\r\n" or "\r": count a "\r\n" once.
		if r == '\n' && (i == 0 || data[i-1] != '\r') || r == '\r' {
			line++
		}
		i += n
	}
	return nil
}

// NextLine splits the first line off b: it ends at "\n", "\r\n" or "\r"
// (Python's universal newlines, as every OpenStack service reads its
// files), which is not part of line.
func NextLine(b []byte) (line, rest []byte) {
	i := bytes.IndexAny(b, "\r\n")
	if i < 0 {
		return b, nil
	}
	if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
		return b[:i], b[i+2:]
	}
	return b[:i], b[i+1:]
}
