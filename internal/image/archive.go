// Package image builds container images without a registry or a Docker
// daemon: a docker-archive tarball (what `docker save` writes and
// `ctr images import` reads) from layers of files, and the subset of the
// Dockerfile syntax the project's own Dockerfiles use, so the images a test
// node runs are built from the same description as the public build.
package image

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"
)

// Image is what an archive holds: one named image, its layers bottom up,
// and its runtime configuration.
type Image struct {
	Ref    string // e.g. localhost/kolla-agent:dev
	Layers []Layer
	Config Config
}

// Config is the part of the OCI image configuration a container runtime
// reads.
type Config struct {
	User       string            `json:"User,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	WorkingDir string            `json:"WorkingDir,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

// Layer is either a tar file on disk (Tar), taken as it is, or files
// written into a new layer.
type Layer struct {
	Tar   string
	Files []File
}

// File is one regular file or directory of a layer; parent directories it
// does not list are added (root-owned, 0755).
type File struct {
	Path string // absolute path in the image
	Mode int64  // permission bits
	UID  int
	GID  int
	Dir  bool // a directory: Src and Data are not used
	// Src is read from disk when Data is nil.
	Src  string
	Data []byte
}

// epoch is every entry's mtime: the same inputs make the same archive.
var epoch = time.Unix(0, 0).UTC()

// WriteArchive writes img as a docker-archive tarball to w.
func WriteArchive(w io.Writer, img Image) error {
	if img.Ref == "" {
		return fmt.Errorf("image: no reference")
	}
	tw := tar.NewWriter(w)
	var layerNames, diffIDs []string
	for i, l := range img.Layers {
		data, err := l.bytes()
		if err != nil {
			return fmt.Errorf("image %s: layer %d: %w", img.Ref, i, err)
		}
		sum := sha256.Sum256(data)
		hexsum := hex.EncodeToString(sum[:])
		name := hexsum + "/layer.tar"
		if !slices.Contains(layerNames, name) {
			if err := addFile(tw, name, data); err != nil {
				return err
			}
		}
		layerNames = append(layerNames, name)
		diffIDs = append(diffIDs, "sha256:"+hexsum)
	}
	cfg, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config":       img.Config,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	if err != nil {
		return err
	}
	cfgSum := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{
		"Config": cfgName, "RepoTags": []string{img.Ref}, "Layers": layerNames,
	}})
	if err != nil {
		return err
	}
	if err := addFile(tw, cfgName, cfg); err != nil {
		return err
	}
	if err := addFile(tw, "manifest.json", manifest); err != nil {
		return err
	}
	return tw.Close()
}

func addFile(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// bytes is the layer's tar: the file on disk, or a new tar of its files
// in path order with their parent directories.
func (l Layer) bytes() ([]byte, error) {
	if l.Tar != "" {
		return os.ReadFile(l.Tar)
	}
	var buf strings.Builder
	tw := tar.NewWriter(&buf)
	files := slices.Clone(l.Files)
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	dirs := map[string]bool{}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, fmt.Errorf("file path %q is not a clean absolute path", f.Path)
		}
		var parents []string
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			parents = append(parents, d)
		}
		slices.Reverse(parents)
		if f.Dir {
			if !dirs[f.Path] {
				dirs[f.Path] = true
				hdr := &tar.Header{Name: f.Path[1:] + "/", Mode: f.Mode, Uid: f.UID, Gid: f.GID, ModTime: epoch, Typeflag: tar.TypeDir, Format: tar.FormatPAX}
				// Parents first.
				for _, d := range parents {
					if !dirs[d] {
						dirs[d] = true
						if err := tw.WriteHeader(&tar.Header{Name: d[1:] + "/", Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
							return nil, err
						}
					}
				}
				if err := tw.WriteHeader(hdr); err != nil {
					return nil, err
				}
			}
			continue
		}
		for _, d := range parents {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Name: d[1:] + "/", Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		}
		data := f.Data
		if data == nil {
			var err error
			if data, err = os.ReadFile(f.Src); err != nil {
				return nil, err
			}
		}
		hdr := &tar.Header{Name: f.Path[1:], Mode: f.Mode, Uid: f.UID, Gid: f.GID, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return []byte(buf.String()), nil
}
