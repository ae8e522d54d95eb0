# pdgate — see README.md for what each target does.
SHELL := /usr/bin/env bash
GO ?= go
BIN := $(CURDIR)/bin
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(BIN)/staticcheck-$(STATICCHECK_VERSION)
export KUBEBUILDER_ASSETS ?= $(BIN)/envtest
# Test packages that need built binaries, envtest or redis live under test/integration and
# test/e2e; test/bench holds in-process benchmark harnesses whose correctness tests run as unit tests.
UNIT_PKGS = $$($(GO) list ./... | grep -Ev '/test/(integration|e2e)/|/hack/')

.PHONY: all build run test unit integration e2e lint fmt vet staticcheck pluginimports envtest deps bench soak fuzz clean

all: build

## build: compile every binary into bin/
build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...

## run: build and start the local lab (whole data path on this machine)
run: build
	$(BIN)/pdgate lab

## deps: install what the tests need (apt packages, envtest binaries built from Go modules)
deps: envtest
	bash hack/install-test-deps.sh

envtest:
	bash hack/build-envtest.sh

## test: lint, unit tests with -race, then integration and e2e suites
test: deps lint unit integration e2e

unit:
	$(GO) test -race -count=1 $(UNIT_PKGS)

# Suites take the binaries make build produced instead of building their own. Each e2e suite
# starts a whole lab (simulators, sidecars, EPP, gateway, often an apiserver) sized for the
# machine and several measure latencies or shedding, so the suites run one at a time (-p 1).
integration: build
	PDGATE_BIN_DIR=$(BIN) $(GO) test -count=1 -timeout 20m ./test/integration/...

e2e: build
	PDGATE_BIN_DIR=$(BIN) $(GO) test -p 1 -count=1 -timeout 25m ./test/e2e/...

## lint: gofmt, go vet, staticcheck (pinned), the import rules (docs/architecture.md)
lint: fmt vet staticcheck pluginimports

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

$(STATICCHECK):
	@mkdir -p $(BIN)
	GOBIN=$(BIN)/.staticcheck $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv $(BIN)/.staticcheck/staticcheck $(STATICCHECK)

staticcheck: $(STATICCHECK)
	$(STATICCHECK) ./...

# The import arrows of docs/architecture.md: no plugin imports another plugin; libraries
# (plugins/lib, plugins/internal, plugins/wire) import no plugin; plugins/wire imports nothing
# of ours outside it and no GIE; cmd/sidecar, cmd/gateway and cmd/sim import nothing under
# plugins/ but plugins/wire and link no GIE; the other binaries import no plugin package
# (plugins/framework interfaces instead) but cmd/epp/pluginset. The check's own tests run first
# (hack/ is not in the unit tests).
pluginimports:
	$(GO) test -count=1 ./hack/pluginimports
	$(GO) run ./hack/pluginimports

## bench: the quick variant of every benchmark; reports under bench-results/ (see docs/benchmarks.md)
BENCH_OUT ?= $(CURDIR)/bench-results
# The Azure LLM inference trace (CC BY 4.0) is kept beside the repository, not in it.
AZURE_TRACE ?= $(CURDIR)/../shared/data/azure-llm-inference-2023/conv.csv
bench: build envtest
	$(GO) test -run '^$$' -bench BenchmarkSchedulingCycle -benchtime 400x ./test/bench/scheduler/
	$(GO) test -run '^$$' -bench BenchmarkBurstSpread -benchtime 1x ./test/bench/scheduler/
	set -o pipefail; $(GO) test -run '^$$' -bench BenchmarkParse -benchtime 0.5s -v ./plugins/parser/openaiparser/ | grep -E 'less than|^ok'
	set -o pipefail; $(GO) test -run '^$$' -bench BenchmarkRequestPath -benchtime 200x -v ./test/bench/requestpath/ | grep -E 'efficiency|^ok'
	$(GO) test -run '^$$' -bench SchedulingCycle -benchtime 5000x ./plugins/requestcontrol/pdtokenledger/
	$(GO) test -run '^$$' -bench BenchmarkSidecarOverhead -benchtime 2000x ./cmd/sidecar/proxy/
	$(BIN)/pdgate-bench epp --quick --bin-dir $(BIN) --out $(BENCH_OUT)/epp
	$(BIN)/pdgate-bench memory --quick --bin-dir $(BIN) --out $(BENCH_OUT)/memory
	$(BIN)/pdgate bench routing --quick --bin-dir $(BIN) --azure-conv $(AZURE_TRACE) --out $(BENCH_OUT)/routing
	$(BIN)/pdgate bench sim --quick --bin-dir $(BIN) --azure-conv $(AZURE_TRACE) --out $(BENCH_OUT)/sim

## soak: the long reliability soak
soak: build
	PDGATE_SOAK=10m PDGATE_SOAK_OUT=$(CURDIR)/soak.json PDGATE_BIN_DIR=$(BIN) $(GO) test -count=1 -timeout 30m -v -run Soak ./test/e2e/soak

## fuzz: run every fuzz target for FUZZTIME each (default 10s)
FUZZTIME ?= 10s
fuzz:
	bash hack/fuzz.sh $(FUZZTIME)

clean:
	rm -rf $(BIN)
