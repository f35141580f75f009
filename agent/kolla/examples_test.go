package kolla

import (
	"path/filepath"
	"testing"
)

// Every kolla config.json in examples/ loads: examples are copied by
// operators.
func TestExamplesLoad(t *testing.T) {
	configs, _ := filepath.Glob("../../examples/*/config.json")
	if len(configs) == 0 {
		t.Fatal("no example config.json found")
	}
	for _, p := range configs {
		if _, err := Load(p); err != nil {
			t.Errorf("%v", err)
		}
	}
}
