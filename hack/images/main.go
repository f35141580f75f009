// Command images builds the images images/agent and images/openstack-helm
// describe, from the binaries of `make build`, and the kolla-style image of
// each service of the examples slice (images/kolla on a Debian root with
// the real packages, internal/image.Services) and the Fluent receiver that
// stands in for fluent-bit (internal/slice), as docker-archive tarballs
// (what `docker save` writes), and imports them into a testenv node's
// containerd when one runs in the -import directory. No registry, no
// Docker daemon: internal/image reads the Dockerfiles.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kolla-agent/kolla-agent/internal/image"
	"github.com/kolla-agent/kolla-agent/internal/slice"
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

func main() {
	out := flag.String("out", "bin/images", "where the tarballs go")
	into := flag.String("import", "", "a hack/testenv directory whose node gets the images (skipped when none runs there)")
	services := flag.Bool("services", true, "also the service images (a Debian root each, cached by package list)")
	roots := flag.Bool("roots", false, "only build (or find cached) every Debian root the tests use, and no image: what make tools does before the tests, whose timeouts a cold build would eat")
	flag.Parse()
	if *roots {
		if err := buildRoots(); err != nil {
			fmt.Fprintln(os.Stderr, "images:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*out, *into, *services); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

// buildRoots builds the Debian roots of the examples slice's images and of
// e2e's uWSGI image into the cache.
func buildRoots() error {
	cache := filepath.Join(testenv.CacheDir(), "images")
	start := time.Now()
	roots, err := slice.Roots(cache)
	if err != nil {
		return err
	}
	uwsgi, err := image.DebianRoot(cache, "bookworm", image.UWSGIPackages())
	if err != nil {
		return err
	}
	for _, p := range append(roots, uwsgi) {
		fmt.Println(filepath.Base(p))
	}
	fmt.Printf("the tests' Debian roots, cached in %s: %.0fs\n", cache, time.Since(start).Seconds())
	return nil
}

func run(out, into string, services bool) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	imgs, err := image.Project(root)
	if err != nil {
		return err
	}
	if services {
		start := time.Now()
		more, err := slice.Images(root, filepath.Join(testenv.CacheDir(), "images"))
		if err != nil {
			return err
		}
		fmt.Printf("the examples slice's images (Debian roots cached in %s): %.0fs\n", filepath.Join(testenv.CacheDir(), "images"), time.Since(start).Seconds())
		imgs = append(imgs, more...)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var env *testenv.Env
	if into != "" {
		env, err = testenv.Open(into)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fmt.Printf("no testenv in %s: images not imported (hack/testenv up %s, as root, starts a node)\n", into, into)
		case err != nil:
			return err
		case !env.Node():
			fmt.Printf("the testenv in %s runs no node: images not imported\n", into)
			env = nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	for _, img := range imgs {
		fmt.Printf("%s: user %s, entrypoint %v\n", img.Ref, img.Config.User, img.Config.Entrypoint)
	}
	if env != nil {
		paths, err := env.ImportImages(ctx, out, imgs...)
		if err != nil {
			return err
		}
		fmt.Printf("%v imported into the node of %s\n", paths, env.Dir)
		return nil
	}
	for _, img := range imgs {
		path := filepath.Join(out, strings.NewReplacer("/", "_", ":", "_").Replace(img.Ref)+".tar")
		if err := image.WriteArchiveFile(path, img); err != nil {
			return err
		}
		fmt.Println(path)
	}
	return nil
}
