package kolla

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/kolla-agent/kolla-agent/agent/render"
)

type kollaOpKind uint8

const (
	kollaOpRemove kollaOpKind = iota // move the disk's entry aside (deleted on commit)
	kollaOpMkdir                     // create a directory (owner and mode at the end)
	kollaOpWrite                     // write a file atomically with its owner and mode
	kollaOpLink                      // create or replace a symlink
	kollaOpAttrs                     // change owner and mode only
)

// kollaOp is one change to the disk, with what it changes for Check and
// Changes, and what was there for a rollback.
type kollaOp struct {
	kind    kollaOpKind
	path    string
	want    kollaNode
	old     kollaNode // the disk's entry before
	oldData []byte    // a file's content before, when rewritten
	role    kollaRole
	diffs   []render.Difference
}

// diff compares the plan's view with the disk. Paths are visited in order,
// so a directory comes before what it holds.
func (p *Plan) diff() ([]kollaOp, error) {
	v := p.v
	keys := make([]string, 0, len(v.over))
	for k := range v.over {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	removed := map[string]bool{}
	gone := func(q string) bool {
		for a := q; ; a = path.Dir(a) {
			if removed[a] {
				return true
			}
			if a == "/" {
				return false
			}
		}
	}
	var ops []kollaOp
	for _, k := range keys {
		n := *v.over[k]
		d := kollaNode{kind: kollaAbsent}
		if !gone(k) {
			var err error
			if d, err = v.onDisk(k); err != nil {
				return nil, err
			}
		}
		if n.kind == kollaAbsent {
			if d.kind != kollaAbsent {
				ops = append(ops, kollaOp{kind: kollaOpRemove, path: k, old: d, role: n.role,
					diffs: []render.Difference{{Path: k, What: "extra", Want: "absent", Got: d.kind.String()}}})
				removed[k] = true
			}
			continue
		}
		var first []render.Difference // what replacing d says, instead of "missing"
		if d.kind != kollaAbsent && d.kind != n.kind {
			ops = append(ops, kollaOp{kind: kollaOpRemove, path: k, old: d, role: n.role})
			removed[k] = true
			first = []render.Difference{{Path: k, What: "type", Want: n.kind.String(), Got: d.kind.String()}}
			d = kollaNode{kind: kollaAbsent}
		}
		missing := func() []render.Difference {
			if first != nil {
				return first
			}
			return []render.Difference{{Path: k, What: "missing", Want: p.describe(n), Got: "absent"}}
		}
		op := kollaOp{path: k, want: n, old: d, role: n.role}
		switch n.kind {
		case kollaDir:
			if d.kind == kollaAbsent {
				op.kind, op.diffs = kollaOpMkdir, missing()
			} else {
				op.kind, op.diffs = kollaOpAttrs, p.attrDiffs(k, n, d)
			}
		case kollaFile:
			switch {
			case d.kind == kollaAbsent:
				op.kind, op.diffs = kollaOpWrite, missing()
			case !n.hasData:
				op.kind, op.diffs = kollaOpAttrs, p.attrDiffs(k, n, d)
			default:
				old, err := os.ReadFile(v.host(k))
				if err != nil {
					return nil, err
				}
				op.kind, op.oldData, op.diffs = kollaOpAttrs, old, p.attrDiffs(k, n, d)
				if !bytes.Equal(old, n.data) {
					op.kind = kollaOpWrite
					op.diffs = append([]render.Difference{{Path: k, What: "content", Want: render.Digest(n.data), Got: render.Digest(old)}}, op.diffs...)
				}
			}
		case kollaLink:
			switch {
			case d.kind == kollaAbsent:
				op.kind, op.diffs = kollaOpLink, missing()
			case d.target != n.target:
				op.kind, op.diffs = kollaOpLink, []render.Difference{{Path: k, What: "target", Want: n.target, Got: d.target}}
				op.diffs = append(op.diffs, p.attrDiffs(k, n, d)...)
			default:
				op.kind, op.diffs = kollaOpAttrs, p.attrDiffs(k, n, d)
			}
		default:
			return nil, fmt.Errorf("kolla: %s: cannot create a %s", k, n.kind)
		}
		if len(op.diffs) > 0 {
			ops = append(ops, op)
		}
		// What the disk holds in a directory the plan made afresh, and did
		// not put back, goes.
		if n.kind == kollaDir && n.fresh && d.kind == kollaDir {
			names, err := v.diskNames(k)
			if err != nil {
				return nil, err
			}
			for _, name := range names {
				c := path.Join(k, name)
				if _, ok := v.over[c]; ok {
					continue
				}
				cd, err := v.onDisk(c)
				if err != nil {
					return nil, err
				}
				ops = append(ops, kollaOp{kind: kollaOpRemove, path: c, old: cd, role: n.role,
					diffs: []render.Difference{{Path: c, What: "extra", Want: "absent", Got: cd.kind.String()}}})
				removed[c] = true
			}
		}
	}
	return ops, nil
}

func (p *Plan) attrDiffs(k string, want, got kollaNode) []render.Difference {
	var out []render.Difference
	if want.kind != kollaLink && want.mode != got.mode {
		out = append(out, render.Difference{Path: k, What: "mode", Want: render.PermString(want.mode), Got: render.PermString(got.mode)})
	}
	if want.uid != got.uid || want.gid != got.gid {
		out = append(out, render.Difference{Path: k, What: "owner", Want: p.users.Name(want.uid, want.gid), Got: p.users.Name(got.uid, got.gid)})
	}
	return out
}

func (p *Plan) describe(n kollaNode) string {
	switch n.kind {
	case kollaLink:
		return "symlink to " + n.target
	case kollaFile:
		return fmt.Sprintf("file %s %s, %s", render.PermString(n.mode), p.users.Name(n.uid, n.gid), render.Digest(n.data))
	}
	return fmt.Sprintf("%s %s %s", n.kind, render.PermString(n.mode), p.users.Name(n.uid, n.gid))
}

// Check reports how the disk differs from what the config renders: every
// path config_files, directories and files produce (content, mode, owner,
// with what permissions do to them), what a non-merge copy would remove, and
// defaults a config no longer lists that are not back. Paths only
// permissions touch are left out: the service writes there (logs), and new
// files' modes would be reported forever. Empty means in sync. Unlike
// kolla's --check, a perm written "600", preserve_properties entries and
// directories with subdirectories are compared correctly.
func (p *Plan) Check() ([]render.Difference, error) {
	var out []render.Difference
	for _, op := range p.ops {
		switch op.role {
		case kollaRoleConfig:
			out = append(out, op.diffs...)
		case kollaRoleParent:
			for _, d := range op.diffs {
				if d.What == "missing" || d.What == "type" {
					out = append(out, d)
				}
			}
		}
	}
	return kollaSortDiffs(out), nil
}

// Changes lists what Apply would change, state files included: the dry run.
// Empty when COPY_ONCE has already copied.
func (p *Plan) Changes() ([]render.Difference, error) {
	if p.configured {
		return nil, nil
	}
	var out []render.Difference
	for _, op := range p.ops {
		out = append(out, op.diffs...)
	}
	return kollaSortDiffs(out), nil
}

func kollaSortDiffs(d []render.Difference) []render.Difference {
	sort.SliceStable(d, func(i, j int) bool { return d[i].Path < d[j].Path })
	return d
}

// Apply brings the disk to the plan: removals first (moved aside), then new
// directories, files written atomically, owners and modes, directories'
// last and deepest first so a restrictive mode never blocks what goes
// inside. If a step fails, what was done is undone in reverse order and the
// error says whether that worked. A plan applies once.
func (p *Plan) Apply() error {
	if p.applied {
		return errors.New("kolla: plan already applied")
	}
	p.applied = true
	if p.configured {
		p.log.Info("kolla: KOLLA_CONFIG_STRATEGY is COPY_ONCE and the config was copied at an earlier start: nothing to do",
			"marker", p.marker)
		return nil
	}
	if len(p.ops) == 0 {
		p.log.Info("kolla: config already in place", "config", p.name)
		return nil
	}
	tx := &kollaTx{v: p.v, log: p.log}
	if err := tx.run(p.ops); err != nil {
		if rerr := tx.rollback(); rerr != nil {
			return fmt.Errorf("kolla: %w; rolling back also failed, the config is half applied: %v", err, rerr)
		}
		return fmt.Errorf("kolla: %w (every change was rolled back)", err)
	}
	tx.commit()
	p.log.Info("kolla: config applied", "config", p.name, "changes", len(p.ops))
	return nil
}

// kollaTx runs the operations and remembers how to undo each.
type kollaTx struct {
	v      *kollaFS
	log    *slog.Logger
	undo   []func() error
	asides []string // removed entries, deleted on commit
	dirs   map[string]bool
}

func (tx *kollaTx) touched(host string) {
	if tx.dirs == nil {
		tx.dirs = map[string]bool{}
	}
	tx.dirs[filepath.Dir(host)] = true
}

func (tx *kollaTx) run(ops []kollaOp) error {
	phase := func(kinds ...kollaOpKind) []kollaOp {
		var out []kollaOp
		for _, op := range ops {
			for _, k := range kinds {
				if op.kind == k {
					out = append(out, op)
				}
			}
		}
		return out
	}
	for _, op := range phase(kollaOpRemove) {
		if err := tx.remove(op); err != nil {
			return err
		}
	}
	for _, op := range phase(kollaOpMkdir) {
		h := tx.v.host(op.path)
		if err := os.Mkdir(h, 0o700); err != nil {
			return err
		}
		tx.touched(h)
		tx.undo = append(tx.undo, func() error { return os.Remove(h) })
		tx.log.Info("kolla: created directory", "path", op.path, "entry", op.want.entry)
	}
	for _, op := range phase(kollaOpWrite, kollaOpLink) {
		if err := tx.write(op); err != nil {
			return err
		}
	}
	var dirs []kollaOp
	for _, op := range phase(kollaOpAttrs, kollaOpMkdir) {
		if op.want.kind == kollaDir {
			dirs = append(dirs, op)
			continue
		}
		if err := tx.attrs(op); err != nil {
			return err
		}
	}
	sort.SliceStable(dirs, func(i, j int) bool { return dirs[i].path > dirs[j].path })
	for _, op := range dirs {
		if err := tx.attrs(op); err != nil {
			return err
		}
	}
	for d := range tx.dirs {
		if err := render.SyncDir(d); err != nil {
			return err
		}
	}
	return nil
}

func (tx *kollaTx) remove(op kollaOp) error {
	h := tx.v.host(op.path)
	aside, err := kollaAsideName(h)
	if err != nil {
		return err
	}
	if err := os.Rename(h, aside); err != nil {
		return err
	}
	tx.touched(h)
	tx.asides = append(tx.asides, aside)
	tx.undo = append(tx.undo, func() error { return os.Rename(aside, h) })
	tx.log.Info("kolla: removing", "path", op.path, "was", op.old.kind.String())
	return nil
}

// kollaAsideName is a free name next to h for moving h out of the way.
func kollaAsideName(h string) (string, error) {
	dir, base := filepath.Split(h)
	for i := 0; i < 100; i++ {
		a := filepath.Join(dir, fmt.Sprintf(".%s.kolla-agent-old-%d-%d", base, os.Getpid(), i))
		if _, err := os.Lstat(a); errors.Is(err, fs.ErrNotExist) {
			return a, nil
		}
	}
	return "", fmt.Errorf("no free name to move %s aside", h)
}

func (tx *kollaTx) write(op kollaOp) error {
	h := tx.v.host(op.path)
	w := op.want
	old, oldData := op.old, op.oldData
	// The file being replaced keeps a second name until commit, so a
	// rollback puts the very same file back (inode, mtime); where a hard
	// link is refused, its content and attributes are rewritten instead.
	var kept string
	if old.kind == kollaFile {
		if a, err := kollaAsideName(h); err == nil && os.Link(h, a) == nil {
			kept = a
			tx.asides = append(tx.asides, a)
		}
	}
	var renamed bool
	var err error
	if op.kind == kollaOpLink {
		err = kollaSymlinkAtomic(h, w.target, w.uid, w.gid)
		renamed = err == nil
	} else {
		renamed, err = render.ReplaceFile(render.File{Host: h, Data: w.data, Mode: w.mode, UID: w.uid, GID: w.gid})
	}
	if renamed {
		tx.touched(h)
		tx.undo = append(tx.undo, func() error {
			switch {
			case kept != "":
				return os.Rename(kept, h)
			case old.kind == kollaFile:
				return render.WriteFile(render.File{Host: h, Data: oldData, Mode: old.mode, UID: old.uid, GID: old.gid})
			case old.kind == kollaLink:
				return kollaSymlinkAtomic(h, old.target, old.uid, old.gid)
			}
			return os.Remove(h)
		})
	}
	if err != nil {
		if !renamed && kept != "" {
			os.Remove(kept) // the file was never replaced
			tx.asides = tx.asides[:len(tx.asides)-1]
		}
		return err
	}
	tx.log.Info("kolla: wrote", "path", op.path, "entry", w.entry)
	return nil
}

// kollaSymlinkAtomic replaces path with a symlink to target.
func kollaSymlinkAtomic(h, target string, uid, gid int) error {
	tmp, err := kollaAsideName(h + ".tmp-link")
	if err != nil {
		return err
	}
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Lchown(tmp, uid, gid); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, h); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func (tx *kollaTx) attrs(op kollaOp) error {
	w := op.want
	if op.kind == kollaOpAttrs {
		old := op.old
		tx.undo = append(tx.undo, func() error {
			if err := setOwnerModeAt(tx.v.root, op.path, old.kind, old.uid, old.gid, old.mode); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		})
	}
	if err := setOwnerModeAt(tx.v.root, op.path, w.kind, w.uid, w.gid, w.mode); err != nil {
		// A path only permissions touch may sit on a volume that refuses
		// (NFS with root_squash, a read-only mount): kolla logs that and
		// goes on, and so does the agent; the config itself is in place.
		// So for one the service swapped for a symlink since planning: it
		// is left alone, not followed.
		if op.role == kollaRolePerm && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EROFS) || errors.Is(err, errChanged)) {
			tx.log.Warn("kolla: cannot set owner or mode", "path", op.path, "entry", w.entry, "err", err)
			return nil
		}
		return err
	}
	return nil
}

func (tx *kollaTx) rollback() error {
	var errs []error
	for i := len(tx.undo) - 1; i >= 0; i-- {
		if err := tx.undo[i](); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (tx *kollaTx) commit() {
	for _, a := range tx.asides {
		if err := os.RemoveAll(a); err != nil {
			tx.log.Warn("kolla: could not delete a replaced entry", "path", a, "err", err)
		}
	}
}
