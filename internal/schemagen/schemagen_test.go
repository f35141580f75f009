package schemagen

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The types of a small config, documented in testdata/sample.go (the same
// declarations, read by Docs).
type sample struct {
	Name     string          `json:"name"`
	Timeout  string          `json:"timeout,omitempty"`
	Mode     string          `json:"mode,omitempty"`
	Kinds    []string        `json:"kinds,omitempty"`
	Items    []item          `json:"items,omitempty"`
	ByName   map[string]item `json:"byName,omitempty"`
	Optional *item           `json:"optional,omitempty"`
	Codes    []int32         `json:"codes,omitempty"`
	Port     uint16          `json:"port,omitempty"`
	Command  command         `json:"command"`
	Skipped  string          `json:"-"`
	TLS      *struct {
		CA string `json:"ca,omitempty"`
	} `json:"tls,omitempty"`
	embedded
	hidden string
}

type item struct {
	Path  string `json:"path"`
	Count int    `json:"count,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

type embedded struct {
	Extra bool `json:"extra,omitempty"`
}

// command decodes itself: a string or a list.
type command struct{ words []string }

func sampleDocs(t *testing.T) map[string]string {
	t.Helper()
	docs, err := Docs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

func generate(t *testing.T, opts ...Option) *Schema {
	t.Helper()
	opts = append([]Option{
		WithField("sample.Timeout", Field{Duration: true}),
		WithField("sample.Mode", Field{Enum: []string{"a", "b"}}),
		WithField("sample.Kinds", Field{Enum: []string{"x", "y"}, MinItems: 1}),
		WithType(reflect.TypeFor[command](), func(reflected *Schema) *Schema {
			return &Schema{OneOf: []*Schema{{Type: Types{"string"}}, {Type: Types{"array"}, Items: &Schema{Type: Types{"string"}}}}}
		}),
		WithID("https://example.com/sample.json", "sample"),
	}, opts...)
	b, err := Generate(reflect.TypeFor[sample](), sampleDocs(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(b), "}\n") {
		t.Errorf("no newline at the end")
	}
	var s Schema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return &s
}

func prop(t *testing.T, s *Schema, name string) *Schema {
	t.Helper()
	if s.Properties != nil {
		for _, p := range *s.Properties {
			if p.Name == name {
				return p.Schema
			}
		}
	}
	t.Fatalf("no property %q", name)
	return nil
}

func TestGenerate(t *testing.T) {
	s := generate(t)
	if s.Schema != Draft || s.ID != "https://example.com/sample.json" || s.Title != "sample" {
		t.Errorf("header: %q %q %q", s.Schema, s.ID, s.Title)
	}
	if s.Description != "sample is a small config." {
		t.Errorf("root description %q", s.Description)
	}
	var names []string
	for _, p := range *s.Properties {
		names = append(names, p.Name)
	}
	if want := []string{"name", "timeout", "mode", "kinds", "items", "byName", "optional", "codes", "port", "command", "tls", "extra"}; !reflect.DeepEqual(names, want) {
		t.Errorf("properties %q, want %q (in the Go order; none for - or unexported)", names, want)
	}
	if want := []string{"name", "command"}; !reflect.DeepEqual(s.Required, want) {
		t.Errorf("required %q, want %q", s.Required, want)
	}
	if !s.AdditionalProperties.IsFalse() {
		t.Error("the root takes other properties")
	}
	if p := prop(t, s, "timeout"); p.Pattern != DurationPattern || p.Default != "10s" || p.Description != "Timeout bounds it; default 10s." {
		t.Errorf("timeout: %+v", p)
	}
	if p := prop(t, s, "mode"); !reflect.DeepEqual(p.Enum, []string{"a", "b"}) || p.Default != "a" {
		t.Errorf("mode: %+v", p)
	}
	if p := prop(t, s, "kinds"); p.Items == nil || !reflect.DeepEqual(p.Items.Enum, []string{"x", "y"}) || p.MinItems == nil || *p.MinItems != 1 || !reflect.DeepEqual(p.Default, []any{"x"}) {
		t.Errorf("kinds: %+v", p)
	}
	items := prop(t, s, "items")
	if items.Items == nil || !reflect.DeepEqual(items.Items.Required, []string{"path"}) || !items.Items.AdditionalProperties.IsFalse() {
		t.Errorf("items: %+v", items.Items)
	}
	if p := prop(t, items.Items, "path"); p.Description != "Path is where." {
		t.Errorf("items[].path: %+v", p)
	}
	if p := prop(t, items.Items, "limit"); p.Description != "Count and Limit go together." || p.Default != nil {
		t.Errorf("items[].limit shares count's comment, which names it: %+v", p)
	}
	if p := prop(t, s, "byName"); p.AdditionalProperties == nil || p.AdditionalProperties.IsFalse() || prop(t, p.AdditionalProperties, "path") == nil {
		t.Errorf("byName: %+v", p)
	}
	if p := prop(t, s, "optional"); !reflect.DeepEqual(p.Type, Types{"object", "null"}) {
		t.Errorf("a pointer is nullable: %v", p.Type)
	}
	if p := prop(t, s, "codes").Items; p.Minimum == nil || *p.Minimum != -1<<31 || *p.Maximum != 1<<31-1 {
		t.Errorf("int32 bounds: %+v", p)
	}
	if p := prop(t, s, "port"); *p.Minimum != 0 || *p.Maximum != 65535 {
		t.Errorf("uint16 bounds: %+v", p)
	}
	if p := prop(t, s, "command"); len(p.OneOf) != 2 || p.Description != "Command is run; \"ls\" (default)." || p.Default != "ls" {
		t.Errorf("command: %+v", p)
	}
	if p := prop(t, prop(t, s, "tls"), "ca"); p.Description != "CA verifies." {
		t.Errorf("a field of an anonymous struct: %+v", p)
	}
}

func TestGenerateOptions(t *testing.T) {
	// An option for a field that is not there (renamed, misspelt).
	if _, err := Generate(reflect.TypeFor[sample](), nil, WithField("sample.Nope", Field{})); err == nil || !strings.Contains(err.Error(), "sample.Nope") {
		t.Errorf("unknown field option: %v", err)
	}
	// An enum on what is not a string.
	if _, err := Generate(reflect.TypeFor[sample](), nil, WithField("sample.Port", Field{Enum: []string{"1"}})); err == nil {
		t.Error("an enum on an integer")
	}
	no, yes := false, true
	s := generate(t,
		WithField("sample.Name", Field{Required: &no}),
		WithField("sample.Port", Field{Required: &yes, Default: 80}),
		WithField("sample.Command", Field{NoDefault: true}),
	)
	if !reflect.DeepEqual(s.Required, []string{"port", "command"}) {
		t.Errorf("required %q", s.Required)
	}
	if p := prop(t, s, "port"); p.Default != float64(80) {
		t.Errorf("default %v", p.Default)
	}
	if p := prop(t, s, "command"); p.Default != nil {
		t.Errorf("NoDefault: %v", p.Default)
	}
	if _, err := Generate(reflect.TypeFor[int](), nil); err == nil {
		t.Error("a schema of an int")
	}
}

func TestDocs(t *testing.T) {
	docs := sampleDocs(t)
	for k, want := range map[string]string{
		"sample":         "sample is a small config.",
		"sample.Name":    "Name names it.",
		"sample.Timeout": "Timeout bounds it; default 10s.",
		"sample.Port":    "the port", // a line comment
		"sample.TLS.CA":  "CA verifies.",
		"item.Limit":     "Count and Limit go together.",
		"command":        "command decodes itself: a string or a list.",
	} {
		if docs[k] != want {
			t.Errorf("%s: %q, want %q", k, docs[k], want)
		}
	}
	for _, k := range []string{"sample.Codes", "notInTests.X"} {
		if d, ok := docs[k]; ok {
			t.Errorf("%s: %q, want none", k, d)
		}
	}
	if _, err := Docs(t.TempDir()); err != nil {
		t.Errorf("an empty directory: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.go"), []byte("package x\ntype {"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Docs(dir); err == nil {
		t.Error("no error for a file that does not parse")
	}
}

func TestMarkdown(t *testing.T) {
	b, err := json.Marshal(generate(t))
	if err != nil {
		t.Fatal(err)
	}
	md := Markdown(b)
	lines := strings.Split(strings.TrimSuffix(md, "\n"), "\n")
	if lines[0] != "| Field | Type | Default | Description |" || lines[1] != "|---|---|---|---|" {
		t.Errorf("header:\n%s", md)
	}
	for _, want := range []string{
		"| `name` | string |  | Name names it. |",
		"| `timeout` | duration | `10s` | Timeout bounds it; default 10s. |",
		"| `mode` | `a` \\| `b` | `a` | Mode: \"a\" (default) or \"b\". |",
		"| `kinds` | list of `x` \\| `y` | `[\"x\"]` | Kinds \\| default [x]. |",
		"| `items[].path` | string |  | Path is where. |",
		"| `byName.<name>.limit` | integer |  | Count and Limit go together. |",
		"| `optional.path` | string |  | Path is where. |",
		"| `command` | string or list of string | `ls` | Command is run; \"ls\" (default). |",
		"| `tls.ca` | string |  | CA verifies. |",
	} {
		if !strings.Contains(md, want+"\n") {
			t.Errorf("no row %s in\n%s", want, md)
		}
	}
	if got := Markdown([]byte("{")); !strings.HasPrefix(got, "schemagen: not a schema") {
		t.Errorf("a bad schema: %q", got)
	}
}

// DurationPattern takes what time.ParseDuration reads as 0 or more.
func FuzzDurationPattern(f *testing.F) {
	for _, s := range []string{"90s", "1h30m", "1.5h", ".5s", "1.s", "0", "+0", "+1s", "500ms", "2µs", "2μs", "3us", "4ns",
		"", "5", "soon", "-1s", "1 minute", "1d", "s", ".s", "1.5.5s", "0s", "00", "1h-1m", " 1s"} {
		f.Add(s)
	}
	re := regexp.MustCompile(DurationPattern)
	f.Fuzz(func(t *testing.T, s string) {
		d, err := time.ParseDuration(s)
		match := re.MatchString(s)
		switch {
		case err == nil && d >= 0 && !strings.HasPrefix(s, "-") && !match:
			t.Errorf("%q is the duration %v, the pattern refuses it", s, d)
		case match && err != nil && overflows(s):
			// the pattern cannot count
		case match && (err != nil || d < 0):
			t.Errorf("the pattern takes %q, which is not a duration of 0 or more (%v)", s, err)
		}
	})
}

// overflows reports whether a duration's parts add up past time.Duration.
func overflows(s string) bool {
	units := map[string]float64{"ns": 1, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9}
	total := 0.0
	for _, m := range regexp.MustCompile(`([0-9.]+)(ns|us|µs|μs|ms|s|m|h)`).FindAllStringSubmatch(s, -1) {
		n, _ := strconv.ParseFloat(m[1], 64)
		total += n * units[m[2]]
	}
	return total >= 1<<63-1024*1024
}
