package image

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestProjectImagesMatchDockerfiles builds the images as the node gets them
// and checks them against what the Dockerfiles say, read independently
// here: the paths, the user and the entrypoint.
func TestProjectImagesMatchDockerfiles(t *testing.T) {
	root := repoRoot(t)
	build := exec.Command("make", "-s", "build")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v: %s", err, out)
	}
	imgs, err := Project(root)
	if err != nil {
		t.Fatal(err)
	}
	agent, entry := imgs[0], imgs[1]
	if got, want := agent.Files(), []string{"/run/kolla-agent", "/usr/local/bin/kolla-agent", "/usr/local/bin/kolla-agent-probe", "/var/lib/kolla-agent"}; !slices.Equal(got, want) {
		t.Errorf("agent image files = %v, want %v", got, want)
	}
	// The agent's default directories belong to the image's user, so its
	// probe socket and reload state can be written as shipped.
	for _, d := range []string{"/run/kolla-agent", "/var/lib/kolla-agent"} {
		if f, ok := agent.file(d); !ok || !f.Dir || f.UID != 65534 || f.GID != 65534 {
			t.Errorf("%s in the agent image: %+v, want a directory owned by 65534:65534", d, f)
		}
	}
	if got, want := entry.Files(), []string{"/usr/local/bin/kubernetes-entrypoint"}; !slices.Equal(got, want) {
		t.Errorf("entrypoint image files = %v, want %v", got, want)
	}
	for _, c := range []struct {
		img        Image
		dockerfile string
	}{{agent, "images/agent/Dockerfile"}, {entry, "images/openstack-helm/Dockerfile"}} {
		b, err := os.ReadFile(filepath.Join(root, c.dockerfile))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if want := "USER " + c.img.Config.User; c.img.Config.User == "" || !strings.Contains(text, want) {
			t.Errorf("%s: image user %q, Dockerfile has no %q", c.dockerfile, c.img.Config.User, want)
		}
		ep, _ := json.Marshal(c.img.Config.Entrypoint)
		if !strings.Contains(strings.ReplaceAll(text, ", ", ","), "ENTRYPOINT "+string(ep)) {
			t.Errorf("%s: image entrypoint %s is not the Dockerfile's", c.dockerfile, ep)
		}
	}
	if agent.Config.User != "65534:65534" {
		t.Errorf("agent user = %q, want nobody (65534:65534)", agent.Config.User)
	}
	// The binary in the image is the one make build wrote.
	want, _ := os.ReadFile(filepath.Join(root, "bin/kolla-agent"))
	var buf bytes.Buffer
	if err := WriteArchive(&buf, entry); err != nil {
		t.Fatal(err)
	}
	got := archiveFile(t, buf.Bytes(), "usr/local/bin/kubernetes-entrypoint")
	if !bytes.Equal(got, want) {
		t.Errorf("kubernetes-entrypoint in the archive (%d bytes) is not bin/kolla-agent (%d bytes)", len(got), len(want))
	}
}

// archiveFile finds a file in a docker archive's layers.
func archiveFile(t *testing.T, archive []byte, name string) []byte {
	t.Helper()
	files := untar(t, archive)
	var manifest []struct{ Layers []string }
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json: %v %s", err, files["manifest.json"])
	}
	for _, l := range manifest[0].Layers {
		if data, ok := untar(t, files[l])[name]; ok {
			return data
		}
	}
	t.Fatalf("%s is in no layer", name)
	return nil
}

func untar(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		out[h.Name] = data
	}
}

func TestArchiveIsReproducible(t *testing.T) {
	img := Image{Ref: "localhost/x:1", Layers: []Layer{{Files: []File{{Path: "/a/b", Mode: 0o644, Data: []byte("x")}}}}}
	var a, b bytes.Buffer
	if err := WriteArchive(&a, img); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(&b, img); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("the same image made two different archives")
	}
	layer := untar(t, a.Bytes())
	var names []string
	for n := range layer {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) != 3 || names[2] != "manifest.json" {
		t.Errorf("archive entries = %v, want a layer, a config and manifest.json", names)
	}
}

func TestDockerfileErrorsNameFileAndLine(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"COPY a b\n", ":1: COPY before FROM"},
		{"FROM scratch\nADD a b\n", ":2: instruction ADD is not supported"},
		{"FROM scratch\nENTRYPOINT /bin/sh\n", ":2: ENTRYPOINT must be in JSON form"},
		{"FROM scratch\nCOPY --chown=1 a b\n", ":2: COPY flag --chown=1 is not supported"},
		{"FROM scratch\nENV A\n", ":2: ENV:"},
		{"# nothing\n", "no FROM"},
	} {
		p := filepath.Join(t.TempDir(), "Dockerfile")
		if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ParseDockerfile(p, nil)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want one naming %s and %q", c.text, err, p, c.want)
		}
	}
}

func TestBuildRefusesWhatItCannotReproduce(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ text, want string }{
		{"FROM debian\n", "base image debian of the last stage is not built here"},
		{"FROM scratch\nRUN true\n", "RUN in the last stage"},
		{"FROM scratch\nCOPY a /b\n", ":2: COPY: copies from the build context"},
		{"FROM scratch\nCOPY --from=x /a /b\n", "--from=x names no stage"},
	} {
		p := filepath.Join(dir, "Dockerfile")
		if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Build(p, "localhost/x:1", nil, Sources{Root: dir}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.text, err, c.want)
		}
	}
}

func FuzzParseDockerfile(f *testing.F) {
	for _, p := range []string{"../../images/agent/Dockerfile", "../../images/kolla/Dockerfile", "../../images/openstack-helm/Dockerfile"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("FROM a AS b\nLABEL x=\"y\" z=w\nENV A=1 B=\"2 3\"\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "Dockerfile")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		stages, err := ParseDockerfile(p, map[string]string{"AGENT": "a"})
		if err == nil && len(stages) == 0 {
			t.Error("no error and no stage")
		}
		if err != nil && !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not name the file", err)
		}
	})
}

// The kolla image runs as the service's user, whichever: the agent's
// directories are group kolla's (42400), group-writable and setgid, so
// that kolla mode's state and the exec-probe socket work without a volume
// (REAL-PODS: as the image's user the agent could not create them).
func TestKollaImageAgentDirsForEveryServiceUser(t *testing.T) {
	agent := Image{Layers: []Layer{{Files: []File{
		{Path: "/usr/local/bin/kolla-agent", Mode: 0o755, Data: []byte("a")},
		{Path: "/usr/local/bin/kolla-agent-probe", Mode: 0o755, Data: []byte("p")},
		{Path: "/run/kolla-agent", Dir: true, Mode: 0o755, UID: 65534, GID: 65534},
		{Path: "/var/lib/kolla-agent", Dir: true, Mode: 0o755, UID: 65534, GID: 65534},
	}}}}
	img, err := Build("../../images/kolla/Dockerfile", "localhost/kolla-x:dev", map[string]string{"AGENT": "kolla-agent", "BASE": "debian-root"},
		Sources{Root: "../..", Images: map[string]Image{"kolla-agent": agent, "debian-root": {}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/run/kolla-agent", "/var/lib/kolla-agent"} {
		f, ok := img.file(p)
		if !ok || !f.Dir || f.Mode != 0o2775 || f.UID != 0 || f.GID != 42400 {
			t.Errorf("%s: %+v (found %v), want a directory 2775 root:42400", p, f, ok)
		}
	}
}
