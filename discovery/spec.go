package discovery

import (
	"fmt"
	"github.com/kolla-agent/kolla-agent/redact"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Kind names a type of dependency; it is also the prefix of the wait syntax.
type Kind string

const (
	KindDNS       Kind = "dns"
	KindTCP       Kind = "tcp"
	KindHTTP      Kind = "http" // http:// and https:// URLs
	KindFile      Kind = "file"
	KindSocket    Kind = "socket"
	KindService   Kind = "service"
	KindJob       Kind = "job"
	KindDaemonSet Kind = "daemonset"
	KindPod       Kind = "pod"
	KindContainer Kind = "container"
	KindResource  Kind = "resource"
	KindExposed   Kind = "exposed" // a Service's public address
)

// NeedsAPI reports whether a dependency of this kind is resolved through the
// Kubernetes API server.
func (k Kind) NeedsAPI() bool {
	switch k {
	case KindService, KindJob, KindDaemonSet, KindPod, KindContainer, KindResource, KindExposed:
		return true
	}
	return false
}

// NeedsPod reports whether resolving this kind needs the agent's own pod
// (its name, or the node it runs on).
func (d Dependency) NeedsPod() bool {
	return d.Kind == KindDaemonSet || d.Kind == KindContainer || (d.Kind == KindPod && d.SameNode)
}

// Dependency is one thing to wait for. Fields not used by its Kind are empty.
type Dependency struct {
	Kind Kind
	// Name: a DNS name (dns), an object name (service, job, daemonset, resource)
	// or a container name (container). Empty for label-selected jobs and pods.
	Name string
	// Namespace of an API object; empty means the agent's own namespace.
	Namespace string
	// Address is HOST:PORT (tcp).
	Address string
	// URL (http).
	URL string
	// Path of a file or Unix socket.
	Path string
	// Labels select jobs or pods.
	Labels map[string]string
	// SameNode restricts a pod dependency to the agent's own node.
	SameNode bool
	// Resource names the API type of a resource dependency and what to match.
	Resource *ResourceRef
	// ExpectStatus lists the HTTP status codes that count as up; empty means
	// any 2xx or 3xx.
	ExpectStatus []int
	// Timeout bounds this dependency alone; 0 leaves only the overall timeout.
	Timeout time.Duration
}

// ResourceRef names an API type by group, version and kind, and the state an
// object of it must reach.
type ResourceRef struct {
	Group, Version, Kind string
	// Plural names the resource when the kind alone would not find it
	// (helm-toolkit's "resource"); the wait syntax does not carry it.
	Plural     string
	Fields     []FieldMatch
	Conditions []ConditionMatch
}

// FieldMatch requires the value at a dotted path of the object to equal Value.
// Value is compared as the field's own type (bool, number or string).
type FieldMatch struct{ Path, Value string }

// ConditionMatch requires status.conditions to hold Type with Status.
type ConditionMatch struct{ Type, Status string }

// String renders the dependency in the wait syntax; Parse(d.String()) gives d
// back (but for Timeout and ExpectStatus, which the syntax does not carry,
// and a URL's credentials, which it hides).
func (d Dependency) String() string {
	ns := func(rest string) string {
		if d.Namespace == "" {
			return rest
		}
		return d.Namespace + "/" + rest
	}
	switch d.Kind {
	case KindHTTP:
		return redact.URL(d.URL) // it names the dependency in logs, Events and metric labels
	case KindTCP:
		return "tcp:" + d.Address
	case KindFile, KindSocket:
		return string(d.Kind) + ":" + d.Path
	case KindDNS, KindContainer:
		return string(d.Kind) + ":" + d.Name
	case KindService, KindDaemonSet, KindExposed:
		return string(d.Kind) + ":" + ns(d.Name)
	case KindJob:
		if d.Labels != nil {
			return "job:" + ns(FormatLabels(d.Labels))
		}
		return "job:" + ns(d.Name)
	case KindPod:
		s := "pod:" + ns(FormatLabels(d.Labels))
		if d.SameNode {
			s += "@samenode"
		}
		return s
	case KindResource:
		r := d.Resource
		if r == nil {
			return "resource:?"
		}
		group := r.Group
		if group == "" {
			group = "core"
		}
		s := fmt.Sprintf("resource:%s/%s/%s/%s", group, r.Version, r.Kind, ns(d.Name))
		var q []string
		for _, f := range r.Fields {
			q = append(q, f.Path+"="+f.Value)
		}
		for _, c := range r.Conditions {
			if c.Status == "" || c.Status == "True" {
				q = append(q, "condition="+c.Type)
			} else {
				q = append(q, "condition="+c.Type+"="+c.Status)
			}
		}
		if len(q) > 0 {
			s += "?" + strings.Join(q, "&")
		}
		return s
	}
	return string(d.Kind) + ":?"
}

// FormatLabels renders a label set as k=v,... in key order.
func FormatLabels(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

// Parse reads one dependency in the wait syntax:
//
//	dns:NAME  tcp:HOST:PORT  http(s)://...  file:PATH  socket:PATH
//	service:[NS/]NAME  job:[NS/]NAME  job:[NS/]k=v,...  daemonset:[NS/]NAME
//	pod:[NS/]k=v,...[@samenode]  container:NAME
//	resource:GROUP/VERSION/KIND/[NS/]NAME[?field.path=value][&condition=Type[=Status]]
//
// Errors quote the input and say what is wrong with it.
func Parse(s string) (Dependency, error) {
	d, err := parse(s)
	if err != nil {
		if strings.Contains(s, "://") {
			s = redact.URL(s)
		}
		return Dependency{}, fmt.Errorf("dependency %q: %w", s, err)
	}
	return d, nil
}

func parse(s string) (Dependency, error) {
	if strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://") {
		u, err := url.Parse(s)
		if err != nil {
			return Dependency{}, fmt.Errorf("bad URL: %s", redact.ParseError(err))
		}
		if u.Hostname() == "" {
			return Dependency{}, fmt.Errorf("URL has no host")
		}
		if strings.HasSuffix(u.Host, ":") {
			// "h:" reads as a user and the start of a password too
			// (h:#@x): refused rather than guessed, here and in logs.
			return Dependency{}, fmt.Errorf("URL has an empty port")
		}
		return Dependency{Kind: KindHTTP, URL: s}, nil
	}
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Dependency{}, fmt.Errorf("want TYPE:VALUE or an http(s) URL")
	}
	if rest == "" {
		return Dependency{}, fmt.Errorf("empty value after %q", kind+":")
	}
	d := Dependency{Kind: Kind(kind)}
	switch d.Kind {
	case KindDNS:
		if err := validDNSName(rest); err != nil {
			return Dependency{}, err
		}
		d.Name = rest
	case KindTCP:
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			return Dependency{}, fmt.Errorf("want tcp:HOST:PORT: %v", err)
		}
		if host == "" {
			return Dependency{}, fmt.Errorf("empty host")
		}
		if err := validPort(port); err != nil {
			return Dependency{}, err
		}
		d.Address = rest
	case KindFile, KindSocket:
		d.Path = rest
	case KindContainer:
		if errs := validation.IsDNS1123Label(rest); len(errs) > 0 {
			return Dependency{}, fmt.Errorf("container name %q: %s", rest, strings.Join(errs, "; "))
		}
		d.Name = rest
	case KindService, KindDaemonSet, KindExposed:
		ns, name, err := splitNamespace(rest)
		if err != nil {
			return Dependency{}, err
		}
		if err := validObjectName(name); err != nil {
			return Dependency{}, err
		}
		d.Namespace, d.Name = ns, name
	case KindJob:
		if strings.Contains(rest, "=") {
			ns, labels, err := parseSelector(rest)
			if err != nil {
				return Dependency{}, err
			}
			d.Namespace, d.Labels = ns, labels
			break
		}
		ns, name, err := splitNamespace(rest)
		if err != nil {
			return Dependency{}, err
		}
		if err := validObjectName(name); err != nil {
			return Dependency{}, err
		}
		d.Namespace, d.Name = ns, name
	case KindPod:
		if before, ok := strings.CutSuffix(rest, "@samenode"); ok {
			rest, d.SameNode = before, true
		}
		ns, labels, err := parseSelector(rest)
		if err != nil {
			return Dependency{}, err
		}
		d.Namespace, d.Labels = ns, labels
	case KindResource:
		return parseResource(rest)
	default:
		return Dependency{}, fmt.Errorf("unknown type %q (want dns, tcp, http(s), file, socket, service, job, daemonset, pod, container or resource)", kind)
	}
	return d, nil
}

func parseResource(rest string) (Dependency, error) {
	path, query, _ := strings.Cut(rest, "?")
	parts := strings.Split(path, "/")
	if len(parts) != 4 && len(parts) != 5 {
		return Dependency{}, fmt.Errorf("want resource:GROUP/VERSION/KIND/[NS/]NAME")
	}
	r := &ResourceRef{Group: parts[0], Version: parts[1], Kind: parts[2]}
	if r.Group == "core" {
		r.Group = ""
	}
	if r.Version == "" || r.Kind == "" {
		return Dependency{}, fmt.Errorf("empty version or kind")
	}
	if r.Group != "" {
		if errs := validation.IsDNS1123Subdomain(r.Group); len(errs) > 0 {
			return Dependency{}, fmt.Errorf("group %q: %s", r.Group, strings.Join(errs, "; "))
		}
	}
	d := Dependency{Kind: KindResource, Resource: r, Name: parts[len(parts)-1]}
	if len(parts) == 5 {
		d.Namespace = parts[3]
		if errs := validation.IsDNS1123Label(d.Namespace); len(errs) > 0 {
			return Dependency{}, fmt.Errorf("namespace %q: %s", d.Namespace, strings.Join(errs, "; "))
		}
	}
	if err := validObjectName(d.Name); err != nil {
		return Dependency{}, err
	}
	if query == "" {
		return d, nil
	}
	for _, term := range strings.Split(query, "&") {
		k, v, ok := strings.Cut(term, "=")
		if !ok || k == "" {
			return Dependency{}, fmt.Errorf("query term %q: want field.path=value or condition=Type[=Status]", term)
		}
		if k == "condition" {
			typ, status, _ := strings.Cut(v, "=")
			if typ == "" {
				return Dependency{}, fmt.Errorf("query term %q: empty condition type", term)
			}
			if status == "" {
				status = "True"
			}
			r.Conditions = append(r.Conditions, ConditionMatch{Type: typ, Status: status})
			continue
		}
		if strings.HasPrefix(k, ".") || strings.HasSuffix(k, ".") || strings.Contains(k, "..") {
			return Dependency{}, fmt.Errorf("query term %q: bad field path", term)
		}
		r.Fields = append(r.Fields, FieldMatch{Path: k, Value: v})
	}
	return d, nil
}

// ParseLabels reads k=v,... into a map; keys and values must be valid label
// keys and values, and the set must not be empty.
func ParseLabels(s string) (map[string]string, error) {
	if s == "" {
		return nil, fmt.Errorf("empty label selector")
	}
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("label %q: want key=value", kv)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("label %q given twice", k)
		}
		m[k] = v
	}
	if err := ValidateLabels(m); err != nil {
		return nil, err
	}
	return m, nil
}

// ValidateLabels checks a label set as the API server would.
func ValidateLabels(m map[string]string) error {
	if len(m) == 0 {
		return fmt.Errorf("empty label selector")
	}
	if _, err := labels.ValidatedSelectorFromSet(m); err != nil {
		return fmt.Errorf("label selector: %v", err)
	}
	return nil
}

func splitNamespace(s string) (ns, rest string, err error) {
	ns, rest, ok := strings.Cut(s, "/")
	if !ok {
		return "", s, nil
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return "", "", fmt.Errorf("namespace %q: %s", ns, strings.Join(errs, "; "))
	}
	if rest == "" {
		return "", "", fmt.Errorf("empty name after namespace %q", ns)
	}
	return ns, rest, nil
}

// parseSelector reads [NS/]k=v,... . A label key may carry a prefix
// ("app.kubernetes.io/name=keystone"), so the text before the first "/" is the
// namespace only when it is a DNS-1123 label (no dots, no "=", no ","); else
// the whole text is the selector. Without a namespace, a key whose prefix is a
// DNS-1123 label ("foo/bar") is refused: String() would render it first or
// later and it would read back as namespace "foo".
func parseSelector(s string) (ns string, m map[string]string, err error) {
	if before, after, ok := strings.Cut(s, "/"); ok && len(validation.IsDNS1123Label(before)) == 0 {
		ns, s = before, after
	}
	if m, err = ParseLabels(s); err != nil {
		return "", nil, err
	}
	if ns == "" {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if prefix, _, ok := strings.Cut(k, "/"); ok && len(validation.IsDNS1123Label(prefix)) == 0 {
				return "", nil, fmt.Errorf("label %q: prefix %q reads as a namespace; give the namespace first (NS/k=v,...)", k, prefix)
			}
		}
	}
	return ns, m, nil
}

func validObjectName(name string) error {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("name %q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

func validDNSName(name string) error {
	n := strings.TrimSuffix(name, ".")
	if n == "" || len(n) > 253 {
		return fmt.Errorf("DNS name %q: empty or longer than 253 characters", name)
	}
	for _, label := range strings.Split(n, ".") {
		// SRV names have _service._proto labels; otherwise host labels.
		l := strings.TrimPrefix(label, "_")
		if l == "" || len(label) > 63 {
			return fmt.Errorf("DNS name %q: bad label %q", name, label)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("DNS name %q: bad character %q in label %q", name, c, label)
			}
		}
	}
	return nil
}

func validPort(p string) error {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q: want a number from 1 to 65535", p)
	}
	return nil
}
