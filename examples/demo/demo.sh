#!/usr/bin/env bash
# `make demo`: the agent's init job on local dependencies, then rendering, the
# service as a child and its probes; no cluster needed.
set -euo pipefail
BIN=${1:-bin/kolla-agent}
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)); }
tcp_port=$(free_port)
http_port=$(free_port)
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "1. No config, no cluster: 'kolla-agent init' runs the embedded default (nothing to wait for) and exits 0"
"$BIN" --root "$work" init
echo "exit code: $?"

say "2. A dependency that is not there: 'kolla-agent wait' times out and exits 2, saying what it last saw"
set +e
"$BIN" wait --timeout 2s "tcp:127.0.0.1:$tcp_port"
echo "exit code: $?"
set -e

say "3. Bad input is exit 1 with the offending field named"
printf 'dependencies:\n  wait:\n    - service:mariadb\n    - {wait: "tcp:db:3306", timeout: "soon"}\n' >"$work/agent.yaml"
set +e
"$BIN" init --config "$work/agent.yaml"
echo "exit code: $?"
set -e

say "4. The real thing: a file, a TCP port and an HTTP endpoint that appear one after another"
go run ./examples/demo/demoserver -file "$work/ready" -tcp "127.0.0.1:$tcp_port" -http "127.0.0.1:$http_port" -step 2s -life 40s &
cat >"$work/agent.yaml" <<YAML
dependencies:
  timeout: 45s
  wait:
    - file:$work/ready
    - tcp:127.0.0.1:$tcp_port
    - wait: http://127.0.0.1:$http_port/healthz
      expectStatus: [200]
YAML
echo "--- agent.yaml"; cat "$work/agent.yaml"; echo "---"
"$BIN" init --config "$work/agent.yaml"
echo "exit code: $?"
say "5. kolla mode: config.json from the (pretend) ConfigMap is copied with owner and mode, a template gets the pod's IP, then the service runs"
kroot="$work/root"
mkdir -p "$kroot/etc" "$kroot/var/lib/kolla/config_files" "$kroot/etc/kolla-agent"
printf 'root:x:0:0:root:/root:/bin/sh\nkeystone:x:42425:42425::/var/lib/keystone:/bin/sh\n' >"$kroot/etc/passwd"
printf 'root:x:0:\nkeystone:x:42425:\n' >"$kroot/etc/group"
printf '[DEFAULT]\ndebug = False\n' >"$kroot/var/lib/kolla/config_files/keystone.conf"
printf '[DEFAULT]\nmy_ip = {{ podIP }}\n' >"$kroot/var/lib/kolla/config_files/my_ip.conf.tmpl"
cat >"$kroot/var/lib/kolla/config_files/config.json" <<JSON
{"command": "sh -c 'echo service started; cat $kroot/etc/keystone/keystone.conf $kroot/etc/keystone/my_ip.conf'",
 "config_files": [{"source": "/var/lib/kolla/config_files/keystone.conf", "dest": "/etc/keystone/keystone.conf", "owner": "keystone", "perm": "0600"}]}
JSON
cat >"$kroot/etc/kolla-agent/agent.yaml" <<YAML
render:
  - {src: /var/lib/kolla/config_files/my_ip.conf.tmpl, dest: /etc/keystone/my_ip.conf, perm: "0644"}
YAML
POD_IP=10.0.0.42 KOLLA_CONFIG_STRATEGY=COPY_ALWAYS "$BIN" --root "$kroot" run
echo "exit code: $?"
ls -ln "$kroot/etc/keystone/"

say "6. Beside the service: probes answered from background checks; SIGTERM fails readiness first, then stops the service"
probe_port=$(free_port)
svc_port=$(free_port)
cat >"$work/probes.yaml" <<YAML
run:
  grace: 10s
probes:
  address: 127.0.0.1:$probe_port
  socket: $work/agent.sock
  drainFile: $work/drain
  checks:
    - name: api
      http: {url: "http://127.0.0.1:$svc_port/healthz", expectStatus: [200]}
      probes: [startup, readiness]
      period: 500ms
      timeout: 400ms
      failureThreshold: 1
    - name: service
      process: {}
      probes: [liveness]
      period: 1s
YAML
echo "--- agent.yaml"; cat "$work/probes.yaml"; echo "---"
# The "service" is the demo server: its HTTP endpoint comes up after 2 s.
go build -o "$work/demoserver" ./examples/demo/demoserver
"$BIN" --config "$work/probes.yaml" run -- "$work/demoserver" -file "$work/svc-ready" -tcp 127.0.0.1:0 -http "127.0.0.1:$svc_port" -step 1s -life 60s &
agent=$!
sleep 1
echo "\$ curl /readyz?verbose   (the service is not answering yet)"
curl -s "http://127.0.0.1:$probe_port/readyz?verbose" || true
for _ in $(seq 1 100); do "$BIN" probe readiness --socket "$work/agent.sock" >/dev/null 2>&1 && break; sleep 0.2; done
echo "\$ kolla-agent probe readiness --verbose   (exec-probe client, over the Unix socket)"
code=0; "$BIN" probe readiness --socket "$work/agent.sock" --verbose || code=$?; echo "exit code: $code"
touch "$work/drain"; sleep 1.5
echo "\$ touch drain; kolla-agent probe readiness"
code=0; "$BIN" probe readiness --socket "$work/agent.sock" || code=$?; echo "exit code: $code"
echo "\$ curl /livez   (draining does not touch liveness)"
curl -s "http://127.0.0.1:$probe_port/livez"
rm -f "$work/drain"
kill -TERM "$agent"
code=0; wait "$agent" || code=$?
echo "agent exit code (the service's, 143 = killed by SIGTERM): $code"

say "Done: each dependency was logged once per change of state, and the summary shows how long each took."
