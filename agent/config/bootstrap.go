package config

import (
	"fmt"
	"path"
	"reflect"
	"regexp"
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
	Timeout string `json:"timeout,omitempty"` // default 10m

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
	LeaseDuration string `json:"leaseDuration,omitempty"`
	// PodCondition patches the condition kolla.openstack.org/bootstrapped on
	// the agent's pod (pods/status), usable as a readiness gate.
	PodCondition bool `json:"podCondition,omitempty"`
	// Endpoints keeps the service's Keystone catalog entry on the URLs the
	// cluster exposes it at.
	Endpoints *Endpoints `json:"endpoints,omitempty"`
}

// Endpoints is bootstrap.endpoints.
type Endpoints struct {
	// Credentials is the directory of a mounted Secret with OS_AUTH_URL,
	// OS_USERNAME, OS_PASSWORD, OS_PROJECT_NAME (and the domains).
	Credentials string `json:"credentials"`
	Type        string `json:"type"` // the catalog's service type: image, identity, ...
	Name        string `json:"name"` // glance, keystone, ...
	Description string `json:"description,omitempty"`
	Region      string `json:"region,omitempty"`
	// Public is where users reach the service (its Service's exposure);
	// Internal and Admin default to the Service's cluster URL.
	Public   *EndpointURL `json:"public,omitempty"`
	Internal *EndpointURL `json:"internal,omitempty"`
	Admin    *EndpointURL `json:"admin,omitempty"`
}

// EndpointURL is one interface's URL: a Service (NAME or NAME.NAMESPACE)
// and a path, or a URL as it is.
type EndpointURL struct {
	Service string `json:"service,omitempty"`
	Path    string `json:"path,omitempty"`
	URL     string `json:"url,omitempty"`
}

// Phase is one step of an upgrade.
type Phase struct {
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

// BootstrapTimeout is bootstrap.timeout, defaulted.
func (b *Bootstrap) BootstrapTimeout() time.Duration {
	if d, err := parseDuration("", b.Timeout); err == nil && d > 0 {
		return d
	}
	return DefaultBootstrapTimeout
}

// Lease is bootstrap.leaseDuration, defaulted.
func (b *Bootstrap) Lease() time.Duration {
	if d, err := parseDuration("", b.LeaseDuration); err == nil && d > 0 {
		return d
	}
	return DefaultLeaseDuration
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

func (c *Config) validateBootstrap() error {
	b := &c.Bootstrap
	if err := b.validateEndpoints(); err != nil {
		return err
	}
	if b.Mode == "" {
		// endpoints alone need no mode: the catalog is kept by every replica
		if !reflect.DeepEqual(Bootstrap{Endpoints: b.Endpoints}, *b) {
			return fmt.Errorf("bootstrap.mode: empty (want create, wait or lease)")
		}
		return nil
	}
	switch {
	case b.Mode != BootstrapCreate && b.Mode != BootstrapWait && b.Mode != BootstrapLease:
		return fmt.Errorf("bootstrap.mode: %q (want create, wait or lease)", b.Mode)
	case b.Name == "":
		return fmt.Errorf("bootstrap.name: empty (it names the Job, the Lease and the record)")
	case len(b.Name) > maxBootstrapName || !dnsLabel.MatchString(b.Name):
		return fmt.Errorf("bootstrap.name: %q is not a DNS label (lower case letters, digits and '-', at most 63)", b.Name)
	case b.Version != "" && (len(b.Version) > 63 || !labelValue.MatchString(b.Version)):
		return fmt.Errorf("bootstrap.version: %q is not a label value (letters, digits, '-', '_', '.', at most 63)", b.Version)
	case b.Retries < 0 || b.Retries > 10:
		return fmt.Errorf("bootstrap.retries: %d (want 0 to 10)", b.Retries)
	}
	for _, f := range []struct{ name, v string }{{"timeout", b.Timeout}, {"leaseDuration", b.LeaseDuration}} {
		if _, err := parseDuration("bootstrap."+f.name, f.v); err != nil {
			return err
		}
	}
	if d, _ := parseDuration("", b.LeaseDuration); d != 0 && d < 2*time.Second {
		return fmt.Errorf("bootstrap.leaseDuration: %s is too short to renew (at least 2s)", b.LeaseDuration)
	}
	for i, p := range b.Inputs {
		if !path.IsAbs(p) {
			return fmt.Errorf("bootstrap.inputs[%d]: %q is not an absolute path", i, p)
		}
	}
	for i, code := range b.PermanentExitCodes {
		if code < 1 || code > 255 {
			return fmt.Errorf("bootstrap.permanentExitCodes[%d]: %d (want 1 to 255: exit code 0 is success)", i, code)
		}
	}
	if err := b.validatePhases(); err != nil {
		return err
	}
	if err := b.validateOwner(); err != nil {
		return err
	}
	switch b.Mode {
	case BootstrapCreate:
		if b.Job == "" {
			return fmt.Errorf("bootstrap.job: empty (create mode needs the Job's template)")
		}
		if !path.IsAbs(b.Job) {
			return fmt.Errorf("bootstrap.job: %q is not an absolute path", b.Job)
		}
		if len(b.Jobs) > 0 {
			return fmt.Errorf("bootstrap.jobs: only for wait mode (create mode names its Job itself)")
		}
	case BootstrapLease:
		if b.Job != "" {
			return fmt.Errorf("bootstrap.job: lease mode runs bootstrap.command in the pod, not a Job")
		}
		if len(b.Jobs) > 0 {
			return fmt.Errorf("bootstrap.jobs: only for wait mode (lease mode runs bootstrap.command in the pod)")
		}
		if b.Command == "" && len(b.Phases) == 0 {
			return fmt.Errorf("bootstrap.command: empty (lease mode runs it)")
		}
		if _, err := splitWords(b.Command); b.Command != "" && err != nil {
			return fmt.Errorf("bootstrap.command: %q: %v", b.Command, err)
		}
		if b.Retries != 0 || len(b.PermanentExitCodes) > 0 {
			return fmt.Errorf("bootstrap.retries and permanentExitCodes: only for create mode (lease mode retries by handing the Lease over)")
		}
	case BootstrapWait:
		if len(b.Jobs) == 0 {
			return fmt.Errorf("bootstrap.jobs: empty (wait mode waits for Jobs by name or by labels)")
		}
		if b.Job != "" || b.Command != "" || len(b.Phases) > 0 {
			return fmt.Errorf("bootstrap.job, command and phases: not for wait mode (another tool creates the Jobs)")
		}
		if _, err := b.WaitJobs(); err != nil {
			return err
		}
	}
	return nil
}

var serviceRef = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)?$`)

func (b *Bootstrap) validateEndpoints() error {
	e := b.Endpoints
	if e == nil {
		return nil
	}
	switch {
	case e.Credentials == "":
		return fmt.Errorf("bootstrap.endpoints.credentials: empty (the directory of the Secret with OS_AUTH_URL, OS_USERNAME, ...)")
	case !path.IsAbs(e.Credentials):
		return fmt.Errorf("bootstrap.endpoints.credentials: %q is not an absolute path", e.Credentials)
	case e.Type == "":
		return fmt.Errorf("bootstrap.endpoints.type: empty (the catalog's service type: image, identity, ...)")
	case e.Name == "":
		return fmt.Errorf("bootstrap.endpoints.name: empty")
	case e.Public == nil && e.Internal == nil && e.Admin == nil:
		return fmt.Errorf("bootstrap.endpoints: no public, internal or admin endpoint")
	}
	for _, f := range []struct {
		name string
		u    *EndpointURL
	}{{"public", e.Public}, {"internal", e.Internal}, {"admin", e.Admin}} {
		if f.u == nil {
			continue
		}
		field := "bootstrap.endpoints." + f.name
		switch {
		case (f.u.Service == "") == (f.u.URL == ""):
			return fmt.Errorf("%s: give one of service and url", field)
		case f.u.Service != "" && !serviceRef.MatchString(f.u.Service):
			return fmt.Errorf("%s.service: %q (want NAME or NAME.NAMESPACE)", field, f.u.Service)
		case f.u.URL != "" && f.u.Path != "":
			return fmt.Errorf("%s.path: only with service (put the path in the url)", field)
		case f.u.URL != "" && !strings.HasPrefix(f.u.URL, "http://") && !strings.HasPrefix(f.u.URL, "https://"):
			return fmt.Errorf("%s.url: %q is not an http(s) URL", field, f.u.URL)
		case f.u.Path != "" && !strings.HasPrefix(f.u.Path, "/"):
			return fmt.Errorf("%s.path: %q does not start with /", field, f.u.Path)
		}
	}
	return nil
}

func (b *Bootstrap) validatePhases() error {
	seen := map[string]bool{}
	later := false
	for i, p := range b.Phases {
		f := fmt.Sprintf("bootstrap.phases[%d]", i)
		switch {
		case p.Name == "":
			return fmt.Errorf("%s.name: empty", f)
		case len(p.Name) > 20 || !dnsLabel.MatchString(p.Name):
			return fmt.Errorf("%s.name: %q is not a short DNS label (at most 20)", f, p.Name)
		case seen[p.Name]:
			return fmt.Errorf("%s.name: %q appears twice", f, p.Name)
		case b.Mode == BootstrapLease && p.Command == "" && b.Command == "":
			return fmt.Errorf("%s.command: empty (lease mode runs it)", f)
		case later && !p.Later():
			return fmt.Errorf("%s: %q runs before the rollout but comes after a phase that waits for it", f, p.Name)
		}
		if _, err := splitWords(p.Command); p.Command != "" && err != nil {
			return fmt.Errorf("%s.command: %q: %v", f, p.Command, err)
		}
		seen[p.Name], later = true, later || p.Later()
	}
	return nil
}

func (b *Bootstrap) validateOwner() error {
	if b.Owner == "" {
		return nil
	}
	kind, name, ok := strings.Cut(b.Owner, "/")
	if !ok || (kind != "deployment" && kind != "statefulset") || len(name) > 253 || !subdomain.MatchString(name) {
		return fmt.Errorf("bootstrap.owner: %q (want deployment/NAME or statefulset/NAME)", b.Owner)
	}
	return nil
}

// OwnerRef splits bootstrap.owner.
func (b *Bootstrap) OwnerRef() (kind, name string) {
	kind, name, _ = strings.Cut(b.Owner, "/")
	return kind, name
}
