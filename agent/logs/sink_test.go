package logs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A sink that cannot be built names the field of logs.sink at fault and
// why; stdout needs nothing and closes nothing.
func TestNewSinkErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "key")
	os.WriteFile(empty, []byte("\n"), 0o600)
	notPEM := filepath.Join(dir, "ca.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	for _, tc := range []struct {
		name  string
		cfg   SinkConfig
		field string
		want  string
	}{
		{"a CA file without a certificate", SinkConfig{Type: "syslog", Address: "127.0.0.1:6514", TLS: &SinkTLS{CAFile: notPEM}}, "tls", "caFile: " + notPEM + ": no PEM certificate"},
		{"a missing CA file", SinkConfig{Type: "forward", Address: "127.0.0.1:24224", TLS: &SinkTLS{CAFile: filepath.Join(dir, "none")}}, "tls", "no such file"},
		{"an empty key file", SinkConfig{Type: "forward", Address: "127.0.0.1:24224", SharedKeyFile: empty}, "sharedKeyFile", "is empty"},
		{"a missing key file", SinkConfig{Type: "forward", Address: "127.0.0.1:24224", SharedKeyFile: filepath.Join(dir, "none")}, "sharedKeyFile", "no such file"},
		{"an address without a port", SinkConfig{Type: "syslog", Address: "localhost"}, "", "address"},
	} {
		_, _, err := NewSink(tc.cfg)
		var se *SinkError
		if !errors.As(err, &se) || se.Field != tc.field || !strings.Contains(se.Err.Error(), tc.want) {
			t.Errorf("%s: %v; want a SinkError on %q saying %q", tc.name, err, tc.field, tc.want)
		}
	}
	var out bytes.Buffer
	s, c, err := NewSink(SinkConfig{Type: "stdout", JSON: true, Stdout: &out})
	if err != nil || c != nil {
		t.Fatalf("stdout: %v, closer %v", err, c)
	}
	if err := s.Send(t.Context(), "app", nil, []Record{{Data: []byte("hello")}}); err != nil || !strings.Contains(out.String(), `"hello"`) {
		t.Errorf("stdout JSON: %v: %q", err, out.String())
	}
}
