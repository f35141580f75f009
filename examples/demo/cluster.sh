#!/usr/bin/env bash
# `make demo-cluster`: as root with a node (hack/install-tools.sh all),
# examples/demo/node puts examples/ on a real node: mariadb, memcached and
# keystone as real pods of kolla-style images of Debian's packages, and
# prints the pods, their Events, the probe answers and a token.
#
# Without a node (not root, or KOLLA_DEMO_STANDIN=1): the keystone example on a real local control plane
# (hack/testenv: etcd, kube-apiserver, kube-controller-manager, CoreDNS on
# loopback). kolla-agent as the init container of a Deployment's pods (waits
# for service:mariadb and job:keystone-fernet-setup with a ServiceAccount
# token bound to examples/rbac/), the bootstrap Job created once in create
# mode and completed, then `kolla-agent run` supervising keystone under uWSGI
# with the kubelet's probes and the EndpointSlice showing the pods ready.
# There is no container runtime: examples/demo/cluster (a Go program on
# internal/testenv) stands in for the scheduler and the kubelet and runs the
# containers' commands on this machine. The control plane is torn down and
# everything removed at exit.
#
# Usage: examples/demo/cluster.sh [bin/kolla-agent]
# KOLLA_DEMO_KEEP=1 keeps the work directory (its processes are stopped anyway).
# Needs what `hack/install-tools.sh all` installs (etcd, kube-apiserver,
# kube-controller-manager, CoreDNS, keystone and uWSGI).
set -euo pipefail
BIN=$(realpath "${1:-bin/kolla-agent}")
cd "$(dirname "$0")/../.."

# As root with the node's tools: the examples as real pods on a real node
# (examples/demo/node). Otherwise, or with KOLLA_DEMO_STANDIN=1, the
# stand-in kubelet below.
if [ -z "${KOLLA_DEMO_STANDIN:-}" ]; then
	rc=0
	go run ./examples/demo/node "$PWD" || rc=$?
	[ "$rc" -ne 3 ] && exit "$rc"
	echo "(falling back to the stand-in kubelet)"
fi

for f in /usr/bin/keystone-manage /usr/bin/keystone-wsgi-public /usr/bin/uwsgi-core \
	/usr/lib/uwsgi/plugins/python3_plugin.so /usr/lib/uwsgi/plugins/http_plugin.so; do
	if [ ! -e "$f" ]; then
		echo "missing $f: run 'bash hack/install-tools.sh all' (make demo-cluster does)" >&2
		exit 1
	fi
done
for addr in 127.0.0.11:18600 127.0.0.11:18695 127.0.0.12:18600 127.0.0.12:18695; do
	if (exec 3<>"/dev/tcp/${addr%:*}/${addr#*:}") 2>/dev/null; then
		echo "$addr is in use; the demo's pods listen there" >&2
		exit 1
	fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/kolla-agent-cluster-demo.XXXXXX")
up=""
cleanup() {
	set +e
	# uWSGI's process groups, should the driver have died without stopping them.
	if [ -f "$work/pgids" ]; then
		while read -r g; do [ -n "$g" ] && kill -KILL -- "-$g" 2>/dev/null; done <"$work/pgids"
	fi
	if [ -n "$up" ]; then
		echo
		echo "== hack/testenv down: stopping the control plane"
		hack/testenv down "$work/testenv" | sed 's/^/  /'
	fi
	[ -n "${KOLLA_DEMO_KEEP:-}" ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The driver is built before the clock of the narration starts.
go build -o "$work/cluster" ./examples/demo/cluster

printf '\n\033[1m== 1. A control plane on loopback (hack/testenv up): etcd, kube-apiserver, kube-controller-manager, CoreDNS\033[0m\n'
up=1
# The stand-in kubelet of this demo binds and runs no pod: no real node.
hack/testenv up --no-node "$work/testenv" | sed -n '1p' | sed 's/^/  /'
# shellcheck disable=SC1091
. "$work/testenv/env"
echo "  KUBECONFIG=$KUBECONFIG (admin: for the chart and the stand-in kubelet; the agents get their own token)"
echo "  DNS: CoreDNS on $KOLLA_AGENT_DNS_SERVER for $CLUSTER_DOMAIN; no scheduler, no kubelet, no container runtime"

"$work/cluster" "$work/testenv" "$work" "$BIN"
