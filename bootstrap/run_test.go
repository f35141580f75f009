package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/kolla-agent/kolla-agent/agent/config"
	"github.com/kolla-agent/kolla-agent/discovery"
)

// noAPI is a client of an API that is not there: a Run needs one, and what
// these tests do asks it nothing (or fails at once).
func noAPI(t *testing.T) *discovery.Kube {
	t.Helper()
	kube, err := discovery.NewKube(&rest.Config{Host: "http://127.0.0.1:1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

// renderCall is one call of Means.Render.
type renderCall struct {
	name string
	src  string
	data map[string]any
}

// testMeans renders a template as its source, recording each call.
func testMeans(t *testing.T, root string, calls *[]renderCall) Means {
	return Means{
		Kube: noAPI(t), Namespace: "openstack", PodName: "keystone-0", Identity: "keystone-0", Root: root, Source: "agent.yaml",
		Render: func(_ context.Context, name string, src []byte, data map[string]any) ([]byte, error) {
			*calls = append(*calls, renderCall{name, string(src), data})
			return src, nil
		},
	}
}

func writeUnder(t *testing.T, root, path, data string) {
	t.Helper()
	p := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Create mode's default version is the hash of the Job rendered without a
// phase or version, the commands and the inputs, each read under the root:
// the very inputs of Version that recorded versions were made from.
func TestRunVersionCreate(t *testing.T) {
	root := t.TempDir()
	writeUnder(t, root, "/etc/kolla-agent/job.yaml", dbSyncJob)
	writeUnder(t, root, "/etc/keystone/keystone.conf", "[database]\n")
	cfg := &config.Bootstrap{Mode: config.BootstrapCreate, Name: "keystone", Job: "/etc/kolla-agent/job.yaml", Command: "keystone-manage db_sync",
		Inputs: []string{"/etc/keystone/keystone.conf"},
		Phases: []config.Phase{{Name: "expand", Command: "keystone-manage db_sync --expand"}, {Name: "contract"}}}
	var calls []renderCall
	r, err := NewRun(context.Background(), cfg, testMeans(t, root, &calls))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Version([]byte(dbSyncJob), map[string][]byte{
		"/etc/keystone/keystone.conf": []byte("[database]\n"),
		"(commands)":                  []byte("keystone-manage db_sync\nexpand=keystone-manage db_sync --expand\ncontract="),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Version() != want {
		t.Errorf("version %s, want %s", r.Version(), want)
	}
	wantData := map[string]any{"Bootstrap": map[string]any{"Name": "keystone", "Phase": "", "Command": "keystone-manage db_sync", "Version": ""}}
	if len(calls) != 1 || calls[0].name != cfg.Job || calls[0].src != dbSyncJob || !reflect.DeepEqual(calls[0].data, wantData) {
		t.Errorf("renders: %+v", calls)
	}

	// A configured version is taken as it is: nothing is read.
	cfg.Version, cfg.Job = "2026.1", "/missing.yaml"
	if r, err := NewRun(context.Background(), cfg, testMeans(t, root, &calls)); err != nil || r.Version() != "2026.1" {
		t.Errorf("configured version: %v, %v", r, err)
	}
}

// The steps before the service and after the rollout, and each one's
// command.
func TestRunSteps(t *testing.T) {
	cfg := &config.Bootstrap{Mode: config.BootstrapLease, Name: "keystone", Version: "v1", Command: "keystone-manage db_sync",
		Phases: []config.Phase{{Name: "expand", Command: "keystone-manage db_sync --expand"}, {Name: "migrate"}, {Name: "contract"}}}
	var calls []renderCall
	r, err := NewRun(context.Background(), cfg, testMeans(t, "", &calls))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Steps(false), []Step{{"expand", "v1"}, {"migrate", "v1"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("before the service: %v, want %v", got, want)
	}
	if got, want := r.Steps(true), []Step{{"contract", "v1"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("after the rollout: %v, want %v", got, want)
	}
	if r.command(Step{Phase: "expand"}) != "keystone-manage db_sync --expand" || r.command(Step{Phase: "migrate"}) != "keystone-manage db_sync" {
		t.Error("a phase's command, else bootstrap.command")
	}
	if !r.later("contract") || r.later("expand") || r.later("") {
		t.Error("later")
	}

	cfg.Phases = nil
	if r, _ := NewRun(context.Background(), cfg, testMeans(t, "", &calls)); !reflect.DeepEqual(r.Steps(false), []Step{{Version: "v1"}}) || r.Steps(true) != nil {
		t.Errorf("without phases: %v %v", r.Steps(false), r.Steps(true))
	}
}

// Bad input is an InputError with the texts the agent shows (its exit
// code 1); the agent's own errors from Render pass through as they are.
func TestRunInputErrors(t *testing.T) {
	root := t.TempDir()
	var calls []renderCall
	check := func(name string, err error, want string) {
		t.Helper()
		var ie *InputError
		if !errors.As(err, &ie) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v, want an InputError starting %q", name, err, want)
		}
	}
	create := func() *config.Bootstrap {
		return &config.Bootstrap{Mode: config.BootstrapCreate, Name: "keystone", Job: "/job.yaml"}
	}
	_, err := NewRun(context.Background(), create(), testMeans(t, root, &calls))
	check("no Job template", err, "agent.yaml: bootstrap.job: open "+filepath.Join(root, "/job.yaml"))

	writeUnder(t, root, "/job.yaml", "kind: [\n")
	_, err = NewRun(context.Background(), create(), testMeans(t, root, &calls))
	check("not YAML", err, "agent.yaml: bootstrap.job /job.yaml: ")

	b := create()
	b.Inputs = []string{"/etc/missing.conf"}
	_, err = NewRun(context.Background(), b, testMeans(t, root, &calls))
	check("missing input", err, "agent.yaml: bootstrap.inputs[0]: open "+filepath.Join(root, "/etc/missing.conf"))

	lease := &config.Bootstrap{Mode: config.BootstrapLease, Name: "keystone", Command: "{{ .x }}"}
	_, err = NewRun(context.Background(), lease, testMeans(t, root, &calls))
	check("no version without the pod", err, "agent.yaml: bootstrap: no version given, and the pod's images (which make the default version) cannot be read: ")

	lease.Version = "v1"
	m := testMeans(t, root, &calls)
	m.Render = func(context.Context, string, []byte, map[string]any) ([]byte, error) { return []byte("  "), nil }
	r, err := NewRun(context.Background(), lease, m)
	if err != nil {
		t.Fatal(err)
	}
	check("an empty command", r.Step(context.Background(), Step{Version: "v1"}), `agent.yaml: bootstrap.command "  ": not a command`)

	bad := errors.New("agent.yaml: template bootstrap.command: no such function")
	m.Render = func(context.Context, string, []byte, map[string]any) ([]byte, error) { return nil, bad }
	r, _ = NewRun(context.Background(), lease, m)
	if err := r.Step(context.Background(), Step{Version: "v1"}); err != bad {
		t.Errorf("a template's error: %v, want the agent's as it is", err)
	}

	wait := &config.Bootstrap{Mode: config.BootstrapWait, Name: "keystone", Version: "v1", Jobs: []string{"a:b:c"}}
	r, _ = NewRun(context.Background(), wait, m)
	check("a bad Job", r.Step(context.Background(), Step{Version: "v1"}), "agent.yaml: bootstrap.jobs[0]: ")

	r, _ = NewRun(context.Background(), &config.Bootstrap{Mode: "other", Name: "keystone", Version: "v1"}, m)
	check("a mode", r.Step(context.Background(), Step{Version: "v1"}), `bootstrap.mode "other"`)
}

// Each change of a step's state is logged once; a step before the service
// holds readiness until done, one after the rollout never does; the
// noteworthy changes are Events, a failure's a Warning.
func TestRunProgress(t *testing.T) {
	var log bytes.Buffer
	var gates []string
	var events []string
	m := Means{Kube: noAPI(t), Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Gate: func(reason string) { gates = append(gates, reason) },
		Event: func(typ, reason, msg string) error {
			events = append(events, typ+" "+reason+" "+msg)
			return errors.New("forbidden")
		},
	}
	cfg := &config.Bootstrap{Mode: config.BootstrapLease, Name: "keystone", Version: "v1", Phases: []config.Phase{{Name: "expand"}, {Name: "contract"}}}
	r, err := NewRun(context.Background(), cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	expand, contract := Step{"expand", "v1"}, Step{"contract", "v1"}
	r.coord.report(expand, Waiting, "", "waiting for lease keystone")
	r.coord.report(expand, Waiting, "", "waiting for lease keystone")
	r.coord.report(expand, Running, "BootstrapRunning", "this pod runs the command")
	r.coord.report(expand, Done, "", "the command succeeded")
	r.coord.report(contract, Failed, "BootstrapJobFailed", "job x failed")

	if want := []string{"expand v1: waiting for lease keystone", "expand v1: this pod runs the command", ""}; !reflect.DeepEqual(gates, want) {
		t.Errorf("gates %q, want %q", gates, want)
	}
	if want := []string{"Normal BootstrapRunning expand v1: this pod runs the command", "Warning BootstrapJobFailed contract v1: job x failed"}; !reflect.DeepEqual(events, want) {
		t.Errorf("events %q, want %q", events, want)
	}
	out := log.String()
	for _, want := range []string{
		`level=INFO msg=bootstrap step="expand v1" state=waiting detail="waiting for lease keystone"`,
		`level=ERROR msg=bootstrap step="contract v1" state=failed detail="job x failed"`,
		`level=DEBUG msg="could not post an Event" reason=BootstrapJobFailed error=forbidden`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "waiting for lease keystone"); n != 1 {
		t.Errorf("a repeated state logged %d times", n)
	}
}

// bootstrap.endpoints as a Catalog: the URLs in interface order, the
// credentials read under the root; errors say which field.
func TestNewCatalog(t *testing.T) {
	dir := writeDir(t, helmAdmin)
	e := &config.Endpoints{Credentials: "/creds", Type: "identity", Name: "keystone", Region: "RegionOne",
		Admin:  &config.EndpointURL{URL: "http://admin:35357/v3"},
		Public: &config.EndpointURL{Service: "keystone-api", Path: "/v3"}}
	root := filepath.Dir(dir)
	e.Credentials = "/" + filepath.Base(dir)
	c, err := NewCatalog(e, root)
	if err != nil {
		t.Fatal(err)
	}
	want := []EndpointURL{{Interface: "public", Service: "keystone-api", Path: "/v3"}, {Interface: "admin", URL: "http://admin:35357/v3"}}
	if !reflect.DeepEqual(c.URLs, want) || !reflect.DeepEqual(c.Service, Registration{Type: "identity", Name: "keystone", Region: "RegionOne"}) || c.Credentials.Auth.Username != "admin" {
		t.Errorf("%+v", c)
	}

	e.Region = "RegionTwo"
	if _, err := NewCatalog(e, root); err == nil || !strings.HasPrefix(err.Error(), "bootstrap.endpoints.region is RegionTwo") {
		t.Errorf("another region: %v", err)
	}
	e.Credentials = "/missing"
	if _, err := NewCatalog(e, root); err == nil || !strings.HasPrefix(err.Error(), "bootstrap.endpoints.credentials: stat "+filepath.Join(root, "/missing")) {
		t.Errorf("no credentials: %v", err)
	}
}
