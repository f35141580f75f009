package discovery

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Annotations on a Service that say how users outside the cluster reach it,
// where the cluster cannot tell: an operator's floating IP in front of a
// LoadBalancer, the VIP in front of the nodes of a NodePort Service, the
// scheme a TLS-terminating balancer serves.
const (
	AnnotationPublicHost   = "kolla.openstack.org/public-host"
	AnnotationPublicPort   = "kolla.openstack.org/public-port"
	AnnotationPublicScheme = "kolla.openstack.org/public-scheme"
	// AnnotationIngress and AnnotationRoute name the Ingress or the
	// OpenShift Route that exposes a ClusterIP Service, when it is not named
	// as the Service is.
	AnnotationIngress = "kolla.openstack.org/ingress"
	AnnotationRoute   = "kolla.openstack.org/route"
)

var (
	servicesGVR  = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	nodesGVR     = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	ingressesGVR = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}
	routesGVR    = schema.GroupVersionResource{Group: "route.openshift.io", Version: "v1", Resource: "routes"}
)

// Exposure is where users outside the cluster reach a Service.
type Exposure struct {
	Scheme string // http or https
	Host   string // an IP address or a DNS name
	Port   int    // 0: the scheme's default
	// Via says where the address came from ("LoadBalancer ingress",
	// "NodePort on node n1", "Ingress keystone", "annotation").
	Via string
}

// URL is scheme://host[:port]path, the port left out when it is the
// scheme's default.
func (e Exposure) URL(path string) string {
	host := e.Host
	if strings.Contains(host, ":") { // IPv6
		host = "[" + host + "]"
	}
	if e.Port != 0 && !(e.Scheme == "http" && e.Port == 80) && !(e.Scheme == "https" && e.Port == 443) {
		host += ":" + strconv.Itoa(e.Port)
	}
	if path != "" && !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return e.Scheme + "://" + host + path
}

// service is what exposure reads of a Service.
type service struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Type  string `json:"type,omitempty"`
		Ports []struct {
			Name     string `json:"name,omitempty"`
			Port     int    `json:"port"`
			NodePort int    `json:"nodePort,omitempty"`
		} `json:"ports,omitempty"`
	} `json:"spec"`
	Status struct {
		LoadBalancer struct {
			Ingress []struct {
				IP       string `json:"ip,omitempty"`
				Hostname string `json:"hostname,omitempty"`
			} `json:"ingress,omitempty"`
		} `json:"loadBalancer"`
	} `json:"status"`
}

type node struct {
	metav1.ObjectMeta `json:"metadata"`
	Status            struct {
		Addresses []struct {
			Type    string `json:"type"`
			Address string `json:"address"`
		} `json:"addresses,omitempty"`
		Conditions []condition `json:"conditions,omitempty"`
	} `json:"status"`
}

type ingress struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		TLS []struct {
			Hosts []string `json:"hosts,omitempty"`
		} `json:"tls,omitempty"`
		Rules []struct {
			Host string `json:"host,omitempty"`
			HTTP *struct {
				Paths []struct {
					Backend struct {
						Service *struct {
							Name string `json:"name"`
						} `json:"service,omitempty"`
					} `json:"backend"`
				} `json:"paths"`
			} `json:"http,omitempty"`
		} `json:"rules,omitempty"`
	} `json:"spec"`
}

// route is what exposure reads of an OpenShift Route (route.openshift.io/v1).
type route struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Host string `json:"host,omitempty"`
		To   struct {
			Kind string `json:"kind,omitempty"`
			Name string `json:"name"`
		} `json:"to"`
		TLS *struct {
			Termination string `json:"termination,omitempty"`
		} `json:"tls,omitempty"`
	} `json:"spec"`
	Status struct {
		Ingress []struct {
			Host       string      `json:"host,omitempty"`
			Conditions []condition `json:"conditions,omitempty"`
		} `json:"ingress,omitempty"`
	} `json:"status"`
}

// fronts is what may expose a ClusterIP Service from outside: its Route
// (where the API serves Routes) and its Ingress, each nil when absent.
type fronts struct {
	route, ingress         string // the names looked for
	rt                     *route
	ing                    *ingress
	routesServed, complete bool // complete: every watch has listed
}

// exposureOf reads where the Service is exposed from what the watches hold:
// the Service, the nodes (NodePort without a public host), and the Route or
// Ingress that names it (ClusterIP). Fields set in ov (the agent's config)
// win over the Service's annotations, which win over what the cluster
// reports. It returns the exposure and an observation: ready with the
// exposure, waiting for what is missing, or failed when the objects cannot
// expose the Service at all.
func exposureOf(what string, svc *service, ov Exposure, nodes []*node, f fronts) (Exposure, Observation) {
	if svc == nil {
		return Exposure{}, waiting("%s does not exist", what)
	}
	if len(svc.Spec.Ports) == 0 {
		return Exposure{}, failed("%s has no ports", what)
	}
	a := svc.Annotations
	port := svc.Spec.Ports[0]
	e := Exposure{Scheme: "http", Port: port.Port}
	if port.Port == 443 || port.Name == "https" {
		e.Scheme = "https"
	}
	switch s := a[AnnotationPublicScheme]; s {
	case "":
	case "http", "https":
		e.Scheme = s
	default:
		return Exposure{}, failed("%s: annotation %s: %q (want http or https)", what, AnnotationPublicScheme, s)
	}
	if p := a[AnnotationPublicPort]; p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Exposure{}, failed("%s: annotation %s: %q is not a port", what, AnnotationPublicPort, p)
		}
		e.Port = n
	}
	portSet := a[AnnotationPublicPort] != "" || ov.Port != 0
	if ov.Scheme != "" {
		e.Scheme = ov.Scheme
	}
	if ov.Port != 0 {
		e.Port = ov.Port
	}
	typ := svc.Spec.Type
	if typ == "" {
		typ = "ClusterIP"
	}
	e.Host, e.Via = a[AnnotationPublicHost], "annotation "+AnnotationPublicHost
	if ov.Host != "" {
		e.Host, e.Via = ov.Host, "agent config"
	}
	if e.Host != "" {
		if typ == "NodePort" && !portSet {
			e.Port = port.NodePort // a VIP in front of the nodes
		}
		return e, ready("%s is exposed at %s (%s)", what, e.URL(""), e.Via)
	}
	switch typ {
	case "LoadBalancer":
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if e.Host = in.IP; e.Host == "" {
				e.Host = in.Hostname
			}
			if e.Host != "" {
				e.Via = "LoadBalancer ingress"
				return e, ready("%s is exposed at %s (%s)", what, e.URL(""), e.Via)
			}
		}
		return Exposure{}, waiting("%s: LoadBalancer has no ingress yet", what)
	case "NodePort":
		if port.NodePort == 0 {
			return Exposure{}, waiting("%s: no nodePort allocated yet", what)
		}
		if !portSet {
			e.Port = port.NodePort
		}
		host, name := nodeAddress(nodes)
		if host == "" {
			return Exposure{}, waiting("%s: NodePort %d, but no ready node has an address (set annotation %s or the agent's exposure config to the VIP in front of the nodes)", what, port.NodePort, AnnotationPublicHost)
		}
		e.Host, e.Via = host, "NodePort on node "+name
		return e, ready("%s is exposed at %s (%s)", what, e.URL(""), e.Via)
	case "ClusterIP":
		if rt := f.rt; rt != nil {
			return routeExposure(what, svc.Name, rt)
		}
		ing := f.ing
		if ing == nil {
			if !f.complete {
				return Exposure{}, waiting("%s: looking for a Route or Ingress", what)
			}
			fronts := "Ingress " + f.ingress
			if f.routesServed {
				fronts = "Route " + f.route + " or " + fronts
			}
			return Exposure{}, failed("%s is of type ClusterIP and no %s exposes it: it has no public address (make it a LoadBalancer or NodePort, set annotation %s, or expose it through a Route or an Ingress)", what, fronts, AnnotationPublicHost)
		}
		host, ok := ingressHost(ing, svc.Name)
		if !ok {
			return Exposure{}, failed("%s: Ingress %s has no rule with a host for service %s", what, ing.Name, svc.Name)
		}
		e = Exposure{Scheme: "http", Host: host, Via: "Ingress " + ing.Name}
		for _, t := range ing.Spec.TLS {
			for _, h := range t.Hosts {
				if h == host {
					e.Scheme = "https"
				}
			}
		}
		return e, ready("%s is exposed at %s (%s)", what, e.URL(""), e.Via)
	}
	return Exposure{}, failed("%s is of type %s: it has no public address", what, typ)
}

// routeExposure: the Route's host, https when it terminates TLS, once a
// router has admitted it (status.ingress[].conditions Admitted=True).
func routeExposure(what, svc string, rt *route) (Exposure, Observation) {
	if rt.Spec.To.Name != svc || (rt.Spec.To.Kind != "" && rt.Spec.To.Kind != "Service") {
		return Exposure{}, failed("%s: Route %s routes to %s %s, not to this Service", what, rt.Name, rt.Spec.To.Kind, rt.Spec.To.Name)
	}
	admitted := ""
	for _, in := range rt.Status.Ingress {
		for _, c := range in.Conditions {
			if c.Type == "Admitted" && c.Status == "True" {
				admitted = in.Host
			}
		}
	}
	if admitted == "" {
		return Exposure{}, waiting("%s: Route %s is not admitted by a router yet", what, rt.Name)
	}
	e := Exposure{Scheme: "http", Host: rt.Spec.Host, Via: "Route " + rt.Name}
	if e.Host == "" {
		e.Host = admitted
	}
	if rt.Spec.TLS != nil {
		e.Scheme = "https"
	}
	return e, ready("%s is exposed at %s (%s)", what, e.URL(""), e.Via)
}

// nodeAddress picks a ready node's ExternalIP, else its InternalIP; nodes
// are taken by name, so every replica picks the same one.
func nodeAddress(nodes []*node) (addr, name string) {
	nodes = slices.Clone(nodes)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	for _, want := range []string{"ExternalIP", "InternalIP"} {
		for _, n := range nodes {
			if !nodeReady(n) {
				continue
			}
			for _, a := range n.Status.Addresses {
				if a.Type == want && net.ParseIP(a.Address) != nil {
					return a.Address, n.Name
				}
			}
		}
	}
	return "", ""
}

func nodeReady(n *node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

// ingressHost is the host of the first rule that routes to the service.
func ingressHost(ing *ingress, svc string) (string, bool) {
	for _, r := range ing.Spec.Rules {
		if r.Host == "" || r.HTTP == nil {
			continue
		}
		for _, p := range r.HTTP.Paths {
			if p.Backend.Service != nil && p.Backend.Service.Name == svc {
				return r.Host, true
			}
		}
	}
	return "", false
}

func decodeOne[T any](set []*unstructured.Unstructured) *T {
	for _, u := range set {
		var t T
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &t) == nil {
			return &t
		}
	}
	return nil
}

// waitExposed: the Service has a public address. One watch of the Service;
// for a NodePort Service without a public host, one of the nodes; for a
// ClusterIP Service, one of the Ingress named as the Service (or by its
// annotation). The state is read again after every change.
func (w *Waiter) waitExposed(ctx context.Context, d Dependency, report func(Observation)) error {
	_, err := w.followExposure(ctx, d, report)
	return err
}

// Exposure waits until the Service ns/name has a public address and
// returns it (template functions, registration).
func (w *Waiter) Exposure(ctx context.Context, ns, name string) (Exposure, error) {
	d := Dependency{Kind: KindExposed, Namespace: ns, Name: name}
	last := ""
	return w.followExposure(step(ctx), d, func(o Observation) {
		if o.State != Ready && o.Detail != last { // what it waits for, once per change
			last = o.Detail
			w.log.Info("waiting for a public address", "service", ns+"/"+name, "state", string(o.State), "detail", o.Detail)
		}
	})
}

func (w *Waiter) followExposure(ctx context.Context, d Dependency, report func(Observation)) (Exposure, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ns := w.namespace(d)
	what := fmt.Sprintf("service %s/%s", ns, d.Name)
	k := w.cfg.Kube
	trouble := apiTrouble(report)
	svcs := k.Observe(ctx, servicesGVR, ns, Selector{Name: d.Name}, trouble)
	var nodesObs, ingObs, routeObs *Observed
	var svc *service
	var nodes []*node
	var f fronts
	ov := w.cfg.Public[ns+"/"+d.Name]
	// What is observed is followed only once every list is in and the
	// exposure is still not settled: an exposure the lists settle costs a
	// LIST per resource and no WATCH.
	svcListed, nodesListed, ingListed, routeListed := false, false, false, false
	for {
		select {
		case <-ctx.Done():
			return Exposure{}, ctx.Err()
		case set := <-svcs.C:
			svc, svcListed = decodeOne[service](set), true
		case set := <-chanOf(nodesObs):
			nodes, nodesListed = decodeAll[node](anys(set)), true
		case set := <-chanOf(ingObs):
			f.ing, ingListed = decodeOne[ingress](set), true
		case set := <-chanOf(routeObs):
			f.rt, routeListed = decodeOne[route](set), true
		}
		if svc != nil && svc.Annotations[AnnotationPublicHost] == "" && ov.Host == "" {
			switch svc.Spec.Type {
			case "NodePort":
				if nodesObs == nil {
					nodesObs = k.Observe(ctx, nodesGVR, "", Selector{}, trouble)
				}
			case "", "ClusterIP":
				if ingObs == nil {
					f.ingress, f.route = nameOr(svc.Annotations[AnnotationIngress], svc.Name), nameOr(svc.Annotations[AnnotationRoute], svc.Name)
					ingObs = k.Observe(ctx, ingressesGVR, ns, Selector{Name: f.ingress}, trouble)
					// Routes exist only where OpenShift's API (or its CRD)
					// serves them: ask API discovery once.
					if f.routesServed = k.serves(ctx, routesGVR); f.routesServed {
						routeObs = k.Observe(ctx, routesGVR, ns, Selector{Name: f.route}, trouble)
					}
				}
				f.complete = ingListed && (routeListed || !f.routesServed)
			}
		}
		e, o := exposureOf(what, svc, ov, nodes, f)
		if done, err := settle(ctx, d, o, report); done {
			return e, err
		}
		if svcListed && (nodesObs == nil || nodesListed) && (ingObs == nil || ingListed) && (routeObs == nil || routeListed) {
			for _, ob := range []*Observed{svcs, nodesObs, ingObs, routeObs} {
				if ob != nil {
					ob.Follow()
				}
			}
		}
	}
}

// chanOf is o's channel, nil (never ready in a select) for no observation.
func chanOf(o *Observed) <-chan []*unstructured.Unstructured {
	if o == nil {
		return nil
	}
	return o.C
}

func nameOr(name, def string) string {
	if name != "" {
		return name
	}
	return def
}

// serves reports whether the API serves the resource; an error (the API
// unreachable) counts as no.
func (k *Kube) serves(ctx context.Context, gvr schema.GroupVersionResource) bool {
	l, err := k.apiResources(ctx, gvr.GroupVersion())
	if err != nil {
		return false
	}
	for _, r := range l.APIResources {
		if r.Name == gvr.Resource {
			return true
		}
	}
	return false
}

func anys(set []*unstructured.Unstructured) []any {
	out := make([]any, len(set))
	for i, u := range set {
		out[i] = u
	}
	return out
}

// ServicePort waits until the Service ns/name exists and returns its first
// port and the scheme it implies (https for 443 or a port named https): what
// an in-cluster URL of the Service needs.
func (w *Waiter) ServicePort(ctx context.Context, ns, name string) (scheme string, port int, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	what := fmt.Sprintf("service %s/%s", ns, name)
	var last atomic.Pointer[error] // written by the watch's goroutine
	svcs := w.cfg.Kube.Observe(ctx, servicesGVR, ns, Selector{Name: name}, func(op string, err error) {
		e := fmt.Errorf("API %s: %v", op, err)
		last.Store(&e)
	})
	for {
		select {
		case <-ctx.Done():
			if last := last.Load(); last != nil {
				return "", 0, fmt.Errorf("%s: %w (last: %v)", what, ctx.Err(), *last)
			}
			return "", 0, fmt.Errorf("%s does not exist: %w", what, ctx.Err())
		case set := <-svcs.Next():
			svc := decodeOne[service](set)
			if svc == nil {
				continue
			}
			if len(svc.Spec.Ports) == 0 {
				return "", 0, fmt.Errorf("%s has no ports", what)
			}
			p := svc.Spec.Ports[0]
			scheme = "http"
			if p.Port == 443 || p.Name == "https" {
				scheme = "https"
			}
			return scheme, p.Port, nil
		}
	}
}
