package config

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"io"
)

//go:generate go test -run TestSchemaInStep -update .

// schemaGz is schema.json compressed (38.7 KB of text; 7 KB compressed,
// and compress/gzip is linked for net/http anyway): the binary's 20 MB
// budget is tight. Both are generated from the types of this package and
// their doc comments by TestSchemaInStep (go generate), which fails when
// either is not in step with them.
//
//go:embed schema.json.gz
var schemaGz []byte

// Schema is the JSON Schema (draft 2020-12) of agent.yaml, for editors and
// `kolla-agent config schema`. It says what the structure is (fields,
// types, enums, durations); Parse says more (paths, ports, what goes with
// what).
func Schema() []byte {
	r, err := gzip.NewReader(bytes.NewReader(schemaGz))
	if err != nil {
		panic("agent/config: the embedded schema: " + err.Error()) // tested; cannot happen
	}
	b, err := io.ReadAll(r)
	if err != nil {
		panic("agent/config: the embedded schema: " + err.Error())
	}
	return b
}
