// The declarations of schemagen_test.go's sample types, with the comments
// Docs reads.
package sample

// sample is a small config.
type sample struct {
	// Name names it.
	Name string `json:"name"`
	// Timeout bounds it; default 10s.
	Timeout string `json:"timeout,omitempty"`
	// Mode: "a" (default) or "b".
	Mode string `json:"mode,omitempty"`
	// Kinds | default [x].
	Kinds    []string        `json:"kinds,omitempty"`
	Items    []item          `json:"items,omitempty"`
	ByName   map[string]item `json:"byName,omitempty"`
	Optional *item           `json:"optional,omitempty"`
	Codes    []int32         `json:"codes,omitempty"`
	Port     uint16          `json:"port,omitempty"` // the port
	// Command is run; "ls" (default).
	Command command `json:"command"`
	Skipped string  `json:"-"`
	TLS     *struct {
		// CA verifies.
		CA string `json:"ca,omitempty"`
	} `json:"tls,omitempty"`
	embedded
	hidden string
}

// item is one of the items.
type item struct {
	// Path is where.
	Path string `json:"path"`
	// Count and Limit go together.
	Count int `json:"count,omitempty"`
	Limit int `json:"limit,omitempty"`
}

type embedded struct {
	Extra bool `json:"extra,omitempty"`
}

// command decodes itself: a string or a list.
type command struct{ words []string }
