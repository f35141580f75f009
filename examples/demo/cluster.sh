#!/usr/bin/env bash
# `make demo-cluster`: as root with a node (hack/install-tools.sh all),
# examples/demo/node puts examples/ on a real node: mariadb, memcached and
# keystone as real pods of kolla-style images of Debian's packages, and
# prints the pods, their Events, the probe answers and a token. The node is
# stopped and the host put back at the end. e2e's TestDemoCluster runs the
# same program on the tests' node.
#
# Usage: examples/demo/cluster.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
rc=0
go run ./examples/demo/node "$PWD" || rc=$?
if [ "$rc" -eq 3 ]; then
	echo "make demo-cluster runs real pods: run it as root, after 'bash hack/install-tools.sh all'" >&2
fi
exit "$rc"
