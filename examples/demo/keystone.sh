#!/usr/bin/env bash
# `make demo-keystone`: the agent's whole job for the real Keystone (Debian's
# python3-keystone under uWSGI, SQLite), on one machine, no cluster:
# kolla's config.json + the agent's templates rendered, the bootstrap
# (db_sync, fernet and credential keys, the admin user) run by
# `KOLLA_BOOTSTRAP= kolla-agent run`, then `kolla-agent run` supervising
# uWSGI, the probes, the Keystone catalog entry written by `kolla-agent
# endpoints`, a ConfigMap change taken with SIGHUP (and a broken one
# refused), keystone's logs shipped to a real Fluent forward server, and a
# clean stop. Everything listens on loopback; everything is removed at exit.
#
# Usage: examples/demo/keystone.sh [bin/kolla-agent]
# KOLLA_DEMO_KEEP=1 keeps the work directory (its processes are stopped anyway).
# Needs what `hack/install-tools.sh services` and `fluent` install.
set -euo pipefail
BIN=$(realpath "${1:-bin/kolla-agent}")
cd "$(dirname "$0")/../.."
repo=$PWD
CACHE=${KOLLA_AGENT_CACHE:-$HOME/.cache/kolla-agent}
FLUENT_MODULE=$CACHE/npm/fluent-org-logger-1.0.10/node_modules/@fluent-org/logger

KS_PORT=18500    # keystone (uWSGI's HTTP router)
PROBE_PORT=18595 # the agent's probe server
FWD_PORT=18524   # the "fluent-bit sidecar": a Fluent forward server
ADMIN_PASSWORD=demo-admin-password

for f in /usr/bin/keystone-manage /usr/bin/keystone-wsgi-public /usr/bin/uwsgi-core \
	/usr/lib/uwsgi/plugins/python3_plugin.so /usr/lib/uwsgi/plugins/http_plugin.so \
	/usr/bin/oslo-config-validator /usr/bin/python3 /usr/bin/node "$FLUENT_MODULE/package.json"; do
	if [ ! -e "$f" ]; then
		echo "missing $f: run 'bash hack/install-tools.sh services' and 'bash hack/install-tools.sh fluent' (make demo-keystone does)" >&2
		exit 1
	fi
done
for port in $KS_PORT $PROBE_PORT $FWD_PORT; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		echo "port 127.0.0.1:$port is in use; the demo needs it" >&2
		exit 1
	fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/kolla-agent-keystone-demo.XXXXXX")
pids=()   # background processes of this script, killed at exit
agent=""  # the running `kolla-agent run`
uwsgi=""  # its child, uWSGI's master (and process group)
cleanup() {
	set +e
	if [ -n "$agent" ] && kill -0 "$agent" 2>/dev/null; then
		kill -TERM "$agent" 2>/dev/null
		for _ in $(seq 1 100); do kill -0 "$agent" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$agent" 2>/dev/null
	fi
	# uWSGI's workers and router, should the agent have been SIGKILLed.
	[ -n "$uwsgi" ] && kill -KILL -- "-$uwsgi" 2>/dev/null
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	[ -n "${KOLLA_DEMO_KEEP:-}" ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A moment first, so the log lines of the step before are shown before it.
say() { sleep 0.3; printf '\n\033[1m== %s\033[0m\n' "$*"; }
# run CMD...: show it, run it in the pod's environment.
run() { printf '$'; printf ' %q' "$@"; echo; pod "$@"; }
# until_ok SECONDS CMD...: retry CMD every 0.2 s for up to SECONDS.
until_ok() {
	local n=$(($1 * 5))
	shift
	for _ in $(seq 1 "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
	echo "timed out: $*" >&2
	return 1
}
curl_() { printf '$ curl %s\n' "$1"; curl -sS --max-time 3 "$1"; echo; }
indent() { sed 's/^/    /'; }
# offsets: each log file's size and the offset the agent committed (after the
# receiver's ack), from its state file.
offsets() {
	/usr/bin/python3 - "$work/var/log/kolla/.kolla-agent/offsets.json" <<'EOF'
import json, os, sys
for f in json.load(open(sys.argv[1]))["files"]:
    print(f"  {os.path.basename(f['path'])}: {os.path.getsize(f['path'])} bytes, offset committed after the ack: {f['offset']}")
EOF
}
# keystone-manage (eventlet) prints a harmless "Exception ignored" traceback
# at interpreter exit; the demo leaves it out.
quiet_eventlet() { sed -u '/^Exception ignored in: <function _removeHandlerRef/,/^AttributeError: .*getcurrent/d'; }
now() { date +%s%N; }
since() { local ms=$((($(date +%s%N) - $1) / 1000000)); printf '%d.%01d s' $((ms / 1000)) $((ms % 1000 / 100)); }

# The container's environment: a clean one, as in an image (Debian's
# python3 must not see a PYTHONPATH meant for another interpreter), with
# what the downward API gives a pod. The pod's filesystem is $work: the
# agent takes every absolute path of its config under --root, and the
# service runs in $work, so the rendered files name their real paths.
podexec() {
	cd "$work"
	exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$work" LANG=C.UTF-8 \
		PYTHONDONTWRITEBYTECODE=1 POD_IP=127.0.0.1 POD_NAME=keystone-api-0 POD_NAMESPACE=openstack \
		CONTAINER_NAME=keystone-api KOLLA_CONFIG_STRATEGY=COPY_ALWAYS DEMO_ROOT="$work" \
		"${podenv[@]}" "$@"
}
pod() { (podexec "$@"); }
podenv=()

cfg=$work/var/lib/kolla/config_files
# publish VERSION: a new version of the ConfigMap keystone-config-files,
# swapped in as the kubelet's AtomicWriter does it: the files go into a new
# timestamped directory, a symlink ..data_tmp to it is renamed over ..data
# (one atomic rename), each key is a symlink through ..data.
publish() {
	local v=$cfg/..$1
	mkdir -p "$v"
	cp "$work/configmap/"* "$v/"
	ln -sfn "$(basename "$v")" "$cfg/..data_tmp"
	mv -T "$cfg/..data_tmp" "$cfg/..data"
	for f in "$v"/*; do ln -sfn "..data/$(basename "$f")" "$cfg/$(basename "$f")"; done
}

# ---- the pod's files --------------------------------------------------------
mkdir -p "$cfg" "$work/configmap" "$work/etc/kolla-agent" "$work/etc/keystone-admin" "$work/run/kolla-agent"
# keystone's user in the image, here the current user under another name.
printf 'root:x:0:0:root:/root:/bin/sh\nkeystone:x:%s:%s::/var/lib/keystone:/bin/sh\n' "$(id -u)" "$(id -g)" >"$work/etc/passwd"
printf 'root:x:0:\nkeystone:x:%s:\n' "$(id -g)" >"$work/etc/group"

# kolla's config.json: what the image's kolla_start would do. The command is
# relative because the demo's pod filesystem is the current directory (in an
# image: /etc/keystone/keystone-uwsgi.ini).
cat >"$work/configmap/config.json" <<'EOF'
{
  "command": "/usr/bin/uwsgi-core --ini etc/keystone/keystone-uwsgi.ini",
  "config_files": [
    {"source": "/var/lib/kolla/config_files/policy.yaml", "dest": "/etc/keystone/policy.yaml",
     "owner": "keystone", "perm": "0600"}
  ],
  "directories": [
    {"path": "/etc/keystone/keystone.conf.d", "owner": "keystone", "perm": "0750"},
    {"path": "/var/lib/keystone", "owner": "keystone", "perm": "0750"},
    {"path": "/var/log/kolla/keystone", "owner": "keystone", "perm": "0755"}
  ]
}
EOF
cat >"$work/configmap/policy.yaml" <<'EOF'
# keystone's in-code defaults, with one rule spelled out.
"identity:list_endpoints": "rule:admin_required or (role:reader and system_scope:all)"
EOF
# keystone.conf, a template of the agent: real paths come from DEMO_ROOT
# (empty in a pod, where they are /etc/keystone, /var/lib/keystone, ...).
cat >"$work/configmap/keystone.conf.tmpl" <<'EOF'
{{- $root := env "DEMO_ROOT" "" -}}
[DEFAULT]
log_dir = {{ $root }}/var/log/kolla/keystone
log_file = keystone.log
use_stderr = false
debug = false

[database]
connection = sqlite:///{{ $root }}/var/lib/keystone/keystone.db

[token]
provider = fernet
expiration = 3600

[fernet_tokens]
key_repository = {{ $root }}/etc/keystone/fernet-keys

[fernet_receipts]
key_repository = {{ $root }}/etc/keystone/fernet-keys

[credential]
key_repository = {{ $root }}/etc/keystone/credential-keys

[identity]
domain_config_dir = {{ $root }}/etc/keystone/domains
# bcrypt's minimum cost: a demo hashes the admin password often.
password_hash_algorithm = bcrypt
password_hash_rounds = 4

[oslo_policy]
policy_file = {{ $root }}/etc/keystone/policy.yaml

[cache]
enabled = false
EOF
# uWSGI as kolla-ansible configures it for keystone (service-uwsgi-config),
# on the pod's IP. Debian's uwsgi-core loads the HTTP router as a plugin.
cat >"$work/configmap/keystone-uwsgi.ini.tmpl" <<'EOF'
{{- $root := env "DEMO_ROOT" "" -}}
[uwsgi]
plugins-dir = /usr/lib/uwsgi/plugins
plugins = http,python3
http = {{ podIP }}:18500
wsgi-file = /usr/bin/keystone-wsgi-public
env = OS_KEYSTONE_CONFIG_DIR={{ $root }}/etc/keystone
pyargv = --config-dir {{ $root }}/etc/keystone/keystone.conf.d
master = true
processes = 2
die-on-term = true
hook-master-start = unix_signal:15 gracefully_kill_them_all
lazy-apps = true
enable-threads = true
thunder-lock = true
buffer-size = 65535
add-header = Connection: close
worker-reload-mercy = 20
need-app = true
logto = {{ $root }}/var/log/kolla/keystone/keystone-uwsgi.log
EOF
# The bootstrap, as kolla's keystone extend_start.sh does it. The admin
# password comes from OS_BOOTSTRAP_PASSWORD (a Secret, in a pod).
cat >"$work/configmap/keystone-bootstrap.sh" <<'EOF'
m="keystone-manage --config-file etc/keystone/keystone.conf --config-dir etc/keystone/keystone.conf.d"
echo "bootstrap: keystone-manage db_sync"
$m db_sync
# SQLite only (a pod has MariaDB): write-ahead logging, so that a reader
# keystone leaves open does not lock the API's writes out.
/usr/bin/python3 -c 'import sqlite3; sqlite3.connect("var/lib/keystone/keystone.db").execute("PRAGMA journal_mode=WAL")'
echo "bootstrap: keystone-manage fernet_setup, credential_setup"
$m fernet_setup --keystone-user "$(id -un)" --keystone-group "$(id -gn)"
$m credential_setup --keystone-user "$(id -un)" --keystone-group "$(id -gn)"
echo "bootstrap: keystone-manage bootstrap (user admin, project admin, role admin)"
$m bootstrap --bootstrap-username admin --bootstrap-project-name admin --bootstrap-role-name admin
EOF
publish 2026_01_01_00_00_00.000000001

# agent.yaml. The paths the agent does not take under --root (the probe
# socket, the validator's program) are real ones.
sed "s|@WORK@|$work|g" >"$work/etc/kolla-agent/agent.yaml" <<'EOF'
# keystone-api's agent, with every duty on.
dependencies:
  timeout: 1m
  wait:
    - tcp:127.0.0.1:18524        # the logging sidecar's forward input
render:
  - src: /var/lib/kolla/config_files/keystone.conf.tmpl
    dest: /etc/keystone/keystone.conf
    owner: keystone
    perm: "0600"
  - src: /var/lib/kolla/config_files/keystone-uwsgi.ini.tmpl
    dest: /etc/keystone/keystone-uwsgi.ini
    owner: keystone
    perm: "0600"
run:
  user: keystone
  grace: 30s
  # KOLLA_BOOTSTRAP set: this runs instead of the service (what kolla's
  # extend_start.sh does). Relative: the demo's pod filesystem is the
  # current directory.
  bootstrap: /bin/sh -e var/lib/kolla/config_files/keystone-bootstrap.sh
probes:
  address: 127.0.0.1:18595
  socket: @WORK@/run/kolla-agent/agent.sock
  checks:
    - name: api
      http: {url: "http://127.0.0.1:18500/v3", expectStatus: [200], bodyRegex: '"id": *"v3'}
      probes: [startup, readiness]
      period: 1s
      timeout: 1s
    - name: uwsgi
      process: {}
      probes: [liveness]
      period: 1s
reload:
  quiet: 500ms
  verifyTimeout: 60s
  validate:
    - dest: /etc/keystone/keystone.conf
      command: /usr/bin/oslo-config-validator --namespace keystone --namespace oslo.log --namespace oslo.db --namespace oslo.policy --namespace oslo.cache --input-file {{ .Staged }}
logs:
  files:
    - path: /var/log/kolla/keystone/*.log
  sink:
    type: forward
    address: 127.0.0.1:18524
  stateDir: /var/log/kolla/.kolla-agent
EOF

# The keystone-admin Secret, mounted: what `kolla-agent endpoints` logs in with.
printf 'http://127.0.0.1:%s/v3' "$KS_PORT" >"$work/etc/keystone-admin/OS_AUTH_URL"
printf admin >"$work/etc/keystone-admin/OS_USERNAME"
printf %s "$ADMIN_PASSWORD" >"$work/etc/keystone-admin/OS_PASSWORD"
printf admin >"$work/etc/keystone-admin/OS_PROJECT_NAME"
# Keystone's own catalog entry. Keystone cannot register itself before it
# runs, so this is not in agent.yaml's bootstrap: (where glance's goes): it is
# a config of its own for `kolla-agent endpoints`, run once keystone answers.
# No cluster here, so the URLs are given as they are; in a cluster
# `public: {service: keystone-api}` follows the Service's exposure.
cat >"$work/etc/kolla-agent/catalog.yaml" <<EOF
bootstrap:
  endpoints:
    credentials: /etc/keystone-admin
    type: identity
    name: keystone
    description: OpenStack Identity
    region: RegionOne
    public: {url: "http://keystone.demo.test:$KS_PORT/v3"}
    internal: {url: "http://127.0.0.1:$KS_PORT/v3"}
EOF

say "1. The pod's files under $work: the ConfigMap as the kubelet mounts it (..data -> a timestamped dir)"
ls -la "$cfg" | sed 1d | indent
echo "  kolla's config.json:"
indent <"$work/configmap/config.json"
echo "  agent.yaml (render, run, probes, reload, logs):"
sed -n '/^[a-z]/,$p' "$work/etc/kolla-agent/agent.yaml" | grep -v '^ *#' | head -16 | indent
echo "    ..."
run "$BIN" --root "$work" config check

say "2. The logging sidecar: a real Fluent forward server (@fluent-org/logger's FluentServer, Node) on 127.0.0.1:$FWD_PORT"
mkdir -p "$work/fluent"
: >"$work/fluent/records.jsonl"
printf '{"module": "%s", "port": %s, "output": "%s"}' "$FLUENT_MODULE" "$FWD_PORT" "$work/fluent/records.jsonl" >"$work/fluent/config.json"
env -u NODE_OPTIONS -u NODE_PATH TEXT_DECODER=force /usr/bin/node "$repo/internal/forwardserver/server.js" \
	"$(cat "$work/fluent/config.json")" >"$work/fluent/server.log" 2>&1 &
pids+=($!)
until_ok 15 grep -q '^listening' "$work/fluent/server.log"
sed 's/^/  node: /' "$work/fluent/server.log"

say "3. kolla-agent render: kolla's config.json (copy, owner, perm, directories) and the agent's templates (pod IP, paths)"
run "$BIN" --root "$work" render
run ls -l "$work/etc/keystone"
echo "  etc/keystone/keystone.conf, rendered (the start):"
head -8 "$work/etc/keystone/keystone.conf" | indent
echo "  etc/keystone/keystone-uwsgi.ini, rendered (the start):"
head -7 "$work/etc/keystone/keystone-uwsgi.ini" | indent
run "$BIN" --root "$work" render --check && echo "  (render --check: the disk matches; exit 0)"

say "4. The bootstrap, kolla's way: KOLLA_BOOTSTRAP set, so run.bootstrap runs instead of the service"
echo "   (db_sync, fernet_setup, credential_setup, keystone-manage bootstrap with the admin password from the environment)"
podenv=(KOLLA_BOOTSTRAP= OS_BOOTSTRAP_PASSWORD="$ADMIN_PASSWORD")
t0=$(now)
echo "\$ KOLLA_BOOTSTRAP= OS_BOOTSTRAP_PASSWORD=... $BIN --root $work run"
set +e
pod "$BIN" --root "$work" run 2>&1 | quiet_eventlet | sed -u 's/^/  | /'
code=${PIPESTATUS[0]}
set -e
podenv=()
echo "  bootstrap exit code: $code ($(since "$t0"))"
[ "$code" -eq 0 ]
run ls "$work/etc/keystone/fernet-keys" "$work/etc/keystone/credential-keys"
/usr/bin/python3 - "$work/var/lib/keystone/keystone.db" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
users = [r[0] for r in db.execute("select name from local_user")]
tables = db.execute("select count(*) from sqlite_master where type='table'").fetchone()[0]
print(f"  keystone.db: {tables} tables, users {users}")
EOF

say "5. kolla-agent run: it waits, renders again, then supervises uWSGI (the agent stays its parent: probes, reload, logs)"
echo "   (the agent's log is shown with '|'; uWSGI and keystone log to files the agent ships)"
# The file first: tail -f gives up on a file the background child has not
# created yet. --pid: tail reads to the end once the agent exits, then stops.
: >"$work/agent.out"
podexec "$BIN" --root "$work" run >>"$work/agent.out" 2>&1 &
agent=$!
tail -n +1 --pid="$agent" -f "$work/agent.out" | sed -u 's/^/  | /' &
shown=$!
pids+=("$shown")
until_ok 20 pgrep -P "$agent"
uwsgi=$(pgrep -P "$agent" | head -1)
curl_ "http://127.0.0.1:$PROBE_PORT/readyz?verbose" || true
t0=$(now)
until_ok 90 curl -sf "http://127.0.0.1:$PROBE_PORT/readyz"
echo "  ready $(since "$t0") later (uWSGI's workers load keystone)"
# Every worker loaded: a worker still loading when SIGTERM comes ignores
# uWSGI's graceful stop (internal/keystone explains).
loaded() { [ "$(grep -c 'WSGI app 0 (mountpoint=.*) ready' "$work/var/log/kolla/keystone/keystone-uwsgi.log")" -ge "$1" ]; }
until_ok 60 loaded 2

say "6. Probes: the kubelet's HTTP probe on the agent's port, and the exec probe over the agent's Unix socket"
curl_ "http://127.0.0.1:$PROBE_PORT/readyz?verbose"
curl_ "http://127.0.0.1:$PROBE_PORT/livez?verbose"
run "$BIN" probe readiness --verbose --socket "$work/run/kolla-agent/agent.sock"
echo "  exit code: $?"
run ps -o pid,ppid,pgid,args --ppid "$agent" --pid "$agent"
pgrep -g "$uwsgi" -a | sed 's/^/    group: /'
curl_ "http://127.0.0.1:$KS_PORT/v3"

say "7. The Keystone catalog: kolla-agent endpoints logs in with the mounted keystone-admin Secret (OS_* files)"
sed 's/^/    /' "$work/etc/kolla-agent/catalog.yaml"
run "$BIN" --root "$work" --config /etc/kolla-agent/catalog.yaml endpoints --dry-run
run "$BIN" --root "$work" --config /etc/kolla-agent/catalog.yaml endpoints
echo "  and once more: nothing to change, never a duplicate"
run "$BIN" --root "$work" --config /etc/kolla-agent/catalog.yaml endpoints
echo "  what a client sees (keystoneauth, as openstackclient uses it):"
/usr/bin/python3 - "http://127.0.0.1:$KS_PORT/v3" "$ADMIN_PASSWORD" <<'EOF'
import sys
from keystoneauth1 import session
from keystoneauth1.identity import v3
auth = v3.Password(auth_url=sys.argv[1], username="admin", password=sys.argv[2], project_name="admin",
                   user_domain_name="Default", project_domain_name="Default")
s = session.Session(auth=auth)
for svc in s.auth.get_access(s).service_catalog.catalog:
    for e in svc["endpoints"]:
        print(f"    {svc['type']:9} {svc['name']:9} {e['interface']:9} {e['region_id']:10} {e['url']}")
print("    public identity endpoint:", s.get_endpoint(service_type="identity", interface="public"))
EOF

say "8. The operator changes the ConfigMap (keystone's public_endpoint): the kubelet swaps ..data; the agent re-renders, validates, commits, sends SIGHUP, verifies"
sed -i 's|^debug = false|debug = false\npublic_endpoint = http://keystone.demo.test:18500|' "$work/configmap/keystone.conf.tmpl"
publish 2026_01_01_00_01_00.000000002
until_ok 10 grep -q 'public_endpoint' "$work/etc/keystone/keystone.conf"
run grep public_endpoint "$work/etc/keystone/keystone.conf"
until_ok 60 grep -q 'reload: .*outcome=applied' "$work/agent.out"
until_ok 30 sh -c "curl -s http://127.0.0.1:$KS_PORT/v3 | grep -q keystone.demo.test"
curl_ "http://127.0.0.1:$KS_PORT/v3"
until_ok 60 loaded 4
echo "  uWSGI's side of the SIGHUP (its log, which the agent ships too):"
grep -E 'SIGHUP|graceful|Respawned|ready in' "$work/var/log/kolla/keystone/keystone-uwsgi.log" | tail -n 6 | cut -c1-140 | indent

say "9. A broken change (an option keystone does not have): oslo-config-validator refuses it before it is written; keystone runs on"
sed -i 's|^expiration = 3600|expiraton = 7200|' "$work/configmap/keystone.conf.tmpl"
publish 2026_01_01_00_02_00.000000003
until_ok 30 grep -q 'outcome=rejected' "$work/agent.out"
run grep -c 'expiraton' "$work/etc/keystone/keystone.conf" || true
curl_ "http://127.0.0.1:$PROBE_PORT/readyz?verbose"

say "10. Logs: every line of keystone's log files reached the forward server, acked, offsets committed"
sleep 1
/usr/bin/python3 - "$work/fluent/records.jsonl" <<'EOF'
import base64, collections, json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
def text(v):
    if isinstance(v, dict) and "$bin" in v:  # msgpack bin: the line's bytes as they were
        return base64.b64decode(v["$bin"]).decode("utf-8", "replace")
    return v
for r in recs:
    r["record"] = {k: text(v) for k, v in r["record"].items()}
by_tag = collections.Counter(r["tag"] for r in recs)
print(f"  {len(recs)} records received:", ", ".join(f"{t}: {n}" for t, n in sorted(by_tag.items())))
print("  one of them, whole:")
print("    " + json.dumps(recs[0])[:500])
ks = [r for r in recs if r["tag"] == "kolla.keystone.keystone"]
uw = [r for r in recs if r["tag"] == "kolla.keystone.keystone-uwsgi" and "GET /v3" in r["record"].get("message", "")]
for r in ks[:2] + ks[-2:] + uw[-2:]:
    print(f"  [{r['tag']}] {r['record'].get('message', '').rstrip()[:200]}")
EOF
echo "  the agent's side (its /metrics):"
curl -s "http://127.0.0.1:$PROBE_PORT/metrics" | grep -E '^kolla_agent_(log_records_total|log_failures_total|reload_total|probe_passing)' | indent
offsets

say "11. SIGTERM (what the kubelet sends): readiness fails at once, uWSGI stops gracefully, the last log lines are shipped"
before=$(wc -l <"$work/fluent/records.jsonl")
kill -TERM "$agent"
sleep 0.1
curl_ "http://127.0.0.1:$PROBE_PORT/readyz?verbose" || true
code=0
wait "$agent" || code=$?
agent=""
wait "$shown" || true
echo "  agent exit code (uWSGI's): $code"
if pgrep -g "$uwsgi" >/dev/null; then echo "  uWSGI processes left!"; exit 1; fi
echo "  no uWSGI process left; $(wc -l <"$work/fluent/records.jsonl") records at the forward server ($before before the SIGTERM)"
offsets
[ "$code" -eq 0 ]

say "Done: the real Keystone rendered, bootstrapped, supervised, probed, in its own catalog, reloaded and stopped by kolla-agent."
