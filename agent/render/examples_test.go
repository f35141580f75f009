package render

import (
	"os"
	"path/filepath"
	"testing"
	"text/template"
)

// Every kolla config.json in examples/ loads, and every example template
// parses with the agent's function names: examples are copied by operators.
func TestExamplesParse(t *testing.T) {
	configs, _ := filepath.Glob("../../examples/*/config.json")
	templates, _ := filepath.Glob("../../examples/*/*.tmpl")
	if len(configs) == 0 || len(templates) == 0 {
		t.Fatalf("no examples found (%d configs, %d templates)", len(configs), len(templates))
	}
	for _, p := range configs {
		if _, err := LoadKolla(p); err != nil {
			t.Errorf("%v", err)
		}
	}
	// The engine's own function map: a renamed function fails the example.
	funcs := (&templateRun{}).funcs()
	for _, p := range templates {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := template.New(p).Funcs(funcs).Parse(string(b)); err != nil {
			t.Errorf("%v", err)
		}
	}
}
