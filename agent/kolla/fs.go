package kolla

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/kolla-agent/kolla-agent/agent/render"
)

// The plan is computed on a view of the filesystem: what is on disk under
// the root, overlaid with what the config's entries do to it, in kolla's
// order. Later entries see what earlier ones wrote (a permissions glob
// matches files config_files copied), nothing touches the disk, and the
// difference between the view and the disk is the set of operations Apply
// runs. Paths in the view are absolute paths of the container, with every
// symlink before the last component resolved, so one key names one file.
//
// Symlinks are resolved as if the root were "/": an absolute target is taken
// under the root, a ".." above the root is an error instead of being
// clamped, so an image's own links (/var/run -> /run) work under --root and
// nothing is ever read or written outside it. filepath-securejoin clamps
// silently and knows nothing of the overlay, hence this resolver.

type kollaKind uint8

const (
	kollaAbsent kollaKind = iota
	kollaDir
	kollaFile
	kollaLink
	kollaOther // sockets, devices, fifos: never created
)

func (k kollaKind) String() string {
	switch k {
	case kollaDir:
		return "directory"
	case kollaFile:
		return "file"
	case kollaLink:
		return "symlink"
	case kollaOther:
		return "special file"
	}
	return "absent"
}

// kollaRole says why a path is in the plan, which decides whether Check
// looks at it.
type kollaRole uint8

const (
	kollaRoleDisk   kollaRole = iota // as found on disk
	kollaRoleParent                  // a missing parent directory: only its existence is checked
	kollaRoleConfig                  // config_files, directories, files, restored defaults: checked
	kollaRolePerm                    // owner or mode from permissions only: not checked
	kollaRoleState                   // the agent's own backups, state file and marker: not checked
)

// kollaNode is one path's state, on disk or wanted.
type kollaNode struct {
	kind     kollaKind
	mode     fs.FileMode // permission bits with setuid, setgid, sticky
	uid, gid int
	// data is a file's content when hasData; otherwise the content is the
	// file on disk at the same path, left as it is.
	data    []byte
	hasData bool
	target  string // symlinks
	// fresh: a directory (re)created by the plan, whose former content on
	// disk is not part of it.
	fresh bool
	role  kollaRole
	entry string // the config entry that set it, for the log
}

// kollaFS is the overlay. disk and list cache what planning saw, so every
// decision is made on one view (a ConfigMap's ..data link is read once: all
// sources come from the same snapshot).
type kollaFS struct {
	root    string
	overlay render.Overlay // sources read from the agent's copy of a ConfigMap
	over    map[string]*kollaNode
	kids    map[string]map[string]bool // over's names by parent: a recursive permission walks big trees
	disk    map[string]kollaNode
	list    map[string][]string
	euid    int
	egid    int
}

func newKollaFS(root string) *kollaFS {
	return &kollaFS{
		root: root,
		over: map[string]*kollaNode{},
		kids: map[string]map[string]bool{},
		disk: map[string]kollaNode{},
		list: map[string][]string{},
		euid: os.Geteuid(),
		egid: os.Getegid(),
	}
}

// host maps a container path to the host's.
func (v *kollaFS) host(p string) string {
	if v.overlay != nil {
		return v.overlay.Host(v.root, p)
	}
	return filepath.Join(v.root, filepath.FromSlash(p))
}

// onDisk is what lstat says of p (whose parents are resolved).
func (v *kollaFS) onDisk(p string) (kollaNode, error) {
	if n, ok := v.disk[p]; ok {
		return n, nil
	}
	n, err := kollaStat(v.host(p))
	if err != nil {
		return kollaNode{}, err
	}
	v.disk[p] = n
	return n, nil
}

func kollaStat(host string) (kollaNode, error) {
	fi, err := os.Lstat(host)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return kollaNode{kind: kollaAbsent}, nil
	}
	if err != nil {
		return kollaNode{}, err
	}
	n := kollaNode{mode: fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		n.uid, n.gid = int(st.Uid), int(st.Gid)
	}
	switch {
	case fi.Mode().IsRegular():
		n.kind = kollaFile
	case fi.IsDir():
		n.kind = kollaDir
	case fi.Mode()&fs.ModeSymlink != 0:
		n.kind = kollaLink
		if n.target, err = os.Readlink(host); err != nil {
			return kollaNode{}, err
		}
	default:
		n.kind = kollaOther
	}
	return n, nil
}

// get is p as the plan sees it: the overlay's node, else absent when a
// parent was replaced, else the disk's.
func (v *kollaFS) get(p string) (kollaNode, error) {
	if n, ok := v.over[p]; ok {
		return *n, nil
	}
	for a := path.Dir(p); ; a = path.Dir(a) {
		if n, ok := v.over[a]; ok && (n.kind != kollaDir || n.fresh) {
			return kollaNode{kind: kollaAbsent}, nil
		}
		if a == "/" {
			break
		}
	}
	return v.onDisk(p)
}

// set puts n at p. A node that is not a directory, or a fresh one, drops
// what the overlay held below p.
func (v *kollaFS) set(p string, n *kollaNode) {
	v.put(p, n)
	if n.kind != kollaDir || n.fresh {
		v.dropBelow(p)
	}
}

func (v *kollaFS) put(p string, n *kollaNode) {
	v.over[p] = n
	if p == "/" {
		return
	}
	dir := path.Dir(p)
	if v.kids[dir] == nil {
		v.kids[dir] = map[string]bool{}
	}
	v.kids[dir][path.Base(p)] = true
}

func (v *kollaFS) dropBelow(p string) {
	for name := range v.kids[p] {
		c := path.Join(p, name)
		v.dropBelow(c)
		delete(v.over, c)
	}
	delete(v.kids, p)
}

// remove deletes p (and what is below it) in the view.
func (v *kollaFS) remove(p string, role kollaRole, entry string) error {
	n, err := v.get(p)
	if err != nil {
		return err
	}
	if n.kind != kollaAbsent {
		v.set(p, &kollaNode{kind: kollaAbsent, role: role, entry: entry})
	}
	return nil
}

// edit returns the overlay node at p to change its owner or mode, adding
// one from disk when needed; nil when p does not exist.
func (v *kollaFS) edit(p string, role kollaRole) (*kollaNode, error) {
	if n, ok := v.over[p]; ok {
		if n.kind == kollaAbsent {
			return nil, nil
		}
		if role == kollaRoleConfig {
			n.role = role
		}
		return n, nil
	}
	n, err := v.get(p)
	if err != nil || n.kind == kollaAbsent {
		return nil, err
	}
	n.role = role
	v.put(p, &n)
	return &n, nil
}

// readDir lists p's names in the view, sorted.
func (v *kollaFS) readDir(p string) ([]string, error) {
	names := map[string]bool{}
	if n, ok := v.over[p]; !ok || !n.fresh {
		disk, err := v.diskNames(p)
		if err != nil {
			return nil, err
		}
		for _, name := range disk {
			names[name] = true
		}
	}
	for name := range v.kids[p] {
		names[name] = true
	}
	out := make([]string, 0, len(names))
	for name := range names {
		n, err := v.get(path.Join(p, name))
		if err != nil {
			return nil, err
		}
		if n.kind != kollaAbsent {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// diskNames lists the directory p on disk (nothing when it is not one).
func (v *kollaFS) diskNames(p string) ([]string, error) {
	if l, ok := v.list[p]; ok {
		return l, nil
	}
	d, err := v.onDisk(p)
	if err != nil {
		return nil, err
	}
	var names []string
	if d.kind == kollaDir {
		f, err := os.Open(v.host(p))
		if err != nil {
			return nil, err
		}
		names, err = f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return nil, err
		}
		sort.Strings(names)
	}
	v.list[p] = names
	return names, nil
}

// readFile is the content of the file at p (resolved) in the view.
func (v *kollaFS) readFile(p string) ([]byte, error) {
	if n, ok := v.over[p]; ok && n.hasData {
		return n.data, nil
	}
	return os.ReadFile(v.host(p))
}

// kollaEscapeError is a path leaving the root.
type kollaEscapeError struct{ via string }

func (e *kollaEscapeError) Error() string {
	if e.via == "" {
		return `escapes the root through ".."`
	}
	return "escapes the root through symlink " + e.via
}

type kollaTok struct{ name, via string }

func kollaToks(p, via string) []kollaTok {
	var out []kollaTok
	for _, s := range strings.Split(p, "/") {
		if s != "" && s != "." {
			out = append(out, kollaTok{s, via})
		}
	}
	return out
}

// kollaMaxSymlinks is Linux's limit on links followed in one lookup.
const kollaMaxSymlinks = 40

// resolve returns p with its symlinks resolved in the view, the last one
// only when follow is set. Missing components are kept as written.
func (v *kollaFS) resolve(p string, follow bool) (string, error) {
	toks := kollaToks(p, "")
	cur, hops := "/", 0
	for len(toks) > 0 {
		t := toks[0]
		toks = toks[1:]
		if t.name == ".." {
			if cur == "/" {
				return "", &kollaEscapeError{via: t.via}
			}
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, t.name)
		if len(toks) == 0 && !follow {
			cur = next
			break
		}
		n, err := v.get(next)
		if err != nil {
			return "", err
		}
		if n.kind != kollaLink {
			cur = next
			continue
		}
		if hops++; hops > kollaMaxSymlinks {
			return "", fmt.Errorf("too many levels of symlinks at %s", next)
		}
		if strings.HasPrefix(n.target, "/") {
			cur = "/"
		}
		toks = append(kollaToks(n.target, next+" -> "+n.target), toks...)
	}
	return cur, nil
}

// glob expands a pattern the way Python's glob.glob does (kolla's rules):
// only segments with "*", "?" or "[" are listed, "*" does not match a
// leading dot, and the result must exist (a dangling symlink does). Matches
// are returned as the pattern spells them, sorted.
func (v *kollaFS) glob(pattern string) ([]string, error) {
	cands := []string{"/"}
	for _, seg := range strings.Split(pattern, "/") {
		if seg == "" {
			continue
		}
		if !kollaHasMagic(seg) {
			for i := range cands {
				cands[i] = kollaJoin(cands[i], seg)
			}
			continue
		}
		pat := kollaGlobSegment(seg)
		var next []string
		for _, c := range cands {
			dir, err := v.resolve(c, true)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c, err)
			}
			if n, err := v.get(dir); err != nil {
				return nil, err
			} else if n.kind != kollaDir {
				continue
			}
			names, err := v.readDir(dir)
			if err != nil {
				return nil, err
			}
			for _, name := range names {
				if name[0] == '.' && seg[0] != '.' {
					continue
				}
				if ok, _ := path.Match(pat, name); ok {
					next = append(next, kollaJoin(c, name))
				}
			}
		}
		cands = next
	}
	var out []string
	for _, c := range cands {
		r, err := v.resolve(c, false)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c, err)
		}
		if n, err := v.get(r); err != nil {
			return nil, err
		} else if n.kind != kollaAbsent {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out, nil
}

// kollaJoin appends a name without cleaning: a glob's matches keep the
// pattern's spelling.
func kollaJoin(dir, name string) string {
	if strings.HasSuffix(dir, "/") {
		return dir + name
	}
	return dir + "/" + name
}

// kollaWithin reports whether p is base or below it.
func kollaWithin(p, base string) bool {
	return p == base || base == "/" || strings.HasPrefix(p, base+"/")
}
