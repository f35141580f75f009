#!/usr/bin/env bash
# Regenerates examples/rbac/service-roles.yaml from each service's
# agent.yaml with `kolla-agent config rbac` (TestExampleKustomization
# checks that the file is in step). Run after `make build`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=bin/kolla-agent
{
	cat <<'HEAD'
# The slice's Roles, one per service, each what its agent.yaml needs and no
# more: printed by `NAMESPACE=openstack kolla-agent config rbac --config
# examples/SERVICE/agent.yaml --owner KIND/NAME --service-account SA`
# (hack/service-roles.sh; TestExampleKustomization checks that each still
# is). Every rule on an object the agent knows by name (the bootstrap
# record and Lease, the catalog and reload Leases, the workload it rolls,
# the Services and Jobs it waits for) carries resourceNames. The
# ServiceAccounts are in service-accounts.yaml; the shared per-mode Roles
# of this directory are for clusters that bind by mode instead.
HEAD
	# directory, owner, ServiceAccount
	while read -r dir owner sa; do
		echo "---"
		NAMESPACE=openstack "$bin" config rbac --config "examples/$dir/agent.yaml" --owner "$owner" --service-account "$sa" | grep -v '^#'
	done <<'LIST'
mariadb statefulset/mariadb mariadb
rabbitmq statefulset/rabbitmq rabbitmq
memcached deployment/memcached memcached
keystone deployment/keystone keystone
glance deployment/glance-api glance-api
nova-conductor deployment/nova-conductor nova-conductor
LIST
} > examples/rbac/service-roles.yaml
