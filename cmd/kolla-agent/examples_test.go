package main

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Every pod manifest in examples/ is accepted by the real API server
// (server-side dry run): the native-sidecar layout (an init container with
// restartPolicy: Always and a startupProbe) included.
func TestExamplePodsValidate(t *testing.T) {
	paths, err := filepath.Glob("../../examples/*/pod.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no example pods: %v", err)
	}
	ns := namespace(t)
	for _, p := range paths {
		t.Run(filepath.Base(filepath.Dir(p)), func(t *testing.T) {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			var pod corev1.Pod
			if err := yaml.UnmarshalStrict(b, &pod); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if _, err := client().CoreV1().Pods(ns).Create(ctxT(t), &pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				t.Fatalf("%s: the API server refuses it: %v", p, err)
			}
			for _, c := range pod.Spec.InitContainers {
				if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways && c.StartupProbe == nil {
					t.Errorf("%s: native sidecar %s has no startupProbe: the service would start before the agent serves", p, c.Name)
				}
			}
		})
	}
}
