package discovery

import (
	"context"
	"encoding/json"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Kube reaches the API server with REST clients over a scheme that holds only
// the four API groups the agent reads. client-go's typed clientsets (and its
// discovery client) register every API group through kubernetes/scheme:
// about 5 MB of binary for types the agent never sees.
type Kube struct {
	core, apps, batch, slices rest.Interface
	dynamic                   dynamic.Interface
}

// NewKube builds the clients from one rest.Config. It makes no request.
func NewKube(cfg *rest.Config) (*Kube, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, discoveryv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()
	client := func(gv schema.GroupVersion) (rest.Interface, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion = &gv
		c.APIPath = "/apis"
		if gv.Group == "" {
			c.APIPath = "/api"
		}
		c.NegotiatedSerializer = codecs
		return rest.RESTClientFor(c)
	}
	var k Kube
	var err error
	if k.core, err = client(corev1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if k.apps, err = client(appsv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if k.batch, err = client(batchv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if k.slices, err = client(discoveryv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if k.dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return &k, nil
}

// resource lists and watches one resource of one namespace.
type resource[L runtime.Object] struct {
	c        rest.Interface
	ns, name string
	newList  func() L
}

func (r resource[L]) List(ctx context.Context, o metav1.ListOptions) (L, error) {
	l := r.newList()
	err := r.c.Get().Namespace(r.ns).Resource(r.name).VersionedParams(&o, metav1.ParameterCodec).Do(ctx).Into(l)
	return l, err
}

func (r resource[L]) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	o.Watch = true
	return r.c.Get().Namespace(r.ns).Resource(r.name).VersionedParams(&o, metav1.ParameterCodec).Watch(ctx)
}

func (k *Kube) pods(ns string) lister[*corev1.PodList] {
	return resource[*corev1.PodList]{k.core, ns, "pods", func() *corev1.PodList { return &corev1.PodList{} }}
}

func (k *Kube) endpoints(ns string) lister[*corev1.EndpointsList] {
	return resource[*corev1.EndpointsList]{k.core, ns, "endpoints", func() *corev1.EndpointsList { return &corev1.EndpointsList{} }}
}

func (k *Kube) endpointSlices(ns string) lister[*discoveryv1.EndpointSliceList] {
	return resource[*discoveryv1.EndpointSliceList]{k.slices, ns, "endpointslices", func() *discoveryv1.EndpointSliceList { return &discoveryv1.EndpointSliceList{} }}
}

func (k *Kube) jobs(ns string) lister[*batchv1.JobList] {
	return resource[*batchv1.JobList]{k.batch, ns, "jobs", func() *batchv1.JobList { return &batchv1.JobList{} }}
}

func (k *Kube) daemonSets(ns string) lister[*appsv1.DaemonSetList] {
	return resource[*appsv1.DaemonSetList]{k.apps, ns, "daemonsets", func() *appsv1.DaemonSetList { return &appsv1.DaemonSetList{} }}
}

// Pod GETs one pod (the agent's own).
func (k *Kube) Pod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	var p corev1.Pod
	err := k.core.Get().Namespace(ns).Resource("pods").Name(name).Do(ctx).Into(&p)
	return &p, err
}

// CreateEvent posts a core/v1 Event.
func (k *Kube) CreateEvent(ctx context.Context, ev *corev1.Event) error {
	return k.core.Post().Namespace(ev.Namespace).Resource("events").Body(ev).Do(ctx).Error()
}

// apiResources asks API discovery which resources a group/version serves.
func (k *Kube) apiResources(ctx context.Context, gv schema.GroupVersion) (*metav1.APIResourceList, error) {
	path := "/apis/" + gv.Group + "/" + gv.Version
	if gv.Group == "" {
		path = "/api/" + gv.Version
	}
	b, err := k.core.Get().AbsPath(path).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var l metav1.APIResourceList
	return &l, json.Unmarshal(b, &l)
}
