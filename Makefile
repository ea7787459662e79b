# nodegc Makefile. `make` (or `make help`) lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

OUT          := _output
BIN          := $(OUT)/bin
TOOLS_BIN    := $(OUT)/tools/bin
GO           ?= go
PKG          := github.com/nodegc/nodegc
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)
COMMIT       ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS      := -s -w -X $(PKG)/internal/version.version=$(VERSION) -X $(PKG)/internal/version.commit=$(COMMIT)
STATICCHECK_VERSION := v0.8.2
FUZZTIME     ?= 2m
TEST_FLAGS   ?=

.PHONY: help
help: ## List the targets
	@echo "nodegc: node-level garbage collection for Kubernetes"
	@echo
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  make %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

## Demo
.PHONY: demo
demo: build tools ## Start here (root): a throw-away node + control plane, a full disk, nodegc cleaning up, a checked report and a usage plot; DEMO_KEEP=1 keeps it up
	@if [ "$$(id -u)" != 0 ]; then echo "[demo] make demo needs root: it runs containerd, loop-mounts a small ext4 filesystem and creates cgroups. Run: sudo make demo"; exit 1; fi
	@echo "[demo] building hack/demo -> $(BIN)/nodegc-demo"
	$(GO) build -o $(BIN)/nodegc-demo ./hack/demo
	$(BIN)/nodegc-demo --nodegc $(BIN)/nodegc

.PHONY: build
build: ## Build nodegc into _output/bin/
	@echo "[build] nodegc $(VERSION) -> $(BIN)/nodegc"
	@mkdir -p $(BIN)
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/nodegc ./cmd/nodegc

IMAGE        ?= ghcr.io/nodegc/nodegc:$(VERSION)

.PHONY: image
image: build ## Build the container image without Docker: _output/image/nodegc.tar and an OCI layout, tagged IMAGE (default ghcr.io/nodegc/nodegc:<git describe>), the tarball also <its repository>:latest
	@echo "[image] $(IMAGE)"
	$(GO) run ./hack/image --binary $(BIN)/nodegc --ref $(IMAGE) --out $(OUT)/image --version $(VERSION) --revision $(COMMIT)

.PHONY: manifests
manifests: ## Regenerate deploy/daemonset.yaml from the Helm chart deploy/helm/nodegc (needs make tools: helm)
	@echo "[manifests] deploy/helm/nodegc -> deploy/daemonset.yaml"
	hack/gen-deploy.sh

.PHONY: tools
tools: ## Install or build the test-bed binaries (containerd, runc, etcd, kube-apiserver, helm, ...), cached in _output/tools
	hack/install-tools.sh

.PHONY: test
test: tools ## Run every test (unit and integration against real containerd and kube-apiserver) with -race
	@echo "[test] go test -race ./... (integration tests start containerd 1.6 and 2.x, etcd and kube-apiserver)"
	$(GO) test -race -count=1 -timeout 20m $(TEST_FLAGS) ./...

.PHONY: e2e
e2e: ## End-to-end (root): nodegc's image and deploy/daemonset.yaml on a real single-node cluster (kubelet, containerd, control plane); E2E_RUN=regexp for a subset
	hack/e2e.sh $(if $(E2E_RUN),-run '$(E2E_RUN)')

.PHONY: test-all
test-all: test e2e ## make test, then make e2e (what CI runs, after make lint)

.PHONY: fuzz
fuzz: ## Fuzz the configuration decoder for FUZZTIME (default 2m)
	@echo "[fuzz] FuzzDecode for $(FUZZTIME)"
	$(GO) test ./pkg/config -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME)

.PHONY: bench
bench: tools ## Run the benchmarks (BenchmarkOwnerGC alone takes about 25 minutes)
	@echo "[bench] go test -bench . ./..."
	$(GO) test -run '^$$' -bench . -benchmem -timeout 60m ./...

.PHONY: bench-ownergc
bench-ownergc: tools ## Only the owner GC vs kube-controller-manager vs a DELETE loop table (NODEGC_BENCH_SCALE, NODEGC_BENCH_CASCADES, NODEGC_BENCH_OBJECTS, NODEGC_BENCH_ROUNDS, NODEGC_BENCH_ROUNDS_LARGE, NODEGC_BENCH_STARTUPS, NODEGC_BENCH_IDLE, NODEGC_BENCH_PROFILE, NODEGC_BENCH_TRACE, NODEGC_BENCH_COMPARE, NODEGC_BENCH_SERVER_CPUS)
	@echo "[bench] BenchmarkOwnerGC (test/ownergcbench)"
	$(GO) test -run '^$$' -bench '^BenchmarkOwnerGC$$' -timeout 60m ./test/ownergcbench/

$(TOOLS_BIN)/staticcheck-$(STATICCHECK_VERSION):
	@echo "[lint] installing staticcheck $(STATICCHECK_VERSION) from the Go module proxy"
	@mkdir -p $(TOOLS_BIN)
	GOBIN=$(abspath $(TOOLS_BIN)) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@touch $@

.PHONY: lint
lint: $(TOOLS_BIN)/staticcheck-$(STATICCHECK_VERSION) ## gofmt check, go vet, staticcheck
	@echo "[lint] gofmt"
	@files=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './_output/*')); \
	  if [ -n "$$files" ]; then echo "gofmt needed on:"; echo "$$files"; exit 1; fi
	@echo "[lint] go vet (also the e2e suite, build tag e2e)"
	$(GO) vet ./...
	$(GO) vet -tags e2e ./internal/testbed/kubecluster/ ./test/e2e/
	@echo "[lint] staticcheck"
	$(TOOLS_BIN)/staticcheck ./...
	$(TOOLS_BIN)/staticcheck -tags e2e ./internal/testbed/kubecluster/ ./test/e2e/

.PHONY: clean
clean: ## Remove build outputs (keeps the cached test-bed tools under _output/tools)
	@echo "[clean] removing $(BIN)"
	rm -rf $(BIN)
