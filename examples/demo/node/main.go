// Command node is `make demo-cluster` on a real node (run as root, with
// what `hack/install-tools.sh all` builds): hack/testenv's control plane
// with containerd, runc, the kubelet, kube-proxy and kube-scheduler; the
// images built here (the agent's, and a kolla-style image per service of
// Debian's real packages); then examples/ itself, for mariadb, memcached
// and keystone, with only the images swapped (and a Fluent receiver where
// fluent-bit is). It prints what a user would check: the pods as `kubectl
// get pods -o wide` shows them, a keystone pod's Events as `kubectl
// describe` lists them, the agent's probe answers, and a token from
// keystone through its Service. Everything is stopped and the host put back
// at the end.
//
// Usage: node REPO (exit 3: no node can run here, and why)
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kolla-agent/kolla-agent/internal/image"
	"github.com/kolla-agent/kolla-agent/internal/slice"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: node REPO")
		os.Exit(2)
	}
	if why := testenv.NodeMissing(); why != "" {
		fmt.Fprintln(os.Stderr, "demo-cluster: no real node here:", why)
		os.Exit(3) // cluster.sh runs the stand-in demo instead
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "demo-cluster:", err)
		os.Exit(1)
	}
}

func step(format string, a ...any) {
	fmt.Printf("\n\033[1m== "+format+"\033[0m\n", a...)
}

func run(repo string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	work, err := os.MkdirTemp("", "kolla-agent-node-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	step("1. The images, built here from the Dockerfiles and Debian's packages (each root cached)")
	start := time.Now()
	imgs, err := image.Project(repo)
	if err != nil {
		return err
	}
	more, err := slice.Images(repo, filepath.Join(testenv.CacheDir(), "images"))
	if err != nil {
		return err
	}
	imgs = append(imgs, more...)
	for _, img := range imgs {
		fmt.Printf("  %-40s user %q, entrypoint %v\n", img.Ref, img.Config.User, img.Config.Entrypoint)
	}
	fmt.Printf("  (%.0fs)\n", time.Since(start).Seconds())

	step("2. A control plane and a real node (hack/testenv): containerd, runc, the kubelet, kube-proxy, kube-scheduler")
	env, err := testenv.StartWith(filepath.Join(work, "testenv"), testenv.Options{Node: true})
	if err != nil {
		return err
	}
	defer func() {
		step("7. Stopping it all; the host is put back as it was")
		if err := env.Stop(); err != nil {
			fmt.Println("  ", err)
		}
	}()
	c := env.Client()
	start = time.Now()
	if _, err := env.ImportImages(ctx, work, imgs...); err != nil {
		return err
	}
	fmt.Printf("  node %s Ready; images imported into its containerd in %.0fs\n", testenv.NodeName, time.Since(start).Seconds())

	step("3. kubectl apply -k examples/ (mariadb, memcached, keystone), only the images swapped")
	objs, err := slice.Build(repo, "mariadb", "memcached", "keystone")
	if err != nil {
		return err
	}
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == "keystone" {
			if err := slice.ReplaceFluentBit(o, slice.Receiver{Image: slice.ReceiverRef, Volume: map[string]any{"emptyDir": map[string]any{}}}); err != nil {
				return err
			}
		}
		fmt.Printf("  %s/%s\n", strings.ToLower(o.GetKind()), o.GetName())
	}
	// mariadb's claim gets a volume on this machine (no provisioner here).
	data := filepath.Join(work, "mariadb-data")
	if err := os.Mkdir(data, 0o750); err != nil {
		return err
	}
	if err := os.Chown(data, 42434, 42434); err != nil {
		return err
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-mariadb-data"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: data}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: slice.Namespace, Name: "data-mariadb-0"},
		},
	}
	if _, err := c.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return err
	}
	applied := time.Now()
	if err := slice.Apply(ctx, env.Admin(), objs); err != nil {
		return err
	}

	step("4. Waiting for every pod to be Ready (keystone's bootstrap Jobs run first)")
	seen := ""
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := c.CoreV1().Pods(slice.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready, total := 0, 0
		var line []string
		for _, p := range pods.Items {
			if p.Labels["component"] == "db-sync" {
				line = append(line, p.Name+" "+string(p.Status.Phase))
				continue
			}
			total++
			if podReady(&p) {
				ready++
			}
		}
		now := fmt.Sprintf("%d of %d Ready; Jobs' pods: %s", ready, total, strings.Join(line, ", "))
		if now != seen {
			fmt.Printf("  %5.1fs  %s\n", time.Since(applied).Seconds(), now)
			seen = now
		}
		return total == 4 && ready == total, nil
	})
	if err != nil {
		return fmt.Errorf("not Ready within 10 minutes: %w", err)
	}

	step("5. kubectl get pods -o wide; kubectl describe pod (Events)")
	pods, err := c.CoreV1().Pods(slice.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	printPods(os.Stdout, pods.Items)
	var keystone *corev1.Pod
	for i := range pods.Items {
		if pods.Items[i].Labels["application"] == "keystone" && pods.Items[i].Labels["component"] == "api" {
			keystone = &pods.Items[i]
			break
		}
	}
	if keystone == nil {
		return fmt.Errorf("no keystone pod")
	}
	fmt.Printf("\n  Events of %s:\n", keystone.Name)
	printEvents(ctx, c, keystone.Name)

	step("6. What the kubelet's probes see, and keystone through its Service")
	for _, p := range pods.Items {
		if p.Labels["component"] == "db-sync" || p.Status.PodIP == "" {
			continue
		}
		fmt.Printf("  GET http://%s:8095/readyz?verbose  (%s)\n", p.Status.PodIP, p.Name)
		fmt.Println(indent(get("http://"+p.Status.PodIP+":8095/readyz?verbose"), "    "))
	}
	svc, err := c.CoreV1().Services(slice.Namespace).Get(ctx, "keystone", metav1.GetOptions{})
	if err != nil {
		return err
	}
	sec, err := c.CoreV1().Secrets(slice.Namespace).Get(ctx, "keystone-admin", metav1.GetOptions{})
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]any{"auth": map[string]any{
		"identity": map[string]any{"methods": []string{"password"}, "password": map[string]any{
			"user": map[string]any{"name": "admin", "domain": map[string]string{"name": "Default"}, "password": string(sec.Data["OS_PASSWORD"])}}},
		"scope": map[string]any{"project": map[string]any{"name": "admin", "domain": map[string]string{"name": "Default"}}},
	}})
	if err != nil {
		return err
	}
	url := "http://" + svc.Spec.ClusterIP + ":5000/v3/auth/tokens"
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Subject-Token") == "" {
		return fmt.Errorf("POST %s: %s, no token", url, resp.Status)
	}
	fmt.Printf("  POST %s (the admin keystone-manage bootstrap made): %s, token %.12s...\n", url, resp.Status, resp.Header.Get("X-Subject-Token"))
	return nil
}

func podReady(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
}

func printPods(w io.Writer, pods []corev1.Pod) {
	tw := tabwriter.NewWriter(w, 2, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tREADY\tSTATUS\tRESTARTS\tIP\tNODE")
	for _, p := range pods {
		ready, restarts := 0, int32(0)
		for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			if cs.Ready {
				ready++
			}
			restarts += cs.RestartCount
		}
		status := string(p.Status.Phase)
		if p.Status.Phase == corev1.PodSucceeded {
			status = "Completed"
		}
		n := len(p.Spec.Containers)
		for _, ic := range p.Spec.InitContainers {
			if ic.RestartPolicy != nil && *ic.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				n++ // a native sidecar counts, as kubectl counts it
			}
		}
		fmt.Fprintf(tw, "  %s\t%d/%d\t%s\t%d\t%s\t%s\n", p.Name, ready, n, status, restarts, p.Status.PodIP, p.Spec.NodeName)
	}
	tw.Flush()
}

func printEvents(ctx context.Context, c kubernetes.Interface, pod string) {
	evs, err := c.CoreV1().Events(slice.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		fmt.Println("   ", err)
		return
	}
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "    TYPE\tREASON\tFROM\tMESSAGE")
	for _, e := range evs.Items {
		from := e.Source.Component
		if from == "" {
			from = e.ReportingController
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\n", e.Type, e.Reason, from, e.Message)
	}
	tw.Flush()
}

func get(url string) string {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := c.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
}

func indent(s, pre string) string {
	return pre + strings.ReplaceAll(s, "\n", "\n"+pre)
}
