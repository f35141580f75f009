package logs

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"slices"
	"sync"
)

// Stdout is the stdout sink, the streaming-sidecar pattern: the records on
// the agent's standard output, so that `kubectl logs` shows the service's
// files. Raw writes each record's lines as they are (no fields); JSON one
// object per record, tagged with the file and the offset, and with the
// fields Send is given (ShipperConfig.Fields) as more keys, in the order of
// their keys. A record is delivered once written.
type Stdout struct {
	mu   sync.Mutex
	w    io.Writer
	json bool
}

// NewStdout writes to w (the agent's stdout): raw, or JSON lines.
func NewStdout(w io.Writer, jsonLines bool) *Stdout { return &Stdout{w: w, json: jsonLines} }

func (s *Stdout) Send(_ context.Context, tag string, fields map[string]string, recs []Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b bytes.Buffer
	// The fields' keys and values, encoded once: ,"k":"v" for each.
	var extra []byte
	if s.json {
		for _, k := range slices.Sorted(maps.Keys(fields)) {
			kj, _ := json.Marshal(k)
			vj, _ := json.Marshal(fields[k])
			extra = append(append(append(append(extra, ','), kj...), ':'), vj...)
		}
	}
	for _, r := range recs {
		if !s.json {
			b.Write(r.Data)
			b.WriteByte('\n')
			continue
		}
		line, err := json.Marshal(struct {
			Tag     string `json:"tag"`
			File    string `json:"file"`
			Offset  int64  `json:"offset"`
			ID      string `json:"id"`
			Partial bool   `json:"partial,omitempty"`
			Message string `json:"message"`
		}{tag, r.File.Path, r.End, string(appendID(nil, r.File)), r.Partial, string(r.Data)})
		if err != nil {
			return err
		}
		b.Write(line[:len(line)-1]) // without its closing brace
		b.Write(extra)
		b.WriteString("}\n")
	}
	_, err := s.w.Write(b.Bytes())
	return err
}
