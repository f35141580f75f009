package config

import (
	"encoding/json"
	"time"
)

// Duration is a duration in Go syntax ("90s", "5m"), parsed once when the
// config is read. A value that does not parse keeps its text and its
// error, which the section's validator reports with the field's path
// (check); unset is the empty text.
type Duration struct {
	raw string
	d   time.Duration
	err error
}

// ParseDuration is text as a config field holds it ("" is unset).
func ParseDuration(text string) Duration {
	d := Duration{raw: text}
	d.d, d.err = parseDuration("", text) // 0 with the error
	return d
}

// UnmarshalJSON reads a string; a number or bool is taken as its text, as
// sigs.k8s.io/yaml converts one for a string field. A text that is not a
// duration is kept, for its section's validator to report with the
// field's path; a list or an object is the decoder's error, reported as a
// string field's is.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var v any
		if json.Unmarshal(b, &v) != nil {
			return err
		}
		switch v.(type) {
		case float64, bool:
			s = string(b)
		default:
			return err
		}
	}
	*d = ParseDuration(s)
	return nil
}

// MarshalJSON writes the text as given.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.raw) }

// String is the text as given ("" when unset).
func (d Duration) String() string { return d.raw }

// IsSet reports whether the field was given.
func (d Duration) IsSet() bool { return d.raw != "" }

// Duration is the duration; 0 when unset.
func (d Duration) Duration() time.Duration { return d.d }

// or is the field as written, or def when it is unset: for the validators,
// which run before withDefaults.
func (d Duration) or(def time.Duration) time.Duration {
	if !d.IsSet() || d.err != nil {
		return def
	}
	return d.d
}

// defaultTo gives an unset field the default it runs with; its text stays
// unset, so a config written back reads the same.
func (d *Duration) defaultTo(def time.Duration) {
	if !d.IsSet() || d.err != nil {
		d.d = def
	}
}

// defaultZeroTo is defaultTo for a field where 0 means the default too.
func (d *Duration) defaultZeroTo(def time.Duration) {
	if d.d <= 0 {
		d.d = def
	}
}

// check is the field's problem ("" path: none), as parseDuration says it.
func (d Duration) check(field string) (time.Duration, error) {
	if d.err != nil {
		_, err := parseDuration(field, d.raw)
		return 0, err
	}
	return d.d, nil
}
