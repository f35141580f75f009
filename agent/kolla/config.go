package kolla

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"regexp/syntax"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/kolla-agent/kolla-agent/agent/render"
)

// Paths and values of kolla's contract.
const (
	// ConfigDir is where kolla-kubernetes mounts a service's ConfigMap,
	// config.json included.
	ConfigDir = "/var/lib/kolla/config_files"
	// DefaultStateDir keeps the image's default files that a config
	// replaced, the state file naming them, and the COPY_ONCE marker.
	DefaultStateDir = "/var/lib/kolla-agent"
	// StrategyCopyAlways and StrategyCopyOnce are KOLLA_CONFIG_STRATEGY's
	// two values.
	StrategyCopyAlways = "COPY_ALWAYS"
	StrategyCopyOnce   = "COPY_ONCE"
)

// Config is kolla's config.json: the service's command and what to copy
// where before starting it. A config that loads is well formed; whether its
// owners, sources and destinations exist is NewPlan's business.
type Config struct {
	// Command is the service's command line, for the caller to split the way
	// a shell splits words.
	Command     string       `json:"command"`
	ConfigFiles []ConfigFile `json:"config_files,omitempty"`
	Directories []PathEntry  `json:"directories,omitempty"`
	Files       []PathEntry  `json:"files,omitempty"`
	Permissions []Permission `json:"permissions,omitempty"`
	name        string       // the file, for errors
}

// ConfigFile is one entry of config_files.
type ConfigFile struct {
	// Source is a glob (Python's rules: "*" does not match a leading dot).
	Source string `json:"source"`
	// Dest is the destination; a trailing "/" copies each source into
	// that directory under its own name.
	Dest string `json:"dest"`
	// Owner is "user", "user:" or "user:group"; the first two mean
	// user:user. Required unless PreserveProperties.
	Owner string `json:"owner,omitempty"`
	// Perm is an octal mode ("0640", "640", "2775", "0o640"). Required
	// unless PreserveProperties. Directories copied get the execute bit
	// wherever the mode has read.
	Perm string `json:"perm,omitempty"`
	// Optional: a source that matches nothing is skipped, not an error.
	Optional bool `json:"optional,omitempty"`
	// Merge copies a directory into an existing one instead of replacing it.
	Merge bool `json:"merge,omitempty"`
	// PreserveProperties keeps each source's mode and owner.
	PreserveProperties bool `json:"preserve_properties,omitempty"`

	mode fs.FileMode
}

// PathEntry is one entry of directories or files: created when missing,
// given its owner and mode in every case. kolla has no such sections (its
// images create these paths in extend_start scripts); they are the agent's.
type PathEntry struct {
	Path  string `json:"path"`
	Owner string `json:"owner"`
	Perm  string `json:"perm"`

	mode fs.FileMode
}

// Permission is one entry of permissions: owner (and mode, when set)
// for every path the glob matches, and with Recurse for everything below,
// except what an Exclude regex matches.
type Permission struct {
	Path    string `json:"path"`
	Owner   string `json:"owner"`
	Perm    string `json:"perm,omitempty"`
	Recurse bool   `json:"recurse,omitempty"`
	// Exclude lists regexes (RE2 syntax), searched in each path below a
	// match: a path that any of them matches is left alone.
	Exclude []string `json:"exclude,omitempty"`

	mode     fs.FileMode
	excludes []*regexp.Regexp
}

// Find returns the kolla config in ConfigDir under root:
// config.json, or config.yaml (or .yml). The error wraps fs.ErrNotExist when
// there is none, so the caller can fall back to another mode.
func Find(root string) (string, error) {
	return FindIn(filepath.Join(root, ConfigDir))
}

// FindIn is Find in dir, the kolla config dir as this host sees
// it.
func FindIn(dir string) (string, error) {
	var found []string
	for _, n := range []string{"config.json", "config.yaml", "config.yml"} {
		p := filepath.Join(dir, n)
		if _, err := os.Stat(p); err == nil {
			found = append(found, p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no config.json or config.yaml in %s: %w", ConfigDir, fs.ErrNotExist)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("%s: more than one kolla config (%s): keep one", ConfigDir, strings.Join(kollaBaseNames(found), ", "))
}

func kollaBaseNames(ps []string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = filepath.Base(p)
	}
	return out
}

// Load reads and validates a kolla config: JSON, or YAML when the name
// ends in .yaml or .yml.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, b)
}

// Parse decodes and validates a kolla config; name is used in errors and
// chooses YAML when it ends in .yaml or .yml. Unknown and repeated fields are
// errors, field names are matched exactly (kolla's Python does), and every
// problem found is reported, each naming the entry and the field
// (config_files[3].perm).
func Parse(name string, b []byte) (*Config, error) {
	if ext := strings.ToLower(filepath.Ext(name)); ext == ".yaml" || ext == ".yml" {
		j, err := yaml.YAMLToJSONStrict(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "error converting YAML to JSON: "))
		}
		b = j
	}
	top, err := kollaReadTop(b)
	if err != nil {
		var pe *kollaPosError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%s:%w", name, err) // name:line:col: ...
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c := &Config{name: name}
	e := &kollaErrs{}
	var files, dirs, plain, perms []json.RawMessage
	kollaDecodeObject(e, "", top, map[string]any{
		"command":      &c.Command,
		"config_files": &files,
		"directories":  &dirs,
		"files":        &plain,
		"permissions":  &perms,
	})
	for i, raw := range files {
		var f ConfigFile
		kollaDecodeObject(e, fmt.Sprintf("config_files[%d]", i), raw, map[string]any{
			"source":              &f.Source,
			"dest":                &f.Dest,
			"owner":               &f.Owner,
			"perm":                &f.Perm,
			"optional":            &f.Optional,
			"merge":               &f.Merge,
			"preserve_properties": &f.PreserveProperties,
		})
		c.ConfigFiles = append(c.ConfigFiles, f)
	}
	pathEntries := func(section string, raws []json.RawMessage) []PathEntry {
		var out []PathEntry
		for i, raw := range raws {
			var p PathEntry
			kollaDecodeObject(e, fmt.Sprintf("%s[%d]", section, i), raw, map[string]any{
				"path": &p.Path, "owner": &p.Owner, "perm": &p.Perm,
			})
			out = append(out, p)
		}
		return out
	}
	c.Directories = pathEntries("directories", dirs)
	c.Files = pathEntries("files", plain)
	for i, raw := range perms {
		var p Permission
		kollaDecodeObject(e, fmt.Sprintf("permissions[%d]", i), raw, map[string]any{
			"path":    &p.Path,
			"owner":   &p.Owner,
			"perm":    &p.Perm,
			"recurse": &p.Recurse,
			"exclude": &p.Exclude,
		})
		c.Permissions = append(c.Permissions, p)
	}
	c.validate(e)
	if err := e.err(name); err != nil {
		return nil, err
	}
	return c, nil
}

// Name is the file the config came from.
func (c *Config) Name() string { return c.name }

// validate checks the fields (a missing field and an empty one are the
// same) and derives modes and regexes from them. NewPlan runs it again on
// its own copy, so a config built or changed in code is held to the same
// rules.
func (c *Config) validate(e *kollaErrs) {
	if strings.TrimSpace(c.Command) == "" {
		e.add("command: missing or empty")
	}
	for i := range c.ConfigFiles {
		f := &c.ConfigFiles[i]
		at := fmt.Sprintf("config_files[%d]", i)
		kollaCheckPath(e, at+".source", f.Source, true)
		kollaCheckPath(e, at+".dest", f.Dest, false)
		switch {
		case f.PreserveProperties:
			// kolla ignores owner and perm here; so does the agent, but
			// it still rejects a malformed one.
			if f.Owner != "" {
				kollaCheckOwner(e, at+".owner", f.Owner)
			}
			if f.Perm != "" {
				f.mode = kollaCheckPerm(e, at+".perm", f.Perm)
			}
			continue
		case f.Owner == "":
			e.add("%s.owner: missing (or set preserve_properties)", at)
		default:
			kollaCheckOwner(e, at+".owner", f.Owner)
		}
		if f.Perm == "" {
			e.add("%s.perm: missing (or set preserve_properties)", at)
		} else {
			f.mode = kollaCheckPerm(e, at+".perm", f.Perm)
		}
	}
	paths := func(section string, list []PathEntry) {
		for i := range list {
			p := &list[i]
			at := fmt.Sprintf("%s[%d]", section, i)
			kollaCheckPath(e, at+".path", p.Path, false)
			kollaCheckOwner(e, at+".owner", p.Owner)
			if p.Perm == "" {
				e.add("%s.perm: missing", at)
			} else {
				p.mode = kollaCheckPerm(e, at+".perm", p.Perm)
			}
		}
	}
	paths("directories", c.Directories)
	paths("files", c.Files)
	for i := range c.Permissions {
		p := &c.Permissions[i]
		at := fmt.Sprintf("permissions[%d]", i)
		kollaCheckPath(e, at+".path", p.Path, true)
		kollaCheckOwner(e, at+".owner", p.Owner)
		if p.Perm != "" {
			p.mode = kollaCheckPerm(e, at+".perm", p.Perm)
		}
		if len(p.Exclude) > 0 && !p.Recurse {
			e.add("%s.exclude: only applies with recurse: true", at)
		}
		p.excludes = nil
		for j, x := range p.Exclude {
			re, err := regexp.Compile(x)
			if err != nil {
				e.add("%s.exclude[%d]: %q is not a regular expression: %v", at, j, x, kollaRegexErr(err))
				continue
			}
			p.excludes = append(p.excludes, re)
		}
	}
}

// clone is a copy whose entries validate can fill in without touching the
// caller's.
func (c *Config) clone() *Config {
	d := *c
	d.ConfigFiles = append([]ConfigFile(nil), c.ConfigFiles...)
	d.Directories = append([]PathEntry(nil), c.Directories...)
	d.Files = append([]PathEntry(nil), c.Files...)
	d.Permissions = append([]Permission(nil), c.Permissions...)
	return &d
}

// kollaRegexErr drops what regexp repeats from its input.
func kollaRegexErr(err error) string {
	var se *syntax.Error
	if errors.As(err, &se) {
		return string(se.Code)
	}
	return err.Error()
}

// kollaCheckPath checks an absolute path, a glob when glob is set.
func kollaCheckPath(e *kollaErrs, at, v string, glob bool) {
	switch {
	case v == "":
		e.add("%s: missing or empty", at)
	case !strings.HasPrefix(v, "/"):
		e.add("%s: %q is not an absolute path", at, v)
	case strings.IndexByte(v, 0) >= 0:
		e.add("%s: %q contains a NUL byte", at, v)
	case glob:
		for _, seg := range strings.Split(v, "/") {
			if _, err := path.Match(kollaGlobSegment(seg), ""); err != nil {
				e.add("%s: %q is not a valid glob", at, v)
				break
			}
		}
	}
}

func kollaCheckOwner(e *kollaErrs, at, s string) {
	if _, _, err := render.ParseOwner(s); err != nil {
		e.add("%s: %v", at, err)
	}
}

func kollaCheckPerm(e *kollaErrs, at, s string) fs.FileMode {
	m, err := render.ParsePerm(s)
	if err != nil {
		e.add("%s: %v", at, err)
	}
	return m
}

// kollaReadTop reads the one JSON object of the file; a syntax error
// carries its line and column.
func kollaReadTop(b []byte) (json.RawMessage, error) {
	at := func(off int64, format string, args ...any) error {
		l, c := kollaLineCol(b, off)
		return &kollaPosError{l, c, fmt.Sprintf(format, args...)}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var top json.RawMessage
	if err := dec.Decode(&top); err != nil {
		var se *json.SyntaxError
		switch {
		case errors.Is(err, io.EOF):
			return nil, errors.New("empty file (want a JSON object)")
		case errors.As(err, &se):
			return nil, at(se.Offset, "%s", strings.TrimPrefix(se.Error(), "json: "))
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, at(int64(len(b)), "unexpected end of file")
		}
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, at(dec.InputOffset(), "unexpected data after the top-level object")
	}
	if top[0] != '{' {
		return nil, fmt.Errorf("want a JSON object, got %s", kollaJSONKind(top))
	}
	return top, nil
}

// kollaPosError is a syntax error at a line and column of the file.
type kollaPosError struct {
	line, col int
	msg       string
}

func (e *kollaPosError) Error() string { return fmt.Sprintf("%d:%d: %s", e.line, e.col, e.msg) }

func kollaLineCol(b []byte, off int64) (line, col int) {
	if off > int64(len(b)) {
		off = int64(len(b))
	}
	line, col = 1, 1
	for _, c := range b[:off] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// kollaDecodeObject reads a JSON object key by key into fields (pointers):
// encoding/json would match keys case-insensitively, take the last of a
// repeated key, and name no array index in its errors. A null value counts
// as absent.
func kollaDecodeObject(e *kollaErrs, at string, raw json.RawMessage, fields map[string]any) {
	prefix := at
	if prefix != "" {
		prefix += "."
	}
	if len(raw) == 0 || raw[0] != '{' {
		if at == "" {
			at = "(top level)"
		}
		e.add("%s: want an object, got %s", at, kollaJSONKind(raw))
		return
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.Token() // '{': raw is a valid JSON value
	seen := map[string]bool{}
	for dec.More() {
		t, _ := dec.Token()
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			e.add("%s%s: %v", prefix, key, err)
			return
		}
		dst, ok := fields[key]
		switch {
		case !ok:
			e.add("%sunknown field %q (want one of %s)", kollaPrefix(at), key, kollaFieldNames(fields))
			continue
		case seen[key]:
			e.add("%s%s: given twice", prefix, key)
			continue
		}
		seen[key] = true
		if bytes.Equal(v, []byte("null")) {
			continue
		}
		if err := json.Unmarshal(v, dst); err != nil {
			e.add("%s%s: want %s, got %s", prefix, key, kollaWantKind(dst), kollaDescribeJSON(v, err))
		}
	}
}

func kollaPrefix(at string) string {
	if at == "" {
		return ""
	}
	return at + ": "
}

func kollaFieldNames(fields map[string]any) string {
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func kollaWantKind(dst any) string {
	switch dst.(type) {
	case *string:
		return "a string"
	case *bool:
		return "true or false"
	case *[]string:
		return "a list of strings"
	case *[]json.RawMessage:
		return "a list"
	}
	return "another type"
}

func kollaDescribeJSON(v json.RawMessage, err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		// inside a list: name the element
		return fmt.Sprintf("%s in %s", te.Value, te.Field)
	}
	k := kollaJSONKind(v)
	if k == "a string" || k == "a number" {
		s := string(v)
		if len(s) > 40 {
			s = s[:40] + "..."
		}
		return k + " " + s
	}
	return k
}

func kollaJSONKind(v json.RawMessage) string {
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// kollaErrs gathers every problem of one config, so an operator fixes them in
// one go; past kollaMaxListed the rest are only counted.
type kollaErrs struct {
	list []string
	more int
}

const kollaMaxListed = 20

func (e *kollaErrs) add(format string, args ...any) {
	if len(e.list) == kollaMaxListed {
		e.more++
		return
	}
	e.list = append(e.list, fmt.Sprintf(format, args...))
}

func (e *kollaErrs) err(name string) error {
	if len(e.list) == 0 {
		return nil
	}
	errs := make([]error, 0, len(e.list)+1)
	for _, s := range e.list {
		errs = append(errs, fmt.Errorf("%s: %s", name, s))
	}
	if e.more > 0 {
		errs = append(errs, fmt.Errorf("%s: and %d more", name, e.more))
	}
	return errors.Join(errs...)
}

// kollaGlobSegment translates one path segment of a Python glob to path.Match's
// syntax: "[!" negates, a backslash is an ordinary character, "^" at the
// start of a class is literal, and a "[" with no closing "]" is literal.
func kollaGlobSegment(seg string) string {
	var b strings.Builder
	n := len(seg)
	for i := 0; i < n; i++ {
		c := seg[i]
		switch c {
		case '\\':
			b.WriteString(`\\`)
		case '[':
			j := i + 1
			if j < n && seg[j] == '!' {
				j++
			}
			if j < n && seg[j] == ']' {
				j++
			}
			for j < n && seg[j] != ']' {
				j++
			}
			if j >= n {
				b.WriteString(`\[`)
				continue
			}
			class := []rune(seg[i+1 : j])
			b.WriteByte('[')
			if class[0] == '!' {
				b.WriteByte('^')
				class = class[1:]
			}
			// Every character escaped: path.Match rejects a "-" at either
			// end of a class, Python takes it literally.
			for k := 0; k < len(class); k++ {
				b.WriteByte('\\')
				b.WriteRune(class[k])
				if k+2 < len(class) && class[k+1] == '-' {
					b.WriteString("-\\")
					b.WriteRune(class[k+2])
					k += 2
				}
			}
			b.WriteByte(']')
			i = j
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// kollaHasMagic is Python glob's test for a segment that needs listing.
func kollaHasMagic(seg string) bool { return strings.ContainsAny(seg, "*?[") }
