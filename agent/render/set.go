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
	return UnderRoot(root, filepath.FromSlash(p))
}

// UnderRoot is where the pod's absolute path p is on this host: under root
// (--root), or p itself without one. "" stays "" (a path not given).
func UnderRoot(root, p string) string {
	if root == "" || p == "" {
		return p
	}
	return filepath.Join(root, p)
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
		if err := WriteFile(f); err != nil {
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

// Difference is one way the disk differs from the rendered config. What is
// one of: missing, extra (would be removed), type, content, mode, owner,
// target (of a symlink). Path is the container's path, not the host's.
type Difference struct {
	Path, What, Want, Got string
}

func (d Difference) String() string {
	return fmt.Sprintf("%s: %s: want %s, got %s", d.Path, d.What, d.Want, d.Got)
}
