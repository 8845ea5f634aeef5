# Fusebox build. `make help` lists the targets.
#
# Tools are pinned and installed into .tools/bin (Go tools via `go install
# …@version`; protoc from Debian's protobuf-compiler, installed with apt-get
# when missing). `build` never depends on `proto`: generated code is committed.

GO      ?= go
PKG     := github.com/fusebox-dev/fusebox
TOOLS   := $(CURDIR)/.tools/bin
BIN     := $(CURDIR)/bin
export PATH := $(TOOLS):$(PATH)

PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
STATICCHECK_VERSION        := v0.8.2
# Debian 12's protobuf-compiler; the version is written into generated code,
# so `make verify` notices a different protoc.
PROTOC_VERSION             := 3.21.12

PROTO_SRC := protocol/fusebox/v1/fusebox.proto
PROTO_OUT := protocol/fuseboxv1

BINARIES := fusebox-agent fusebox-coordinator fuseboxctl fusebox-demo

# The Go modules, each a folder with its go.mod, the root first (sharedstate/DESIGN.md,
# "Modules"). Targets that run the go command run it in each, one after
# another; `make modules-check` (in verify and test) fails when a go.mod
# exists that this list lacks. No go.work: each module's replace
# directives name its sibling folders, and every module builds, tests and
# tidies on its own (GOWORK=off, so a go.work above the checkout changes
# nothing).
MODULES := . sharedstate/store sharedstate/daemonflag protocol/gossip clientlib/idempotency/redisstore agent coordinator cmd deploy agent/lab
export GOWORK := off

# $(call each,COMMAND[,FOLDERS]): COMMAND in every module's folder (or in
# FOLDERS, in that order), every one even after one failed; fails naming
# those where it did.
each = fail=""; for m in $(or $(2),$(MODULES)); do \
	  echo "== $@: $$m"; (cd $$m && $(1)) || fail="$$fail $$m"; \
	done; \
	if [ -n "$$fail" ]; then echo "$@: failed in:$$fail"; exit 1; fi

# `make image`: the container image of deploy/docker/Dockerfile.
IMAGE   ?= fusebox
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

TEST_TIMEOUT ?= 15m
SCALE_SIZES  ?= 10,50,200,500,1000
SCALE_ARGS   ?=
N            ?= 40
DURATION     ?= 10m
SEED         ?= 0
BENCH        ?= .
BENCH_COUNT  ?= 6

.PHONY: help build test test-deps bench lint verify proto tools protoc proto-check tidy tidy-check modules-check deps-check fmt-check test-waits clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14

build: ## build the four binaries into bin/
	@mkdir -p $(BIN)
	cd cmd && $(GO) build -o $(BIN)/ $(addprefix ./,$(BINARIES))

.PHONY: image
image: ## build the container image $(IMAGE):$(VERSION) (deploy/docker/Dockerfile; needs docker)
	docker build -f deploy/docker/Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) .

.PHONY: run
run: ## build fusebox-demo and fuseboxctl into bin/ and run the demo fleet (flags: make run ARGS='--duration 70s --headless')
	@mkdir -p $(BIN)
	cd cmd && $(GO) build -o $(BIN)/ ./fusebox-demo ./fuseboxctl
	$(BIN)/fusebox-demo $(ARGS)

test: test-deps modules-check ## run every module's tests with -race (fuzz seed corpora included)
	@$(call each,$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...)

# Like `protoc`, installs what is missing with apt-get: Debian's chromium
# for the dashboard's browser tests (not with FUSEBOX_SKIP_BROWSER=1, nor
# when $$FUSEBOX_CHROMIUM names another binary) and redis-server for the
# idempotency store's tests (they start their own server in a temp dir);
# as root, nftables and iproute2 for the network-namespace tests (they skip
# for other users); python-deps (below) the Python client's packages.
test-deps: ## install the Debian packages the tests need when missing (chromium, redis-server, as root nftables and iproute2, python-deps)
	@need=""; \
	if [ "$$FUSEBOX_SKIP_BROWSER" != 1 ] && [ -z "$$FUSEBOX_CHROMIUM" ] && ! command -v chromium >/dev/null; then \
	  need="$$need chromium"; fi; \
	command -v redis-server >/dev/null || need="$$need redis-server"; \
	if [ "$$(id -u)" = 0 ]; then \
	  command -v nft >/dev/null || need="$$need nftables"; \
	  command -v ip >/dev/null || need="$$need iproute2"; fi; \
	if [ -n "$$need" ]; then \
	  echo "installing Debian's$$need for the tests"; \
	  apt-get update && apt-get install -y $$need; \
	fi

.PHONY: scale
scale: ## run the fleet scenarios in virtual time (SCALE_SIZES=10,50,200,500,1000), print the Scale table of agent/README.md, plot to bin/scale.png
	@mkdir -p $(BIN)
	cd agent/lab && $(GO) test -c -o $(BIN)/scale.test ./scale && \
	  $(GO) run ./scale/cmd/scale -test-binary $(BIN)/scale.test -sizes $(SCALE_SIZES) -plot $(BIN)/scale.png $(SCALE_ARGS)

# N real fusebox-agent processes on loopback: scenario (a) against real
# sockets (an embedded etcd, unix sockets in a temp dir; every agent is
# stopped on exit and on Ctrl-C).
.PHONY: scale-procs
scale-procs: ## run scenario (a) with N real agent processes on loopback (N=40) and print the Scale table's first columns
	@mkdir -p $(BIN)
	cd cmd && $(GO) build -o $(BIN)/fusebox-agent ./fusebox-agent
	cd agent/lab && $(GO) run ./scale/cmd/scaleprocs -n $(N) -agent $(BIN)/fusebox-agent $(ARGS)

# Real fusebox-agent, etcd and fusebox-coordinator processes in network
# namespaces under random faults drawn from a seed, with continuous checks
# (deploy/README.md, "Soak under faults"). Needs root; not part of `make test`.
.PHONY: soak
soak: ## run Fusebox under random faults for DURATION (10m; SEED=N replays a schedule; root only)
	@[ "$$(id -u)" = 0 ] || { echo "soak: needs root (network namespaces, nftables): run 'make soak' as root"; exit 2; }
	@command -v nft >/dev/null && command -v ip >/dev/null || { echo "installing Debian's nftables and iproute2 for the soak"; apt-get update && apt-get install -y nftables iproute2; }
	@mkdir -p $(BIN)
	cd cmd && $(GO) build -o $(BIN)/ ./fusebox-agent ./fusebox-coordinator ./fuseboxctl
	cd agent/lab && $(GO) run ./soak/cmd/soak -duration $(DURATION) -seed $(SEED) -bin $(BIN) $(ARGS)

bench: test-deps ## run the benchmarks of the folder READMEs' Performance sections
	@$(call each,$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(BENCH_COUNT) ./...)

lint: tools fmt-check ## gofmt, go vet and staticcheck (every module)
	@$(call each,$(GO) vet ./... && $(TOOLS)/staticcheck ./...)

verify: lint test-waits proto-check modules-check tidy-check deps-check ## lint + unbounded test waits + stale generated code + module list + go mod tidy + import table
	@echo "verify: ok"

proto: tools protoc ## regenerate protocol/fuseboxv1 from the .proto sources
	protoc -I protocol \
	  --go_out=. --go_opt=module=$(PKG) \
	  --go-grpc_out=. --go-grpc_opt=module=$(PKG) \
	  $(PROTO_SRC)

tools: $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc $(TOOLS)/staticcheck ## install the pinned Go tools

$(TOOLS)/protoc-gen-go:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(TOOLS)/protoc-gen-go-grpc:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

protoc: ## make sure protoc $(PROTOC_VERSION) is installed (Debian's protobuf-compiler)
	@if ! command -v protoc >/dev/null; then \
	  echo "installing Debian's protobuf-compiler"; \
	  apt-get update && apt-get install -y protobuf-compiler; \
	fi
	@protoc --version | grep -q '$(PROTOC_VERSION)' || \
	  { echo "protoc $(PROTOC_VERSION) required, found: $$(protoc --version)"; exit 1; }

proto-check: tools protoc ## fail when the committed generated code is stale
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	protoc -I protocol \
	  --go_out=$$tmp --go_opt=module=$(PKG) \
	  --go-grpc_out=$$tmp --go-grpc_opt=module=$(PKG) \
	  $(PROTO_SRC) && \
	for f in $$(cd $$tmp/$(PROTO_OUT) && ls); do \
	  cmp -s $$tmp/$(PROTO_OUT)/$$f $(PROTO_OUT)/$$f || \
	    { echo "proto-check: $(PROTO_OUT)/$$f is stale: run 'make proto' and commit the result"; exit 1; }; \
	done; \
	for f in $$(cd $(PROTO_OUT) && ls *.pb.go); do \
	  [ -f $$tmp/$(PROTO_OUT)/$$f ] || { echo "proto-check: $(PROTO_OUT)/$$f is no longer generated: delete it"; exit 1; }; \
	done
	@echo "proto-check: ok"

# The nested modules first: they see the root go.mod's requirements (they
# require the root module), so a dependency that moves out of the root
# keeps its version; the root then drops what it no longer uses.
tidy: ## run `go mod tidy` in every module (after changing an import or a go.mod)
	@$(call each,$(GO) mod tidy,$(filter-out .,$(MODULES)) .)

tidy-check: ## fail when `go mod tidy` would change a module's go.mod or go.sum
	@$(call each,$(GO) mod tidy -diff || { echo "tidy-check: 'go mod tidy' changes $$m's go.mod/go.sum (the diff above): run 'make tidy' and commit the result"; exit 1; })
	@echo "tidy-check: ok"

modules-check: ## fail when a go.mod exists that MODULES lacks (or MODULES names a folder without one), or a module wants another Go
	@found=$$(find . -name go.mod -not -path './.*' -not -path '*/testdata/*' -printf '%h\n' | sed 's|^\./||' | sort); \
	listed=$$(printf '%s\n' $(MODULES) | sort); \
	if [ "$$found" != "$$listed" ]; then \
	  echo "modules-check: the Makefile's MODULES ($$(echo $$listed)) differ from the folders with a go.mod ($$(echo $$found))"; exit 1; fi; \
	want=$$(grep -m1 '^go ' go.mod); \
	for m in $(MODULES); do \
	  [ "$$(grep -m1 '^go ' $$m/go.mod)" = "$$want" ] || { echo "modules-check: $$m/go.mod does not say '$$want' as go.mod does"; exit 1; }; \
	done
	@echo "modules-check: ok"

deps-check: ## fail when an import or a module's graph breaks sharedstate/DESIGN.md's layout and import rules (or a binary links test code)
	@GO=$(GO) .ci/deps-check.sh

test-waits: ## fail on a wait in a _test.go file with no deadline (bare <-x.Done(), unbounded for {)
	@.ci/test-waits

fmt-check: ## fail when gofmt would change a file
	@out=$$(find . -name '*.go' -not -path './.*' | xargs gofmt -l); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

clean: ## remove bin/ and .tools/
	rm -rf $(BIN) $(TOOLS)

# --- The Python client (clientlib/python) ----------------------------------
# Its stubs come from Debian's protobuf-compiler-grpc (grpc_python_plugin)
# and are committed; its tests run Debian's /usr/bin/python3 (the Debian
# packages python3-grpcio, python3-protobuf, python3-requests) against real
# agents built from this tree.

PYTHON         ?= /usr/bin/python3
PY_DIR         := clientlib/python
PY_STUBS       := $(PY_DIR)/fusebox/v1
GRPC_PY_PLUGIN ?= /usr/bin/grpc_python_plugin
py_protoc = protoc -I protocol --python_out=$(1) --grpc_out=$(1) \
  --plugin=protoc-gen-grpc=$(GRPC_PY_PLUGIN) $(PROTO_SRC)

.PHONY: python-deps protoc-python proto-python proto-check-python test-python bench-python
proto: proto-python
verify: proto-check-python
test: test-python
test-deps: python-deps

python-deps: ## install Debian's python3-grpcio, python3-protobuf, python3-requests and protobuf-compiler-grpc when missing
	@need=""; \
	$(PYTHON) -c 'import grpc, google.protobuf, requests' 2>/dev/null || need="$$need python3-grpcio python3-protobuf python3-requests"; \
	[ -x $(GRPC_PY_PLUGIN) ] || need="$$need protobuf-compiler-grpc"; \
	if [ -n "$$need" ]; then \
	  echo "installing Debian's$$need for the Python client"; \
	  apt-get update && apt-get install -y $$need; \
	fi

protoc-python: protoc ## make sure Debian's grpc_python_plugin (protobuf-compiler-grpc) is installed
	@if [ ! -x $(GRPC_PY_PLUGIN) ]; then \
	  echo "installing Debian's protobuf-compiler-grpc"; \
	  apt-get update && apt-get install -y protobuf-compiler-grpc; \
	fi

proto-python: protoc-python ## regenerate the Python client's stubs in clientlib/python/fusebox/v1
	$(call py_protoc,$(PY_DIR))

proto-check-python: protoc-python ## fail when the committed Python stubs are stale
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	$(call py_protoc,$$tmp) && \
	for f in $$(cd $$tmp/fusebox/v1 && ls); do \
	  cmp -s $$tmp/fusebox/v1/$$f $(PY_STUBS)/$$f || \
	    { echo "proto-check-python: $(PY_STUBS)/$$f is stale: run 'make proto' and commit the result"; exit 1; }; \
	done; \
	for f in $$(cd $(PY_STUBS) && ls *_pb2*.py); do \
	  [ -f $$tmp/fusebox/v1/$$f ] || { echo "proto-check-python: $(PY_STUBS)/$$f is no longer generated: delete it"; exit 1; }; \
	done
	@echo "proto-check-python: ok"

test-python: python-deps ## run the Python client's tests (unittest) against real agents built from this tree
	cd $(PY_DIR) && $(PYTHON) -m unittest discover -s tests -t . $(if $(V),-v)

bench-python: python-deps ## measure the Python client's overhead per call (clientlib/python/README.md's table)
	cd $(PY_DIR) && $(PYTHON) bench.py $(ARGS)
