package render

import (
	"os"
	"path/filepath"
	"testing"
	"text/template"
)

// Every example template parses with the agent's function names:
// examples are copied by operators (agent/kolla checks their config.json).
func TestExamplesParse(t *testing.T) {
	templates, _ := filepath.Glob("../../examples/*/*.tmpl")
	if len(templates) == 0 {
		t.Fatal("no example templates found")
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
