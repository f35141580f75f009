package render

// Templates: the render: items of agent.yaml. kolla's config files are made
// ahead of time; what only the pod knows at start (its IP, the endpoints of
// the services it talks to, a mounted Secret) is filled in here, from Go
// text/template sources.
//
// Strictness is the point: a missing key, an unknown or failing function, or
// a printed nil is an error naming the source file, line and column, never a
// config file with "<no value>" or an empty host in it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kolla-agent/kolla-agent/discovery"
	"github.com/kolla-agent/kolla-agent/retry"
)

const (
	// DefaultTemplateTimeout bounds the waiting of one render when
	// TemplateOptions.Timeout is 0.
	DefaultTemplateTimeout = 5 * time.Minute
	// DefaultTemplatePerm is the mode of a rendered file without perm.
	DefaultTemplatePerm fs.FileMode = 0o644
	// SecretTemplatePerm is the mode of a rendered file without perm whose
	// template called secret: what it holds is as private as the Secret.
	SecretTemplatePerm fs.FileMode = 0o600

	// templateTop is the name text/template knows the source by. Errors are
	// rewritten to carry the source's path instead: a fixed name makes that
	// rewrite exact, and text/template mangles a name holding a '%'.
	templateTop = "\x00"
	// maxTemplateOutput stops a runaway template (a range over a huge
	// number) before it fills memory; real config files are far smaller.
	maxTemplateOutput = 16 << 20
	// maxTemplateIndent keeps indent's count sane.
	maxTemplateIndent = 1024
	// templateSnapshotTries bounds re-renders after the kubelet replaced a volume's
	// data mid-render (see errTemplateVolumeMoved).
	templateSnapshotTries = 3
	// templateNoValue is what text/template prints for a nil value.
	templateNoValue = "<no value>"
)

// Resolver answers the DNS questions of endpoints, srv and lookup.
// *discovery.Resolver is one.
type Resolver interface {
	Lookup(ctx context.Context, name string) (discovery.Answer, error)
}

// Exposer answers publicURL and internalURL from the API: where users
// outside the cluster reach a Service, and its port.
type Exposer interface {
	Exposure(ctx context.Context, ns, name string) (discovery.Exposure, error)
	ServicePort(ctx context.Context, ns, name string) (scheme string, port int, err error)
}

// TemplateOptions are the means a template may use.
type TemplateOptions struct {
	// LookupEnv reads the pod's environment (env, podIP, ...); nil means
	// os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Resolver answers endpoints, srv and lookup; nil (or a nil
	// *discovery.Resolver) makes them fail.
	Resolver Resolver
	// ClusterDomain (cluster.local) makes service names absolute. Without
	// it, service and internalURL fail and endpoints and srv leave the name
	// to Resolver.
	ClusterDomain string
	// Exposer answers publicURL and internalURL; nil makes them fail.
	Exposer Exposer
	// AllowedFileDirs are the only directories file and secret read under,
	// as the container sees them.
	AllowedFileDirs []string
	// Timeout bounds how long one render waits for discovered values, all
	// of them together; 0 means DefaultTemplateTimeout.
	Timeout time.Duration
	// Root: every absolute path (sources, destinations, allowed dirs, the
	// files that file and secret read) is taken under Root (--root).
	Root string
	// Data is the templates' dot; nil is an empty map (so .key fails).
	Data map[string]any
	// Logger says what a render waits for; nil discards.
	Logger *slog.Logger

	// Overlay reads the templates under these container directories from
	// other directories (reload from the API).
	Overlay Overlay

	// afterRead is called after each source is read: tests swap volumes
	// there.
	afterRead func(src string)
}

// TemplateItem is one render: item.
type TemplateItem struct {
	// Src is the template, an absolute path; under a ConfigMap mount it is
	// read through the volume's ..data snapshot.
	Src string
	// Dest is the file written, an absolute path in an existing directory.
	Dest string
	// Owner is "user", "user:group" (names of the image's passwd and group,
	// or numbers); "user" alone means user:user. Empty: the agent's own.
	Owner string
	// Perm is the octal mode (0640, 640, 0o640, 2775); empty: 0644, or
	// 0600 when the template calls secret.
	Perm string
}

// RenderedTemplate is a rendered item, not yet written.
type RenderedTemplate struct {
	Item TemplateItem
	// Path is where it is written: Dest under Root.
	Path     string
	Data     []byte
	Mode     fs.FileMode
	UID, GID int // -1: the agent's own
}

// TemplateError is a template that failed to parse or to execute, or whose
// output printed a nil value. Error() is "FILE:LINE:COL: message" (1-based,
// in bytes), or "FILE: message" when there is no place to name.
type TemplateError struct {
	File      string
	Line, Col int
	Msg       string
	// Err is what text/template returned; it wraps a function's error, so
	// errors.Is(err, discovery.ErrTimeout) tells a dependency that never
	// came from a broken template.
	Err error
}

func (e *TemplateError) Error() string {
	switch {
	case e.Line > 0 && e.Col > 0:
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
	case e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return e.File + ": " + e.Msg
}

func (e *TemplateError) Unwrap() error { return e.Err }

// errTemplateVolumeMoved: a file read through a volume's snapshot is gone because
// the kubelet swapped ..data and deleted the old version mid-render. The
// whole render starts again on the new version rather than mix the two.
var errTemplateVolumeMoved = errors.New("the volume was updated during the render")

// RenderTemplate renders one template from memory; name is the path errors
// name. file and secret read through their volume's snapshot; discovery
// functions wait up to o.Timeout.
func RenderTemplate(ctx context.Context, name string, src []byte, o TemplateOptions) ([]byte, error) {
	r, cancel := newTemplateRun(ctx, o)
	defer cancel()
	var out []byte
	err := r.retryMoved(func() (err error) {
		out, err = r.render(name, src)
		return err
	})
	return out, err
}

// RenderTemplates renders every item to memory and writes nothing: the
// items' fields are checked first, then every source is read (through one
// snapshot per volume), then each is rendered; the first failure is
// returned. Discovery functions wait up to o.Timeout for the whole set, and
// every use of a name in the set sees the same answer.
func RenderTemplates(ctx context.Context, items []TemplateItem, o TemplateOptions) ([]RenderedTemplate, error) {
	files, err := planTemplates(items, o.Root)
	if err != nil {
		return nil, err
	}
	r, cancel := newTemplateRun(ctx, o)
	defer cancel()
	if err := r.retryMoved(func() error { return r.renderAll(files) }); err != nil {
		return nil, err
	}
	return files, nil
}

// retryMoved runs f again, on a fresh snapshot, when the kubelet swapped a
// volume's ..data under it and removed the version it was reading.
func (r *templateRun) retryMoved(f func() error) error {
	for try := 1; ; try++ {
		err := f()
		if !errors.Is(err, errTemplateVolumeMoved) || try == templateSnapshotTries {
			return err
		}
		clear(r.mounts)
	}
}

// WriteTemplates writes rendered files, each atomically. It stops at the
// first failure; the files before it stay written.
func WriteTemplates(files []RenderedTemplate) error {
	for _, f := range files {
		if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
			return fmt.Errorf("render: %s: %w", f.Item.Dest, err)
		}
		if err := WriteFile(File{Host: f.Path, Data: f.Data, Mode: f.Mode, UID: f.UID, GID: f.GID}); err != nil {
			return fmt.Errorf("render: %s: %w", f.Item.Dest, err)
		}
	}
	return nil
}

// CheckTemplates compares rendered files with the disk: content, mode and
// owner (an owner of -1 is not compared).
func CheckTemplates(files []RenderedTemplate) []Difference {
	var diffs []Difference
	for _, f := range files {
		fi, err := os.Stat(f.Path)
		if err != nil {
			diffs = append(diffs, Difference{Path: f.Item.Dest, What: "missing", Want: "file", Got: "nothing"})
			continue
		}
		if b, err := os.ReadFile(f.Path); err != nil || !bytes.Equal(b, f.Data) {
			diffs = append(diffs, Difference{Path: f.Item.Dest, What: "content", Want: Digest(f.Data), Got: Digest(b)})
		}
		if fi.Mode().Perm() != f.Mode.Perm() {
			diffs = append(diffs, Difference{Path: f.Item.Dest, What: "mode", Want: PermString(f.Mode), Got: PermString(fi.Mode().Perm())})
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && ((f.UID >= 0 && int(st.Uid) != f.UID) || (f.GID >= 0 && int(st.Gid) != f.GID)) {
			diffs = append(diffs, Difference{Path: f.Item.Dest, What: "owner", Want: fmt.Sprintf("%d:%d", f.UID, f.GID), Got: fmt.Sprintf("%d:%d", st.Uid, st.Gid)})
		}
	}
	return diffs
}

// planTemplates checks every item's fields, so that a bad perm in the last
// item fails before a template waits for anything.
func planTemplates(items []TemplateItem, root string) ([]RenderedTemplate, error) {
	files := make([]RenderedTemplate, len(items))
	dests := map[string]int{}
	var db *Owners
	for i, it := range items {
		field := func(name string) string { return fmt.Sprintf("render[%d].%s", i, name) }
		switch {
		case !filepath.IsAbs(it.Src):
			return nil, fmt.Errorf("%s: %q: want an absolute path", field("src"), it.Src)
		case !filepath.IsAbs(it.Dest) || strings.HasSuffix(it.Dest, "/"):
			return nil, fmt.Errorf("%s: %q: want the absolute path of a file", field("dest"), it.Dest)
		}
		dest := filepath.Clean(it.Dest)
		if j, dup := dests[dest]; dup {
			return nil, fmt.Errorf("%s: %s is also render[%d].dest", field("dest"), it.Dest, j)
		}
		dests[dest] = i
		f := RenderedTemplate{Item: it, Path: UnderRoot(root, dest), UID: -1, GID: -1}
		// Missing directories are made at the write, as kolla's
		// set_configs makes a destination's parents; what exists on the
		// way must be a directory.
		for d := filepath.Dir(dest); ; d = filepath.Dir(d) {
			fi, err := os.Stat(UnderRoot(root, d))
			if err == nil && !fi.IsDir() {
				return nil, fmt.Errorf("%s: %s: %s is not a directory", field("dest"), it.Dest, d)
			}
			if err == nil || d == filepath.Dir(d) {
				break
			}
		}
		var err error
		if f.Mode, err = templatePerm(it.Perm); err != nil {
			return nil, fmt.Errorf("%s: %w", field("perm"), err)
		}
		if it.Owner != "" {
			if db == nil {
				if db, err = LoadOwners(root); err != nil {
					return nil, fmt.Errorf("%s: %w", field("owner"), err)
				}
			}
			if f.UID, f.GID, err = db.Owner(it.Owner); err != nil {
				return nil, fmt.Errorf("%s: %w", field("owner"), err)
			}
		}
		files[i] = f
	}
	return files, nil
}

// templatePerm is ParsePerm, with DefaultTemplatePerm for "".
func templatePerm(s string) (fs.FileMode, error) {
	if s == "" {
		return DefaultTemplatePerm, nil
	}
	return ParsePerm(s)
}

// templateRun is one render: its deadline, and what it has seen, so that
// every source and function of the render sees one version of each volume
// and one answer per DNS name. text/template calls functions from the
// executing goroutine only, and a run renders one template at a time, so
// it needs no lock.
type templateRun struct {
	// secrets counts the secret calls: a template that made one is written
	// SecretTemplatePerm unless its item gives a perm.
	secrets int
	// ctx bounds the render; it is here because template functions cannot
	// take one.
	ctx       context.Context
	o         TemplateOptions
	lookupEnv func(string) (string, bool)
	log       *slog.Logger
	current   string // the template being rendered, for the log
	answers   map[string]discovery.Answer
	// mounts maps a directory to its snapshot ("" when it is no volume).
	mounts map[string]string
}

func newTemplateRun(ctx context.Context, o TemplateOptions) (*templateRun, context.CancelFunc) {
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultTemplateTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	r := &templateRun{ctx: ctx, o: o, lookupEnv: o.LookupEnv,
		answers: map[string]discovery.Answer{}, mounts: map[string]string{}}
	if r.lookupEnv == nil {
		r.lookupEnv = os.LookupEnv
	}
	if r.log = o.Logger; r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r, cancel
}

// renderAll reads every source, then renders each into files[i].Data.
func (r *templateRun) renderAll(files []RenderedTemplate) error {
	srcs := make([][]byte, len(files))
	for i, f := range files {
		b, err := r.readSource(f.Item.Src)
		if err != nil {
			return fmt.Errorf("render[%d].src: %w", i, err)
		}
		srcs[i] = b
		if r.o.afterRead != nil {
			r.o.afterRead(f.Item.Src)
		}
	}
	for i := range files {
		before := r.secrets
		out, err := r.render(files[i].Item.Src, srcs[i])
		if err != nil {
			return err
		}
		files[i].Data = out
		if r.secrets > before && files[i].Item.Perm == "" {
			files[i].Mode = SecretTemplatePerm
		}
	}
	return nil
}

// readSource reads a template through its volume's snapshot.
func (r *templateRun) readSource(src string) ([]byte, error) {
	top := UnderRoot(r.o.Root, "/")
	return r.readThrough(src, r.o.Overlay.Host(r.o.Root, src), top, os.ReadFile)
}

// readThrough reads path (shown as name) through the snapshot of the volume
// that holds it, looking for the volume up to top.
func (r *templateRun) readThrough(name, path, top string, read func(string) ([]byte, error)) ([]byte, error) {
	mount, snap, err := r.snapshotOf(path, top)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	through := path
	if snap != "" {
		rel, err := filepath.Rel(mount, path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		through = filepath.Join(snap, rel)
	}
	b, err := read(through)
	if err == nil {
		return b, nil
	}
	if snap != "" && errors.Is(err, fs.ErrNotExist) {
		if now, serr := snapshot(mount); serr == nil && now != snap {
			return nil, fmt.Errorf("%s: %w", name, errTemplateVolumeMoved)
		}
		// Not one of the volume's own files (something put beside it):
		// it has no version to keep, read it as it is.
		if b, err = read(path); err == nil {
			return b, nil
		}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err // its path is the snapshot's, not the one the operator wrote
	}
	return nil, fmt.Errorf("%s: %w", name, err)
}

// snapshotOf finds the volume holding path: the nearest directory from
// path's own up to top with a ..data entry. It returns that directory and
// its snapshot, resolved once per render; "" when there is none.
func (r *templateRun) snapshotOf(path, top string) (mount, snap string, err error) {
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		s, seen := r.mounts[dir]
		if !seen {
			if s, err = snapshot(dir); err != nil {
				return "", "", err
			}
			if s == dir {
				s = ""
			}
			r.mounts[dir] = s
		}
		if s != "" {
			return dir, s, nil
		}
		if dir == top || dir == filepath.Dir(dir) || !strings.HasPrefix(dir, top) {
			return "", "", nil
		}
	}
}

// snapshot returns the directory to read dir's files through. The kubelet
// writes a ConfigMap, Secret or projected volume into a timestamped
// directory and swaps the dir/..data symlink to it atomically; the files
// are links through ..data. Reading every file of one render through the
// link's target, resolved once, sees one version even when the kubelet
// swaps in between. Without ..data, dir itself.
func snapshot(dir string) (resolved string, err error) {
	link := filepath.Join(dir, "..data")
	fi, err := os.Lstat(link)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return dir, nil
	case err != nil:
		return "", err
	case fi.IsDir():
		return link, nil
	case fi.Mode()&fs.ModeSymlink == 0:
		return "", fmt.Errorf("%s is neither a symlink nor a directory", link)
	}
	target, err := os.Readlink(link)
	if err != nil {
		return "", err
	}
	if !filepath.IsLocal(target) {
		// The kubelet links to a sibling; anything else is not its volume.
		return "", fmt.Errorf("%s points to %s, outside the volume", link, target)
	}
	return filepath.Join(dir, target), nil
}

// render parses and executes one template.
func (r *templateRun) render(name string, src []byte) ([]byte, error) {
	r.current = name
	t, err := template.New(templateTop).Option("missingkey=error").Funcs(r.funcs()).Parse(string(src))
	if err != nil {
		return nil, templateParseError(name, string(src), err)
	}
	var data any = r.o.Data
	if r.o.Data == nil {
		data = map[string]any{}
	}
	var out templateOutput
	if err := t.Execute(&out, data); err != nil {
		return nil, templateExecError(name, err)
	}
	b := out.Bytes()
	if i := bytes.Index(b, []byte(templateNoValue)); i >= 0 {
		// missingkey=error covers absent keys, not a key set to null, nor
		// index of a missing key, nor a function returning nil.
		return nil, &TemplateError{File: name, Msg: fmt.Sprintf(
			"output line %d: %s printed: a key holds null or a missing key was indexed; use default for optional values",
			1+bytes.Count(b[:i], []byte("\n")), templateNoValue)}
	}
	return b, nil
}

// templateOutput is a bytes.Buffer that refuses to grow past
// maxTemplateOutput.
type templateOutput struct{ bytes.Buffer }

func (b *templateOutput) Write(p []byte) (int, error) {
	if b.Len()+len(p) > maxTemplateOutput {
		return 0, fmt.Errorf("output larger than %d MiB", maxTemplateOutput>>20)
	}
	return b.Buffer.Write(p)
}

// templateParseError rewrites "template: NAME:LINE: msg" as a TemplateError.
// text/template names only the line of a parse error; the column is a best
// guess (see templateParseColumn).
func templateParseError(name, src string, err error) error {
	line, _, msg := cutTemplatePlace(err.Error())
	te := &TemplateError{File: name, Line: line, Msg: templateMsg(name, msg), Err: err}
	if line > 0 {
		te.Col = templateParseColumn(src, line, msg)
	}
	return te
}

// templateExecError rewrites `template: NAME:LINE:COL: executing "NAME" at
// <node>: msg` as a TemplateError with a 1-based column.
func templateExecError(name string, err error) error {
	line, col, msg := cutTemplatePlace(err.Error())
	msg = strings.TrimPrefix(msg, "executing "+strconv.Quote(templateTop)+" ")
	te := &TemplateError{File: name, Line: line, Msg: templateMsg(name, msg), Err: err}
	if col >= 0 {
		te.Col = col + 1 // text/template counts from 0
	}
	return te
}

func templateMsg(name, msg string) string {
	msg = strings.ReplaceAll(msg, strconv.Quote(templateTop), strconv.Quote(name))
	// "unclosed action started at NAME:2": the name is the file's already.
	return strings.ReplaceAll(msg, templateTop+":", "line ")
}

// cutTemplatePlace splits "template: \x00:LINE:COL: msg", "template:
// \x00:LINE: msg" or "template: \x00: msg"; line 0 and col -1 when absent.
func cutTemplatePlace(s string) (line, col int, msg string) {
	col = -1
	rest, ok := strings.CutPrefix(s, "template: "+templateTop+":")
	if !ok {
		return 0, col, strings.TrimPrefix(s, "template: ")
	}
	l, after, ok := cutTemplateNumber(rest)
	if !ok {
		return 0, col, strings.TrimPrefix(rest, " ")
	}
	if m, ok := strings.CutPrefix(after, ": "); ok {
		return l, col, m
	}
	if after, ok = strings.CutPrefix(after, ":"); ok {
		if c, after, ok := cutTemplateNumber(after); ok {
			if m, ok := strings.CutPrefix(after, ": "); ok {
				return l, c, m
			}
		}
	}
	return 0, col, strings.TrimPrefix(rest, " ")
}

func cutTemplateNumber(s string) (int, string, bool) {
	i := 0
	for i < len(s) && i < 9 && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, s, false
	}
	n, _ := strconv.Atoi(s[:i])
	return n, s[i:], true
}

// templateParseColumn guesses where on line a parse error is: at the token the
// message quotes (`function "foo" not defined`, `unexpected "}"`), found
// as a whole word from the line's first action on; else at the line's
// first action; else at 1.
func templateParseColumn(src string, line int, msg string) int {
	lines := strings.Split(src, "\n")
	if line > len(lines) {
		return 1
	}
	text := lines[line-1]
	start := max(strings.Index(text, "{{"), 0)
	if q := strings.IndexByte(msg, '"'); q >= 0 {
		if quoted, err := strconv.QuotedPrefix(msg[q:]); err == nil {
			if tok, err := strconv.Unquote(quoted); err == nil && tok != "" {
				if i := templateIndexWord(text[start:], tok); i >= 0 {
					return start + i + 1
				}
			}
		}
	}
	if strings.Contains(text, "{{") {
		return start + 1
	}
	return 1
}

// templateIndexWord finds tok in s where it does not continue a longer identifier.
func templateIndexWord(s, tok string) int {
	isWord := func(c byte) bool {
		return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	for off := 0; ; {
		i := strings.Index(s[off:], tok)
		if i < 0 {
			return -1
		}
		i += off
		end := i + len(tok)
		if (i == 0 || !isWord(s[i-1]) || !isWord(tok[0])) &&
			(end == len(s) || !isWord(s[end]) || !isWord(tok[len(tok)-1])) {
			return i
		}
		off = i + 1
	}
}

// funcs are the template functions, bound to this run.
func (r *templateRun) funcs() template.FuncMap {
	return template.FuncMap{
		"env":         r.env,
		"podIP":       r.podEnv("podIP", "POD_IP", "status.podIP"),
		"podName":     r.podEnv("podName", "POD_NAME", "metadata.name"),
		"namespace":   r.podEnv("namespace", "NAMESPACE", "metadata.namespace"),
		"nodeName":    r.podEnv("nodeName", "NODE_NAME", "spec.nodeName"),
		"hostname":    os.Hostname,
		"file":        r.file,
		"secret":      r.secret,
		"service":     r.service,
		"endpoints":   r.endpoints,
		"publicURL":   r.publicURL,
		"internalURL": r.internalURL,
		"srv":         r.srv,
		"lookup":      r.lookup,
		"join":        templateJoin,
		"split":       templateSplit,
		"quote":       templateQuote,
		"default":     templateDefault,
		"toJSON":      templateJSON,
		"indent":      templateIndent,
		"replace":     templateReplace,
		"lower":       strings.ToLower,
		"upper":       strings.ToUpper,
		"withPort":    templateWithPort,
	}
}

// env is strict: an unset variable is an error unless a fallback is given
// (env "NAME" "fallback"). A variable set to "" is "".
func (r *templateRun) env(name string, fallback ...string) (string, error) {
	if len(fallback) > 1 {
		return "", fmt.Errorf("want env NAME [FALLBACK], got %d fallbacks", len(fallback))
	}
	if v, ok := r.lookupEnv(name); ok {
		return v, nil
	}
	if len(fallback) == 1 {
		return fallback[0], nil
	}
	return "", fmt.Errorf("%s is not set (give a fallback: env %q \"VALUE\")", name, name)
}

// podEnv reads what the downward API puts in the environment; an empty
// value is as useless as none.
func (r *templateRun) podEnv(fn, name, field string) func() (string, error) {
	return func() (string, error) {
		v, _ := r.lookupEnv(name)
		if v == "" && name == "NAMESPACE" {
			v, _ = r.lookupEnv("POD_NAMESPACE")
		}
		if v == "" {
			return "", fmt.Errorf("%s is not set: give the pod's %s through the downward API (fieldRef %s)", name, fn, field)
		}
		return v, nil
	}
}

// file reads a file under an allowed directory, as it is.
func (r *templateRun) file(p string) (string, error) {
	b, err := r.readAllowed(p)
	return string(b), err
}

// secret reads a file under an allowed directory without its final line
// break: a Secret made from a file usually ends in one, which would break a
// URL or a password.
func (r *templateRun) secret(p string) (string, error) {
	r.secrets++
	b, err := r.readAllowed(p)
	if err != nil {
		return "", err
	}
	s := strings.TrimSuffix(string(b), "\n")
	return strings.TrimSuffix(s, "\r"), nil
}

// readAllowed reads p if it lies under an allowed directory. The read goes
// through os.Root, so no symlink (absolute, or with "..") leads out of that
// directory, and through the volume's snapshot when it is one.
func (r *templateRun) readAllowed(p string) ([]byte, error) {
	if !filepath.IsAbs(p) {
		return nil, fmt.Errorf("%q: want an absolute path", p)
	}
	clean := filepath.Clean(p)
	for _, dir := range r.o.AllowedFileDirs {
		dir = filepath.Clean(dir)
		rel, err := filepath.Rel(dir, clean)
		if err != nil || !filepath.IsAbs(dir) || !filepath.IsLocal(rel) || rel == "." {
			continue
		}
		host := UnderRoot(r.o.Root, dir)
		return r.readThrough(p, filepath.Join(host, rel), host, func(path string) ([]byte, error) {
			root, err := os.OpenRoot(host)
			if err != nil {
				return nil, err
			}
			defer root.Close()
			in, err := filepath.Rel(host, path)
			if err != nil {
				return nil, err
			}
			return root.ReadFile(in)
		})
	}
	if len(r.o.AllowedFileDirs) == 0 {
		return nil, fmt.Errorf("%s: no directory is allowed to be read from", p)
	}
	return nil, fmt.Errorf("%s: not under an allowed directory (%s)", p, strings.Join(r.o.AllowedFileDirs, ", "))
}

// service is a Service's FQDN: service "keystone.openstack" ->
// keystone.openstack.svc.cluster.local; "keystone" is in the pod's
// namespace.
func (r *templateRun) service(name string) (string, error) {
	host, err := r.serviceHost(name)
	if err != nil {
		return "", err
	}
	if r.o.ClusterDomain == "" {
		return "", fmt.Errorf("%s: the cluster domain is not known", name)
	}
	return host + ".svc." + strings.TrimSuffix(r.o.ClusterDomain, "."), nil
}

// serviceHost checks "name.namespace" (or "name") and returns
// "name.namespace".
func (r *templateRun) serviceHost(name string) (string, error) {
	labels := strings.Split(name, ".")
	if len(labels) == 1 {
		ns, err := r.podEnv("namespace", "NAMESPACE", "metadata.namespace")()
		if err != nil {
			return "", fmt.Errorf("%s: no namespace given and %w", name, err)
		}
		labels = append(labels, ns)
	}
	if len(labels) != 2 {
		return "", fmt.Errorf("%q: want NAME.NAMESPACE", name)
	}
	for _, l := range labels {
		if errs := validation.IsDNS1123Label(l); len(errs) > 0 {
			return "", fmt.Errorf("%q: %q: %s", name, l, strings.Join(errs, "; "))
		}
	}
	return labels[0] + "." + labels[1], nil
}

// query is the name a discovery function asks: absolute when the cluster
// domain is known, else as written for the resolver's own rules.
func (r *templateRun) query(host string) string {
	if r.o.ClusterDomain == "" {
		return host
	}
	return host + ".svc." + strings.TrimSuffix(r.o.ClusterDomain, ".") + "."
}

// publicURL is the URL users outside the cluster reach the Service NAME[.NS]
// at, with the path appended: from its LoadBalancer, NodePort, Route or
// Ingress (discovery.Exposure), waited for up to the render's timeout.
func (r *templateRun) publicURL(name string, path ...string) (string, error) {
	ns, svc, err := r.exposerArgs(name, path)
	if err != nil {
		return "", err
	}
	e, err := r.o.Exposer.Exposure(r.ctx, ns, svc)
	if err != nil {
		return "", fmt.Errorf("publicURL %q: %w", name, err)
	}
	return e.URL(strings.Join(path, "")), nil
}

// internalURL is the Service's URL inside the cluster: its absolute DNS
// name (NAME.NS.svc.DOMAIN) and its port, with the path appended.
func (r *templateRun) internalURL(name string, path ...string) (string, error) {
	ns, svc, err := r.exposerArgs(name, path)
	if err != nil {
		return "", err
	}
	if r.o.ClusterDomain == "" {
		return "", fmt.Errorf("internalURL %q: the cluster domain is unknown (CLUSTER_DOMAIN, --cluster-domain)", name)
	}
	scheme, port, err := r.o.Exposer.ServicePort(r.ctx, ns, svc)
	if err != nil {
		return "", fmt.Errorf("internalURL %q: %w", name, err)
	}
	e := discovery.Exposure{Scheme: scheme, Host: svc + "." + ns + ".svc." + strings.TrimSuffix(r.o.ClusterDomain, "."), Port: port}
	return e.URL(strings.Join(path, "")), nil
}

func (r *templateRun) exposerArgs(name string, path []string) (ns, svc string, err error) {
	if len(path) > 1 {
		return "", "", fmt.Errorf("%q: want NAME[.NAMESPACE] [PATH], got %d paths", name, len(path))
	}
	host, err := r.serviceHost(name)
	if err != nil {
		return "", "", err
	}
	if r.o.Exposer == nil {
		return "", "", fmt.Errorf("%s: no Kubernetes API to ask (no service account, no --kubeconfig)", name)
	}
	svc, ns, _ = strings.Cut(host, ".")
	return ns, svc, nil
}

// endpoints is the sorted addresses of a headless service's ready
// endpoints (cluster DNS publishes only those). For a service with a
// cluster IP, that one address.
func (r *templateRun) endpoints(name string) ([]string, error) {
	host, err := r.serviceHost(name)
	if err != nil {
		return nil, err
	}
	a, err := r.answer(r.query(host))
	if err != nil {
		return nil, err
	}
	return templateAddrs(a), nil
}

// srv is the sorted "target:port" pairs of _port._proto.name.ns (targets
// without the final dot, which TLS host checks reject); a name with more
// labels is asked as written.
func (r *templateRun) srv(name string) ([]string, error) {
	labels := strings.Split(name, ".")
	if len(labels) < 3 || !strings.HasPrefix(labels[0], "_") || !strings.HasPrefix(labels[1], "_") {
		return nil, fmt.Errorf("%q: want _PORT._PROTO.NAME.NAMESPACE", name)
	}
	q := name
	if len(labels) <= 4 {
		host, err := r.serviceHost(strings.Join(labels[2:], "."))
		if err != nil {
			return nil, err
		}
		q = r.query(labels[0] + "." + labels[1] + "." + host)
	}
	a, err := r.answer(q)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(a.SRV))
	for _, s := range a.SRV {
		out = append(out, net.JoinHostPort(strings.TrimSuffix(s.Target, "."), strconv.Itoa(int(s.Port))))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// lookup is the sorted addresses of any name, asked as written.
func (r *templateRun) lookup(name string) ([]string, error) {
	a, err := r.answer(name)
	if err != nil {
		return nil, err
	}
	return templateAddrs(a), nil
}

func templateAddrs(a discovery.Answer) []string {
	out := make([]string, len(a.Addrs))
	for i, ip := range a.Addrs {
		out[i] = ip.String()
	}
	return out
}

// answer looks name up, waiting while it has no records (not yet) or DNS
// is unhealthy, with backoff, until the render's deadline. Each name is
// asked once per render: every use sees the same answer.
func (r *templateRun) answer(name string) (discovery.Answer, error) {
	if a, ok := r.answers[name]; ok {
		return a, nil
	}
	if rv := reflect.ValueOf(r.o.Resolver); !rv.IsValid() || rv.Kind() == reflect.Pointer && rv.IsNil() {
		return discovery.Answer{}, fmt.Errorf("%s: no DNS resolver", name)
	}
	start := time.Now()
	// As discovery's waits: the first retry is fast, for a dependency that
	// comes up right after us; later ones back off, with jitter.
	b := retry.Lookup()
	var last error
	for {
		a, err := r.o.Resolver.Lookup(r.ctx, name)
		if err == nil {
			if last != nil {
				r.log.Info("template: DNS name resolved", "template", r.current, "name", name, "waited", time.Since(start).Round(time.Millisecond))
			}
			r.answers[name] = a
			return a, nil
		}
		var sick *discovery.DNSUnhealthyError
		switch {
		case r.ctx.Err() != nil:
			// Cut short: err says nothing about the name.
		case errors.Is(err, discovery.ErrNoRecords), errors.As(err, &sick):
			// A wait may last minutes: say what blocks it, once per state.
			if last == nil || last.Error() != err.Error() {
				r.log.Info("template: waiting for a DNS name", "template", r.current, "name", name, "state", err.Error())
			}
			last = err
		default:
			return discovery.Answer{}, err // a malformed name never resolves
		}
		if r.ctx.Err() == nil && retry.Sleep(r.ctx, nil, b.Step()) {
			continue
		}
		state := "no answer yet"
		if last != nil {
			state = last.Error()
		}
		if errors.Is(r.ctx.Err(), context.DeadlineExceeded) {
			return discovery.Answer{}, fmt.Errorf("waiting for %s: %w after %v (last: %s)",
				name, discovery.ErrTimeout, time.Since(start).Round(time.Millisecond), state)
		}
		return discovery.Answer{}, fmt.Errorf("waiting for %s: %w (last: %s)", name, r.ctx.Err(), state)
	}
}

// templateStrings takes a list (of strings or scalars) or one value.
func templateStrings(v any) ([]string, error) {
	switch v := v.(type) {
	case []string:
		return v, nil
	case string:
		return []string{v}, nil
	case nil:
		return nil, errors.New("no value (nil) where a list was wanted")
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return nil, fmt.Errorf("want a list, got %T", v)
	}
	out := make([]string, rv.Len())
	for i := range out {
		s, err := templateString(rv.Index(i).Interface())
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		out[i] = s
	}
	return out, nil
}

// templateString shows a scalar as a config file wants it: numbers from
// YAML (float64) without an exponent.
func templateString(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", errors.New("no value (nil)")
	case string:
		return v, nil
	case fmt.Stringer:
		return v.String(), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case float32:
		return strconv.FormatFloat(float64(v), 'f', -1, 32), nil
	}
	switch reflect.ValueOf(v).Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.String:
		return fmt.Sprint(v), nil
	}
	return "", fmt.Errorf("want a string or a number, got %T", v)
}

// templateJoin: join SEP LIST.
func templateJoin(sep string, list any) (string, error) {
	s, err := templateStrings(list)
	if err != nil {
		return "", err
	}
	return strings.Join(s, sep), nil
}

// templateSplit: split SEP S; an empty S is an empty list, not [""].
func templateSplit(sep, s string) []string {
	if s == "" {
		return []string{}
	}
	return strings.Split(s, sep)
}

// templateQuote: a double-quoted string with Go (and mostly JSON and YAML)
// escapes.
func templateQuote(v any) (string, error) {
	s, err := templateString(v)
	if err != nil {
		return "", err
	}
	return strconv.Quote(s), nil
}

// templateDefault: default FALLBACK VALUE is VALUE unless it is nil or an
// empty string, list or map. Unlike sprig's, false and 0 are values.
func templateDefault(fallback, v any) any {
	if v == nil {
		return fallback
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String, reflect.Slice, reflect.Map, reflect.Array:
		if rv.Len() == 0 {
			return fallback
		}
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return fallback
		}
	}
	return v
}

// templateJSON: compact JSON, without HTML escapes (a config file is not a
// web page).
func templateJSON(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// templateIndent: indent N S puts N spaces before every non-empty line
// (empty lines stay empty: no trailing blanks).
func templateIndent(n int, s string) (string, error) {
	if n < 0 || n > maxTemplateIndent {
		return "", fmt.Errorf("indent %d: want 0 to %d", n, maxTemplateIndent)
	}
	pad := strings.Repeat(" ", n)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = pad + l
		}
	}
	return strings.Join(lines, "\n"), nil
}

// templateReplace: replace OLD NEW S, every occurrence.
func templateReplace(old, repl, s string) (string, error) {
	if old == "" {
		return "", errors.New("replace: empty string to replace")
	}
	if n := strings.Count(s, old); len(s)+n*(len(repl)-len(old)) > maxTemplateOutput {
		return "", fmt.Errorf("replace: result larger than %d MiB", maxTemplateOutput>>20)
	}
	return strings.ReplaceAll(s, old, repl), nil
}

// templateWithPort: withPort PORT ADDRS appends :PORT to one address or to
// each of a list, bracketing IPv6 addresses:
// endpoints "memcached.openstack" | withPort 11211 | join ",".
func templateWithPort(port, addrs any) (any, error) {
	p, err := templateString(port)
	if err != nil {
		return nil, fmt.Errorf("withPort: port: %w", err)
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return nil, fmt.Errorf("withPort: port %q: want 1 to 65535", p)
	}
	if s, ok := addrs.(string); ok {
		return net.JoinHostPort(s, p), nil
	}
	list, err := templateStrings(addrs)
	if err != nil {
		return nil, fmt.Errorf("withPort: %w", err)
	}
	out := make([]string, len(list))
	for i, a := range list {
		out[i] = net.JoinHostPort(a, p)
	}
	return out, nil
}

// ParseTemplate parses a template with the functions rendering gives it,
// running nothing: `config check` finds syntax errors and unknown functions
// without the pod's environment or the cluster.
func ParseTemplate(name string, src []byte) error {
	r, cancel := newTemplateRun(context.Background(), TemplateOptions{})
	defer cancel()
	if _, err := template.New(templateTop).Option("missingkey=error").Funcs(r.funcs()).Parse(string(src)); err != nil {
		return templateParseError(name, string(src), err)
	}
	return nil
}
