package config

import (
	"fmt"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/kolla-agent/kolla-agent/discovery"
)

// DefaultBootstrapTimeout bounds a bootstrap wait when the config does not.
const DefaultBootstrapTimeout = 10 * time.Minute

// DefaultLeaseDuration is a Lease's leaseDurationSeconds in lease mode, as
// client-go's leader election uses.
const DefaultLeaseDuration = 15 * time.Second

// Bootstrap modes.
const (
	BootstrapCreate = "create"
	BootstrapWait   = "wait"
	BootstrapLease  = "lease"
)

// Bootstrap is the bootstrap: section: one-time work (db_sync) that runs once
// per version across the replicas, before the service starts.
type Bootstrap struct {
	// Mode: create (the first replica creates a content-named Job), wait
	// (something else creates the Jobs), lease (the replica that holds a
	// Lease runs Command itself). Empty: no bootstrap.
	Mode string `json:"mode,omitempty"`
	// Name prefixes the Job's name and names the Lease and the record
	// ConfigMap (<name>-bootstrap); it is also the value of the
	// kolla.openstack.org/bootstrap label.
	Name string `json:"name,omitempty"`
	// Job is the Job manifest's template (create).
	Job string `json:"job,omitempty"`
	// Command is what the Lease holder runs (lease); in create mode the Job
	// template sees it as .Bootstrap.Command.
	Command string `json:"command,omitempty"`
	// Version names what is bootstrapped; default: a hash of the rendered
	// Job, the phases' commands and the inputs (create); of the commands,
	// the pod's images and the inputs (lease); of the Jobs' names, the
	// pod's images and the inputs (wait).
	Version string `json:"version,omitempty"`
	// Timeout bounds the whole bootstrap; default 10m.
	Timeout Duration `json:"timeout,omitempty"`

	// Jobs are what wait mode waits for: Job names or k=v,... label sets.
	Jobs []string `json:"jobs,omitempty"`
	// Retries recreates a failed Job up to this many times (create).
	Retries int `json:"retries,omitempty"`
	// PermanentExitCodes fail the Job at once, without the backoffLimit's
	// retries (a podFailurePolicy FailJob rule; create).
	PermanentExitCodes []int32 `json:"permanentExitCodes,omitempty"`
	// Inputs are files whose content goes into the version hash, e.g. the
	// config files the Job mounts.
	Inputs []string `json:"inputs,omitempty"`
	// Phases run in order: online schema migrations (expand, migrate
	// before the service starts; contract after the rollout). Empty: one
	// step.
	Phases []Phase `json:"phases,omitempty"`
	// Owner is the workload whose rollout gates afterRollout phases:
	// deployment/NAME or statefulset/NAME; default: the pod's owner.
	Owner string `json:"owner,omitempty"`
	// LeaseDuration is how long a silent Lease holder keeps it (lease).
	LeaseDuration Duration `json:"leaseDuration,omitempty"`
	// PodCondition patches the condition kolla.openstack.org/bootstrapped on
	// the agent's pod (pods/status), usable as a readiness gate.
	PodCondition bool `json:"podCondition,omitempty"`
	// Endpoints keeps the service's Keystone catalog entry on the URLs the
	// cluster exposes it at.
	Endpoints *Endpoints `json:"endpoints,omitempty"`
	// Allow names what the Job template (create mode) may ask for beyond a
	// plain pod; anything else is refused before the Job is created.
	Allow JobAllow `json:"allow,omitempty"`
}

// JobAllow is bootstrap.allow.
type JobAllow struct {
	// ServiceAccounts the Job's pod may run as (serviceAccountName); the
	// namespace's default account needs no entry.
	ServiceAccounts []string `json:"serviceAccounts,omitempty"`
	// HostPaths the pod may mount as hostPath volumes (absolute).
	HostPaths []string `json:"hostPaths,omitempty"`
	// HostNamespaces the pod may share with the node: network, pid, ipc.
	HostNamespaces []string `json:"hostNamespaces,omitempty"`
	// Privileged names the containers that may run privileged.
	Privileged []string `json:"privileged,omitempty"`
	// Capabilities (NET_ADMIN, ...) any container may add.
	Capabilities []string `json:"capabilities,omitempty"`
}

// Endpoints is bootstrap.endpoints.
type Endpoints struct {
	// Credentials is the directory of a mounted Secret with one file per
	// OS_* name openstackclient reads (OS_AUTH_URL, OS_USERNAME,
	// OS_PASSWORD, OS_SYSTEM_SCOPE or OS_PROJECT_NAME, OS_REGION_NAME,
	// OS_CACERT, application credentials, or OS_CLOUD with a clouds.yaml);
	// empty: the same names from the agent's environment.
	Credentials string `json:"credentials,omitempty"`
	// Type is the catalog's service type: image, identity, ...
	Type string `json:"type"`
	// Name is the service's name in the catalog: glance, keystone, ...
	Name string `json:"name"`
	// Description of the service in the catalog.
	Description string `json:"description,omitempty"`
	// Region of the endpoints (RegionOne, ...); default: the credentials'
	// OS_REGION_NAME, else the catalog's only region.
	Region string `json:"region,omitempty"`
	// Public is where users reach the service (its Service's exposure);
	// Internal and Admin default to the Service's cluster URL.
	Public   *EndpointURL `json:"public,omitempty"`
	Internal *EndpointURL `json:"internal,omitempty"`
	Admin    *EndpointURL `json:"admin,omitempty"`
}

// EndpointURL is one interface's URL: a Service (NAME or NAME.NAMESPACE)
// and a path, or a URL as it is.
type EndpointURL struct {
	// Service is the Service whose address the URL follows (NAME or
	// NAME.NAMESPACE).
	Service string `json:"service,omitempty"`
	// Path is appended to the Service's URL; it starts with /.
	Path string `json:"path,omitempty"`
	// URL is the endpoint as it is, instead of a Service's.
	URL string `json:"url,omitempty"`
}

// Phase is one step of an upgrade.
type Phase struct {
	// Name of the phase, a DNS label of at most 20 characters (expand,
	// migrate, contract, ...); it is part of the Job's name.
	Name string `json:"name"`
	// Command: lease mode runs it; create mode's template sees it as
	// .Bootstrap.Command.
	Command string `json:"command,omitempty"`
	// AfterRollout runs the phase only once every replica of the owner runs
	// the new version (default: true for a phase named contract).
	AfterRollout *bool `json:"afterRollout,omitempty"`
}

// Later reports whether the phase waits for the rollout.
func (p Phase) Later() bool {
	if p.AfterRollout != nil {
		return *p.AfterRollout
	}
	return p.Name == "contract"
}

var (
	dnsLabel   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	subdomain  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	labelValue = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

// maxBootstrapName keeps <name>-<phase>-<10 hex>-r<N> readable within a
// Job's 63 characters; longer names are cut in the Job's name only.
const maxBootstrapName = 63

// HasLater reports whether a phase waits for the rollout: it runs beside
// the service, in `run`.
func (b *Bootstrap) HasLater() bool {
	for _, p := range b.Phases {
		if p.Later() {
			return true
		}
	}
	return false
}

// FollowsExposure reports whether the catalog's public URL comes from a
// Service's exposure, which `run` follows beside the service.
func (b *Bootstrap) FollowsExposure() bool {
	return b.Endpoints != nil && b.Endpoints.Public != nil && b.Endpoints.Public.Service != ""
}

// Enabled reports whether a bootstrap is configured.
func (b *Bootstrap) Enabled() bool { return b.Mode != "" }

func (b *Bootstrap) withDefaults() {
	b.Timeout.defaultZeroTo(DefaultBootstrapTimeout)
	b.LeaseDuration.defaultZeroTo(DefaultLeaseDuration)
}

// WaitJobs returns wait mode's Jobs as dependencies.
func (b *Bootstrap) WaitJobs() ([]discovery.Dependency, error) {
	var deps []discovery.Dependency
	for i, j := range b.Jobs {
		d, err := discovery.Parse("job:" + j)
		if err != nil {
			return nil, fmt.Errorf("bootstrap.jobs[%d]: %q: %v", i, j, err)
		}
		deps = append(deps, d)
	}
	return deps, nil
}

// bootstrapModes are what bootstrap.mode takes.
var bootstrapModes = []string{BootstrapCreate, BootstrapWait, BootstrapLease}

func (c *Config) validateBootstrap(e *problems) {
	b := &c.Bootstrap
	b.validateEndpoints(e)
	if b.Mode == "" {
		// endpoints alone need no mode: the catalog is kept by every replica
		if reflect.DeepEqual(Bootstrap{Endpoints: b.Endpoints}, *b) {
			return
		}
		e.add("bootstrap.mode: empty (want %s)", oneOf(bootstrapModes))
	} else if !slices.Contains(bootstrapModes, b.Mode) {
		e.add("bootstrap.mode: %q (want %s)", b.Mode, oneOf(bootstrapModes))
	}
	// What does not depend on the mode, checked whatever it is.
	switch {
	case b.Name == "" && b.Mode != "":
		e.add("bootstrap.name: empty (it names the Job, the Lease and the record)")
	case b.Name != "" && (len(b.Name) > maxBootstrapName || !dnsLabel.MatchString(b.Name)):
		e.add("bootstrap.name: %q is not a DNS label (lower case letters, digits and '-', at most 63)", b.Name)
	}
	if b.Version != "" && (len(b.Version) > 63 || !labelValue.MatchString(b.Version)) {
		e.add("bootstrap.version: %q is not a label value (letters, digits, '-', '_', '.', at most 63)", b.Version)
	}
	if b.Retries < 0 || b.Retries > 10 {
		e.add("bootstrap.retries: %d (want 0 to 10)", b.Retries)
	}
	_, err := b.Timeout.check("bootstrap.timeout")
	e.addErr(err)
	if d, err := b.LeaseDuration.check("bootstrap.leaseDuration"); err != nil {
		e.addErr(err)
	} else if d != 0 && d < 2*time.Second {
		e.add("bootstrap.leaseDuration: %s is too short to renew (at least 2s)", b.LeaseDuration)
	}
	for i, p := range b.Inputs {
		if !path.IsAbs(p) {
			e.add("bootstrap.inputs[%d]: %q is not an absolute path", i, p)
		}
	}
	for i, code := range b.PermanentExitCodes {
		if code < 1 || code > 255 {
			e.add("bootstrap.permanentExitCodes[%d]: %d (want 1 to 255: exit code 0 is success)", i, code)
		}
	}
	b.validatePhases(e)
	b.validateOwner(e)
	b.validateAllow(e)
	switch b.Mode {
	case BootstrapCreate:
		switch {
		case b.Job == "":
			e.add("bootstrap.job: empty (create mode needs the Job's template)")
		case !path.IsAbs(b.Job):
			e.add("bootstrap.job: %q is not an absolute path", b.Job)
		}
		if len(b.Jobs) > 0 {
			e.add("bootstrap.jobs: only for wait mode (create mode names its Job itself)")
		}
	case BootstrapLease:
		if b.Job != "" {
			e.add("bootstrap.job: lease mode runs bootstrap.command in the pod, not a Job")
		}
		if len(b.Jobs) > 0 {
			e.add("bootstrap.jobs: only for wait mode (lease mode runs bootstrap.command in the pod)")
		}
		if b.Command == "" && len(b.Phases) == 0 {
			e.add("bootstrap.command: empty (lease mode runs it)")
		}
		if _, err := splitWords(b.Command); b.Command != "" && err != nil {
			e.add("bootstrap.command: %q: %v", b.Command, err)
		}
		if b.Retries != 0 || len(b.PermanentExitCodes) > 0 {
			e.add("bootstrap.retries and permanentExitCodes: only for create mode (lease mode retries by handing the Lease over)")
		}
	case BootstrapWait:
		if len(b.Jobs) == 0 {
			e.add("bootstrap.jobs: empty (wait mode waits for Jobs by name or by labels)")
		}
		if b.Job != "" || b.Command != "" || len(b.Phases) > 0 {
			e.add("bootstrap.job, command and phases: not for wait mode (another tool creates the Jobs)")
		}
		for i, j := range b.Jobs {
			if _, err := discovery.Parse("job:" + j); err != nil {
				e.add("bootstrap.jobs[%d]: %q: %v", i, j, err)
			}
		}
	}
}

var hostNamespaces = []string{"network", "pid", "ipc"}

var capability = regexp.MustCompile(`^[A-Z][A-Z_]*$`)

func (b *Bootstrap) validateAllow(e *problems) {
	a := b.Allow
	if reflect.DeepEqual(a, JobAllow{}) {
		return
	}
	if b.Mode != BootstrapCreate {
		e.add("bootstrap.allow: only for create mode (it judges the Job template)")
	}
	for i, p := range a.HostPaths {
		if !path.IsAbs(p) {
			e.add("bootstrap.allow.hostPaths[%d]: %q is not an absolute path", i, p)
		}
	}
	for i, n := range a.HostNamespaces {
		if !slices.Contains(hostNamespaces, n) {
			e.add("bootstrap.allow.hostNamespaces[%d]: %q (want network, pid or ipc)", i, n)
		}
	}
	for i, c := range a.Capabilities {
		if !capability.MatchString(c) || strings.HasPrefix(c, "CAP_") {
			e.add("bootstrap.allow.capabilities[%d]: %q (want a capability's name without CAP_: NET_ADMIN)", i, c)
		}
	}
}

var serviceRef = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)?$`)

func (b *Bootstrap) validateEndpoints(e *problems) {
	ep := b.Endpoints
	if ep == nil {
		return
	}
	if ep.Credentials != "" && !path.IsAbs(ep.Credentials) {
		e.add("bootstrap.endpoints.credentials: %q is not an absolute path", ep.Credentials)
	}
	if ep.Type == "" {
		e.add("bootstrap.endpoints.type: empty (the catalog's service type: image, identity, ...)")
	}
	if ep.Name == "" {
		e.add("bootstrap.endpoints.name: empty")
	}
	if ep.Public == nil && ep.Internal == nil && ep.Admin == nil {
		e.add("bootstrap.endpoints: no public, internal or admin endpoint")
	}
	for _, f := range []struct {
		name string
		u    *EndpointURL
	}{{"public", ep.Public}, {"internal", ep.Internal}, {"admin", ep.Admin}} {
		u := f.u
		if u == nil {
			continue
		}
		field := "bootstrap.endpoints." + f.name
		if (u.Service == "") == (u.URL == "") {
			e.add("%s: give one of service and url", field)
		}
		if u.Service != "" && !serviceRef.MatchString(u.Service) {
			e.add("%s.service: %q (want NAME or NAME.NAMESPACE)", field, u.Service)
		}
		if u.URL != "" && !strings.HasPrefix(u.URL, "http://") && !strings.HasPrefix(u.URL, "https://") {
			e.add("%s.url: %q is not an http(s) URL", field, u.URL)
		}
		switch {
		case u.URL != "" && u.Path != "":
			e.add("%s.path: only with service (put the path in the url)", field)
		case u.Path != "" && !strings.HasPrefix(u.Path, "/"):
			e.add("%s.path: %q does not start with /", field, u.Path)
		}
	}
}

func (b *Bootstrap) validatePhases(e *problems) {
	seen := map[string]bool{}
	later := false
	for i, p := range b.Phases {
		f := fmt.Sprintf("bootstrap.phases[%d]", i)
		switch {
		case p.Name == "":
			e.add("%s.name: empty", f)
		case len(p.Name) > 20 || !dnsLabel.MatchString(p.Name):
			e.add("%s.name: %q is not a short DNS label (at most 20)", f, p.Name)
		case seen[p.Name]:
			e.add("%s.name: %q appears twice", f, p.Name)
		default:
			seen[p.Name] = true
		}
		if b.Mode == BootstrapLease && p.Command == "" && b.Command == "" {
			e.add("%s.command: empty (lease mode runs it)", f)
		}
		if later && !p.Later() {
			e.add("%s: %q runs before the rollout but comes after a phase that waits for it", f, p.Name)
		}
		if _, err := splitWords(p.Command); p.Command != "" && err != nil {
			e.add("%s.command: %q: %v", f, p.Command, err)
		}
		later = later || p.Later()
	}
}

func (b *Bootstrap) validateOwner(e *problems) {
	if b.Owner == "" {
		return
	}
	kind, name, ok := strings.Cut(b.Owner, "/")
	if !ok || (kind != "deployment" && kind != "statefulset") || len(name) > 253 || !subdomain.MatchString(name) {
		e.add("bootstrap.owner: %q (want deployment/NAME or statefulset/NAME)", b.Owner)
	}
}

// OwnerRef splits bootstrap.owner.
func (b *Bootstrap) OwnerRef() (kind, name string) {
	kind, name, _ = strings.Cut(b.Owner, "/")
	return kind, name
}
