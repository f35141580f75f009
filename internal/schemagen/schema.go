// Package schemagen writes the JSON Schema (draft 2020-12) of a
// configuration from its Go types: JSON names from the json tags, required
// fields from the absence of omitempty, descriptions from the fields' doc
// comments (Docs reads them from the source), and what reflection cannot
// see (enums, durations in strings, types that decode themselves) from
// options. Markdown turns a schema into a reference table for a README.
//
// It is a build-time tool, used by tests and go:generate: a program that
// only loads its configuration embeds the generated schema instead.
package schemagen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Draft is the JSON Schema dialect Generate writes.
const Draft = "https://json-schema.org/draft/2020-12/schema"

// DurationPattern matches what time.ParseDuration reads and is not
// negative: "90s", "1h30m", "1.5h", "0".
const DurationPattern = `^\+?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`

// Schema is one JSON Schema, its keywords written in this order.
type Schema struct {
	Schema               string      `json:"$schema,omitempty"`
	ID                   string      `json:"$id,omitempty"`
	Title                string      `json:"title,omitempty"`
	Description          string      `json:"description,omitempty"`
	Type                 Types       `json:"type,omitempty"`
	Enum                 []string    `json:"enum,omitempty"`
	Const                any         `json:"const,omitempty"`
	Pattern              string      `json:"pattern,omitempty"`
	Minimum              *int64      `json:"minimum,omitempty"`
	Maximum              *int64      `json:"maximum,omitempty"`
	MinItems             *int        `json:"minItems,omitempty"`
	Default              any         `json:"default,omitempty"`
	Items                *Schema     `json:"items,omitempty"`
	OneOf                []*Schema   `json:"oneOf,omitempty"`
	Properties           *Properties `json:"properties,omitempty"`
	Required             []string    `json:"required,omitempty"`
	AdditionalProperties *Schema     `json:"additionalProperties,omitempty"`

	// never is the schema false, which nothing validates
	// (additionalProperties: false).
	never bool
}

// False is the schema nothing validates.
func False() *Schema { return &Schema{never: true} }

// IsFalse reports whether s is the schema false.
func (s *Schema) IsFalse() bool { return s != nil && s.never }

type plainSchema Schema

// MarshalJSON writes false for False(), else the keywords in order.
func (s *Schema) MarshalJSON() ([]byte, error) {
	if s.never {
		return []byte("false"), nil
	}
	return json.Marshal((*plainSchema)(s))
}

// UnmarshalJSON reads a schema, or true or false.
func (s *Schema) UnmarshalJSON(b []byte) error {
	switch string(bytes.TrimSpace(b)) {
	case "false":
		*s = Schema{never: true}
		return nil
	case "true":
		*s = Schema{}
		return nil
	}
	return json.Unmarshal(b, (*plainSchema)(s))
}

// Types is the type keyword: one name is written as a string.
type Types []string

// MarshalJSON writes one type as a string, several as a list.
func (t Types) MarshalJSON() ([]byte, error) {
	if len(t) == 1 {
		return json.Marshal(t[0])
	}
	return json.Marshal([]string(t))
}

// UnmarshalJSON reads either form.
func (t *Types) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*t = Types{one}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(t))
}

// Property is one entry of properties.
type Property struct {
	Name   string
	Schema *Schema
}

// Properties keeps the order of the Go fields.
type Properties []Property

// MarshalJSON writes an object, in order.
func (p Properties) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, pr := range p {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(pr.Name)
		v, err := json.Marshal(pr.Schema)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads an object, keeping its order.
func (p *Properties) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return fmt.Errorf("properties: want an object")
	}
	*p = nil
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := t.(string)
		var s Schema
		if err := dec.Decode(&s); err != nil {
			return fmt.Errorf("properties.%s: %w", name, err)
		}
		*p = append(*p, Property{name, &s})
	}
	return nil
}

// Field says what reflection and the doc comment cannot about one field,
// named "TypeName.FieldName" (for a field of an anonymous struct,
// "TypeName.FieldName.InnerField").
type Field struct {
	// Required overrides the rule (no omitempty: required), for a field
	// the code defaults or lets go empty.
	Required *bool
	// Enum is the set of values of a string, or of a list's strings.
	Enum []string
	// Pattern is a regular expression a string, or a list's strings,
	// must match.
	Pattern string
	// Duration: a string in Go's duration syntax (DurationPattern).
	Duration bool
	// Default is shown as the default instead of what the comment says;
	// NoDefault: the comment's is not one to show (it depends).
	Default   any
	NoDefault bool
	// MinItems of a list.
	MinItems int
	// Schema replaces the field's schema (its description is kept).
	Schema *Schema
}

// Option configures Generate.
type Option func(*generator)

// WithField sets what is known of one field ("TypeName.FieldName").
func WithField(name string, f Field) Option {
	return func(g *generator) { g.fields[name] = f }
}

// WithType gives the schema of a type that decodes itself (a custom
// UnmarshalJSON): hook gets the schema reflection makes of it (a struct's
// object) and returns the type's.
func WithType(t reflect.Type, hook func(reflected *Schema) *Schema) Option {
	return func(g *generator) { g.types[t] = hook }
}

// WithID sets the schema's $id and title.
func WithID(id, title string) Option {
	return func(g *generator) { g.id, g.title = id, title }
}

type generator struct {
	docs   map[string]string
	fields map[string]Field
	used   map[string]bool
	types  map[reflect.Type]func(*Schema) *Schema
	id     string
	title  string
}

// Generate writes the JSON Schema of root, a struct type, indented and
// ending with a newline. docs maps "TypeName.FieldName" to the field's doc
// comment (Docs); an option naming a field that does not exist is an error.
func Generate(root reflect.Type, docs map[string]string, opts ...Option) ([]byte, error) {
	g := &generator{docs: docs, fields: map[string]Field{}, used: map[string]bool{}, types: map[reflect.Type]func(*Schema) *Schema{}}
	for _, o := range opts {
		o(g)
	}
	for root.Kind() == reflect.Pointer {
		root = root.Elem()
	}
	if root.Kind() != reflect.Struct {
		return nil, fmt.Errorf("schemagen: %v is not a struct", root)
	}
	s, err := g.typeSchema(root, root.Name())
	if err != nil {
		return nil, err
	}
	s.Schema, s.ID, s.Title = Draft, g.id, g.title
	if s.Description == "" {
		s.Description = docs[root.Name()]
	}
	for _, name := range slices.Sorted(maps.Keys(g.fields)) {
		if !g.used[name] {
			return nil, fmt.Errorf("schemagen: an option names %s, which is not a field of %v", name, root)
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// typeSchema is the schema of a Go type; key names it for the docs and the
// options (a named type's name, else the field it is the type of).
func (g *generator) typeSchema(t reflect.Type, key string) (*Schema, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if hook, ok := g.types[t]; ok {
		var reflected *Schema
		if t.Kind() == reflect.Struct {
			var err error
			if reflected, err = g.object(t, key); err != nil {
				return nil, err
			}
		}
		return hook(reflected), nil
	}
	switch t.Kind() {
	case reflect.String:
		return &Schema{Type: Types{"string"}}, nil
	case reflect.Bool:
		return &Schema{Type: Types{"boolean"}}, nil
	case reflect.Int, reflect.Int64:
		return &Schema{Type: Types{"integer"}}, nil
	case reflect.Int8, reflect.Int16, reflect.Int32:
		lo, hi := int64(-1)<<(t.Bits()-1), int64(1)<<(t.Bits()-1)-1
		return &Schema{Type: Types{"integer"}, Minimum: &lo, Maximum: &hi}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		lo := int64(0)
		s := &Schema{Type: Types{"integer"}, Minimum: &lo}
		if t.Bits() < 64 {
			hi := int64(1)<<t.Bits() - 1
			s.Maximum = &hi
		}
		return s, nil
	case reflect.Float32, reflect.Float64:
		return &Schema{Type: Types{"number"}}, nil
	case reflect.Slice, reflect.Array:
		items, err := g.typeSchema(t.Elem(), elemKey(t.Elem(), key))
		if err != nil {
			return nil, err
		}
		return &Schema{Type: Types{"array"}, Items: items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("schemagen: %s: map keys of %v are not strings", key, t.Key())
		}
		values, err := g.typeSchema(t.Elem(), elemKey(t.Elem(), key))
		if err != nil {
			return nil, err
		}
		return &Schema{Type: Types{"object"}, AdditionalProperties: values}, nil
	case reflect.Struct:
		return g.object(t, key)
	case reflect.Interface:
		return &Schema{}, nil
	}
	return nil, fmt.Errorf("schemagen: %s: no JSON for %v", key, t)
}

// elemKey names the type of a list's or a map's values.
func elemKey(t reflect.Type, key string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Name() != "" {
		return t.Name()
	}
	return key
}

// namedType is the name of a type, or of what it points to or holds.
func namedType(t reflect.Type) string {
	for t.Name() == "" && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map) {
		t = t.Elem()
	}
	return t.Name()
}

// object is a struct's schema: its JSON fields, required unless omitempty,
// and nothing else.
func (g *generator) object(t reflect.Type, key string) (*Schema, error) {
	if t.Name() != "" {
		key = t.Name()
	}
	s := &Schema{Type: Types{"object"}, Properties: &Properties{}, AdditionalProperties: False()}
	if err := g.fieldsOf(t, key, s); err != nil {
		return nil, err
	}
	if len(*s.Properties) == 0 {
		s.Properties = nil
	}
	return s, nil
}

func (g *generator) fieldsOf(t reflect.Type, key string, s *Schema) error {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			if err := g.fieldsOf(ft, ft.Name(), s); err != nil { // embedded: its fields are ours
				return err
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fkey := key + "." + f.Name
		fs, err := g.field(f, fkey, name)
		if err != nil {
			return err
		}
		*s.Properties = append(*s.Properties, Property{name, fs})
		required := !slices.Contains(strings.Split(opts, ","), "omitempty")
		if o, ok := g.fields[fkey]; ok && o.Required != nil {
			required = *o.Required
		}
		if required {
			s.Required = append(s.Required, name)
		}
	}
	return nil
}

// field is one field's schema: its type's, the options', the doc's.
func (g *generator) field(f reflect.StructField, key, name string) (*Schema, error) {
	s, err := g.typeSchema(f.Type, key)
	if err != nil {
		return nil, err
	}
	o, ok := g.fields[key]
	if ok {
		g.used[key] = true
	}
	if o.Schema != nil {
		c := *o.Schema
		s = &c
	}
	leaf := s // what a string's constraints go on: the items of a list
	if leaf.Items != nil && len(leaf.Type) == 1 && leaf.Type[0] == "array" {
		leaf = leaf.Items
	}
	if len(o.Enum) > 0 || o.Pattern != "" || o.Duration {
		if len(leaf.Type) != 1 || leaf.Type[0] != "string" {
			return nil, fmt.Errorf("schemagen: %s: an enum, a pattern or a duration needs a string, not %v", key, f.Type)
		}
	}
	if len(o.Enum) > 0 {
		leaf.Enum = o.Enum
	}
	if o.Pattern != "" {
		leaf.Pattern = o.Pattern
	}
	if o.Duration {
		leaf.Pattern = DurationPattern
	}
	if o.MinItems > 0 {
		n := o.MinItems
		s.MinItems = &n
	}
	doc := g.docs[key]
	if doc == "" {
		doc = g.docs[namedType(f.Type)] // the type's own doc
	}
	s.Description = doc
	if s.Description == "" {
		s.Description = o.schemaDescription()
	}
	switch {
	case o.Default != nil:
		s.Default = o.Default
	case !o.NoDefault:
		s.Default = defaultOf(doc, s)
	}
	if f.Type.Kind() == reflect.Pointer && len(s.Type) == 1 {
		s.Type = append(s.Type, "null") // nil: left out, or off
	}
	return s, nil
}

func (o Field) schemaDescription() string {
	if o.Schema != nil {
		return o.Schema.Description
	}
	return ""
}

var (
	quotedDefault = regexp.MustCompile(`"([^"]*)" \(default\)`)
	saysDefault   = regexp.MustCompile(`(?i)\bdefault(?:s to| is|:)?\s+("[^"]*"|\[[^\]]*\]|[^\s,;()]+?)\.?([\s,;)]|$)`)
)

// defaultOf is the default a doc comment states, as a value of the
// field's type, or nil: `"auto" (default)`, or "default" then one word
// that ends the phrase ("default 10s", "default: [readiness]."), not an
// explanation ("default: the pod's hostname", "default X when ...").
func defaultOf(doc string, s *Schema) any {
	var v string
	if m := quotedDefault.FindStringSubmatch(doc); m != nil {
		v = m[1]
	} else if m := saysDefault.FindStringSubmatchIndex(doc); m != nil {
		v = doc[m[2]:m[3]]
		rest := doc[m[4]:]
		if rest != "" && rest[0] == ' ' || strings.HasPrefix(rest, ", else") {
			return nil
		}
	} else {
		return nil
	}
	v = strings.Trim(v, `"`)
	types := slices.Clone(s.Type)
	for _, o := range s.OneOf {
		types = append(types, o.Type...)
	}
	switch {
	case types.Has("array") && strings.HasPrefix(v, "["):
		var l []any
		for _, w := range strings.Split(strings.Trim(v, "[]"), ",") {
			if w = strings.TrimSpace(w); w != "" {
				l = append(l, w)
			}
		}
		return l
	case types.Has("string"):
		return v
	case types.Has("integer"):
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	case types.Has("boolean"):
		if b, err := strconv.ParseBool(v); err == nil {
			return b
		}
	}
	return nil
}

// Has reports whether t names typ.
func (t Types) Has(typ string) bool { return slices.Contains(t, typ) }
