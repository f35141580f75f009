package image

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// debianRecipe changes when DebianRoot's way of building changes, so a
// cached root from an older recipe is built again.
const debianRecipe = "r1"

// DebianRoot returns a tarball of a Debian root with packages installed,
// made by mmdebstrap from the host's apt sources (Debian's packages, the
// only registry there is), and cached in dir by suite and package list:
// the base layer of a service image, with the real services in it.
func DebianRoot(dir, suite string, packages []string) (string, error) {
	return Root{Suite: suite, Packages: packages}.Build(dir)
}

// UWSGIPackages are the Debian packages of e2e's uWSGI image: uWSGI serving
// a Python app, as openstack-helm runs keystone and the other APIs.
func UWSGIPackages() []string { return []string{"uwsgi-core", "uwsgi-plugin-python3"} }

// Root is a Debian root to build. Essential and Customize are shell
// commands mmdebstrap runs on the host with the root's path as $1:
// Essential once the essential packages are in and before Packages (users
// the packages' scripts must find, as kolla's base image makes them),
// Customize at the end.
type Root struct {
	Suite     string
	Packages  []string
	Essential []string
	Customize []string
}

// Build makes the root, or returns the one cached in dir for the same
// recipe, suite, packages and hooks.
func (r Root) Build(dir string) (string, error) {
	pkgs := slices.Clone(r.Packages)
	slices.Sort(pkgs)
	key := debianRecipe + "\n" + r.Suite + "\n" + strings.Join(pkgs, ",")
	if len(r.Essential)+len(r.Customize) > 0 {
		key += "\n" + strings.Join(r.Essential, "\n") + "\n--\n" + strings.Join(r.Customize, "\n") + "\n--skip=cleanup/run"
	}
	sum := sha256.Sum256([]byte(key))
	path := filepath.Join(dir, "debian-"+r.Suite+"-"+hex.EncodeToString(sum[:8])+".tar")
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		return path, nil
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return "", fmt.Errorf("image: mmdebstrap is not installed (hack/install-tools.sh node): %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := strings.TrimSuffix(path, ".tar") + ".partial.tar"
	args := []string{"--variant=apt", "--format=tar", "--include=" + strings.Join(pkgs, ",")}
	for _, h := range r.Essential {
		args = append(args, "--essential-hook="+h)
	}
	for _, h := range r.Customize {
		args = append(args, "--customize-hook="+h)
	}
	if len(r.Customize) > 0 {
		// What the hooks made under /run (/run/mysqld) stays: an image's
		// /run is not a fresh tmpfs in a pod.
		args = append(args, "--skip=cleanup/run")
	}
	args = append(args, r.Suite, tmp)
	// The host's sources: the mirror this machine may reach.
	if out, err := exec.Command("mmdebstrap", args...).CombinedOutput(); err != nil {
		os.Remove(tmp)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return "", fmt.Errorf("image: mmdebstrap %s: %v:\n%s", strings.Join(args, " "), err, strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	return path, os.Rename(tmp, path)
}

// KollaImage builds images/kolla/Dockerfile on a Debian root: the agent's
// binaries from agent (the agent image Project built) and `kolla-agent run`
// as the entrypoint, the root's services left as they are.
func KollaImage(root, ref string, agent Image, debianRoot string) (Image, error) {
	base := Image{Layers: []Layer{{Tar: debianRoot}}, Config: Config{
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	}}
	src := Sources{Root: root, Images: map[string]Image{"kolla-agent": agent, "debian-root": base}}
	return Build(filepath.Join(root, "images/kolla/Dockerfile"), ref, map[string]string{"AGENT": "kolla-agent", "BASE": "debian-root"}, src)
}
