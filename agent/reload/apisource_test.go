package reload

import (
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kolla-agent/kolla-agent/agent/render"
)

// Two ConfigMaps updated before the pass reads the signal: one signal, and
// the pass names both (it named the first alone, and a change of the
// second was said as the first's, found by TestReloadFromAPI under load).
// A delivery seen before (a re-list) names nothing.
func TestAPISourceUpdatedNamesEvery(t *testing.T) {
	dir := t.TempDir()
	s := &APISource{log: discard, changed: make(chan struct{}, 1), overlay: render.Overlay{}, pending: map[string]bool{}}
	vol := func(name string) *apiVolume {
		return &apiVolume{dir: "/etc/" + name, configMap: name, copy: filepath.Join(dir, name), seen: map[string]bool{}}
	}
	cm := func(v string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"data": map[string]any{"conf": v}}}
	}
	config, policy := vol("glance-config"), vol("glance-policy")
	s.update(policy, cm("{}"))
	s.update(config, cm("workers = 2"))
	if n := len(s.Changed()); n != 1 {
		t.Fatalf("%d signals pending, want 1", n)
	}
	<-s.Changed()
	if got, want := s.Updated(), []string{"glance-config", "glance-policy"}; !slices.Equal(got, want) {
		t.Errorf("updated %v, want %v", got, want)
	}
	if got := s.Updated(); len(got) != 0 {
		t.Errorf("updated %v again after they were taken", got)
	}
	s.update(config, cm("workers = 2")) // a re-list
	if got := s.Updated(); len(got) != 0 || len(s.Changed()) != 0 {
		t.Errorf("a delivery seen before named %v", got)
	}
}
