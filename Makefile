# orchestrate: Consul as the control plane of a Puppet-built OpenStack cloud.
#
#   make demo   build everything and run it against a local dev Consul
#   make test   install what the tests need, then vet, gofmt and go test -race

GO       ?= go
CONSUL_MOD := internal/consultest/consul
export CONSUL_BIN := $(CURDIR)/bin/consul

.PHONY: all build consul test-deps test vet fmt-check demo clean

all: build consul

## build: the project's binaries into bin/
build:
	$(GO) build -o bin/ ./cmd/...

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

## test: what CI runs. CI=true makes every test that needs Consul or Puppet
## fail rather than skip when its tool is missing.
test: test-deps vet fmt-check
	$(GO) test -race -count=1 ./...

## demo: build everything, start a dev Consul on free loopback ports and run
## a short orchestrate session against it; stops what it started.
demo: build consul
	$(GO) run ./internal/demo --bin bin $(DEMO_FLAGS)

clean:
	rm -rf bin
