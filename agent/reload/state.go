package reload

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kolla-agent/kolla-agent/agent/render"
)

// The state directory:
//
//	sets/<hash>/manifest.json   a rendered set: path, host path, mode, owner of each file
//	sets/<hash>/files/<path>    its files, as staged (validators read them here)
//	applied                     the hash of the set the service runs with
//	good                        the hash of the last set that passed verification
//	pending                     a reload between commit and verdict: its hash
//	bad                         hashes rejected or rolled back, one per line
//
// Every small file is written to a temporary name and renamed, so a SIGKILL
// leaves the old or the new content.
type state struct{ dir string }

type manifestEntry struct {
	Path string      `json:"path"`
	Host string      `json:"host"`
	Mode fs.FileMode `json:"mode"`
	UID  int         `json:"uid"`
	GID  int         `json:"gid"`
}

// maxBad bounds the remembered bad hashes: the newest are kept.
const maxBad = 64

func (s state) setDir(hash string) string { return filepath.Join(s.dir, "sets", hash) }

// staged is where file f of the set hash is staged.
func (s state) staged(hash string, f render.File) string {
	return filepath.Join(s.setDir(hash), "files", filepath.FromSlash(strings.TrimPrefix(f.Path, "/")))
}

// stage writes the set under sets/<hash>: its files, then its manifest
// last, so a set with a manifest is complete.
func (s state) stage(hash string, files []render.File) error {
	dir := s.setDir(hash)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	m := make([]manifestEntry, len(files))
	for i, f := range files {
		p := s.staged(hash, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := writeSynced(p, f.Data, 0o600); err != nil {
			return err
		}
		m[i] = manifestEntry{Path: f.Path, Host: f.Host, Mode: f.Mode, UID: f.UID, GID: f.GID}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return writeSynced(filepath.Join(dir, "manifest.json"), b, 0o600)
}

// load reads the set hash back; an error when it is not (completely) there.
func (s state) load(hash string) ([]render.File, error) {
	b, err := os.ReadFile(filepath.Join(s.setDir(hash), "manifest.json"))
	if err != nil {
		return nil, err
	}
	var m []manifestEntry
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(s.setDir(hash), "manifest.json"), err)
	}
	files := make([]render.File, len(m))
	for i, e := range m {
		files[i] = render.File{Path: e.Path, Host: e.Host, Mode: e.Mode, UID: e.UID, GID: e.GID}
		if files[i].Data, err = os.ReadFile(s.staged(hash, files[i])); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// prune removes every set but keep.
func (s state) prune(keep ...string) {
	ents, _ := os.ReadDir(filepath.Join(s.dir, "sets"))
	for _, e := range ents {
		if !slices.Contains(keep, e.Name()) {
			os.RemoveAll(filepath.Join(s.dir, "sets", e.Name()))
		}
	}
}

func (s state) read(name string) string {
	b, _ := os.ReadFile(filepath.Join(s.dir, name))
	return strings.TrimSpace(string(b))
}

func (s state) write(name, value string) error {
	if value == "" {
		err := os.Remove(filepath.Join(s.dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return writeSynced(filepath.Join(s.dir, name), []byte(value+"\n"), 0o600)
}

func (s state) isBad(hash string) bool {
	return slices.Contains(strings.Fields(s.read("bad")), hash)
}

func (s state) markBad(hash string) error {
	bad := strings.Fields(s.read("bad"))
	if slices.Contains(bad, hash) {
		return nil
	}
	bad = append(bad, hash)
	if len(bad) > maxBad {
		bad = bad[len(bad)-maxBad:]
	}
	return s.write("bad", strings.Join(bad, "\n"))
}

// writeSynced writes data to a temporary file beside path, fsyncs it and
// renames it over path.
func writeSynced(path string, data []byte, mode fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
