# orchestrate: Consul as the control plane of a Puppet-built OpenStack cloud.
#
#   make demo     build everything and run it against a local dev Consul
#   make test     install what the tests need, then vet, gofmt and go test -race
#   make bench    every benchmark, printed as one table
#   make package  the Debian package, dist/orchestrate_<version>_amd64.deb

GO       ?= go
CONSUL_MOD := internal/consultest/consul
export CONSUL_BIN := $(CURDIR)/bin/consul

# VERSION is `git describe` of the tree (scripts/version.sh: v1.2.3,
# v1.2.3-4-gabcdef0, -dirty with uncommitted changes; v0.0.0-N-gHASH before
# the first v* tag). Every binary prints it with --version.
VERSION ?= $(shell scripts/version.sh)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/jiocloud/orchestrate/internal/cli.version=$(VERSION) -X github.com/jiocloud/orchestrate/internal/cli.commit=$(COMMIT)

# nfpm builds the package; pinned, from the Go module proxy (v2.46 and
# later need go.digitalxero.dev modules the proxy does not serve).
NFPM ?= $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
DIST ?= dist

.PHONY: all build consul test-deps test vet fmt-check demo clean package

all: build consul

## build: the four shipped binaries into bin/, stamped with VERSION and
## COMMIT. cmd/demo and cmd/benchtable are the project's own programs, run by
## `make demo` and `make bench` (go run), neither built into bin/ nor shipped;
## scripts/package.sh lists the same four.
BINARIES := hiera-services orchestrate reaper service-blocker
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ $(addprefix ./cmd/,$(BINARIES))

## package: dist/orchestrate_<version>_amd64.deb (scripts/package.sh):
## the four binaries, both systemd units, /etc/orchestrate conffiles, the
## Consul ACL policies, man pages and documents. Needs no root.
package:
	VERSION='$(VERSION)' COMMIT='$(COMMIT)' DIST='$(DIST)' GO='$(GO)' NFPM='$(NFPM)' scripts/package.sh

## consul: the real Consul agent used by tests and the demo, built from the
## Go module proxy (a few minutes the first time; a no-op when up to date).
consul: bin/consul

bin/consul: $(CONSUL_MOD)/go.mod $(CONSUL_MOD)/go.sum $(CONSUL_MOD)/main.go
	cd $(CONSUL_MOD) && $(GO) build -o $(CURDIR)/bin/consul .

## test-deps: everything the tests need on a fresh machine.
test-deps: consul
	scripts/install-test-deps.sh

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## test: what CI runs. CI=true makes every test that needs Consul, Puppet or
## Nova fail rather than skip when its tool is missing. The whole suite runs
## with the real-Nova test cloud up (see nova-up below), which is stopped
## afterwards unless it was already running. Then the autoscaling decision
## is fuzzed for 20 s (its seeds, reaper/planner/testdata/fuzz, run with the suite).
## Last, the small lab (lab-ci below): the whole cloud in containers, built
## by the reaper through the real Nova, and four of its scenarios.
test: test-deps vet fmt-check
	NOVA_E2E_DIR=$(NOVA_E2E_DIR) GO=$(GO) scripts/nova/e2e.sh ./...
	$(GO) test -run '^$$' -fuzz '^FuzzAutoscaleDecision$$' -fuzztime 20s ./reaper/planner
	$(MAKE) lab-ci

## demo: build everything, start a dev Consul on free loopback ports and run
## a short orchestrate session against it; stops what it started.
demo: build consul
	$(GO) run ./cmd/demo --bin bin $(DEMO_FLAGS)

clean:
	rm -rf bin build dist

## nova-up: install (apt, first time only), configure and start a real
## single-host OpenStack for the reaper's end-to-end tests: keystone,
## placement, glance and Nova (fake virt driver) from Debian's Zed packages,
## RabbitMQ, MariaDB and a Neutron stand-in, all on 127.0.0.1, all state in
## $(NOVA_E2E_DIR). Idempotent. Needs root.
## nova-down: stop every daemon nova-up started, by PID.
## e2e-nova: nova-up, the tests named *Nova* in internal/novatest and
## reaper/..., then nova-down (unless the cloud was already up before: then
## it is left running); fails when a test fails. See scripts/nova/README.md.
NOVA_E2E_DIR ?= /tmp/orchestrate-nova

.PHONY: nova-up nova-down e2e-nova

nova-up:
	NOVA_E2E_DIR=$(NOVA_E2E_DIR) scripts/nova/up.sh

nova-down:
	NOVA_E2E_DIR=$(NOVA_E2E_DIR) scripts/nova/stop.sh

e2e-nova:
	NOVA_E2E_DIR=$(NOVA_E2E_DIR) GO=$(GO) scripts/nova/e2e.sh

## swift-up: configure (first time) and start a real single-replica Swift
## (Debian's swift-proxy, -account, -container, -object, memcached) with
## tempauth and tempurl on 127.0.0.1:24720-24724, all state in
## $(SWIFT_E2E_DIR); idempotent. The tests do not need it: internal/swifttest
## starts a private one per test process. See scripts/swift/README.md.
## swift-down: stop every daemon swift-up started, by PID.
SWIFT_E2E_DIR ?= /tmp/orchestrate-swift

.PHONY: swift-up swift-down

swift-up:
	SWIFT_E2E_DIR=$(SWIFT_E2E_DIR) scripts/swift/up.sh

swift-down:
	SWIFT_E2E_DIR=$(SWIFT_E2E_DIR) scripts/swift/down.sh

## bench-blocker: service-blocker's benchmarks against real agents: latency
## from the 5th instance passing to the blocker's exit (median, p99 over 50
## trials), polling (--no-watch) beside watching, fresh and after 30 s of
## waiting; DNS queries and HTTP requests per minute of one waiting blocker;
## a client agent's and its server's CPU and RSS with 500 blockers waiting;
## the waiting binary's RSS and CPU over BLOCKER_BENCH_WAIT (default 20s).
## Takes about 3.5 minutes.
.PHONY: bench-blocker
bench-blocker: consul
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 20m ./blocker

## bin/consul-template: the consul-template binary, built from the Go module
## proxy, only to compare hiera-services with it in bench-hiera.
bin/consul-template:
	GOBIN=$(CURDIR)/bin $(GO) install github.com/hashicorp/consul-template@v0.41.1

## bench-hiera: hiera-services beside the consul-template binary on real
## dev agents holding 1,000, then 5,000 services x 5 instances, hiera-services
## on agents with Consul's default limits (alone, and following the catalog
## change feed): once-mode render (process start to file written) with peak
## RSS and connections, and in watch mode the latency from one registration,
## and from one check change, to the file holding it, with the connections held
## and the bytes the agent sent per change; then a server and eight default
## client agents, hiera-services --watch on each, under a trickle of check
## changes: CPU of each part and bytes per change per node. About 20 minutes
## (consul-template's once mode at 5,000 services alone takes 12).
.PHONY: bench-hiera
bench-hiera: consul bin/consul-template
	$(GO) test -run '^$$' -bench Catalog1000x5 -benchtime 5x -timeout 30m ./hiera
	$(GO) test -run '^$$' -bench 'Catalog5000x5/(watch|health)' -benchtime 5x -timeout 30m ./hiera
	$(GO) test -run '^$$' -bench Catalog5000x5/once -benchtime 2x -timeout 30m ./hiera
	$(GO) test -run '^$$' -bench EightNodesTrickle -benchtime 50x -timeout 30m ./hiera

## bench-fleet: what the renderer on every node costs the Consul server as
## the fleet grows: a server and 8, 16, then 32 default client agents, 1,000
## services x 5 instances, hiera-services --watch on every node beside the
## consul-template binary and its -dedup mode (on agents with a raised
## connection limit); per registration, check change and burst of 20
## registrations, the server's CPU and TCP bytes sent (total and per node)
## and the time until the last node's file holds it. About 15 minutes on 2
## cores (consul-template's first render at 32 nodes alone takes 2-3).
.PHONY: bench-fleet
bench-fleet: consul bin/consul-template
	$(GO) test -run '^$$' -bench FleetCost -benchtime 1x -timeout 30m ./hiera

## soak: the reaper against a real agent and the simulated cloud while a
## seeded random schedule injects faults, for SOAK_DURATION (default 5m;
## `make test` runs 60s); prints the seed, the faults injected, the actions
## taken and any violation with its trace. SOAK_SEED=N replays a schedule.
.PHONY: soak
soak: consul
	SOAK_DURATION=$${SOAK_DURATION:-5m} REAPER_TEST_LOG=quiet CI=true $(GO) test -run '^TestSoak$$' -v -count=1 -timeout 60m ./reaper/daemon

## bench: every benchmark in one go, printed as one table with the machine it
## ran on (hiera-services beside consul-template, the fleet's cost on the
## server at 8-32 nodes, service-blocker latency and footprint, the reaper
## planner and a full reaper cycle). About 30 minutes.
## lab-image: what the lab's servers are made of (lab/README.md): the base
## image, built once with mmdebstrap and cached in $(LAB_DIR)/cache; the
## packages orchestrate, consul and orchestrate-lab-roles in $(LAB_DIR)/debs;
## and the signed apt repository serving them, $(LAB_DIR)/repo. Prints each
## one's time and size. Needs root and the machine's apt sources.
LAB_DIR ?= /var/tmp/orchestrate-lab

.PHONY: lab-image
lab-image: consul test-deps
	LAB_DIR='$(LAB_DIR)' NFPM='$(NFPM)' $(GO) run ./lab/cmd/labimage

## bench: every benchmark above in one table (cmd/benchtable): about 50
## minutes on 2 cores with nothing else running (docs/performance.md).
.PHONY: bench
bench: consul bin/consul-template
	$(GO) run ./cmd/benchtable

## lab: the whole cloud in containers on this machine, built from nothing by
## the reaper through the real Nova, then broken on purpose (lab/README.md):
## every scenario, the invariant checker, the summary. LAB_SIZE small |
## default | large; LAB_SCENARIOS a comma list (default all). Needs root.
## lab-ci: what CI runs, a small lab and the scenarios bootstrap, death,
## partition and failover. lab-down: stops whatever a lab left running.
LAB_SIZE ?= default
LAB_SCENARIOS ?= all

.PHONY: lab lab-ci lab-down
lab: consul test-deps
	LAB_DIR='$(LAB_DIR)' LAB_SIZE='$(LAB_SIZE)' LAB_SCENARIOS='$(LAB_SCENARIOS)' NFPM='$(NFPM)' CONSUL_BIN='$(CONSUL_BIN)' \
		$(GO) test -tags lab -run '^TestLab$$' -count=1 -v -timeout 90m ./lab

lab-ci: consul test-deps
	$(MAKE) lab LAB_SIZE=small LAB_SCENARIOS=bootstrap,death,partition,failover

lab-down:
	LAB_DIR='$(LAB_DIR)' $(GO) run ./lab/cmd/labdown
