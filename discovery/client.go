package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Kube reaches the API server through the dynamic client alone, and decodes
// the few fields the checks read into local structs (objects.go). client-go's
// typed clientsets register every API group, and k8s.io/api's types bring
// their generated methods: together about 10 MB of binary the agent does not
// use.
type Kube struct {
	dynamic dynamic.Interface
	http    *http.Client
	host    string
	log     *slog.Logger // debug: every LIST and WATCH, for an operator counting requests
	// told holds the verbs and resources (verb resource.group/namespace)
	// the API server refused, each told once; refusals counts them all.
	told     sync.Map
	refusals *prometheus.CounterVec
	// OnRefused, when set, is told once per verb and resource that the
	// API server refused and how the lookup works around it.
	OnRefused func(msg string)
}

// The resources the checks watch.
var (
	podsGVR           = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	endpointsGVR      = schema.GroupVersionResource{Version: "v1", Resource: "endpoints"}
	eventsGVR         = schema.GroupVersionResource{Version: "v1", Resource: "events"}
	endpointSlicesGVR = schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	jobsGVR           = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	daemonSetsGVR     = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}
)

// NewKube builds the clients from one rest.Config. It makes no request.
// log (nil: none) gets a debug line for every LIST and WATCH.
func NewKube(cfg *rest.Config, log *slog.Logger) (*Kube, error) {
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Kube{dynamic: d, http: hc, host: strings.TrimSuffix(cfg.Host, "/"), log: log,
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kolla_agent_api_watch_refused_total",
			Help: "Lookups whose verb the API server refused (403), by resource and verb: a refused watch polls with LIST instead, a refused list of one object by name polls with GET.",
		}, []string{"resource", "verb"}),
	}, nil
}

// Register adds the client's metrics to reg.
func (k *Kube) Register(reg prometheus.Registerer) error { return reg.Register(k.refusals) }

// refused is told when the API server refuses a verb of a lookup: a
// refused watch polls with LIST, a refused list of one object by name polls
// with GET. The first refusal of each verb, resource and namespace is
// logged at warning level with the rule that would fix it, and told to
// OnRefused (the agent posts an Event).
func (k *Kube) refused(gvr schema.GroupVersionResource, ns, verb string, err error) {
	res := gvr.GroupResource().String()
	k.refusals.WithLabelValues(res, verb).Inc()
	if _, told := k.told.LoadOrStore(verb+" "+res+"/"+ns, true); told {
		return
	}
	instead, grant, need := "LIST", "list, watch", "the verb watch"
	if verb == "list" {
		instead, grant, need = "GET", "get, list, watch", "the verbs list and watch"
	}
	rule := fmt.Sprintf(`{apiGroups: [%q], resources: [%q], verbs: [%s]}`, gvr.Group, gvr.Resource, grant)
	short := fmt.Sprintf("API %s refused: polling with %s every 2 s instead, as kubernetes-entrypoint does; to be told of changes at once, grant %s on this resource in the pod's Role", verb, instead, need)
	msg := fmt.Sprintf("API %s of %s refused: polling with %s every 2 s instead; to be told of changes at once, grant %s in the pod's Role: %s", verb, res, instead, need, rule)
	k.log.Warn(short, "resource", res, "namespace", ns, "rule", rule, "error", err.Error())
	if k.OnRefused != nil {
		k.OnRefused(msg)
	}
}

// in lists and watches one resource of one namespace ("" for cluster scope).
// At debug level its requests are logged.
func (k *Kube) in(gvr schema.GroupVersionResource, ns string) lister {
	r := k.dynamic.Resource(gvr)
	var l lister = r
	if ns != "" {
		l = r.Namespace(ns)
	}
	return k.wrap(l, gvr, ns)
}

// jobs lists and watches a namespace's Jobs in the API server's Table form
// (jobtable.go), as in does the other resources; wants (nil: all) says
// which failed Jobs are read whole.
func (k *Kube) jobs(ns string, wants func(string) bool) lister {
	return k.wrap(k.jobTable(ns, wants), jobsGVR, ns)
}

// wrap logs l's requests at debug level and tells the Kube of refusals.
func (k *Kube) wrap(l lister, gvr schema.GroupVersionResource, ns string) lister {
	if k.log.Enabled(context.Background(), slog.LevelDebug) {
		l = loggedLister{lister: l, log: k.log.With("resource", gvr.GroupResource().String(), "namespace", ns)}
	}
	return refusalLister{lister: l, onRefused: func(verb string, err error) { k.refused(gvr, ns, verb, err) }}
}

// refusalLister tells the Kube when a watch is refused (see watchSet).
type refusalLister struct {
	lister
	onRefused func(verb string, err error)
}

func (l refusalLister) refused(verb string, err error) { l.onRefused(verb, err) }

// loggedLister says at debug level which requests the agent makes: a
// narrowed LIST, and a WATCH from its resourceVersion only for a caller the
// list did not settle. Never a watch-list (sendInitialEvents), which an etcd
// without progress requests cannot serve.
type loggedLister struct {
	lister
	log *slog.Logger
}

func (l loggedLister) List(ctx context.Context, o metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	list, err := l.lister.List(ctx, o)
	if err != nil {
		l.log.Debug("API list", "labels", o.LabelSelector, "fields", o.FieldSelector, "error", err.Error())
	} else {
		l.log.Debug("API list", "labels", o.LabelSelector, "fields", o.FieldSelector, "items", len(list.Items), "resourceVersion", list.GetResourceVersion())
	}
	return list, err
}

func (l loggedLister) Get(ctx context.Context, name string, o metav1.GetOptions, sub ...string) (*unstructured.Unstructured, error) {
	u, err := l.lister.Get(ctx, name, o, sub...)
	if err != nil {
		l.log.Debug("API get", "name", name, "error", err.Error())
	} else {
		l.log.Debug("API get", "name", name, "resourceVersion", u.GetResourceVersion())
	}
	return u, err
}

func (l loggedLister) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	wi, err := l.lister.Watch(ctx, o)
	attrs := []any{"labels", o.LabelSelector, "fields", o.FieldSelector, "from", o.ResourceVersion}
	if err != nil {
		attrs = append(attrs, "error", err.Error())
	}
	l.log.Debug("API watch", attrs...)
	return wi, err
}

// getPod GETs one pod (the agent's own).
func (k *Kube) getPod(ctx context.Context, ns, name string) (*pod, error) {
	u, err := k.dynamic.Resource(podsGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var p pod
	return &p, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p)
}

// PodRef is what an Event needs to name a pod.
type PodRef struct{ Namespace, Name, UID, ResourceVersion, NodeName string }

// PodRef GETs the pod and returns its reference.
func (k *Kube) PodRef(ctx context.Context, ns, name string) (PodRef, error) {
	p, err := k.getPod(ctx, ns, name)
	if err != nil {
		return PodRef{}, err
	}
	return PodRef{Namespace: ns, Name: name, UID: string(p.UID), ResourceVersion: p.ResourceVersion, NodeName: p.Spec.NodeName}, nil
}

// CreateEvent posts a core/v1 Event, given as its JSON fields.
func (k *Kube) CreateEvent(ctx context.Context, ns string, ev map[string]any) error {
	_, err := k.dynamic.Resource(eventsGVR).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: ev}, metav1.CreateOptions{})
	return err
}

// apiResources asks API discovery which resources a group/version serves:
// one GET, decoded as the API's own APIResourceList.
func (k *Kube) apiResources(ctx context.Context, gv schema.GroupVersion) (*metav1.APIResourceList, error) {
	path := "/apis/" + gv.Group + "/" + gv.Version
	if gv.Group == "" {
		path = "/api/" + gv.Version
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.host+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: gv.Group}, gv.Version)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	var l metav1.APIResourceList
	return &l, json.Unmarshal(body, &l)
}
