package logs

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"sync"
)

// Stdout is the stdout sink, the streaming-sidecar pattern: the records on
// the agent's standard output, so that `kubectl logs` shows the service's
// files. Raw writes each record's lines as they are; JSON one object per
// record, tagged with the file and the offset. A record is delivered once
// written.
type Stdout struct {
	mu   sync.Mutex
	w    io.Writer
	json bool
}

// NewStdout writes to w (the agent's stdout): raw, or JSON lines.
func NewStdout(w io.Writer, jsonLines bool) *Stdout { return &Stdout{w: w, json: jsonLines} }

func (s *Stdout) Send(_ context.Context, tag string, recs []Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b bytes.Buffer
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
			Partial bool   `json:"partial,omitempty"`
			Message string `json:"message"`
		}{tag, r.File.Path, r.End, r.Partial, string(r.Data)})
		if err != nil {
			return err
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	_, err := s.w.Write(b.Bytes())
	return err
}
