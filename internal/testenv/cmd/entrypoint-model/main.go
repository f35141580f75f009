// Command entrypoint-model is the baseline of the real-pod benchmarks:
// kubernetes-entrypoint's service dependency loop as its source has it
// (the real one is not on the Go module proxy): with the pod's
// ServiceAccount, every 2 s it GETs the Endpoints of each Service of
// DEPENDENCY_SERVICE (comma-separated, [namespace:]name) and exits once
// every one has an address.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func main() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cfg.WarningHandler = rest.NoWarnings{} // Endpoints is deprecated: that is the point
	c := kubernetes.NewForConfigOrDie(cfg)
	ns := os.Getenv("POD_NAMESPACE")
	var deps [][2]string
	for _, d := range strings.Split(os.Getenv("DEPENDENCY_SERVICE"), ",") {
		if d = strings.TrimSpace(d); d == "" {
			continue
		}
		n, name, ok := strings.Cut(d, ":")
		if !ok {
			n, name = ns, d
		}
		deps = append(deps, [2]string{n, name})
	}
	for {
		ready := 0
		for _, d := range deps {
			ep, err := c.CoreV1().Endpoints(d[0]).Get(context.Background(), d[1], metav1.GetOptions{})
			if err == nil && len(ep.Subsets) > 0 && len(ep.Subsets[0].Addresses) > 0 {
				ready++
			}
		}
		if ready == len(deps) {
			fmt.Println("entrypoint-model: every dependency resolved")
			return
		}
		time.Sleep(2 * time.Second)
	}
}
