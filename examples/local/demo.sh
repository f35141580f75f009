#!/usr/bin/env bash
# `make demo`: the agent's whole job on one machine, no cluster and nothing
# to install: `kolla-agent run` for the small service of examples/local/
# (waits for its database, renders its config, supervises it, answers
# probes, ships its log to stdout, reloads it when its "ConfigMap" changes,
# refuses a broken one, stops cleanly). Everything listens on loopback.
set -euo pipefail
BIN=$(realpath "${1:-bin/kolla-agent}")
cd "$(dirname "$0")/../.."
repo=$PWD
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# A moment first, so the log lines of the step before are shown before it.
say() { sleep 0.3; printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$'; printf ' %q' "$@"; echo; "$@"; }
# until CMD...: retry for up to 20 s.
until_ok() { for _ in $(seq 1 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done; echo "timed out: $*" >&2; return 1; }
curl_() { printf '$ curl %s\n' "$1"; curl -sS --max-time 2 "$1"; echo; }

for port in 18080 18095 18306; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		echo "port 127.0.0.1:$port is in use; the demo needs it (examples/local/agent.yaml)" >&2
		exit 1
	fi
done

say "1. With no config at all the agent runs its embedded default: nothing to wait for, nothing to render"
run "$BIN" --root "$work/empty" config check
run "$BIN" --root "$work/empty" init && echo "exit code: 0"

say "2. The example service's agent.yaml and kolla config.json, checked without touching anything"
sed -n '/^[a-z]/,$p' examples/local/agent.yaml | head -12
echo "  ..."
run "$BIN" config check --config examples/local/agent.yaml --kolla-config examples/local/config.json

say "3. A pod's filesystem under $work: the ConfigMap volume as the kubelet writes it (..data -> a timestamped dir)"
cfg=$work/var/lib/kolla/config_files
# publish NAME FILE...: a new version of the ConfigMap, swapped in atomically
# (a new timestamped dir, then ..data renamed over), as the kubelet does.
publish() {
	local v=$cfg/..$1
	mkdir -p "$v"
	shift
	cp "$@" "$v/"
	ln -sfn "$(basename "$v")" "$cfg/..data_tmp"
	mv -T "$cfg/..data_tmp" "$cfg/..data"
	for f in "$v"/*; do ln -sfn "..data/$(basename "$f")" "$cfg/$(basename "$f")"; done
}
mkdir -p "$cfg" "$work/etc/kolla-agent" "$work/bin" "$work/var/log"
publish 2026_01_01_00_00_00.000000001 examples/local/config.json examples/local/demo.conf.tmpl examples/local/policy.yaml
cp examples/local/agent.yaml "$work/etc/kolla-agent/agent.yaml"
printf 'root:x:0:0:root:/root:/bin/sh\ndemo:x:%s:%s::/var/lib/demo:/bin/sh\n' "$(id -u)" "$(id -g)" >"$work/etc/passwd"
printf 'root:x:0:\ndemo:x:%s:\n' "$(id -g)" >"$work/etc/group"
(cd "$repo" && go build -o "$work/bin/demoservice" ./examples/local/demoservice)
ls -la "$cfg" | sed 1d

say "4. kolla-agent run: it waits for the database (tcp:127.0.0.1:18306), which comes up after 3 seconds"
echo "   (the agent's log and the service's log lines it ships to stdout are shown with '|')"
# The log file exists before tail opens it: the redirection below happens in
# the child, and a tail -f that starts first would give up on a missing file.
: >"$work/agent.out"
(cd "$work" && POD_IP=127.0.0.1 POD_NAME=demo-0 KOLLA_CONFIG_STRATEGY=COPY_ALWAYS \
	exec "$BIN" --root "$work" run) >>"$work/agent.out" 2>&1 &
agent=$!
pids+=("$agent")
# --pid: tail reads the file to its end once the agent has exited, then stops,
# so step 8 can wait for the last lines instead of guessing how long they take.
tail -n +1 --pid="$agent" -f "$work/agent.out" | sed -u 's/^/  | /' &
shown=$!
pids+=("$shown")
"$work/bin/demoservice" -dependency 127.0.0.1:18306 -after 3s &
pids+=($!)
sleep 1
curl_ "http://127.0.0.1:18095/readyz?verbose" || true
until_ok curl -sf http://127.0.0.1:18095/readyz

say "5. Ready: the config was rendered (pod IP and name from the environment), kolla's files copied, the service started"
run cat "$work/etc/demo/demo.conf"
run ls -l "$work/etc/demo"
curl_ "http://127.0.0.1:18095/readyz?verbose"
curl_ "http://127.0.0.1:18095/livez"
curl_ "http://127.0.0.1:18080/"

say "6. The operator edits the ConfigMap: a new greeting. The agent re-renders, validates (demoservice -check), commits, sends SIGHUP, verifies readiness"
sed 's/greeting = hello/greeting = good day/' examples/local/demo.conf.tmpl >"$work/demo.conf.tmpl"
publish 2026_01_01_00_01_00.000000002 examples/local/config.json "$work/demo.conf.tmpl" examples/local/policy.yaml
until_ok grep -q 'greeting = good day' "$work/etc/demo/demo.conf"
until_ok sh -c "curl -s http://127.0.0.1:18080/ | grep -q 'good day'"
curl_ "http://127.0.0.1:18080/"

say "7. A broken change (a port that is not a number): refused before it is written; the service keeps running as it was"
sed 's/^port = .*/port = eighty/' "$work/demo.conf.tmpl" >"$work/broken.conf.tmpl"
mv "$work/broken.conf.tmpl" "$work/demo.conf.tmpl"
publish 2026_01_01_00_02_00.000000003 examples/local/config.json "$work/demo.conf.tmpl" examples/local/policy.yaml
until_ok grep -q 'eighty' "$work/agent.out"
sleep 0.5
run grep -c 'port = 18080' "$work/etc/demo/demo.conf"
curl_ "http://127.0.0.1:18095/readyz?verbose"
curl_ "http://127.0.0.1:18080/"

say "8. SIGTERM (what the kubelet sends): readiness fails at once, the service stops within its grace, the log is drained"
kill -TERM "$agent"
code=0
wait "$agent" || code=$?
wait "$shown" || true
echo "agent exit code (the service's): $code"
[ "$code" -eq 0 ]

say "Done. The same agent.yaml fields run in a cluster: see examples/ (kustomization) and README."
