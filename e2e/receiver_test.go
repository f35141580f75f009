package e2e

import (
	"context"
	"io/fs"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/forwardserver"
	"github.com/kolla-agent/kolla-agent/internal/image"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

// receiverRef is a Fluent forward receiver as an image: the npm package
// @fluent-org/logger's FluentServer run by Debian's Node.js
// (internal/forwardserver's server.js), which writes every entry it acks to
// a JSON-lines file. It stands in for the examples' fluent-bit, which
// Debian does not package.
const receiverRef = "localhost/fluent-receiver:dev"

var receiverOnce struct {
	sync.Once
	err error
}

func receiverImage(t *testing.T) {
	t.Helper()
	if err := forwardserver.CheckInstalled(); err != nil {
		t.Fatalf("the Fluent receiver image: %v", err)
	}
	receiverOnce.Do(func() {
		receiverOnce.err = func() error {
			rootfs, err := image.DebianRoot(filepath.Join(testenv.CacheDir(), "images"), "bookworm", []string{"nodejs"})
			if err != nil {
				return err
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
				return err
			}
			img := image.Image{Ref: receiverRef, Layers: []image.Layer{{Tar: rootfs}, {Files: files}}, Config: image.Config{
				User:       "65534:65534",
				Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
				Entrypoint: []string{"/usr/bin/node", "/srv/server.js"},
			}}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			_, err = env.ImportImages(ctx, env.Dir, img)
			return err
		}()
	})
	if receiverOnce.err != nil {
		t.Fatalf("the Fluent receiver image: %v", receiverOnce.err)
	}
}
