package schemagen

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Markdown is a reference table of a schema Generate wrote: one row per
// field, by its path in the file (probes.checks[].http.url; a map's
// entries as <name>), with its type, its default and its description.
// A schema that does not parse gives one line that says so.
func Markdown(schema []byte) string {
	var root Schema
	if err := json.Unmarshal(schema, &root); err != nil {
		return fmt.Sprintf("schemagen: not a schema: %v\n", err)
	}
	var b strings.Builder
	b.WriteString("| Field | Type | Default | Description |\n")
	b.WriteString("|---|---|---|---|\n")
	rows(&b, "", &root)
	return b.String()
}

func rows(b *strings.Builder, path string, s *Schema) {
	if s.Properties != nil {
		for _, p := range *s.Properties {
			at := p.Name
			if path != "" {
				at = path + "." + p.Name
			}
			fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", at, cell(typeName(p.Schema)), cell(defaultText(p.Schema.Default)), cell(p.Schema.Description))
			rows(b, at, p.Schema)
		}
	}
	switch {
	case s.Items != nil:
		rows(b, path+"[]", s.Items)
	case s.AdditionalProperties != nil && !s.AdditionalProperties.IsFalse():
		rows(b, path+".<name>", s.AdditionalProperties)
	}
	for _, o := range s.OneOf {
		rows(b, path, o)
	}
}

// typeName says what a field takes, in words.
func typeName(s *Schema) string {
	if len(s.OneOf) > 0 {
		var alts []string
		for _, o := range s.OneOf {
			alts = append(alts, typeName(o))
		}
		return strings.Join(alts, " or ")
	}
	var t string
	for _, n := range s.Type {
		if n != "null" {
			t = n
			break
		}
	}
	switch {
	case s.Const != nil:
		return defaultText(s.Const)
	case len(s.Enum) > 0:
		return "`" + strings.Join(s.Enum, "` | `") + "`"
	case s.Pattern == DurationPattern:
		return "duration"
	case t == "array" && s.Items != nil:
		return "list of " + typeName(s.Items)
	case t == "object" && s.AdditionalProperties != nil && !s.AdditionalProperties.IsFalse():
		return "map of " + typeName(s.AdditionalProperties)
	case t == "":
		return "any"
	}
	return t
}

func defaultText(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return "`" + v + "`"
	}
	b, _ := json.Marshal(v)
	return "`" + string(b) + "`"
}

// cell escapes what would end a table cell.
func cell(s string) string {
	return strings.NewReplacer("|", "\\|", "\n", " ").Replace(s)
}
