package config

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"

	"github.com/kolla-agent/kolla-agent/internal/schemagen"
)

var update = flag.Bool("update", false, "rewrite schema.json and the config reference in README.md from the Go types")

const (
	readmePath = "../../README.md"
	refBegin   = "<!-- config-reference:begin -->"
	refEnd     = "<!-- config-reference:end -->"
)

// schemaFields is what the Go types and their comments cannot say. The
// enums are the lists the validators use; TestSchemaAgreesWithParse checks
// every enum and duration against Parse.
func schemaFields() map[string]schemagen.Field {
	yes, no := true, false
	dur := func(def time.Duration) schemagen.Field {
		f := schemagen.Field{Duration: true}
		if def != 0 {
			f.Default = shortDuration(def)
		}
		return f
	}
	off := &schemagen.Schema{OneOf: []*schemagen.Schema{
		{Type: schemagen.Types{"string"}},
		{Const: false, Description: "off (YAML reads a bare off as false)"},
	}}
	return map[string]schemagen.Field{
		// Durations, with the defaults the code has.
		"Dependencies.Timeout":    dur(DefaultTimeout),
		"Dependency.Timeout":      dur(0),
		"RenderOptions.Timeout":   dur(0),
		"Run.Grace":               dur(30 * time.Second),
		"Check.Period":            dur(DefaultCheckPeriod),
		"Check.Timeout":           dur(DefaultCheckTimeout),
		"FileCheck.MaxAge":        dur(0),
		"Bootstrap.Timeout":       dur(DefaultBootstrapTimeout),
		"Bootstrap.LeaseDuration": dur(DefaultLeaseDuration),
		"Reload.Quiet":            dur(DefaultReloadQuiet),
		"Reload.MaxWait":          dur(DefaultReloadMaxWait),
		"Reload.Rescan":           dur(DefaultReloadRescan),
		"Reload.VerifyTimeout":    dur(DefaultReloadVerify),
		"Reload.Settle":           dur(DefaultReloadSettle),
		"Logs.Rescan":             dur(DefaultLogsRescan),
		"Logs.Drain":              dur(DefaultLogsDrain),
		"Multiline.Idle":          dur(DefaultLogsIdle),
		"LogSink.AckTimeout":      dur(DefaultLogsAckTimeout),

		// Enums.
		"Run.Supervise":           {Enum: superviseModes},
		"Check.Probes":            {Enum: probeKinds},
		"Bootstrap.Mode":          {Enum: bootstrapModes},
		"PublicAddress.Scheme":    {Enum: schemes},
		"Reload.Source":           {Enum: reloadSources, Default: reloadSources[0]},
		"Reload.Action":           {Enum: reloadActions, Default: DefaultReloadAction},
		"ReloadAction.Action":     {Enum: reloadActions},
		"LogSink.Type":            {Enum: sinkTypes, Required: &yes},
		"LogSink.Format":          {Enum: sinkFormats},
		"JobAllow.HostNamespaces": {Enum: hostNamespaces},
		"Reload.Signal":           {Pattern: signalPattern(), Default: DefaultReloadSignal},

		// Required, or not, against the rule of omitempty.
		"Sidecar.Process": {Required: &no}, // sidecar: {} is the default matcher
		"Logs.Files":      {Required: &yes, MinItems: 1},
		"Logs.Sink":       {Required: &yes},

		// Other defaults the code has.
		"Probes.Address":     {Schema: off, Default: DefaultProbeAddress},
		"Probes.Socket":      {Schema: off, Default: DefaultProbeSocket},
		"Reload.StateDir":    {Default: DefaultReloadStateDir},
		"Logs.StateDir":      {Default: DefaultLogsStateDir},
		"Logs.MaxLineSize":   {Default: DefaultLogsMaxLineSize},
		"Phase.AfterRollout": {NoDefault: true}, // true for contract only
	}
}

func schemaOptions() []schemagen.Option {
	opts := []schemagen.Option{
		schemagen.WithID("https://github.com/kolla-agent/kolla-agent/agent/config/schema.json", "kolla-agent agent.yaml"),
		schemagen.WithType(reflect.TypeFor[Dependency](), func(object *schemagen.Schema) *schemagen.Schema {
			return &schemagen.Schema{OneOf: []*schemagen.Schema{
				{Type: schemagen.Types{"string"}, Description: "the dependency in the wait syntax (service:mariadb, tcp:HOST:PORT, http://...)"},
				object,
			}}
		}),
		schemagen.WithType(reflect.TypeFor[StringOrList](), func(*schemagen.Schema) *schemagen.Schema {
			return &schemagen.Schema{OneOf: []*schemagen.Schema{
				{Type: schemagen.Types{"string"}, Description: "split like a shell would"},
				{Type: schemagen.Types{"array"}, Items: &schemagen.Schema{Type: schemagen.Types{"string"}}, Description: "the words, as they are"},
			}}
		}),
		// A duration is its text in Go syntax (each field adds its pattern
		// and default).
		schemagen.WithType(durationType, func(*schemagen.Schema) *schemagen.Schema {
			return &schemagen.Schema{Type: schemagen.Types{"string"}}
		}),
	}
	for name, f := range schemaFields() {
		opts = append(opts, schemagen.WithField(name, f))
	}
	return opts
}

// signalPattern matches what ParseSignal takes: a name of reloadSignals,
// with or without SIG, in any case.
func signalPattern() string {
	anyCase := func(s string) string {
		var b strings.Builder
		for _, r := range s {
			if l, u := strings.ToLower(string(r)), strings.ToUpper(string(r)); l != u {
				b.WriteString("[" + u + l + "]")
			} else {
				b.WriteRune(r)
			}
		}
		return b.String()
	}
	var names []string
	for _, n := range slices.Sorted(maps.Keys(reloadSignals)) {
		names = append(names, anyCase(strings.TrimPrefix(n, "SIG")))
	}
	return "^(" + anyCase("SIG") + ")?(" + strings.Join(names, "|") + ")$"
}

// shortDuration writes 1m, not 1m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func generateSchema(t *testing.T) []byte {
	t.Helper()
	docs, err := schemagen.Docs(".")
	if err != nil {
		t.Fatal(err)
	}
	b, err := schemagen.Generate(reflect.TypeFor[Config](), docs, schemaOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withReference puts the table between the README's markers.
func withReference(readme []byte, table string) ([]byte, error) {
	s := string(readme)
	i, j := strings.Index(s, refBegin+"\n"), strings.Index(s, refEnd)
	if i < 0 || j < i {
		return nil, fmt.Errorf("%s: no lines %s and %s", readmePath, refBegin, refEnd)
	}
	i += len(refBegin) + 1
	gen := "<!-- generated from agent/config's Go types by `go generate ./agent/config`: edit those, not this -->\n"
	return []byte(s[:i] + gen + table + s[j:]), nil
}

// schema.json and the README's reference are what the Go types and their
// comments make now. -update rewrites both.
func TestSchemaInStep(t *testing.T) {
	schema := generateSchema(t)
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	wantReadme, err := withReference(readme, schemagen.Markdown(schema))
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if old, _ := os.ReadFile("schema.json"); !bytes.Equal(old, schema) {
			if err := os.WriteFile("schema.json", schema, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Log("wrote schema.json")
		}
		if !bytes.Equal(Schema(), schema) {
			// What the binary embeds. Compared by content, not bytes:
			// another Go version may compress the same text differently.
			var gz bytes.Buffer
			w, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
			w.Write(schema)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile("schema.json.gz", gz.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Log("wrote schema.json.gz")
		}
		if !bytes.Equal(readme, wantReadme) {
			if err := os.WriteFile(readmePath, wantReadme, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote the config reference in %s", readmePath)
		}
		return
	}
	committed, err := os.ReadFile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, schema) {
		t.Errorf("schema.json is not in step with the Go types (go generate ./agent/config):\n%s", lineDiff(string(committed), string(schema)))
	}
	if !bytes.Equal(readme, wantReadme) {
		t.Errorf("the config reference in README.md is not in step with the Go types (go generate ./agent/config):\n%s", lineDiff(string(readme), string(wantReadme)))
	}
	if !bytes.Equal(Schema(), committed) {
		t.Error("Schema() (schema.json.gz, embedded) is not schema.json (go generate ./agent/config)")
	}
}

// lineDiff shows the lines that differ ("-" in a only, "+" in b only), with
// two lines of context.
func lineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	// trim what both start and end with, then a plain LCS on the rest
	pre := 0
	for pre < len(x) && pre < len(y) && x[pre] == y[pre] {
		pre++
	}
	suf := 0
	for suf < len(x)-pre && suf < len(y)-pre && x[len(x)-1-suf] == y[len(y)-1-suf] {
		suf++
	}
	xs, ys := x[pre:len(x)-suf], y[pre:len(y)-suf]
	if len(xs)*len(ys) > 4_000_000 {
		return fmt.Sprintf("(too different to show: first difference at line %d)", pre+1)
	}
	lcs := make([][]int, len(xs)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(ys)+1)
	}
	for i := len(xs) - 1; i >= 0; i-- {
		for j := len(ys) - 1; j >= 0; j-- {
			if xs[i] == ys[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	for _, l := range x[max(0, pre-2):pre] {
		out.WriteString("  " + l + "\n")
	}
	i, j := 0, 0
	for i < len(xs) || j < len(ys) {
		switch {
		case i < len(xs) && j < len(ys) && xs[i] == ys[j]:
			out.WriteString("  " + xs[i] + "\n")
			i, j = i+1, j+1
		case j < len(ys) && (i == len(xs) || lcs[i][j+1] >= lcs[i+1][j]):
			out.WriteString("+ " + ys[j] + "\n")
			j++
		default:
			out.WriteString("- " + xs[i] + "\n")
			i++
		}
	}
	for _, l := range x[len(x)-suf : min(len(x), len(x)-suf+2)] {
		out.WriteString("  " + l + "\n")
	}
	return out.String()
}

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// validateYAML validates a YAML document against the schema.
func validateYAML(s *jsonschema.Schema, b []byte) error {
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

// Every example shipped, and the embedded default, is valid by the schema.
func TestSchemaTakesExamples(t *testing.T) {
	s := compileSchema(t)
	var paths []string
	for _, g := range []string{"../../examples/*/agent.yaml", "../../examples/*/*/agent.yaml"} {
		p, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p...)
	}
	if len(paths) == 0 {
		t.Fatal("no examples found")
	}
	paths = append(paths, "default.yaml")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := validateYAML(s, b); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// What Parse refuses for its structure (an unknown field, a wrong type, a
// value out of an enum, a bad duration, a required field left out), the
// schema refuses too.
func TestSchemaRefusesWhatParseRefuses(t *testing.T) {
	s := compileSchema(t)
	for _, tc := range []struct{ name, yaml, parse string }{
		{"unknown top-level field", "dependencie: {}\n", `unknown field "dependencie"`},
		{"unknown nested field", "probes:\n  checks: [{name: a, htpp: {url: \"http://a/\"}}]\n", `probes.checks[0]: unknown field "htpp"`},
		{"unknown field of a long-form dependency", "dependencies:\n  wait: [{wait: \"tcp:a:1\", timeot: 1s}]\n", `unknown field "timeot"`},
		{"unknown field in a map entry", "exposure:\n  keystone: {vip: 192.0.2.1}\n", `unknown field "vip"`},
		{"unknown field of the anonymous tls", "logs: {files: [{path: /a}], sink: {type: forward, address: \"a:1\", tls: {ca: /ca}}}\n", `unknown field "ca"`},
		{"string for an int", "bootstrap: {mode: create, name: x, job: /j, retries: two}\n", "field bootstrap.retries (want int)"},
		{"list for a string", "namespace: [a]\n", "field namespace (want string)"},
		{"string for a list", "reload: {watch: /a}\n", "field reload.watch (want a list)"},
		{"number for a command", "probes:\n  checks: [{name: a, exec: {command: 3}}]\n", "want a string or a list of strings"},
		{"number for a dependency", "dependencies:\n  wait: [5]\n", "want a string or an object"},
		{"int32 overflow", "bootstrap: {mode: create, name: x, job: /j, permanentExitCodes: [3000000000]}\n", "(want int32)"},
		{"string for a bool", "bootstrap: {mode: create, name: x, job: /j, podCondition: yes please}\n", "(want bool)"},
		{"bad supervise", "run: {supervise: sometimes}\n", `run.supervise: "sometimes"`},
		{"bad probe", "probes:\n  checks: [{name: a, process: {}, probes: [ready]}]\n", `probes.checks[0].probes[0]: "ready"`},
		{"bad mode", "bootstrap: {mode: run, name: x}\n", `bootstrap.mode: "run"`},
		{"bad scheme", "exposure:\n  keystone: {scheme: ftp}\n", `exposure["keystone"].scheme: "ftp"`},
		{"bad source", "reload: {source: etcd}\n", `reload.source: "etcd"`},
		{"bad action", "reload: {action: reboot}\n", `reload.action: "reboot"`},
		{"bad override action", "reload: {actions: [{path: /a, action: reboot}]}\n", `reload.actions[0].action: "reboot"`},
		{"bad signal", "reload: {signal: KILL}\n", `reload.signal: "KILL"`},
		{"bad sink type", "logs: {files: [{path: /a}], sink: {type: kafka}}\n", `logs.sink.type: "kafka"`},
		{"bad sink format", "logs: {files: [{path: /a}], sink: {type: stdout, format: xml}}\n", `logs.sink.format: "xml"`},
		{"bad duration", "dependencies: {timeout: soon}\n", `dependencies.timeout: "soon" is not a duration`},
		{"duration without a unit", "logs: {files: [{path: /a}], sink: {type: stdout}, drain: \"5\"}\n", `logs.drain: "5" is not a duration`},
		{"negative duration", "run: {grace: -1s}\n", `run.grace: negative duration`},
		{"bad check duration", "probes:\n  checks: [{name: a, process: {}, period: often}]\n", `probes.checks[0].period: "often"`},
		{"bad dependency duration", "dependencies:\n  wait: [{wait: \"tcp:a:1\", timeout: 1 minute}]\n", `dependencies.wait[0].timeout: "1 minute"`},
		{"check without a name", "probes:\n  checks: [{process: {}}]\n", "probes.checks[0].name: empty"},
		{"render without dest", "render: [{src: /a}]\n", "render[0].dest: empty"},
		{"file check without maxAge", "probes:\n  checks: [{name: a, file: {path: /hb}}]\n", "probes.checks[0].file.maxAge: required"},
		{"logs without files", "logs: {sink: {type: stdout}}\n", "logs.files: empty"},
		{"logs without a sink type", "logs: {files: [{path: /a}]}\n", "logs.sink.type: empty"},
		{"not an object", "- a\n", "cannot unmarshal array into the document"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("agent.yaml", []byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.parse) {
				t.Errorf("Parse: %v, want %q", err, tc.parse)
			}
			if err := validateYAML(s, []byte(tc.yaml)); err == nil {
				t.Errorf("the schema takes %q", tc.yaml)
			}
		})
	}
}

// leaf is a string field somewhere in Config, and how to write a document
// that sets it.
type leaf struct {
	key  string // TypeName.FieldName, as schemaFields names it
	path string // as Parse's problems name it
	doc  func(v any) any
}

func stringLeaves(t reflect.Type, key, path string, doc func(any) any) []leaf {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == stringOrListType:
		return nil
	case t.Kind() == reflect.String, t == durationType:
		return []leaf{{key, path, doc}}
	case t.Kind() == reflect.Slice:
		return stringLeaves(t.Elem(), key, path+"[0]", func(v any) any { return doc([]any{v}) })
	case t.Kind() == reflect.Map:
		return stringLeaves(t.Elem(), key, path+`["k"]`, func(v any) any { return doc(map[string]any{"k": v}) })
	case t.Kind() == reflect.Struct:
		if t.Name() != "" {
			key = t.Name()
		}
		var out []leaf
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			out = append(out, stringLeaves(f.Type, key+"."+f.Name, join(path, name), func(v any) any { return doc(map[string]any{name: v}) })...)
		}
		return out
	}
	return nil
}

// The schema's enums and durations are Parse's: each string field is set
// to values Parse and the schema should agree on, and where Parse lists
// the values it wants ("(want a, b or c)"), they are the schema's enum.
func TestSchemaAgreesWithParse(t *testing.T) {
	fields := schemaFields()
	leaves := stringLeaves(reflect.TypeFor[Config](), "", "", func(v any) any { return v })
	if len(leaves) < 50 {
		t.Fatalf("only %d string fields found", len(leaves))
	}
	problemsAt := func(l leaf, v string) []string {
		b, err := json.Marshal(l.doc(v))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Parse("t.yaml", b)
		var at []string
		for _, p := range Problems(err) {
			if strings.HasPrefix(p, "t.yaml: "+l.path+": ") {
				at = append(at, strings.TrimPrefix(p, "t.yaml: "+l.path+": "))
			}
		}
		return at
	}
	seen := map[string]bool{}
	for _, l := range leaves {
		f := fields[l.key]
		seen[l.key] = true

		// Durations.
		isDuration := slices.ContainsFunc(problemsAt(l, "soon"), func(p string) bool { return strings.Contains(p, "is not a duration") })
		if isDuration != f.Duration {
			t.Errorf("%s (%s): Parse reads a duration: %v; the schema: %v", l.key, l.path, isDuration, f.Duration)
		}
		if f.Duration {
			for _, v := range []string{"90s", "1h30m", "1.5h", "0", "500ms", "2µs"} {
				if p := problemsAt(l, v); slices.ContainsFunc(p, func(p string) bool { return strings.Contains(p, "duration") }) {
					t.Errorf("%s: Parse refuses the duration %q: %q", l.path, v, p)
				}
			}
		}

		// Enums: the values Parse wants are the schema's.
		var want []string
		for _, p := range problemsAt(l, "no-such-value") {
			if _, list, ok := strings.Cut(p, `"no-such-value" (want `); ok {
				want = enumOf(strings.TrimSuffix(list, ")"))
			}
		}
		if !slices.Equal(want, f.Enum) {
			t.Errorf("%s (%s): Parse wants %q; the schema's enum is %q", l.key, l.path, want, f.Enum)
		}
		for _, v := range f.Enum {
			if p := problemsAt(l, v); len(p) > 0 {
				t.Errorf("%s: Parse refuses %q of the enum: %q", l.path, v, p)
			}
		}
	}
	for key, f := range fields {
		if (f.Duration || len(f.Enum) > 0) && !seen[key] {
			t.Errorf("%s: not a string field of Config", key)
		}
	}
}

// enumOf reads "a, b or c" as a list of plain words, or nil when it is a
// description ("lower-case letters, digits, ...").
func enumOf(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ", ") {
		for _, w := range strings.Split(part, " or ") {
			if w == "" || strings.Trim(w, "abcdefghijklmnopqrstuvwxyz") != "" {
				return nil
			}
			out = append(out, w)
		}
	}
	return out
}

// The signal pattern takes what ParseSignal takes.
func TestSchemaSignalPattern(t *testing.T) {
	s := compileSchema(t)
	var candidates []string
	for n := range reloadSignals {
		short := strings.TrimPrefix(n, "SIG")
		candidates = append(candidates, n, short, strings.ToLower(n), strings.ToLower(short), "Sig"+strings.ToLower(short))
	}
	candidates = append(candidates, "KILL", "SIGKILL", "SIG", "SIGSIGHUP", " HUP", "1", "hangup", "SIGUSR3")
	for _, c := range candidates {
		_, perr := ParseSignal(c)
		serr := validateYAML(s, []byte("reload: {signal: \""+c+"\"}\n"))
		if (perr == nil) != (serr == nil) {
			t.Errorf("signal %q: ParseSignal %v, schema %v", c, perr, serr)
		}
	}
}

// Every field the schema has says what it is.
func TestSchemaDescribesEveryField(t *testing.T) {
	for _, line := range strings.Split(schemagen.Markdown(Schema()), "\n")[2:] {
		cells := strings.Split(line, " | ")
		if line != "" && (len(cells) < 4 || strings.TrimSpace(strings.TrimSuffix(cells[len(cells)-1], "|")) == "") {
			t.Errorf("no description: %s", line)
		}
	}
}

// The generator (go/parser, reflection over source) stays out of the agent:
// agent/config embeds what it wrote.
func TestSchemaGeneratorNotInAgent(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if strings.Contains(string(out), "internal/schemagen") {
		t.Error("agent/config imports internal/schemagen outside its tests")
	}
}
