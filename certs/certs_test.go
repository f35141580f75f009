package certs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPoolBadInput(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		notPEM:                           "ca.pem: no PEM certificate in it",
		filepath.Join(dir, "absent.pem"): "absent.pem: no such file",
	} {
		if _, err := Pool(file); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Pool(%s) = %v, want %q", file, err, want)
		}
	}
}
