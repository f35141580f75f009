#!/usr/bin/env bash
# Installs the real components the tests run against: etcd (Debian), kube-apiserver
# and kube-controller-manager (built from the k8s.io/kubernetes Go module), CoreDNS
# (a trimmed build with only the plugins the tests use), rsyslog, and the OpenStack
# services and RabbitMQ that probe tests run (Debian).
#
# Built binaries are cached outside the checkout, keyed by version, so a second run
# is a no-op. Prints the bin directory on its last line.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.3}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
# Bump when the trimmed CoreDNS recipe below changes (plugins, directives), so a
# cached build from an older recipe is rebuilt once.
COREDNS_RECIPE=r2
CACHE=${KOLLA_AGENT_CACHE:-$HOME/.cache/kolla-agent}
BIN="$CACHE/bin"
mkdir -p "$BIN"

log() { echo "install-tools: $*" >&2; }

apt_install() {
	local missing=()
	for pkg in "$@"; do
		dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	log "apt-get install ${missing[*]}"
	local sudo=""
	[ "$(id -u)" -ne 0 ] && sudo=sudo
	# Debian's packages try to start their daemons; there is no init system here and
	# the tests start their own instances, so forbid it.
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
		$sudo chmod +x /usr/sbin/policy-rc.d
	fi
	$sudo apt-get update -qq >/dev/null || true
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

install_etcd() {
	if [ ! -x "$BIN/etcd" ]; then
		apt_install etcd-server
		ln -sf "$(command -v etcd || echo /usr/bin/etcd)" "$BIN/etcd"
	fi
}

install_rsyslog() {
	apt_install rsyslog
}

# The OpenStack services and their infrastructure that probe, reload and log
# tests run for real: Keystone under uWSGI, RabbitMQ with an oslo.messaging
# RPC server. Debian's packages; the tests start their own instances on
# loopback (policy-rc.d keeps the packages' own daemons from starting).
# GNU time measures a child's peak RSS for the benchmarks.
install_services() {
	apt_install rabbitmq-server python3-keystone uwsgi-core uwsgi-plugin-python3 \
		python3-oslo.messaging python3-oslo.service python3-oslo.config time
}

# k8s.io/kubernetes points its staging modules at ./staging/...; as a dependency
# those replaces are ignored, so a throwaway module replaces each with the
# published v0.<minor>.<patch> release of the same tree.
install_kube() {
	local stamp="$BIN/.kube-$K8S_VERSION"
	[ -f "$stamp" ] && [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ] && return 0
	local dir="$CACHE/build/kube-$K8S_VERSION"
	mkdir -p "$dir"
	local staging="v0.${K8S_VERSION#v1.}"
	log "building kube-apiserver and kube-controller-manager $K8S_VERSION (cold: ~10 min on 2 cores)"
	(
		cd "$dir"
		go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
		local gomod
		gomod=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod
		{
			echo "module kolla-agent.test/kubebuild"
			echo
			grep -E '^go ' "$gomod"
			echo
			echo "require k8s.io/kubernetes $K8S_VERSION"
			echo
			echo "replace ("
			grep -E '=> \./staging/src/' "$gomod" | awk -v v="$staging" '{print "\t" $1 " => " $1 " " v}'
			echo ")"
		} >go.mod
		cat >tools.go <<-'EOF'
			//go:build tools

			package tools

			import (
				_ "k8s.io/kubernetes/cmd/kube-apiserver"
				_ "k8s.io/kubernetes/cmd/kube-controller-manager"
			)
		EOF
		GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true
		local pkg=k8s.io/component-base/version
		local ld="-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2) -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
		local pkg2=k8s.io/client-go/pkg/version
		ld="$ld -X $pkg2.gitVersion=$K8S_VERSION -X $pkg2.gitMajor=1 -X $pkg2.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
		CGO_ENABLED=0 GOFLAGS=-mod=mod go build -ldflags "$ld" -o "$BIN/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
		CGO_ENABLED=0 GOFLAGS=-mod=mod go build -ldflags "$ld" -o "$BIN/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
	)
	touch "$stamp"
}

# A trimmed CoreDNS: only the plugins the test Corefile uses, which builds in a
# fraction of the time of the full binary.
install_coredns() {
	local stamp="$BIN/.coredns-$COREDNS_VERSION-$COREDNS_RECIPE"
	[ -f "$stamp" ] && [ -x "$BIN/coredns" ] && return 0
	local dir="$CACHE/build/coredns-$COREDNS_VERSION"
	mkdir -p "$dir"
	log "building CoreDNS $COREDNS_VERSION (bind, errors, log, kubernetes, whoami plugins)"
	(
		cd "$dir"
		cat >go.mod <<-EOF
			module kolla-agent.test/corednsbuild

			go 1.24

			require github.com/coredns/coredns $COREDNS_VERSION
		EOF
		cat >main.go <<-'EOF'
			package main

			import (
				"github.com/coredns/coredns/core/dnsserver"
				"github.com/coredns/coredns/coremain"

				_ "github.com/coredns/coredns/plugin/bind"
				_ "github.com/coredns/coredns/plugin/errors"
				_ "github.com/coredns/coredns/plugin/kubernetes"
				_ "github.com/coredns/coredns/plugin/log"
				_ "github.com/coredns/coredns/plugin/whoami"
			)

			// Only listed plugins may appear in a Corefile; keep the relative
			// order of CoreDNS' plugin.cfg (bind comes before errors).
			func init() {
				dnsserver.Directives = []string{"bind", "errors", "log", "kubernetes", "whoami"}
			}

			func main() { coremain.Run() }
		EOF
		GOFLAGS=-mod=mod go mod tidy >/dev/null
		CGO_ENABLED=0 go build -ldflags "-s -w" -o "$BIN/coredns.tmp" .
		mv -f "$BIN/coredns.tmp" "$BIN/coredns"
	)
	rm -f "$BIN/.coredns-$COREDNS_VERSION" "$BIN/.coredns-$COREDNS_VERSION"-r*
	touch "$stamp"
}

what=${1:-all}
case "$what" in
all)
	install_etcd
	install_rsyslog
	install_services
	install_coredns
	install_kube
	;;
etcd) install_etcd ;;
rsyslog) install_rsyslog ;;
services) install_services ;;
coredns) install_coredns ;;
kube) install_kube ;;
*)
	echo "usage: $0 [all|etcd|rsyslog|services|coredns|kube]" >&2
	exit 1
	;;
esac
echo "$BIN"
