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

# `make image`: the container image of deploy/docker/Dockerfile.
IMAGE   ?= fusebox
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

TEST_TIMEOUT ?= 15m
SCALE_SIZES  ?= 10,50,200,500
N            ?= 40
DURATION     ?= 10m
SEED         ?= 0
BENCH        ?= .
BENCH_COUNT  ?= 6

.PHONY: help build test test-deps bench lint verify proto tools protoc proto-check tidy-check deps-check fmt-check test-waits clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14

build: ## build the four binaries into bin/
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(BINARIES))

.PHONY: image
image: ## build the container image $(IMAGE):$(VERSION) (deploy/docker/Dockerfile; needs docker)
	docker build -f deploy/docker/Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) .

.PHONY: run
run: ## build and run the demo fleet (flags: make run ARGS='--duration 70s --headless')
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/fusebox-demo ./cmd/fusebox-demo
	$(BIN)/fusebox-demo $(ARGS)

test: test-deps ## run every test with -race (fuzz seed corpora included)
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

# Like `protoc`, installs what is missing with apt-get: Debian's chromium
# for the dashboard's browser tests (not with FUSEBOX_SKIP_BROWSER=1, nor
# when $$FUSEBOX_CHROMIUM names another binary) and redis-server for the
# idempotency store's tests (they start their own server in a temp dir).
test-deps: ## install the Debian packages the tests need when missing (chromium, redis-server)
	@need=""; \
	if [ "$$FUSEBOX_SKIP_BROWSER" != 1 ] && [ -z "$$FUSEBOX_CHROMIUM" ] && ! command -v chromium >/dev/null; then \
	  need="$$need chromium"; fi; \
	command -v redis-server >/dev/null || need="$$need redis-server"; \
	if [ -n "$$need" ]; then \
	  echo "installing Debian's$$need for the tests"; \
	  apt-get update && apt-get install -y $$need; \
	fi

.PHONY: scale
scale: ## run the fleet scenarios on the simulated network (SCALE_SIZES=10,50,200,500) and print the README's Scale table
	$(GO) run ./agent/internal/scale/cmd/scale -sizes $(SCALE_SIZES)

# N real fusebox-agent processes on loopback: scenario (a) against real
# sockets (an embedded etcd, unix sockets in a temp dir; every agent is
# stopped on exit and on Ctrl-C).
.PHONY: scale-procs
scale-procs: ## run scenario (a) with N real agent processes on loopback (N=40) and print the Scale table's first columns
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/fusebox-agent ./cmd/fusebox-agent
	$(GO) run ./agent/internal/scale/cmd/scaleprocs -n $(N) -agent $(BIN)/fusebox-agent $(ARGS)

# Real fusebox-agent, etcd and fusebox-coordinator processes in network
# namespaces under random faults drawn from a seed, with continuous checks
# (README "How we test", "Soak"). Needs root; not part of `make test`.
.PHONY: soak
soak: ## run Fusebox under random faults for DURATION (10m; SEED=N replays a schedule; root only)
	@[ "$$(id -u)" = 0 ] || { echo "soak: needs root (network namespaces, nftables): run 'make soak' as root"; exit 2; }
	@command -v nft >/dev/null || { echo "installing Debian's nftables for the soak"; apt-get update && apt-get install -y nftables; }
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/fusebox-agent ./cmd/fusebox-coordinator ./cmd/fuseboxctl
	$(GO) run ./agent/internal/soak/cmd/soak -duration $(DURATION) -seed $(SEED) -bin $(BIN) $(ARGS)

bench: test-deps ## run the benchmarks of the README's Performance section
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(BENCH_COUNT) ./...

lint: tools fmt-check ## gofmt, go vet and staticcheck
	$(GO) vet ./...
	$(TOOLS)/staticcheck ./...

verify: lint test-waits proto-check tidy-check deps-check ## lint + unbounded test waits + stale generated code + go mod tidy
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

tidy-check: ## fail when `go mod tidy` would change go.mod or go.sum
	@cp go.mod /tmp/fusebox-go.mod.bak; cp go.sum /tmp/fusebox-go.sum.bak; \
	$(GO) mod tidy; \
	if ! cmp -s go.mod /tmp/fusebox-go.mod.bak || ! cmp -s go.sum /tmp/fusebox-go.sum.bak; then \
	  cp /tmp/fusebox-go.mod.bak go.mod; cp /tmp/fusebox-go.sum.bak go.sum; \
	  echo "tidy-check: 'go mod tidy' changes go.mod/go.sum: run it and commit the result"; exit 1; \
	fi
	@echo "tidy-check: ok"

deps-check: ## fail when an import breaks DESIGN.md's import table (or a binary links test code)
	@GO=$(GO) .ci/deps-check.sh

test-waits: ## fail on a wait in a _test.go file with no deadline (bare <-x.Done(), unbounded for {)
	@.ci/test-waits

fmt-check: ## fail when gofmt would change a file
	@out=$$(find . -name '*.go' -not -path './.*' | xargs gofmt -l); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

clean: ## remove bin/ and .tools/
	rm -rf $(BIN) $(TOOLS)
