package image

import (
	"fmt"
	"os"
	"path/filepath"
)

// The project's images as a test node runs them: the names pods use with
// imagePullPolicy Never.
const (
	AgentRef      = "localhost/kolla-agent:dev"
	EntrypointRef = "localhost/kolla-agent-entrypoint:dev"
)

// Project builds the images images/agent and images/openstack-helm
// describe, from the binaries of `make build` under root/bin: the agent
// image, then the openstack-helm init-container image from it.
func Project(root string) ([]Image, error) {
	for _, b := range []string{"bin/kolla-agent", "bin/kolla-agent-probe"} {
		if _, err := os.Stat(filepath.Join(root, b)); err != nil {
			return nil, fmt.Errorf("image: %s is not built (run make build): %w", b, err)
		}
	}
	src := Sources{Root: root, Images: map[string]Image{}}
	agent, err := Build(filepath.Join(root, "images/agent/Dockerfile"), AgentRef, nil, src)
	if err != nil {
		return nil, err
	}
	// images/openstack-helm takes the binary FROM ${AGENT}: this build.
	src.Images["kolla-agent"] = agent
	entrypoint, err := Build(filepath.Join(root, "images/openstack-helm/Dockerfile"), EntrypointRef, map[string]string{"AGENT": "kolla-agent"}, src)
	if err != nil {
		return nil, err
	}
	return []Image{agent, entrypoint}, nil
}

// WriteArchiveFile writes img as a docker-archive tarball at path.
func WriteArchiveFile(path string, img Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteArchive(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
