package config

import (
	"strings"
	"testing"
)

func TestParseLogs(t *testing.T) {
	c, err := Parse("agent.yaml", []byte(`logs:
  files:
    - path: /var/log/kolla/keystone/*.log
      exclude: ["*.gz"]
      tag: kolla.keystone
  sink:
    type: forward
    address: 127.0.0.1:24224
    sharedKey: ""
    tls: {caFile: "", insecureSkipVerify: false}
  stateDir: /var/log/kolla/.kolla-agent
`))
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Logs; len(l.Files) != 1 || l.Files[0].Tag != "kolla.keystone" || l.Sink.Address != "127.0.0.1:24224" {
		t.Errorf("logs %+v", l)
	}
}

func TestParseLogsBad(t *testing.T) {
	const files = "logs:\n  files: [{path: /var/log/kolla/keystone/*.log}]\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"no files", "logs:\n  sink: {type: stdout}\n", "logs.files: empty"},
		{"relative path", "logs:\n  files: [{path: keystone/*.log}]\n  sink: {type: stdout}\n", `logs.files[0].path: "keystone/*.log" is not an absolute path`},
		{"bad glob", "logs:\n  files: [{path: \"/var/log/[\"}]\n  sink: {type: stdout}\n", `logs.files[0].path: "/var/log/["`},
		{"bad exclude", "logs:\n  files: [{path: /a/*.log, exclude: [\"[\"]}]\n  sink: {type: stdout}\n", `logs.files[0].exclude[0]: "[" is not a glob`},
		{"bad tag", "logs:\n  files: [{path: /a/*.log, tag: \"kolla keystone\"}]\n  sink: {type: stdout}\n", `logs.files[0].tag: "kolla keystone"`},
		{"no sink type", files, "logs.sink.type: empty"},
		{"unknown sink type", files + "  sink: {type: kafka}\n", `logs.sink.type: "kafka"`},
		{"forward without address", files + "  sink: {type: forward}\n", `logs.sink.address: "": want HOST:PORT`},
		{"forward bad port", files + "  sink: {type: forward, address: \"sidecar:fluent\"}\n", `logs.sink.address: "sidecar:fluent": "fluent" is not a port`},
		{"stdout with address", files + "  sink: {type: stdout, address: \"a:1\"}\n", "type stdout takes no address"},
		{"sharedKey on syslog", files + "  sink: {type: syslog, address: \"127.0.0.1:514\", sharedKey: k}\n", "logs.sink.sharedKey: only for type forward"},
		{"sharedKeyFile on syslog", files + "  sink: {type: syslog, address: \"127.0.0.1:514\", sharedKeyFile: /k}\n", "logs.sink.sharedKeyFile: only for type forward"},
		{"sharedKey and sharedKeyFile", files + "  sink: {type: forward, address: \"127.0.0.1:24224\", sharedKey: k, sharedKeyFile: /k}\n", "logs.sink: sharedKey and sharedKeyFile exclude each other"},
		{"relative sharedKeyFile", files + "  sink: {type: forward, address: \"127.0.0.1:24224\", sharedKeyFile: k}\n", `logs.sink.sharedKeyFile: "k" is not an absolute path`},
		{"format on forward", files + "  sink: {type: forward, address: \"127.0.0.1:24224\", format: json}\n", "logs.sink.format: only for type stdout"},
		{"bad format", files + "  sink: {type: stdout, format: xml}\n", `logs.sink.format: "xml"`},
		{"relative caFile", files + "  sink: {type: forward, address: \"127.0.0.1:24224\", tls: {caFile: ca.pem}}\n", `logs.sink.tls.caFile: "ca.pem" is not an absolute path`},
		{"caFile and insecure", files + "  sink: {type: forward, address: \"127.0.0.1:24224\", tls: {caFile: /ca.pem, insecureSkipVerify: true}}\n", "caFile and insecureSkipVerify exclude each other"},
		{"bad ackTimeout", files + "  sink: {type: forward, address: \"127.0.0.1:24224\", ackTimeout: soon}\n", `logs.sink.ackTimeout: "soon" is not a duration`},
		{"bad rescan", files + "  sink: {type: stdout}\n  rescan: -1s\n", "logs.rescan: negative duration"},
		{"bad idle", files + "  sink: {type: stdout}\n  multiline: {idle: x}\n", `logs.multiline.idle: "x" is not a duration`},
		{"bad drain", files + "  sink: {type: stdout}\n  drain: 5\n", `logs.drain: "5" is not a duration`},
		{"bad firstLine", files + "  sink: {type: stdout}\n  multiline: {firstLine: \"(\"}\n", "logs.multiline.firstLine: error parsing regexp"},
		{"relative stateDir", files + "  sink: {type: stdout}\n  stateDir: state\n", `logs.stateDir: "state" is not an absolute path`},
		{"tiny maxLineSize", files + "  sink: {type: stdout}\n  maxLineSize: 10\n", "logs.maxLineSize: 10 (want at least 1024 bytes)"},
		{"unknown field", files + "  sink: {type: stdout}\n  buffer: 1M\n", `unknown field "buffer"`},
		{"unknown sink field", files + "  sink: {type: stdout, port: 1}\n", `unknown field "port"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("agent.yaml", []byte(tc.yaml))
			if err == nil || !strings.HasPrefix(err.Error(), "agent.yaml: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want agent.yaml: ... %q", err, tc.want)
			}
		})
	}
}
