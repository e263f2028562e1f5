# render: the two commands a new machine needs are `make demo` and `make test`.
GO        ?= go
BIN       := bin/render
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/render-dev/render/internal/cli.Version=$(VERSION)
DEMO      := .demo
DEMO_FLAGS = --platform fixtures/platform
DOCKER    ?= docker
IMAGE     ?= render:$(VERSION)

.PHONY: build demo demo-clean test unit bench chaos servers fmt vet image test-containers

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/render

## demo: render the fixtures into a local bare repository (no servers) and print its tree.
demo: build
	@mkdir -p $(DEMO)
	@echo "== promise workflow (dependencies) =="
	KRATIX_WORKFLOW_TYPE=promise KRATIX_PIPELINE_NAME=promise-configure \
	  $(BIN) $(DEMO_FLAGS) --output fixtures/promise-workflow/output \
	  --metadata fixtures/promise-workflow/metadata --input fixtures/promise-workflow/input
	@echo "== resource workflow (one request) =="
	KRATIX_WORKFLOW_TYPE=resource KRATIX_PROMISE_NAME=postgres KRATIX_PIPELINE_NAME=instance-configure \
	  $(BIN) $(DEMO_FLAGS) --output fixtures/resource-workflow/output \
	  --metadata fixtures/resource-workflow/metadata --input fixtures/resource-workflow/input
	@echo "== $(DEMO)/state.git, branch main =="
	@git --git-dir $(DEMO)/state.git ls-tree -r --name-only main

demo-clean:
	rm -rf $(DEMO)

## test: the whole suite, with real Gitea and MinIO built and started by scripts/test.sh.
test:
	scripts/test.sh

## unit: the tests that need no servers (integration tests skip unless CI=true).
unit:
	$(GO) test -count=1 ./...

## bench: side-by-side figures against real Gitea and MinIO; a table, and JSON under .bench/.
bench:
	scripts/bench.sh

## chaos: both fault campaigns against every store (STORE to run one), each
## printing a table of trials, faults by kind and violations. First the
## process-level one (internal/testinfra/chaos: render processes, SIGKILL, a TCP fault
## proxy): SEEDS trials per store from FIRST, or until DURATION per store
## (0: no limit). Then the in-process one (internal/testinfra/chaos/sim: render's engine
## as goroutines on a virtual clock, faults drawn per request, 2-64 writers,
## foreign state): SIM_SEEDS trials per store from SIM_FIRST, SIM_PARALLEL at
## a time per store, the stores side by side, starting no trial that would
## end past SIM_DURATION (0: no limit). Last, TestManySidecars with MANY (64)
## one-file renders at once per store (`make test` runs 16), every core busy.
## The defaults keep the campaigns within an hour: 4 x 2m and the trials in
## flight, then 45m; the 64 renders take tens of minutes more on a loaded
## 2-core machine.
SEEDS        ?= 1000
FIRST        ?= 1
DURATION     ?= 2m
STORE        ?=
SIM_SEEDS    ?= 1000
SIM_FIRST    ?= 1
SIM_PARALLEL ?= 4
SIM_DURATION ?= 45m
MANY         ?= 64
chaos:
	scripts/testservers.sh with sh -c '$(GO) test -count=1 -timeout=0 -run TestCampaign -v ./internal/testinfra/chaos/ \
	    -args -seeds $(SEEDS) -first $(FIRST) -duration $(DURATION) -store "$(STORE)"; rc=$$?; \
	  $(GO) test -count=1 -timeout=0 -run TestSimCampaign -v ./internal/testinfra/chaos/sim/ \
	    -args -seeds $(SIM_SEEDS) -first $(SIM_FIRST) -parallel $(SIM_PARALLEL) -duration $(SIM_DURATION) \
	    -max-writers 64 -foreign -store "$(STORE)" || rc=$$?; \
	  $(GO) test -count=1 -timeout=0 -run "TestManySidecars/$(STORE)" -v ./internal/testinfra/chaos/ -args -many $(MANY) || rc=$$?; exit $$rc'

## image: build render's container image (Dockerfile) as $(IMAGE) with $(DOCKER).
image:
	$(DOCKER) build -t $(IMAGE) --build-arg VERSION=$(VERSION) $(DOCKER_BUILD_FLAGS) .

## test-containers: only the container tests (the image as a pod's sidecar, the
## docker-compose quickstart), with a private Docker engine set up by scripts/containers.sh.
test-containers:
	scripts/containers.sh with $(GO) test -count=1 -timeout=30m ./internal/testinfra/containere2e/

servers:
	scripts/testservers.sh build

vet:
	$(GO) vet ./...

fmt:
	gofmt -l -w $$(git ls-files '*.go')
