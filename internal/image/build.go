package image

import (
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Sources is what a Dockerfile's stages are built from here.
type Sources struct {
	// Root is the repository. A build stage that copies the context and
	// runs `make build` (images/agent's) is taken as done: its WORKDIR is
	// Root, so the binaries of a local `make build` stand for its output.
	Root string
	// Images are images built before, by the name a FROM gives them (an
	// ARG's value such as kolla-agent).
	Images map[string]Image
}

// Build builds the last stage of dockerfile as the image ref: its base
// (scratch or an image of src.Images), the files its COPY instructions
// take from earlier stages, and its USER, ENV, LABEL, ENTRYPOINT and CMD.
// It refuses what it cannot reproduce (a RUN in the last stage, a base it
// has not built, a source it cannot find), naming the file and line.
func Build(dockerfile, ref string, args map[string]string, src Sources) (Image, error) {
	stages, err := ParseDockerfile(dockerfile, args)
	if err != nil {
		return Image{}, err
	}
	last := stages[len(stages)-1]
	img := Image{Ref: ref, Config: Config{Labels: map[string]string{}}}
	if last.From != "scratch" {
		base, ok := src.Images[last.From]
		if !ok {
			return Image{}, fmt.Errorf("%s: base image %s of the last stage is not built here", dockerfile, last.From)
		}
		img.Layers = slices.Clone(base.Layers)
		img.Config = base.Config
		img.Config.Labels = maps.Clone(base.Config.Labels)
		if img.Config.Labels == nil {
			img.Config.Labels = map[string]string{}
		}
	}
	if len(last.Runs) > 0 {
		return Image{}, fmt.Errorf("%s: RUN in the last stage cannot be reproduced without a container runtime", dockerfile)
	}
	var layer Layer
	for _, c := range last.Copies {
		files, err := copyFiles(c, stages, src)
		if err != nil {
			return Image{}, fmt.Errorf("%s:%d: COPY: %w", dockerfile, c.Line, err)
		}
		layer.Files = append(layer.Files, files...)
	}
	if len(layer.Files) > 0 {
		img.Layers = append(img.Layers, layer)
	}
	if last.User != "" {
		img.Config.User = last.User
	}
	for _, kv := range last.Env {
		k, _, _ := strings.Cut(kv, "=")
		img.Config.Env = slices.DeleteFunc(img.Config.Env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		img.Config.Env = append(img.Config.Env, kv)
	}
	maps.Copy(img.Config.Labels, last.Labels)
	if last.Entrypoint != nil {
		img.Config.Entrypoint = last.Entrypoint
		img.Config.Cmd = nil // Docker resets CMD when ENTRYPOINT changes
	}
	if last.Cmd != nil {
		img.Config.Cmd = last.Cmd
	}
	if last.Workdir != "/" {
		img.Config.WorkingDir = last.Workdir
	}
	return img, nil
}

// copyFiles resolves one COPY of the last stage to files.
func copyFiles(c Copy, stages []*Stage, src Sources) ([]File, error) {
	if c.From == "" {
		return nil, fmt.Errorf("copies from the build context are not supported in the last stage")
	}
	var from *Stage
	for _, s := range stages {
		if s.Name == c.From {
			from = s
		}
	}
	toDir := strings.HasSuffix(c.Dest, "/") || len(c.Srcs) > 1
	var uid, gid int
	if c.Chown != "" {
		fmt.Sscanf(c.Chown, "%d:%d", &uid, &gid)
	}
	var out []File
	for _, s := range c.Srcs {
		dest := c.Dest
		if toDir {
			dest = path.Join(c.Dest, path.Base(s))
		}
		switch {
		case from != nil && slices.Contains(madeDirs(from), path.Clean(s)):
			// An empty directory the stage made: COPY creates the
			// destination, owned as --chown says.
			out = append(out, File{Path: path.Clean(c.Dest), Dir: true, Mode: c.mode(0o755), UID: uid, GID: gid})
			continue
		case from != nil && builtByMake(from):
			rel, ok := strings.CutPrefix(s, strings.TrimSuffix(from.Workdir, "/")+"/")
			if !ok {
				return nil, fmt.Errorf("%s is outside stage %s's WORKDIR %s", s, from.Name, from.Workdir)
			}
			out = append(out, File{Path: dest, Mode: c.mode(0o755), UID: uid, GID: gid, Src: filepath.Join(src.Root, filepath.FromSlash(rel))})
		case from != nil:
			base, ok := src.Images[from.From]
			if !ok {
				return nil, fmt.Errorf("stage %s is FROM %s, which is not built here", from.Name, from.From)
			}
			f, ok := base.file(s)
			if !ok {
				return nil, fmt.Errorf("%s is not in image %s", s, from.From)
			}
			f.Path, f.UID, f.GID, f.Mode = dest, uid, gid, c.mode(f.Mode)
			out = append(out, f)
		default:
			return nil, fmt.Errorf("--from=%s names no stage", c.From)
		}
	}
	return out, nil
}

// mode is --chmod's mode, or def without one.
func (c Copy) mode(def int64) int64 {
	if c.Chmod != 0 {
		return c.Chmod
	}
	return def
}

// madeDirs is what a stage's `RUN mkdir -p DIR...` lines make: the one
// kind of RUN besides make build that is reproduced here.
func madeDirs(s *Stage) []string {
	var dirs []string
	for _, r := range s.Runs {
		if rest, ok := strings.CutPrefix(r, "mkdir -p "); ok && !strings.ContainsAny(rest, "&|;$`") {
			for _, d := range strings.Fields(rest) {
				dirs = append(dirs, path.Clean(d))
			}
		}
	}
	return dirs
}

// builtByMake reports whether a stage is the project's build stage: it
// copies the context and runs make build.
func builtByMake(s *Stage) bool {
	copiesContext := slices.ContainsFunc(s.Copies, func(c Copy) bool { return c.From == "" && slices.Contains(c.Srcs, ".") })
	runsMake := slices.ContainsFunc(s.Runs, func(r string) bool { return strings.HasPrefix(r, "make build") })
	return copiesContext && runsMake
}

// file finds a file of the image's own layers (not of a tar layer).
func (img Image) file(p string) (File, bool) {
	for i := len(img.Layers) - 1; i >= 0; i-- {
		for _, f := range img.Layers[i].Files {
			if f.Path == p {
				return f, true
			}
		}
	}
	return File{}, false
}

// Files lists the paths of the image's own files (not of tar layers),
// sorted: what a test compares with the Dockerfile.
func (img Image) Files() []string {
	var out []string
	for _, l := range img.Layers {
		for _, f := range l.Files {
			out = append(out, f.Path)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
