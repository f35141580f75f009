package bootstrap

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kolla-agent/kolla-agent/retry"
)

// Entry is the record of one finished step. It lives in the ConfigMap
// <name>-bootstrap, which a Job's deletion (TTL, cleanup) does not remove.
type Entry struct {
	Version string `json:"version"`
	Phase   string `json:"phase,omitempty"`
	// Job and UID name the Job that did the work (create, wait); Holder the
	// pod that held the Lease (lease).
	Job      string `json:"job,omitempty"`
	UID      string `json:"uid,omitempty"`
	Holder   string `json:"holder,omitempty"`
	Finished string `json:"finished"`
	// RecordedBy is the pod whose agent wrote the entry.
	RecordedBy string `json:"recordedBy,omitempty"`
}

// maxEntries bounds the record: the oldest entries go first. A version
// older than the last few is not coming back.
const maxEntries = 32

// RecordName is the record ConfigMap's name.
func RecordName(name string) string { return name + "-bootstrap" }

// key is the entry's data key: ConfigMap keys allow [-._a-zA-Z0-9].
func key(s Step) string {
	if s.Phase == "" {
		return "bootstrap." + s.Version
	}
	return s.Phase + "." + s.Version
}

// recorded reads the record once (one GET) and returns the step's entry,
// nil when there is none. A missing ConfigMap is no entry.
func (c *Coordinator) recorded(ctx context.Context, s Step) (*Entry, error) {
	u, err := c.cfg.Kube.Resource(configMapsGVR, c.cfg.Namespace).Get(ctx, RecordName(c.cfg.Name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return entryOf(u, s)
}

func entryOf(u *unstructured.Unstructured, s Step) (*Entry, error) {
	v, ok, _ := unstructured.NestedString(u.Object, "data", key(s))
	if !ok {
		return nil, nil
	}
	var e Entry
	if err := json.Unmarshal([]byte(v), &e); err != nil {
		return nil, fmt.Errorf("configmap %s: data.%s: %v", u.GetName(), key(s), err)
	}
	return &e, nil
}

// record writes the step's entry unless one is there already, and returns
// the entry that stands. Each write carries the resourceVersion it was based
// on, so of two replicas (or two Lease holders, a Lease being no fence) that
// race, exactly one entry is written and the other finds it.
func (c *Coordinator) record(ctx context.Context, s Step, e Entry) (*Entry, bool, error) {
	cms := c.cfg.Kube.Resource(configMapsGVR, c.cfg.Namespace)
	name := RecordName(c.cfg.Name)
	e.Version, e.Phase, e.RecordedBy = s.Version, s.Phase, c.cfg.PodName
	if e.Finished == "" {
		e.Finished = time.Now().UTC().Format(time.RFC3339)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, false, err
	}
	bo := retry.Step()
	for {
		u, err := cms.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			cm := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": name, "labels": map[string]any{LabelName: c.cfg.Name}},
				"data":     map[string]any{key(s): string(b)},
			}}
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			if err == nil {
				return &e, true, nil
			}
		case err == nil:
			if old, _ := entryOf(u, s); old != nil {
				return old, false, nil
			}
			data, _, _ := unstructured.NestedStringMap(u.Object, "data")
			if data == nil {
				data = map[string]string{}
			}
			data[key(s)] = string(b)
			prune(data)
			if err = unstructured.SetNestedStringMap(u.Object, data, "data"); err != nil {
				return nil, false, err
			}
			// u carries the resourceVersion read above: a write in
			// between makes this one fail with Conflict, and we read again.
			_, err = cms.Update(ctx, u, metav1.UpdateOptions{})
			if err == nil {
				return &e, true, nil
			}
		}
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			continue // someone wrote first: read what they wrote
		}
		c.log.Warn("could not write the bootstrap record; retrying", "configmap", c.cfg.Namespace+"/"+name, "error", err.Error())
		if !retry.Sleep(ctx, nil, bo.Step()) {
			return nil, false, fmt.Errorf("writing the record %s: %w (last error: %v)", name, ctx.Err(), err)
		}
	}
}

// prune keeps the newest maxEntries entries.
func prune(data map[string]string) {
	if len(data) <= maxEntries {
		return
	}
	type kv struct{ k, finished string }
	all := make([]kv, 0, len(data))
	for k, v := range data {
		var e Entry
		_ = json.Unmarshal([]byte(v), &e) // an unreadable entry sorts first and goes
		all = append(all, kv{k, e.Finished})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].finished < all[j].finished })
	for _, x := range all[:len(all)-maxEntries] {
		delete(data, x.k)
	}
}
