package kolla

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/kolla-agent/kolla-agent/agent/render"
)

// Options are NewPlan's inputs besides the config.
type Options struct {
	// Root is the directory every absolute path is taken under: sources,
	// destinations, permission paths, the state directory, /etc/passwd and
	// /etc/group. "" is "/".
	Root string
	// StateDir keeps the image's default files a config replaced, the state
	// file naming them, and the COPY_ONCE marker; an absolute path inside
	// Root, DefaultStateDir when empty.
	StateDir string
	// Strategy is KOLLA_CONFIG_STRATEGY: StrategyCopyAlways or
	// StrategyCopyOnce. Anything else, empty included, is an error.
	Strategy string
	// Overlay reads the sources of these container directories from other
	// directories (reload from the API).
	Overlay render.Overlay
	Logger  *slog.Logger
}

// Plan is a resolved, validated config: every owner looked up, every
// source read, every destination checked, and the operations that bring the
// disk to the wanted state. Planning changes nothing on disk.
type Plan struct {
	name       string
	opts       Options
	log        *slog.Logger
	v          *kollaFS
	users      *render.Owners
	ops        []kollaOp
	marker     string
	configured bool // COPY_ONCE and the marker exists
	applied    bool
}

// kollaState is the state file: for each destination a config has written,
// whether the image had something there ("saved" under defaults/) or not
// ("absent"), so a later config that drops the entry gets the image's
// default back.
type kollaState struct {
	Version  int               `json:"version"`
	Defaults map[string]string `json:"defaults"`
}

const (
	kollaStateVersion = 1
	kollaStateFile    = "state.json"
	kollaMarkerFile   = "configured"
	kollaDefaultsDir  = "defaults"
	kollaSaved        = "saved"
	kollaNotThere     = "absent"
)

// NewPlan resolves and validates everything the config asks for and
// computes what applying it would change. Nothing on disk is touched. The
// error lists every problem found, each naming the entry and the field
// (config_files[3].owner) and the reason.
func NewPlan(cfg *Config, o Options) (*Plan, error) {
	if cfg == nil {
		return nil, errors.New("kolla: no config")
	}
	name := cfg.name
	if name == "" {
		name = "config.json"
	}
	switch o.Strategy {
	case StrategyCopyAlways, StrategyCopyOnce:
	case "":
		return nil, fmt.Errorf("KOLLA_CONFIG_STRATEGY is not set (want %s or %s)", StrategyCopyAlways, StrategyCopyOnce)
	default:
		return nil, fmt.Errorf("KOLLA_CONFIG_STRATEGY: %q is neither %s nor %s", o.Strategy, StrategyCopyAlways, StrategyCopyOnce)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	root := o.Root
	if root == "" {
		root = "/"
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if !strings.HasPrefix(o.StateDir, "/") {
		return nil, fmt.Errorf("kolla state directory %q is not an absolute path", o.StateDir)
	}
	cfg = cfg.clone()
	ve := &kollaErrs{}
	if cfg.validate(ve); len(ve.list) > 0 {
		return nil, ve.err(name)
	}
	users, err := render.LoadOwners(root)
	if err != nil {
		return nil, err
	}
	p := &Plan{name: name, opts: o, log: o.Logger, v: newKollaFS(root), users: users}
	p.v.overlay = o.Overlay
	pl := &kollaPlanner{p: p, v: p.v, e: &kollaErrs{}}
	if err := pl.plan(cfg); err != nil {
		return nil, err
	}
	if err := pl.e.err(name); err != nil {
		return nil, err
	}
	if p.ops, err = p.diff(); err != nil {
		return nil, err
	}
	return p, nil
}

// AlreadyConfigured reports that the strategy is COPY_ONCE and an earlier
// start has copied the config: Apply does nothing and Changes is empty.
func (p *Plan) AlreadyConfigured() bool { return p.configured }

// kollaPlanner builds the plan's view entry by entry, in kolla's order:
// restore the defaults a config replaced, create directories and files,
// copy config_files (backing up what they replace), set permissions.
type kollaPlanner struct {
	p        *Plan
	v        *kollaFS
	base     *kollaFS // the view after restores: what backups save
	e        *kollaErrs
	stateDir string
	state    kollaState
	changed  bool // state gained entries
}

func (pl *kollaPlanner) plan(cfg *Config) error {
	v, e, o := pl.v, pl.e, pl.p.opts

	// Every owner first: a name the image lacks is the commonest mistake.
	// An entry whose owner is unknown is still planned (with ids that are
	// never used: the plan fails) so its other problems are reported too.
	owner := func(at, s string) [2]int {
		uid, gid, err := pl.p.users.Owner(s)
		if err != nil {
			e.add("%s.owner: %s", at, strings.ReplaceAll(err.Error(), "\n", "; "))
		}
		return [2]int{uid, gid}
	}
	cfOwners := make([][2]int, len(cfg.ConfigFiles))
	for i, f := range cfg.ConfigFiles {
		if !f.PreserveProperties {
			cfOwners[i] = owner(fmt.Sprintf("config_files[%d]", i), f.Owner)
		}
	}
	dirOwners := make([][2]int, len(cfg.Directories))
	for i, d := range cfg.Directories {
		dirOwners[i] = owner(fmt.Sprintf("directories[%d]", i), d.Owner)
	}
	fileOwners := make([][2]int, len(cfg.Files))
	for i, f := range cfg.Files {
		fileOwners[i] = owner(fmt.Sprintf("files[%d]", i), f.Owner)
	}
	permOwners := make([][2]int, len(cfg.Permissions))
	for i, pr := range cfg.Permissions {
		permOwners[i] = owner(fmt.Sprintf("permissions[%d]", i), pr.Owner)
	}

	sd, err := v.resolve(o.StateDir, true)
	if err != nil {
		e.add("kolla state directory %s: %v", o.StateDir, err)
		return nil
	}
	if sd == "/" {
		e.add("kolla state directory %s: is the root", o.StateDir)
		return nil
	}
	pl.stateDir = sd
	if err := pl.loadState(); err != nil {
		return err
	}
	pl.p.marker = path.Join(sd, kollaMarkerFile)
	if o.Strategy == StrategyCopyOnce {
		m, err := v.get(pl.p.marker)
		if err != nil {
			return err
		}
		pl.p.configured = m.kind != kollaAbsent
	}

	// kolla puts every default it saved back before copying, so a merge
	// lands on the image's directory and not on the last render, and an
	// entry dropped from the config leaves the image's file behind.
	restores := make([]string, 0, len(pl.state.Defaults))
	for d := range pl.state.Defaults {
		restores = append(restores, d)
	}
	sort.Strings(restores)
	for _, d := range restores {
		if err := pl.restore(d, pl.state.Defaults[d]); err != nil {
			e.add("kolla state file %s: default of %s: %v", path.Join(sd, kollaStateFile), d, err)
		}
	}
	pl.base = v.clone()

	for i, d := range cfg.Directories {
		pl.ensure(fmt.Sprintf("directories[%d]", i), d, dirOwners[i], kollaDir)
	}
	for i, f := range cfg.Files {
		pl.ensure(fmt.Sprintf("files[%d]", i), f, fileOwners[i], kollaFile)
	}
	for i, f := range cfg.ConfigFiles {
		pl.configFile(fmt.Sprintf("config_files[%d]", i), f, cfOwners[i])
	}
	for i, pr := range cfg.Permissions {
		pl.permission(fmt.Sprintf("permissions[%d]", i), pr, permOwners[i])
	}
	if len(e.list) > 0 {
		return nil
	}
	if pl.changed {
		b, err := json.MarshalIndent(pl.state, "", "  ")
		if err != nil {
			return err
		}
		pl.stateNode(path.Join(sd, kollaStateFile), append(b, '\n'))
	}
	if o.Strategy == StrategyCopyOnce && !pl.p.configured {
		pl.stateNode(pl.p.marker, nil)
	}
	return nil
}

func (pl *kollaPlanner) stateNode(p string, data []byte) {
	if err := pl.mkdirAll(path.Dir(p), 0o700, kollaRoleState, "state"); err != nil {
		pl.e.add("kolla state directory %s: %v", pl.p.opts.StateDir, err)
		return
	}
	pl.v.set(p, &kollaNode{kind: kollaFile, mode: 0o600, uid: pl.v.euid, gid: pl.v.egid,
		data: data, hasData: true, role: kollaRoleState, entry: "state"})
}

// loadState reads the state file; a damaged one is an error rather than a
// reason to forget which defaults were replaced.
func (pl *kollaPlanner) loadState() error {
	pl.state = kollaState{Version: kollaStateVersion, Defaults: map[string]string{}}
	sf := path.Join(pl.stateDir, kollaStateFile)
	n, err := pl.v.get(sf)
	if err != nil {
		return err
	}
	if n.kind == kollaAbsent {
		return nil
	}
	if n.kind != kollaFile {
		pl.e.add("kolla state file %s: is a %s", sf, n.kind)
		return nil
	}
	b, err := pl.v.readFile(sf)
	if err != nil {
		return err
	}
	var s kollaState
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		pl.e.add("kolla state file %s: %v (remove the state directory to start afresh)", sf, err)
		return nil
	}
	if s.Version != kollaStateVersion {
		pl.e.add("kolla state file %s: version %d, want %d", sf, s.Version, kollaStateVersion)
		return nil
	}
	for d, how := range s.Defaults {
		if !strings.HasPrefix(d, "/") || (how != kollaSaved && how != kollaNotThere) {
			pl.e.add("kolla state file %s: bad entry %q: %q", sf, d, how)
			return nil
		}
		pl.state.Defaults[d] = how
	}
	return nil
}

func (pl *kollaPlanner) restore(dst, how string) error {
	v := pl.v
	r, err := v.resolve(dst, false)
	if err != nil {
		return err
	}
	if err := v.remove(r, kollaRoleConfig, "restore"); err != nil {
		return err
	}
	if how == kollaNotThere {
		return nil
	}
	b := path.Join(pl.stateDir, kollaDefaultsDir, r)
	n, err := v.get(b)
	if err != nil {
		return err
	}
	if n.kind == kollaAbsent {
		return fmt.Errorf("the saved copy %s is missing", b)
	}
	if err := pl.mkdirAll(path.Dir(r), 0o755, kollaRoleParent, "restore"); err != nil {
		return err
	}
	return pl.copyTree(v, b, r, kollaRoleConfig, "restore")
}

// backup saves what the image has at dst, the first time a config writes
// there.
func (pl *kollaPlanner) backup(dst string) error {
	if _, ok := pl.state.Defaults[dst]; ok {
		return nil
	}
	pl.changed = true
	n, err := pl.base.get(dst)
	if err != nil {
		return err
	}
	if n.kind == kollaAbsent {
		pl.state.Defaults[dst] = kollaNotThere
		return nil
	}
	pl.state.Defaults[dst] = kollaSaved
	b := path.Join(pl.stateDir, kollaDefaultsDir, dst)
	if err := pl.mkdirAll(pl.stateDir, 0o700, kollaRoleState, "backup"); err != nil {
		return err
	}
	if err := pl.mkdirAll(path.Dir(b), 0o700, kollaRoleState, "backup"); err != nil {
		return err
	}
	return pl.copyTree(pl.base, dst, b, kollaRoleState, "backup")
}

// copyTree copies src of the view from into dst of the plan's view as it is:
// modes, owners, symlinks as symlinks.
func (pl *kollaPlanner) copyTree(from *kollaFS, src, dst string, role kollaRole, entry string) error {
	n, err := from.get(src)
	if err != nil {
		return err
	}
	nn := &kollaNode{kind: n.kind, mode: n.mode, uid: n.uid, gid: n.gid, role: role, entry: entry}
	switch n.kind {
	case kollaAbsent:
		return nil
	case kollaDir:
		nn.fresh = true
		pl.v.set(dst, nn)
		names, err := from.readDir(src)
		if err != nil {
			return err
		}
		for _, name := range names {
			if err := pl.copyTree(from, path.Join(src, name), path.Join(dst, name), role, entry); err != nil {
				return err
			}
		}
		return nil
	case kollaFile:
		if nn.data, err = from.readFile(src); err != nil {
			return err
		}
		nn.hasData = true
	case kollaLink:
		nn.target = n.target
	default:
		return fmt.Errorf("%s is a %s, which is not copied", src, n.kind)
	}
	pl.v.set(dst, nn)
	return nil
}

// mkdirAll creates p and its missing parents in the view: p with mode,
// parents with 0755 (what mkdir -p gives under the usual umask), all owned
// by the agent.
func (pl *kollaPlanner) mkdirAll(p string, mode fs.FileMode, role kollaRole, entry string) error {
	if p == "/" {
		return nil
	}
	if err := pl.mkdirAll(path.Dir(p), 0o755, role, entry); err != nil {
		return err
	}
	n, err := pl.v.get(p)
	if err != nil {
		return err
	}
	switch n.kind {
	case kollaDir:
		return nil
	case kollaAbsent:
		pl.v.set(p, &kollaNode{kind: kollaDir, mode: mode, uid: pl.v.euid, gid: pl.v.egid, fresh: true, role: role, entry: entry})
		return nil
	}
	return fmt.Errorf("%s exists and is a %s, not a directory", p, n.kind)
}

// ensure is one entry of directories or files.
func (pl *kollaPlanner) ensure(at string, k PathEntry, ids [2]int, kind kollaKind) {
	v, e := pl.v, pl.e
	r, err := v.resolve(k.Path, true)
	if err != nil {
		e.add("%s.path: %q %v", at, k.Path, err)
		return
	}
	if r == "/" || kollaWithin(r, pl.stateDir) {
		e.add("%s.path: %q is the root or inside the agent's state directory", at, k.Path)
		return
	}
	n, err := v.get(r)
	if err != nil {
		e.add("%s.path: %v", at, err)
		return
	}
	mode := k.mode
	if kind == kollaDir {
		mode = kollaDirMode(mode)
	}
	switch n.kind {
	case kollaAbsent:
		if err := pl.mkdirAll(path.Dir(r), 0o755, kollaRoleParent, at); err != nil {
			e.add("%s.path: %v", at, err)
			return
		}
		v.set(r, &kollaNode{kind: kind, mode: mode, uid: ids[0], gid: ids[1],
			fresh: kind == kollaDir, hasData: kind == kollaFile, role: kollaRoleConfig, entry: at})
	case kind:
		nn, err := v.edit(r, kollaRoleConfig)
		if err != nil {
			e.add("%s.path: %v", at, err)
			return
		}
		nn.mode, nn.uid, nn.gid, nn.entry = mode, ids[0], ids[1], at
	default:
		e.add("%s.path: %s exists and is a %s, not a %s", at, k.Path, n.kind, kind)
	}
}

// kollaDirMode gives a directory the execute bit wherever its mode has read, as
// kolla does: "0600" on a directory of config files means 0700.
func kollaDirMode(m fs.FileMode) fs.FileMode {
	return m | (m&0o444)>>2
}

// configFile is one entry of config_files.
func (pl *kollaPlanner) configFile(at string, f ConfigFile, ids [2]int) {
	v, e := pl.v, pl.e
	src := strings.TrimRight(f.Source, "/")
	if src == "" {
		e.add("%s.source: %q is the root", at, f.Source)
		return
	}
	matches, err := v.glob(src)
	if err != nil {
		e.add("%s.source: %v", at, err)
		return
	}
	if len(matches) == 0 {
		if f.Optional {
			pl.p.log.Info("kolla: optional source matches nothing", "entry", at, "source", f.Source)
			return
		}
		e.add("%s.source: %q matches nothing (mark the entry optional to skip it)", at, f.Source)
		return
	}
	for _, m := range matches {
		dst := f.Dest
		if strings.HasSuffix(dst, "/") {
			dst += path.Base(m)
		}
		dr, err := v.resolve(dst, false)
		if err != nil {
			e.add("%s.dest: %q %v", at, dst, err)
			continue
		}
		sr, err := v.resolve(m, true)
		if err != nil {
			e.add("%s.source: %s %v", at, m, err)
			continue
		}
		switch {
		case dr == "/":
			e.add("%s.dest: %q is the root", at, dst)
			continue
		case kollaWithin(dr, pl.stateDir) || kollaWithin(pl.stateDir, dr):
			e.add("%s.dest: %q would overwrite the agent's state directory %s", at, dst, pl.p.opts.StateDir)
			continue
		case kollaWithin(dr, sr):
			e.add("%s.dest: %q is inside its own source %s", at, dst, m)
			continue
		case !f.Merge && kollaWithin(sr, dr):
			e.add("%s.source: %s is inside the destination %q that replaces it", at, m, dst)
			continue
		}
		if err := pl.backup(dr); err != nil {
			e.add("%s.dest: saving the image's %s: %v", at, dr, err)
			continue
		}
		if !f.Merge {
			if err := v.remove(dr, kollaRoleConfig, at); err != nil {
				e.add("%s.dest: %v", at, err)
				continue
			}
		}
		if err := pl.mkdirAll(path.Dir(dr), 0o755, kollaRoleParent, at); err != nil {
			e.add("%s.dest: %q: %v", at, dst, err)
			continue
		}
		if field, err := pl.copySource(at, f, ids, m, dr, map[string]bool{}); err != nil {
			e.add("%s.%s: %v", at, field, err)
		}
	}
}

// copySource copies one source (file, or directory recursively) to dst, the
// way kolla's _merge_directories does. The error's field is the one to blame.
func (pl *kollaPlanner) copySource(at string, f ConfigFile, ids [2]int, src, dst string, stack map[string]bool) (string, error) {
	v := pl.v
	lr, err := v.resolve(src, false)
	if err != nil {
		return "source", fmt.Errorf("%s %v", src, err)
	}
	ln, err := v.get(lr)
	if err != nil {
		return "source", err
	}
	sr, err := v.resolve(src, true)
	if err != nil {
		return "source", fmt.Errorf("%s %v", src, err)
	}
	n, err := v.get(sr)
	if err != nil {
		return "source", err
	}
	attrs := func(nn *kollaNode, mode fs.FileMode) {
		if f.PreserveProperties {
			nn.mode, nn.uid, nn.gid = n.mode, n.uid, n.gid
		} else {
			nn.mode, nn.uid, nn.gid = mode, ids[0], ids[1]
		}
		nn.role, nn.entry = kollaRoleConfig, at
	}
	if ln.kind == kollaLink && n.kind != kollaDir && f.Merge && f.PreserveProperties {
		// kolla's one case of copying a symlink as a symlink.
		v.set(dst, &kollaNode{kind: kollaLink, target: ln.target, uid: ln.uid, gid: ln.gid, role: kollaRoleConfig, entry: at})
		return "", nil
	}
	switch n.kind {
	case kollaDir:
		if stack[sr] {
			return "source", fmt.Errorf("%s: symlink loop", src)
		}
		stack[sr] = true
		defer delete(stack, sr)
		cur, err := v.get(dst)
		if err != nil {
			return "dest", err
		}
		var dn *kollaNode
		if cur.kind == kollaDir {
			if dn, err = v.edit(dst, kollaRoleConfig); err != nil {
				return "dest", err
			}
		} else {
			dn = &kollaNode{kind: kollaDir, fresh: true}
			v.set(dst, dn)
		}
		attrs(dn, kollaDirMode(f.mode))
		names, err := v.readDir(sr)
		if err != nil {
			return "source", err
		}
		for _, name := range names {
			// The kubelet's ..data link and ..<timestamp> directories are
			// the volume's machinery, not config: kolla copies them too.
			if strings.HasPrefix(name, "..") {
				continue
			}
			if field, err := pl.copySource(at, f, ids, path.Join(sr, name), path.Join(dst, name), stack); err != nil {
				return field, err
			}
		}
		return "", nil
	case kollaFile:
		data, err := v.readFile(sr)
		if err != nil {
			return "source", err
		}
		nn := &kollaNode{kind: kollaFile, data: data, hasData: true}
		attrs(nn, f.mode)
		v.set(dst, nn)
		return "", nil
	case kollaAbsent:
		return "source", fmt.Errorf("%s is a dangling symlink", src)
	}
	return "source", fmt.Errorf("%s is a %s: only files, directories and symlinks are copied", src, n.kind)
}

// permission is one entry of permissions.
func (pl *kollaPlanner) permission(at string, pr Permission, ids [2]int) {
	v, e := pl.v, pl.e
	matches, err := v.glob(pr.Path)
	if err != nil {
		e.add("%s.path: %v", at, err)
		return
	}
	if len(matches) == 0 {
		pl.p.log.Info("kolla: permissions path matches nothing", "entry", at, "path", pr.Path)
		return
	}
	for _, m := range matches {
		// The last component is never followed (kolla's os.chown follows
		// it): the entry often names a directory the service can write
		// (/var/log/kolla/keystone), where it can put a link to /etc.
		r, err := v.resolve(m, false)
		if err != nil {
			e.add("%s.path: %s %v", at, m, err)
			continue
		}
		n, err := v.get(r)
		if err != nil {
			e.add("%s.path: %v", at, err)
			continue
		}
		if n.kind == kollaAbsent {
			pl.p.log.Info("kolla: permissions path does not exist", "entry", at, "path", m)
			continue
		}
		if n.kind == kollaLink {
			pl.p.log.Warn("kolla: permissions path is a symlink: its own owner is set, not its target's, and it is not recursed into", "entry", at, "path", m, "target", n.target)
		}
		if err := pl.setAttrs(at, r, pr, ids); err != nil {
			e.add("%s.path: %v", at, err)
			continue
		}
		if pr.Recurse && n.kind == kollaDir {
			if err := pl.walk(at, pr, ids, r, m); err != nil {
				e.add("%s.path: %v", at, err)
			}
		}
	}
}

// walk applies a recursive permission below dir, never following a
// symlink: kolla's os.chown follows them, and a link in a log directory
// would hand its target (/etc/shadow) to the service's user.
func (pl *kollaPlanner) walk(at string, pr Permission, ids [2]int, dir, spelled string) error {
	names, err := pl.v.readDir(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		child, shown := path.Join(dir, name), kollaJoin(spelled, name)
		n, err := pl.v.get(child)
		if err != nil {
			return err
		}
		// kolla applies an entry once per exclude that does not match, so
		// with two excludes everything is changed; here any match excludes.
		excluded := false
		for _, re := range pr.excludes {
			if re.MatchString(shown) {
				excluded = true
				break
			}
		}
		if !excluded {
			if err := pl.setAttrs(at, child, pr, ids); err != nil {
				return err
			}
		}
		if n.kind == kollaDir {
			if err := pl.walk(at, pr, ids, child, shown); err != nil {
				return err
			}
		}
	}
	return nil
}

func (pl *kollaPlanner) setAttrs(at, p string, pr Permission, ids [2]int) error {
	nn, err := pl.v.edit(p, kollaRolePerm)
	if err != nil || nn == nil {
		return err
	}
	nn.uid, nn.gid = ids[0], ids[1]
	if pr.Perm != "" && nn.kind != kollaLink {
		nn.mode = pr.mode
		if nn.kind == kollaDir {
			nn.mode = kollaDirMode(pr.mode)
		}
	}
	if nn.role == kollaRolePerm {
		nn.entry = at
	}
	return nil
}

// clone copies the overlay (the disk caches are shared: they only grow).
func (v *kollaFS) clone() *kollaFS {
	c := *v
	c.over = make(map[string]*kollaNode, len(v.over))
	for k, n := range v.over {
		nn := *n
		c.over[k] = &nn
	}
	c.kids = make(map[string]map[string]bool, len(v.kids))
	for k, m := range v.kids {
		c.kids[k] = make(map[string]bool, len(m))
		for name := range m {
			c.kids[k][name] = true
		}
	}
	return &c
}

// Files lists the files the plan's config writes (config_files, files, the
// image defaults it restores), as wanted, sorted by path. COPY_ONCE after
// its first copy writes nothing, so lists nothing.
func (p *Plan) Files() []render.File {
	if p.configured {
		return nil
	}
	var out []render.File
	for k, n := range p.v.over {
		if n.role != kollaRoleConfig || n.kind != kollaFile || !n.hasData {
			continue
		}
		out = append(out, render.File{Path: k, Host: p.v.host(k), Data: n.data, Mode: n.mode, UID: n.uid, GID: n.gid})
	}
	slices.SortFunc(out, func(a, b render.File) int { return strings.Compare(a.Path, b.Path) })
	return out
}
