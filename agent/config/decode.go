package config

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// decode reads agent.yaml into a Config. A YAML syntax error is the only
// error it returns: nothing can be read past it. Every other problem of
// structure (an unknown field, a value of the wrong type, a key given
// twice) goes to e with its field path, and the config is decoded without
// the fields in question, so that the validators still look at the rest;
// dropped are the paths of those fields (and of the ones a misspelt name
// stands for), whose absence explains other problems.
func decode(b []byte, e *problems) (_ *Config, dropped []string, _ error) {
	var c Config
	strictErr := yaml.UnmarshalStrict(b, &c)
	if strictErr == nil && !c.Dependencies.decodeErrs() {
		return &c, nil, nil
	}
	// Strict decoding stops at the first problem: find them all.
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		if strictErr == nil {
			strictErr = err
		}
		return nil, nil, errors.New(oneLine(cleanYAMLError(strictErr)))
	}
	before := e.count()
	if _, err := yaml.YAMLToJSONStrict(b); err != nil {
		e.add("%s", cleanYAMLError(err)) // a key given twice
	}
	doc, err := genericJSON(j)
	if err != nil {
		return nil, nil, errors.New(oneLine(cleanYAMLError(err)))
	}
	w := &walker{e: e}
	doc, ok := w.value(doc, reflect.TypeFor[Config](), "", "", true)
	if !ok {
		doc = nil
	}
	pruned, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, err
	}
	// The pruned document is decoded as YAML again (JSON is YAML), for
	// sigs.k8s.io/yaml's conversions (a number where a string is wanted).
	c = Config{}
	if err := yaml.UnmarshalStrict(pruned, &c); err != nil {
		// What the walk does not know about: as encoding/json says it.
		e.add("%s", cleanYAMLError(err))
		c = Config{}
		_ = yaml.Unmarshal(pruned, &c) // as much as it can read
	} else if e.count() == before && strictErr != nil {
		e.add("%s", cleanYAMLError(strictErr))
	}
	return &c, w.dropped, nil
}

// genericJSON decodes JSON into maps, slices and json.Numbers.
func genericJSON(j []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var doc any
	err := dec.Decode(&doc)
	return doc, err
}

// decodeErrs reports whether an entry of dependencies.wait kept an error of
// its own decoding (its UnmarshalJSON does not fail, so as to keep the path).
func (d *Dependencies) decodeErrs() bool {
	for _, w := range d.Wait {
		if w.decodeErr != nil {
			return true
		}
	}
	return false
}

// walker checks a generic JSON document against the Go type it is decoded
// into, as encoding/json behind sigs.k8s.io/yaml would decode it: json tags,
// a field name's case ignored when no field has it exactly, a number or a
// bool taken for a string (sigs.k8s.io/yaml converts them) except under a
// type that decodes itself. Each unknown field and each value of the wrong
// type is a problem; the document comes back without them.
type walker struct {
	e       *problems
	dropped []string
}

var (
	dependencyType   = reflect.TypeFor[Dependency]()
	stringOrListType = reflect.TypeFor[StringOrList]()
	durationType     = reflect.TypeFor[Duration]()
)

// value checks v, at path, against t; obj is the path of the object v is
// in (where a problem is reported). ok false: drop v.
func (w *walker) value(v any, t reflect.Type, path, obj string, coerce bool) (_ any, ok bool) {
	if v == nil {
		return nil, true // null leaves the field as it is
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case dependencyType: // the wait syntax, or an object
		switch v := v.(type) {
		case string:
			return v, true
		case map[string]any:
			return w.object(v, t, path, false), true
		}
		return w.mismatch(v, path, obj, "a string or an object")
	case stringOrListType: // a command: a string, or its words
		if _, ok := v.(string); ok {
			return v, true
		}
		if l, ok := v.([]any); ok && !slices.ContainsFunc(l, func(x any) bool { _, s := x.(string); return !s }) {
			return v, true
		}
		return w.mismatch(v, path, obj, "a string or a list of strings")
	case durationType: // a string field's text, parsed by its validator
		t = reflect.TypeFor[string]()
	}
	switch t.Kind() {
	case reflect.String:
		switch v.(type) {
		case string:
			return v, true
		case json.Number, bool:
			if coerce {
				return v, true
			}
		}
	case reflect.Bool:
		if _, ok := v.(bool); ok {
			return v, true
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n, ok := v.(json.Number); ok {
			if _, err := strconv.ParseInt(string(n), 10, t.Bits()); err == nil {
				return v, true
			}
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n, ok := v.(json.Number); ok {
			if _, err := strconv.ParseUint(string(n), 10, t.Bits()); err == nil {
				return v, true
			}
		}
	case reflect.Float32, reflect.Float64:
		if _, ok := v.(json.Number); ok {
			return v, true
		}
	case reflect.Slice:
		l, ok := v.([]any)
		if !ok {
			break
		}
		for i, x := range l {
			// A bad entry is left as null, a zero value, not dropped: the
			// validators name the others by their index. What they say of
			// the zero one is skipped (dropped holds its path).
			l[i], _ = w.value(x, t.Elem(), fmt.Sprintf("%s[%d]", path, i), obj, coerce)
		}
		return l, true
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			break
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if x, ok := w.value(m[k], t.Elem(), fmt.Sprintf("%s[%q]", path, k), path, coerce); ok {
				m[k] = x
			} else {
				delete(m, k)
			}
		}
		return m, true
	case reflect.Struct:
		if m, ok := v.(map[string]any); ok {
			return w.object(m, t, path, coerce), true
		}
	case reflect.Interface:
		return v, true
	default:
		return v, true // nothing in Config has another kind
	}
	return w.mismatch(v, path, obj, want(t))
}

// object checks the fields of a struct's object.
func (w *walker) object(m map[string]any, t reflect.Type, path string, coerce bool) map[string]any {
	fields := jsonFields(t)
	// In the order of the Go fields, as the validators go; an unknown one
	// where the one it is likely meant for is, else last.
	type key struct {
		k, meant string
		field    int
	}
	keys := make([]key, 0, len(m))
	for k := range m {
		i, meant := lookupField(fields, k), ""
		if i < 0 {
			meant = didYouMean(k, fields)
		}
		keys = append(keys, key{k, meant, i})
	}
	rank := func(k key) int {
		switch {
		case k.field >= 0:
			return k.field
		case k.meant != "":
			return lookupField(fields, k.meant)
		}
		return len(fields)
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a.k, b.k)) })
	for _, k := range keys {
		if k.field < 0 {
			hint := ""
			w.dropped = append(w.dropped, join(path, k.k))
			if k.meant != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", k.meant)
				w.dropped = append(w.dropped, join(path, k.meant))
			}
			w.e.add("%sunknown field %q%s", at(path), k.k, hint)
			delete(m, k.k)
			continue
		}
		if x, ok := w.value(m[k.k], fields[k.field].typ, join(path, k.k), path, coerce); ok {
			m[k.k] = x
		} else {
			delete(m, k.k)
		}
	}
	return m
}

func (w *walker) mismatch(v any, path, obj, want string) (any, bool) {
	w.dropped = append(w.dropped, path)
	if path == "" {
		w.e.add("cannot unmarshal %s into the document (want %s)", jsonKind(v), want)
	} else {
		w.e.add("%scannot unmarshal %s into field %s (want %s)", at(obj), jsonKind(v), path, want)
	}
	return nil, false
}

// at prefixes a problem with the path it is at, when there is one.
func at(path string) string {
	if path == "" {
		return ""
	}
	return path + ": "
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// jsonKind names a JSON value's type the way encoding/json's errors do.
func jsonKind(v any) string {
	switch v := v.(type) {
	case string:
		return "string"
	case bool:
		return "bool"
	case json.Number:
		return "number " + string(v)
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// want says what a Go type takes, for a problem's message.
func want(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Float32, reflect.Float64:
		return "number"
	}
	return t.Kind().String()
}

type jsonField struct {
	name string
	typ  reflect.Type
}

// jsonFields are the fields encoding/json decodes into, by their JSON name.
func jsonFields(t reflect.Type) []jsonField {
	var fs []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			fs = append(fs, jsonFields(ft)...) // an embedded struct's fields are its parent's
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fs = append(fs, jsonField{name, f.Type})
	}
	return fs
}

// lookupField finds a key's field as encoding/json does: its exact name,
// else one that differs only in case; -1 for none.
func lookupField(fs []jsonField, k string) int {
	if i := slices.IndexFunc(fs, func(f jsonField) bool { return f.name == k }); i >= 0 {
		return i
	}
	return slices.IndexFunc(fs, func(f jsonField) bool { return strings.EqualFold(f.name, k) })
}

// didYouMean suggests the known field closest to a misspelt one, when one
// is close enough to be what was meant.
func didYouMean(k string, fs []jsonField) string {
	best, bestD := "", 0
	limit := 1
	switch {
	case len(k) >= 12:
		limit = 3
	case len(k) >= 6:
		limit = 2
	}
	for _, f := range fs {
		if d := editDistance(strings.ToLower(k), strings.ToLower(f.name)); d <= limit && (best == "" || d < bestD) {
			best, bestD = f.name, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of adjacent bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b)) // not a misspelling; and bounded work
	}
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
