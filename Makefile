# kolla-agent. `make demo` and `make test` are the two commands a new machine needs.
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
BIN       := bin/kolla-agent
# The packages `make test` runs again with -race.
RACEPKGS := ./agent/ ./agent/logs/ ./agent/reload/ ./agent/supervise/ ./bootstrap/ ./discovery/ ./probes/

# Fuzz time per target in `make test`; `make fuzz FUZZTIME=5m` for longer runs.
FUZZTIME  ?= 10s
# One fuzz worker in `make test`: on a 2-core CI machine, two workers plus
# the coordinator contend; `make fuzz FUZZPAR=2` for more throughput.
FUZZPAR   ?= 1
# Tools the tests run against (etcd, kube-apiserver, kube-controller-manager,
# CoreDNS, rsyslog) are built or installed once and cached here.
export KOLLA_AGENT_CACHE ?= $(HOME)/.cache/kolla-agent

.PHONY: build test unit fuzz bench demo testenv tools vet clean e2e images soak

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/kolla-agent
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)-probe ./cmd/kolla-agent-probe

# As root (where e2e/ runs a node), also the Debian roots of the tests'
# images: built cold inside e2e/, they took minutes of its go test timeout.
tools:
	bash hack/install-tools.sh all >/dev/null
	@if [ "$$(id -u)" = 0 ] && command -v mmdebstrap >/dev/null; then $(GO) run ./hack/images -roots; fi

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Every test, including those against the real control plane and, as root,
# the real node (e2e/), then each fuzz target briefly.
test: tools vet
	$(GO) test -count=1 -timeout 30m ./...
	# Once more under the race detector, the packages whose tests run
	# goroutines against each other (TestHealthAnswersWhileRunStarts and
	# TestFinderConcurrent prove nothing without it); about 2 minutes.
	$(GO) test -race -count=1 -timeout 20m $(RACEPKGS)
	# The request counts once more on Debian's etcd 3.4, which serves no watch-list.
	TESTENV_ETCD=debian $(GO) test -count=1 -run '^TestAPIRequests' ./cmd/kolla-agent/
	$(MAKE) fuzz

# The soak: the sidecar ships a service's logs and checks the API and DNS
# while the API server, CoreDNS, the log receiver and the service are
# killed at random; every line arrives, RSS, open files and goroutines stay
# flat (slopes in the output). `make test` runs it for 3 minutes.
SOAK ?= 30m
soak: tools
	KOLLA_AGENT_SOAK=$(SOAK) $(GO) test -count=1 -timeout 60m -run '^(TestSoak|TestLogsLogrotateCreateRace)$$' -v ./cmd/kolla-agent/

# Targets are found by name in the test files: listing them with `go test
# -list` would run each package's TestMain (the e2e one starts a control plane).
# Go 1.26's fuzz coordinator can fail a target with a bare "context deadline
# exceeded" and no failing input at the -fuzztime deadline (go.dev/issue/75804,
# fixed in Go 1.27): that one case is run again, up to 3 runs in all (twice in
# a row was seen when the last seconds found a new input); a real failure is
# not.
fuzz:
	@set -e; grep -l '^func Fuzz' $$(git ls-files '*_test.go') | while read f; do \
	  pkg=./$$(dirname $$f); \
	  for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
	    echo "fuzz $$pkg $$t ($(FUZZTIME))"; \
	    for run in 1 2 3; do \
	      out=$$($(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -parallel $(FUZZPAR) $$pkg 2>&1) && break; \
	      if [ $$run -lt 3 ] && echo "$$out" | grep -q 'context deadline exceeded' && ! echo "$$out" | grep -q 'Failing input written'; then \
	        echo "  no failing input: Go's fuzz coordinator race at the -fuzztime deadline (go.dev/issue/75804); again"; \
	      else echo "$$out" | tail -40; exit 1; fi; \
	    done; \
	  done; \
	done; echo "fuzz: all targets passed"

# The end-to-end benchmarks of cmd/ run 3 times (many measure one window: a
# run is one sample); the real-pod ones of e2e/ run once and take their own
# samples (5-9 pods each; they report their count and range); the agent's
# in-process benchmarks need iterations to be stable; the probe benchmarks
# run 3 times (a /readyz loopback window is one sample). The
# raw output goes to bin/bench/; hack/bench keeps its benchmark lines in
# docs/benchmarks.txt (benchstat's input: `benchstat old.txt
# docs/benchmarks.txt`) and writes the table of docs/benchmarks.md from them.
# A run measures one commit: it refuses to start with uncommitted changes,
# and to write if HEAD moved meanwhile.
BENCHRAW := bin/bench
bench: tools build
	mkdir -p $(BENCHRAW)
	$(GO) run ./hack/bench -start $(BENCHRAW)/commit
	bash -o pipefail -c "$(GO) test -run '^$$' -bench . -benchtime 1x -count 3 -timeout 100m ./cmd/... ./discovery/... ./internal/... 2>&1 | tee $(BENCHRAW)/e2e.txt"
	bash -o pipefail -c "$(GO) test -run '^$$' -bench . -benchtime 20x -count 3 ./agent/... 2>&1 | tee $(BENCHRAW)/agent.txt"
	bash -o pipefail -c "$(GO) test -run '^$$' -bench . -count 3 -timeout 30m ./probes/... 2>&1 | tee $(BENCHRAW)/probes.txt"
	bash -o pipefail -c "$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout 30m ./e2e/ 2>&1 | tee $(BENCHRAW)/pods.txt"
	$(GO) run ./hack/bench -commit $(BENCHRAW)/commit -txt docs/benchmarks.txt -doc docs/benchmarks.md $(BENCHRAW)/e2e.txt $(BENCHRAW)/agent.txt $(BENCHRAW)/probes.txt $(BENCHRAW)/pods.txt

demo: build
	bash examples/local/demo.sh $(BIN)

# The agent's images as real pods on a real node (containerd, runc, the
# kubelet, kube-proxy): e2e/ starts its own control plane and node, builds
# and imports the images, and checks the host is left as it was. Needs root;
# `make test` runs it too.
e2e: tools
	$(GO) test -count=1 -timeout 20m -v ./e2e/

# The images images/agent and images/openstack-helm describe, built from
# `make build`'s binaries without a registry or a Docker daemon, as
# docker-archive tarballs in bin/images/, and imported into the node of the
# testenv in TESTENV_DIR (default .testenv) when one runs there.
TESTENV_DIR ?= .testenv
images: build
	$(GO) run ./hack/images -out bin/images -import $(TESTENV_DIR)

# Start a local control plane in DIR (default .testenv), with a node when run
# as root; stop it with `hack/testenv down DIR`.
testenv:
	hack/testenv up $(or $(DIR),.testenv)

clean:
	rm -rf bin .testenv

# The agent's whole job for the real Keystone (Debian's python3-keystone under
# uWSGI, SQLite), no cluster: render, bootstrap, run, probes, the catalog,
# reload, log shipping to a Fluent forward server, stop (~30 s).
.PHONY: demo-keystone demo-cluster
demo-keystone: build
	bash hack/install-tools.sh services >/dev/null
	bash hack/install-tools.sh fluent >/dev/null
	bash examples/demo/keystone.sh $(BIN)

# examples/ (mariadb, memcached, keystone) as real pods on a real node, as
# root: the images built here, the pods, their Events, the probe answers and
# a token; the node is stopped and the host put back (a few minutes warm).
demo-cluster: build tools
	bash examples/demo/cluster.sh
