package config

import (
	"os"
	"path/filepath"
	"testing"
)

// Every agent.yaml shipped in examples/ loads: an example that does not is a
// lie to the operator who copies it.
func TestExamplesLoad(t *testing.T) {
	paths, err := filepath.Glob("../../examples/*/agent.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	for _, p := range paths {
		if _, err := Load(p); err != nil {
			t.Errorf("%v", err)
		}
	}
	if _, err := os.Stat("../../examples/rbac/kolla-agent.yaml"); err != nil {
		t.Errorf("the RBAC example is missing: %v", err)
	}
}
