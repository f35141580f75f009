package config

import (
	"bytes"
	_ "embed"
)

//go:generate go test -run TestSchemaInStep -update .

// schemaJSON is generated from the types of this package and their doc
// comments by TestSchemaInStep (go generate), which fails when it is not
// in step with them.
//
//go:embed schema.json
var schemaJSON []byte

// Schema is the JSON Schema (draft 2020-12) of agent.yaml, for editors and
// `kolla-agent config schema`. It says what the structure is (fields,
// types, enums, durations); Parse says more (paths, ports, what goes with
// what).
func Schema() []byte { return bytes.Clone(schemaJSON) }
