package ask

import (
	"os"

	"sigs.k8s.io/yaml"
)

// DefaultConfig is where the agent's config is when no path is given.
const DefaultConfig = "/etc/kolla-agent/agent.yaml"

// SocketFromConfig reads probes.socket of the agent's config and nothing
// else; any trouble (no file, bad YAML, "off") means DefaultSocket: the
// agent's own validation of the file is where errors are reported.
func SocketFromConfig(path string) string {
	if path == "" {
		path = DefaultConfig
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return DefaultSocket
	}
	var c struct {
		Probes struct {
			Socket string `json:"socket"`
		} `json:"probes"`
	}
	if yaml.Unmarshal(b, &c) != nil {
		return DefaultSocket
	}
	if s := c.Probes.Socket; s == "" || Off(s) {
		return DefaultSocket
	}
	return c.Probes.Socket
}

// Off reports whether a listener setting (probes.address, probes.socket)
// turns it off: "off", or a bare YAML off, which YAML 1.1 reads as the
// boolean false and which arrives as "false".
func Off(v string) bool { return v == "off" || v == "false" }
