package slice

import (
	"io/fs"
	"path/filepath"

	"github.com/kolla-agent/kolla-agent/internal/forwardserver"
	"github.com/kolla-agent/kolla-agent/internal/image"
)

// ReceiverRef is the Fluent forward receiver's image.
const ReceiverRef = "localhost/fluent-receiver:dev"

// Images are the slice's images beyond the agent's own: the kolla-style
// image of every service (internal/image.Services, each Debian root cached
// in cacheDir) and the receiver.
func Images(repo, cacheDir string) ([]image.Image, error) {
	project, err := image.Project(repo)
	if err != nil {
		return nil, err
	}
	var out []image.Image
	for _, s := range image.Services() {
		rootfs, err := image.ServiceRoot(cacheDir, s)
		if err != nil {
			return nil, err
		}
		img, err := image.ServiceImage(repo, s, project[0], rootfs)
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	r, err := receiverImage(cacheDir)
	if err != nil {
		return nil, err
	}
	return append(out, r), nil
}

// Roots builds (or finds cached in cacheDir) the Debian roots of Images,
// and returns their paths: what is slow to build, without the agent's
// binaries the images need.
func Roots(cacheDir string) ([]string, error) {
	var paths []string
	for _, s := range image.Services() {
		p, err := image.ServiceRoot(cacheDir, s)
		if err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	p, err := receiverRoot(cacheDir)
	return append(paths, p), err
}

// receiverRoot is the receiver's Debian root: Node.js.
func receiverRoot(cacheDir string) (string, error) {
	return image.DebianRoot(cacheDir, "bookworm", []string{"nodejs"})
}

// receiverImage is a Fluent forward receiver: the npm package
// @fluent-org/logger's FluentServer run by Debian's Node.js
// (internal/forwardserver's server.js), writing every entry it acks to a
// JSON-lines file. It takes the place of the examples' fluent-bit, which
// Debian does not package.
func receiverImage(cacheDir string) (image.Image, error) {
	if err := forwardserver.CheckInstalled(); err != nil {
		return image.Image{}, err
	}
	rootfs, err := receiverRoot(cacheDir)
	if err != nil {
		return image.Image{}, err
	}
	files := []image.File{{Path: "/srv/server.js", Mode: 0o644, Data: forwardserver.Script()}}
	modules := filepath.Dir(filepath.Dir(forwardserver.ModuleDir())) // node_modules
	err = filepath.WalkDir(modules, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(modules, p)
		f := image.File{Path: filepath.Join("/srv/node_modules", rel), Mode: 0o644, Src: p}
		if d.IsDir() {
			f.Dir, f.Mode, f.Src = true, 0o755, ""
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		return image.Image{}, err
	}
	return image.Image{Ref: ReceiverRef, Layers: []image.Layer{{Tar: rootfs}, {Files: files}}, Config: image.Config{
		User:       "65534:65534",
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Entrypoint: []string{"/usr/bin/node", "/srv/server.js"},
	}}, nil
}
