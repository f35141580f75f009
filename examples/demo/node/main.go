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
// With -env DIR it uses the node `hack/testenv up DIR` (or the end-to-end
// tests) left running instead of starting one, and at the end deletes what
// it applied (the namespace, mariadb's volume) and leaves the node up: how
// e2e's TestDemoCluster runs it beside its own tests (with -imported: they
// imported the images).
//
// Usage: node [-env DIR [-imported]] REPO (exit 3: no node can run here, and why)
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kolla-agent/kolla-agent/internal/image"
	"github.com/kolla-agent/kolla-agent/internal/slice"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

func main() {
	envDir := flag.String("env", "", "use the node hack/testenv left running in `DIR`")
	imported := flag.Bool("imported", false, "with -env: the node's containerd has the images (the e2e tests imported them)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: node [-env DIR] REPO")
		os.Exit(2)
	}
	if why := testenv.NodeMissing(); why != "" {
		fmt.Fprintln(os.Stderr, "demo-cluster: no real node here:", why)
		os.Exit(3)
	}
	if err := run(flag.Arg(0), *envDir, *imported && *envDir != ""); err != nil {
		fmt.Fprintln(os.Stderr, "demo-cluster:", err)
		os.Exit(1)
	}
}

func step(format string, a ...any) {
	fmt.Printf("\n\033[1m== "+format+"\033[0m\n", a...)
}

func run(repo, envDir string, imported bool) error {
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
	env, done, err := node(ctx, work, envDir)
	if err != nil {
		return err
	}
	defer done()
	c := env.Client()
	start = time.Now()
	if imported {
		fmt.Printf("  node %s Ready; its containerd has the images already\n", testenv.NodeName)
	} else {
		if _, err := env.ImportImages(ctx, work, imgs...); err != nil {
			return err
		}
		fmt.Printf("  node %s Ready; images imported into its containerd in %.0fs\n", testenv.NodeName, time.Since(start).Seconds())
	}

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
		ObjectMeta: metav1.ObjectMeta{Name: demoPV},
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
	// The keystone pod whose agent created the bootstrap Jobs (one of the
	// two replicas won): its Events show it. The first one otherwise.
	created := map[string]bool{}
	if evs, err := c.CoreV1().Events(slice.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=BootstrapJobCreated"}); err == nil {
		for _, e := range evs.Items {
			created[e.InvolvedObject.Name] = true
		}
	}
	var keystone *corev1.Pod
	for i := range pods.Items {
		if pods.Items[i].Labels["application"] == "keystone" && pods.Items[i].Labels["component"] == "api" {
			if keystone == nil || created[pods.Items[i].Name] {
				keystone = &pods.Items[i]
			}
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

// node starts a control plane and a node in work, or opens the one
// running in envDir. done stops what it started, or deletes from the
// running one what the demo applied.
func node(ctx context.Context, work, envDir string) (*testenv.Env, func(), error) {
	if envDir == "" {
		env, err := testenv.StartWith(filepath.Join(work, "testenv"), testenv.Options{Node: true})
		if err != nil {
			return nil, nil, err
		}
		return env, func() {
			step("7. Stopping it all; the host is put back as it was")
			if err := env.Stop(); err != nil {
				fmt.Println("  ", err)
			}
		}, nil
	}
	env, err := testenv.Open(envDir)
	if err == nil && !env.Node() {
		err = fmt.Errorf("%s runs no node (hack/testenv up as root starts one)", envDir)
	}
	if err == nil {
		err = env.Healthy(ctx)
	}
	if err != nil {
		return nil, nil, err
	}
	fmt.Printf("  the one hack/testenv runs in %s\n", envDir)
	return env, func() {
		step("7. Deleting what the demo applied; the node runs on")
		if err := unapply(env.Client()); err != nil {
			fmt.Println("  ", err)
		}
	}, nil
}

// unapply deletes the demo's namespace and mariadb's volume, and waits
// until the namespace is gone: whoever applies the examples next finds none
// of it.
func unapply(c kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := c.CoreV1().Namespaces().Delete(ctx, slice.Namespace, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	err = c.CoreV1().PersistentVolumes().Delete(ctx, demoPV, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Namespaces().Get(ctx, slice.Namespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return errors.New("namespace " + slice.Namespace + " still there after 3 minutes")
	}
	fmt.Printf("  namespace %s and persistentvolume %s deleted\n", slice.Namespace, demoPV)
	return nil
}

// demoPV is mariadb's volume, a directory of the demo's work directory.
const demoPV = "demo-mariadb-data"

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
		sidecars := map[string]bool{}
		for _, ic := range p.Spec.InitContainers {
			sidecars[ic.Name] = ic.RestartPolicy != nil && *ic.RestartPolicy == corev1.ContainerRestartPolicyAlways
		}
		for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			// A completed init container reports Ready too: kubectl
			// counts the containers and the native sidecars only.
			if _, init := sidecars[cs.Name]; cs.Ready && (!init || sidecars[cs.Name]) {
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
