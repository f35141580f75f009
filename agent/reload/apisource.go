package reload

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kolla-agent/kolla-agent/agent/render"
	"github.com/kolla-agent/kolla-agent/discovery"
)

// ConfigMapAPI is what the API source needs of the API server, in the
// agent's own namespace.
type ConfigMapAPI interface {
	// Pod reads the agent's pod, for its volumes and their mounts.
	Pod(ctx context.Context) (*unstructured.Unstructured, error)
	// ConfigMap sends the named ConfigMap (a set of one, or none) at once
	// and, once follow is called, after every change, until ctx ends; onErr
	// is told of the API's failures, which it retries by itself.
	ConfigMap(ctx context.Context, name string, onErr func(op string, err error)) (sets <-chan []*unstructured.Unstructured, follow func())
}

var (
	podsGVR       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

// configMapAPI is ConfigMapAPI on the agent's client.
type configMapAPI struct {
	kube    *discovery.Kube
	ns, pod string
}

func (c configMapAPI) Pod(ctx context.Context) (*unstructured.Unstructured, error) {
	u, err := c.kube.Resource(podsGVR, c.ns).Get(ctx, c.pod, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", c.ns, c.pod, err)
	}
	return u, nil
}

// ConfigMap is one LIST narrowed to its name, and the WATCH from its
// resourceVersion once followed.
func (c configMapAPI) ConfigMap(ctx context.Context, name string, onErr func(op string, err error)) (<-chan []*unstructured.Unstructured, func()) {
	obs := c.kube.Observe(ctx, configMapsGVR, c.ns, discovery.Selector{Name: name}, onErr)
	return obs.C, obs.Follow
}

// APISource is reload.source: api. It watches the ConfigMap behind each
// watched volume through the API (one LIST and one WATCH per ConfigMap,
// however many volumes mount it, never polling; no WATCH of an immutable
// one, which never changes: the kubelet watches none either)
// and keeps a copy of it laid out as the kubelet lays out the volume; the
// render reads the copy instead of the volume, so a change is taken as soon
// as the API has it rather than after the kubelet's sync period and cache.
// The volume stays the fallback: when it shows content the API never
// delivered (the API was unreachable), the render reads the volume again.
type APISource struct {
	api     ConfigMapAPI
	log     *slog.Logger
	vols    []*apiVolume
	changed chan struct{} // a copy was updated (which: pending)

	mu      sync.Mutex
	overlay render.Overlay  // container dir -> copy, for the copies in use
	pending map[string]bool // ConfigMaps updated since the last Updated
}

type apiVolume struct {
	dir       string // the mount, a container path
	host      string // the volume on this host
	configMap string
	items     []keyPath // nil: every key under its own name
	copy      string    // the agent's copy
	seen      map[string]bool
	current   string // hash of the copy's content
	immutable bool
}

// keyPath is one of a ConfigMap volume's items (tagged: the unstructured
// converter matches names exactly, so Key alone never read "key").
type keyPath struct {
	Key  string `json:"key"`
	Path string `json:"path"`
}

// NewAPISource maps each watched directory (as the container sees it;
// host maps it to this host's path) to the ConfigMap mounted there, from
// the pod's own spec (one GET). The copies go under stateDir.
func NewAPISource(ctx context.Context, api ConfigMapAPI, dirs []string, host func(string) string, stateDir string, log *slog.Logger) (*APISource, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	u, err := api.Pod(ctx)
	if err != nil {
		return nil, fmt.Errorf("reload.source api: %w", err)
	}
	var pod podVolumes
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pod); err != nil {
		return nil, err
	}
	s := &APISource{api: api, log: log, changed: make(chan struct{}, 1), overlay: render.Overlay{}, pending: map[string]bool{}}
	for i, d := range dirs {
		v, err := pod.configMapAt(d)
		if err != nil {
			return nil, fmt.Errorf("reload.source api: %w", err)
		}
		v.host, v.copy, v.seen = host(d), filepath.Join(stateDir, "api", fmt.Sprint(i)), map[string]bool{}
		s.vols = append(s.vols, v)
	}
	return s, nil
}

// podVolumes is what the API source reads of its pod.
type podVolumes struct {
	Spec struct {
		Volumes []struct {
			Name      string `json:"name"`
			ConfigMap *struct {
				Name  string    `json:"name"`
				Items []keyPath `json:"items,omitempty"`
			} `json:"configMap,omitempty"`
		} `json:"volumes"`
		Containers []struct {
			VolumeMounts []struct {
				Name      string `json:"name"`
				MountPath string `json:"mountPath"`
				SubPath   string `json:"subPath,omitempty"`
			} `json:"volumeMounts"`
		} `json:"containers"`
	} `json:"spec"`
}

func (pv *podVolumes) configMapAt(dir string) (*apiVolume, error) {
	var mounts []string
	for _, c := range pv.Spec.Containers {
		for _, m := range c.VolumeMounts {
			mounts = append(mounts, m.MountPath)
			if path.Clean(m.MountPath) != path.Clean(dir) {
				continue
			}
			if m.SubPath != "" {
				return nil, fmt.Errorf("%s is mounted with subPath, which the kubelet never updates (kubernetes#50345)", dir)
			}
			for _, v := range pv.Spec.Volumes {
				if v.Name == m.Name && v.ConfigMap != nil {
					return &apiVolume{dir: dir, configMap: v.ConfigMap.Name, items: v.ConfigMap.Items}, nil
				}
			}
			return nil, fmt.Errorf("volume %s mounted at %s is not a ConfigMap volume", m.Name, dir)
		}
	}
	return nil, fmt.Errorf("no volume of the pod is mounted at %s (mounts: %s)", dir, strings.Join(mounts, ", "))
}

// Run watches each ConfigMap until ctx ends: once, for all the volumes
// that mount it.
func (s *APISource) Run(ctx context.Context) {
	byName := map[string][]*apiVolume{}
	for _, v := range s.vols {
		byName[v.configMap] = append(byName[v.configMap], v)
	}
	var wg sync.WaitGroup
	for name, vols := range byName {
		wg.Go(func() {
			sets, follow := s.api.ConfigMap(ctx, name, func(op string, err error) {
				s.log.Warn("reload: watching a ConfigMap through the API; the volume is the fallback", "configmap", name, "op", op, "error", err.Error())
			})
			for {
				select {
				case <-ctx.Done():
					return
				case set, ok := <-sets:
					switch {
					case !ok:
						return
					case len(set) != 1:
						follow() // not there (yet): watch for it
						continue
					}
					for _, v := range vols {
						s.update(v, set[0])
					}
					if imm, _, _ := unstructured.NestedBool(set[0].Object, "immutable"); !imm {
						follow()
					}
				}
			}
		})
	}
	wg.Wait()
}

// update writes the ConfigMap's files to the copy when they changed, and
// says so.
func (s *APISource) update(v *apiVolume, cm *unstructured.Unstructured) {
	if imm, _, _ := unstructured.NestedBool(cm.Object, "immutable"); imm && !v.immutable {
		v.immutable = true
		s.log.Warn("reload: the ConfigMap is immutable: it never changes, so this volume never reloads (a new config is a new ConfigMap and a rollout)", "configmap", v.configMap)
	}
	files, err := configMapFiles(cm, v.items)
	if err != nil {
		s.log.Warn("reload: ConfigMap not usable; the volume is the fallback", "configmap", v.configMap, "error", err.Error())
		return
	}
	h := filesHash(files)
	s.mu.Lock()
	defer s.mu.Unlock()
	if v.seen[h] {
		// Delivered before (a re-list): not news. After a fallback to
		// the volume it must not bring the older copy back.
		return
	}
	v.seen[h] = true
	if err := WriteVolume(v.copy, files); err != nil {
		s.log.Warn("reload: cannot write the ConfigMap's copy; the volume is the fallback", "configmap", v.configMap, "error", err.Error())
		delete(s.overlay, v.dir)
		return
	}
	v.current = h
	s.overlay[v.dir] = v.copy
	// Every ConfigMap updated before the pass is named by it, not the
	// first alone: one updated while another's signal waited was said as
	// the other's change.
	s.pending[v.configMap] = true
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Changed says a copy was updated: Updated names which.
func (s *APISource) Changed() <-chan struct{} { return s.changed }

// Updated returns the ConfigMaps whose copies were updated since it last
// did, sorted.
func (s *APISource) Updated() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := slices.Sorted(maps.Keys(s.pending))
	clear(s.pending)
	return names
}

// Reconcile runs before a pass the volume watcher asked for: a volume that
// shows content the API never delivered is newer than the copy (the API
// was unreachable), so the render reads it again.
func (s *APISource) Reconcile() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.vols {
		files, err := volumeFiles(v.host)
		if err != nil || s.overlay[v.dir] == "" {
			continue
		}
		if h := filesHash(files); h != v.current && !v.seen[h] {
			s.log.Info("reload: the volume is newer than the ConfigMap the API gave; reading the volume", "configmap", v.configMap, "dir", v.dir)
			delete(s.overlay, v.dir)
		}
	}
}

// Current maps each volume whose copy is in use to that copy.
func (s *APISource) Current() render.Overlay {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(render.Overlay, len(s.overlay))
	for k, v := range s.overlay {
		out[k] = v
	}
	return out
}

// configMapFiles are the files a ConfigMap volume shows: every key of data
// and binaryData under its own name, or the items' paths.
func configMapFiles(cm *unstructured.Unstructured, items []keyPath) (map[string][]byte, error) {
	all := map[string][]byte{}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	for k, v := range data {
		all[k] = []byte(v)
	}
	bin, _, _ := unstructured.NestedStringMap(cm.Object, "binaryData")
	for k, v := range bin {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("binaryData[%s]: %w", k, err)
		}
		all[k] = b
	}
	if items == nil {
		return all, nil
	}
	out := map[string][]byte{}
	for _, it := range items {
		b, ok := all[it.Key]
		if !ok {
			return nil, fmt.Errorf("items: key %s is not in the ConfigMap", it.Key)
		}
		out[it.Path] = b
	}
	return out, nil
}

// volumeFiles reads a volume's files through its ..data, leaving out the
// kubelet's dot entries.
func volumeFiles(dir string) (map[string][]byte, error) {
	root := dir
	if t, err := os.Readlink(filepath.Join(dir, "..data")); err == nil {
		root = filepath.Join(dir, t)
	}
	out := map[string][]byte{}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root && strings.HasPrefix(e.Name(), "..") {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil // a link to a directory or nowhere
		}
		rel, _ := filepath.Rel(root, p)
		out[filepath.ToSlash(rel)] = b
		return nil
	})
	return out, err
}

// filesHash names a set of files by their names and contents.
func filesHash(files map[string][]byte) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(h, "%s\x00%d\x00", k, len(files[k]))
		h.Write(files[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// SourceHash names what the watched volumes hold, the same in every
// replica: each directory's files (through ..data for a kubelet volume,
// leaving out the kubelet's own dot entries), names and contents.
func SourceHash(dirs []string) (string, error) {
	all := map[string][]byte{}
	for _, d := range dirs {
		files, err := volumeFiles(d)
		if err != nil {
			return "", err
		}
		for k, b := range files {
			all[filepath.Base(d)+"/"+k] = b
		}
	}
	return filesHash(all), nil
}
