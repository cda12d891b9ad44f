# mmmq — the two commands a newcomer needs: `make run` and `make test`.
GO       ?= go
BIN      ?= bin/mmmq
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X github.com/mmmq/mmmq/modules/contract.Version=$(VERSION)
# CONFIG is the YAML file `make run` passes with --config (it must exist).
# Unset, the broker reads $MMMQ_CONFIG if set, else configs/mmmq.yaml.
CONFIG   ?=

.PHONY: all build run test test-short race fuzz bench bench-tracing crash demo cluster cluster-restart ui-screenshot dashboard-render vet lint ts-check fmt clean

all: build

build: ## build bin/mmmq
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./app/mmmq

run: build ## start the broker (console logs) with CONFIG=FILE, else MMMQ_CONFIG, else configs/mmmq.yaml: ./data, port 8080
	MMMQ_LOGGING_FORMAT=$${MMMQ_LOGGING_FORMAT:-console} ./$(BIN) serve$(if $(CONFIG), --config $(CONFIG))

# The storage engine's power-loss rounds run a few rounds per crash variant
# under the race detector (it slows them some 24 times) and the full count
# in a second run of that package without it.
test: ## check the prerequisites (.ci/prereq.sh), go vet, staticcheck, all tests with the race detector, the storage power-loss rounds in full without it, plus short fuzz runs
	@bash .ci/prereq.sh
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	$(GO) test -race -count=1 -timeout 15m ./...
	$(GO) test -count=1 -timeout 10m ./modules/storage/
	$(MAKE) fuzz FUZZTIME=20000x

test-short: ## quick tests without -race
	$(GO) test -count=1 ./...

# make test uses an execution count, not a duration: Go 1.26's fuzz
# coordinator can report a spurious "context deadline exceeded" failure when
# a -fuzztime duration ends mid-exec (golang/go#75804, fixed in Go 1.27).
FUZZTIME ?= 60s
fuzz: ## run every fuzz target for FUZZTIME (default 60s each; make test uses 20000x)
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

bench: ## mmmq beside Redis (line protocol, same client), the HTTP ceiling (wrk) and raw NATS JetStream (3-node cluster), Go benchmarks, end-to-end runs; one table (~20 min; BENCH_QUICK=1 ~5 min)
	GO=$(GO) bash .bench/run.sh

bench-tracing: ## what tracing costs a publish: the build before tracing (TRACING_BASE, default 80ceac9) beside this build with tracing off and on (OTLP/HTTP to a local sink), interleaved rounds, plus the Go benchmarks' allocs/op (~6 min)
	GO=$(GO) bash .bench/tracing.sh

# LazyFS for the power-loss rounds of the real binary: MMMQ_LAZYFS, else
# built from ../shared/tools/build-lazyfs.sh when that is there (the rounds
# say in one line that they did not run when neither gives a binary).
LAZYFS_BUILD ?= ../shared/tools/build-lazyfs.sh

crash: ## long randomized crash and power-loss rounds (storage engine, then the real binary under kill -9, and on LazyFS under power loss: MMMQ_LAZYFS=path/to/lazyfs, else built from ../shared)
	MMMQ_LONG=1 $(GO) test -count=1 -timeout 30m -run 'Crash|PowerLoss' -v ./modules/storage/
	MMMQ_LONG=1 MMMQ_LAZYFS=$${MMMQ_LAZYFS:-$$([ -f $(LAZYFS_BUILD) ] && bash $(LAZYFS_BUILD) | tail -1)} \
	  $(GO) test -count=1 -timeout 30m -v ./app/mmmq/crashtest/
	MMMQ_LONG=1 $(GO) test -count=1 -timeout 10m -run SharedGroupProperty -v ./modules/groups/

demo: ## broker + two consumers + producer on the 3000 order events; checks delivery
	./examples/demo/demo.sh

cluster: build ## 3 NATS JetStream nodes + 2 mmmq nodes on loopback (configs/cluster/), in the foreground; a node that dies is reported, the others keep running; Ctrl-C stops them
	GO=$(GO) MMMQ=$${MMMQ:-$(BIN)} bash .cluster/run.sh

# NODE is the node of a running `make cluster` that cluster-restart restarts.
NODE ?=
cluster-restart: ## restart one node (dead, or alive: stopped first) of a running `make cluster`: NODE=n1|n2|n3|mmmq-1|mmmq-2 (same CLUSTER_PORT_OFFSET)
	@bash .cluster/run.sh restart "$(NODE)"

ui-screenshot: ## regenerate plugins/ui/status-page.png (the README shows it): the status page (/ui/) in headless Chromium (apt-get install chromium, or CHROMIUM=path)
	MMMQ_UI_SCREENSHOT_DIR=$(CURDIR)/plugins/ui $(GO) test -count=1 -run '^TestStatusPageInBrowser$$' -v ./app/

dashboard-render: ## regenerate plugins/metrics/grafana/mmmq.png: the Grafana dashboard's panels evaluated over 30 scrapes of a broker under load, in headless Chromium (CHROMIUM=path)
	MMMQ_DASHBOARD_RENDER_DIR=$(CURDIR)/plugins/metrics/grafana $(GO) test -count=1 -run '^TestDashboardPanelsRender$$' -v ./plugins/metrics/

vet:
	$(GO) vet ./...

# Redocly CLI, the OpenAPI linter of make lint (installed by npm into
# .tmp/redocly/ by .ci/redocly.sh when missing or another version).
REDOCLY_VERSION := 2.77.0

lint: ## gofmt -l, go vet, staticcheck (pinned in go.mod) and Redocly CLI $(REDOCLY_VERSION) on modules/httpapi/openapi.yaml (installed into .tmp/ by npm; needs node >= 20); zero findings expected
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	  if [ -n "$$out" ]; then echo "make lint: not gofmt-formatted (make fmt):" >&2; echo "$$out" >&2; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	@bash .ci/redocly.sh $(REDOCLY_VERSION)

# TypeScript types of the API: openapi-typescript generates them from
# modules/httpapi/openapi.yaml and tsc type-checks a usage file that calls
# the API through openapi-fetch (.ci/openapi-ts.sh installs the three,
# pinned here, into .tmp/openapi-ts/ by npm; CI runs it). The Go client is
# generated by oapi-codegen, pinned in go.mod (modules/httpapi/client).
OPENAPI_TS_VERSION := 7.13.0
TYPESCRIPT_VERSION := 5.9.3
OPENAPI_FETCH_VERSION := 0.17.0

ts-check: ## TypeScript types from openapi-typescript $(OPENAPI_TS_VERSION), type-checked (tsc $(TYPESCRIPT_VERSION) --noEmit) on modules/httpapi/client/ts/usage.ts (installed into .tmp/ by npm; needs node >= 20)
	@bash .ci/openapi-ts.sh $(OPENAPI_TS_VERSION) $(TYPESCRIPT_VERSION) $(OPENAPI_FETCH_VERSION)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
