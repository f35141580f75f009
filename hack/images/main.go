// Command images builds the images images/agent and images/openstack-helm
// describe, from the binaries of `make build`, as docker-archive tarballs
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
	"github.com/kolla-agent/kolla-agent/internal/testenv"
)

func main() {
	out := flag.String("out", "bin/images", "where the tarballs go")
	into := flag.String("import", "", "a hack/testenv directory whose node gets the images (skipped when none runs there)")
	flag.Parse()
	if err := run(*out, *into); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(out, into string) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	imgs, err := image.Project(root)
	if err != nil {
		return err
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
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
