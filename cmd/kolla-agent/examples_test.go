package main

import (
	"fmt"
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

// Every example bootstrap Job template, rendered and completed by the agent
// in create mode, is accepted by the real API server: the Job exists, with
// the agent's defaults merged in and the step's command rendered.
func TestExampleBootstrapJobsCreate(t *testing.T) {
	paths, err := filepath.Glob("../../examples/*/db-sync-job.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no example bootstrap jobs: %v", err)
	}
	for _, p := range paths {
		t.Run(filepath.Base(filepath.Dir(p)), func(t *testing.T) {
			abs, err := filepath.Abs(p)
			if err != nil {
				t.Fatal(err)
			}
			ns := namespace(t)
			cfg := agentYAML(t, fmt.Sprintf("namespace: %s\nbootstrap:\n  mode: create\n  name: example-db-sync\n  job: %s\n  command: keystone-manage db_sync\n  permanentExitCodes: [2]\n", ns, abs))
			a := startAgent(t, withEnv(bootstrapEnv(t, ns, "create"), "POD_NAME=example-0"), "--config", cfg, "init")
			name := waitJobs(t, ns, "example-db-sync", 1)[0]
			j, err := client().BatchV1().Jobs(ns).Get(ctxT(t), name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if c := j.Spec.Template.Spec.Containers[0].Command; c[len(c)-1] != "keystone-manage db_sync" {
				t.Errorf("%s: rendered command %q", p, c)
			}
			if j.Spec.PodFailurePolicy == nil || len(j.Spec.PodFailurePolicy.Rules) != 2 {
				t.Errorf("%s: podFailurePolicy %+v", p, j.Spec.PodFailurePolicy)
			}
			a.cmd.Process.Kill()
		})
	}
}
