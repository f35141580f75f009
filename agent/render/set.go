package render

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// Overlay maps directories of the container (a ConfigMap volume's mount)
// to directories of this host their files are read from instead: the
// agent's own copy of the ConfigMap, fresh from the API before the kubelet
// has updated the volume. Sources only: destinations are never there.
type Overlay map[string]string

// Host is where container path p is read: under its overlay directory, or
// under root.
func (o Overlay) Host(root, p string) string {
	for dir, h := range o {
		if p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/") {
			return filepath.Join(h, filepath.FromSlash(strings.TrimPrefix(p, dir)))
		}
	}
	if root == "" {
		return p
	}
	return filepath.Join(root, filepath.FromSlash(p))
}

// File is one file of a rendered config as it is wanted: what a reload
// stages, validates, hashes, and puts back when it rolls back.
type File struct {
	Path     string // the container's path (the destination)
	Host     string // where it is written here: Path under the root
	Data     []byte
	Mode     fs.FileMode
	UID, GID int // -1: left as the process creates it
}

// Files lists the files the plan's config writes (config_files, files, the
// image defaults it restores), as wanted, sorted by path. COPY_ONCE after
// its first copy writes nothing, so lists nothing.
func (p *KollaPlan) Files() []File {
	if p.configured {
		return nil
	}
	var out []File
	for k, n := range p.v.over {
		if n.role != kollaRoleConfig || n.kind != kollaFile || !n.hasData {
			continue
		}
		out = append(out, File{Path: k, Host: p.v.host(k), Data: n.data, Mode: n.mode, UID: n.uid, GID: n.gid})
	}
	sortFiles(out)
	return out
}

// TemplateFiles are rendered templates as Files, sorted by path.
func TemplateFiles(rs []RenderedTemplate) []File {
	out := make([]File, len(rs))
	for i, r := range rs {
		out[i] = File{Path: r.Item.Dest, Host: r.Path, Data: r.Data, Mode: r.Mode, UID: r.UID, GID: r.GID}
	}
	sortFiles(out)
	return out
}

func sortFiles(fs []File) { sort.Slice(fs, func(i, j int) bool { return fs[i].Path < fs[j].Path }) }

// WriteFiles writes each file atomically (a temporary file, fsync'd,
// renamed over the old one), in order; it stops at the first failure.
func WriteFiles(files []File) error {
	for _, f := range files {
		if err := writeFileAtomic(f.Host, f.Data, f.Mode, f.UID, f.GID); err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
	}
	return nil
}

// Hash names a set of files by what they are: path, mode, owner and content
// of each, in path order. Two renders with the same result have the same
// hash, whatever the sources looked like.
func Hash(files []File) string {
	sorted := append([]File(nil), files...)
	sortFiles(sorted)
	h := sha256.New()
	var b [8]byte
	field := func(p []byte) {
		binary.BigEndian.PutUint64(b[:], uint64(len(p)))
		h.Write(b[:])
		h.Write(p)
	}
	for _, f := range sorted {
		field([]byte(f.Path))
		field(fmt.Appendf(nil, "%o %d %d", uint32(f.Mode), f.UID, f.GID))
		field(f.Data)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// ReadLive is files as they are on disk now (at their Host paths): data,
// mode, and owner where the file sets one. A file not there is left out.
func ReadLive(files []File) []File {
	var live []File
	for _, f := range files {
		b, err := os.ReadFile(f.Host)
		if err != nil {
			continue
		}
		fi, err := os.Stat(f.Host)
		if err != nil {
			continue
		}
		f.Data, f.Mode = b, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && f.UID >= 0 {
			f.UID, f.GID = int(st.Uid), int(st.Gid)
		}
		live = append(live, f)
	}
	return live
}

// Output is the service's whole config rendered in memory: kolla's plan
// (nil outside kolla mode) and the templates. Nothing is written until
// Commit.
type Output struct {
	Kolla     *KollaConfig // kolla's config.json; nil outside kolla mode
	Plan      *KollaPlan
	Applied   bool // the plan is on disk already
	Templates []RenderedTemplate
}

// Files is every file the config writes, kolla's then the templates'.
func (o *Output) Files() []File {
	var out []File
	if o.Plan != nil {
		out = o.Plan.Files()
	}
	return append(out, TemplateFiles(o.Templates)...)
}

// Commit writes it: kolla's plan (all or nothing), then the templates,
// each atomically.
func (o *Output) Commit() error {
	if o.Plan != nil && !o.Applied {
		if err := o.Plan.Apply(); err != nil {
			return fmt.Errorf("render: %w", err)
		}
	}
	if err := WriteTemplates(o.Templates); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	return nil
}

// Differences is what differs between the output and the disk (kolla's
// Check and the templates'), or with dryRun what writing it would change
// (kolla's Changes).
func (o *Output) Differences(dryRun bool) ([]Difference, error) {
	var diffs []Difference
	var err error
	switch {
	case o.Plan == nil:
	case dryRun:
		diffs, err = o.Plan.Changes()
	default:
		diffs, err = o.Plan.Check()
	}
	if err != nil {
		return nil, err
	}
	return append(diffs, CheckTemplates(o.Templates)...), nil
}
