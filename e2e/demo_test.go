package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kolla-agent/kolla-agent/internal/slice"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

// `make demo-cluster` (examples/demo/node) on this package's node, as a
// user runs it: every pod Ready, the probe answers and a token from
// keystone through its Service in its output, and nothing of it left in
// the cluster after.
func TestDemoCluster(t *testing.T) {
	testenv.NeedNode(t, env)
	sliceImages(t)
	bin := filepath.Join(t.TempDir(), "demo")
	build := exec.Command("go", "build", "-o", bin, "./examples/demo/node")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/demo/node: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, bin, "-env", env.Dir, "-imported", repoRoot()).CombinedOutput()
	t.Logf("the demo took %v", time.Since(start).Round(time.Second))
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	s := string(out)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`4 of 4 Ready`),
		regexp.MustCompile(`(?m)^  keystone-[a-z0-9]+-[a-z0-9]+\s+2/2\s+Running\s`), // keystone-api and the receiver
		regexp.MustCompile(`(?m)^  mariadb-0\s+1/1\s+Running\s`),
		regexp.MustCompile(`Normal\s+BootstrapJobCreated\s+kolla-agent\s`), // the agent's Event on a keystone pod
		regexp.MustCompile(`GET http://\S+:8095/readyz\?verbose`),
		regexp.MustCompile(`(?m)^    readiness ok$`),
		regexp.MustCompile(`POST http://\S+:5000/v3/auth/tokens .*: 201 \S+, token \S+`),
		regexp.MustCompile(`namespace openstack and persistentvolume demo-mariadb-data deleted`),
	} {
		if !want.MatchString(s) {
			t.Errorf("the demo's output does not match %s:\n%s", want, s)
		}
	}
	if n := strings.Count(s, "    readiness ok\n"); n != 4 {
		t.Errorf("want 4 pods answering readiness ok, saw %d:\n%s", n, s)
	}
	if _, err := env.Client().CoreV1().Namespaces().Get(ctx, slice.Namespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s after the demo: %v", slice.Namespace, err)
	}
	if _, err := env.Client().CoreV1().PersistentVolumes().Get(ctx, "demo-mariadb-data", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("persistentvolume demo-mariadb-data after the demo: %v", err)
	}
}
