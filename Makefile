# warren: run `make help` for the targets.
STATICCHECK_VERSION := v0.8.2
GO ?= go
SERVICES := scripts/services.sh
# A service named by the environment is the user's own: not started here.
DEMO_SERVICES := $(if $(WARREN_AMQP_URL),,rabbitmq)
TEST_SERVICES := $(if $(TEST_AMQP_URL),,rabbitmq) $(if $(TEST_DATABASE_URL),,postgres) chromium promtool
# Every Go package: ./... stops at internal/tests, a module of its own (in
# go.work) for the tests whose tools warren does not require.
PACKAGES := ./... ./internal/tests/...

.PHONY: help demo build test test-go test-python lint fmt chaos chaos-cluster
.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  %-14s %s\n", $$1, $$2}'

demo: ## run a word-count job end to end (starts or installs RabbitMQ when it may; embedded SQLite store)
	@$(if $(DEMO_SERVICES),bash $(SERVICES) ensure $(DEMO_SERVICES))
	@GO=$(GO) bash scripts/build.sh bin/warren
	./bin/warren demo

build: ## build the warren binary into ./bin
	$(GO) build -o bin/ ./cmd/...

test: ## run the whole test suite (starts or installs RabbitMQ, PostgreSQL and the test tools when it may)
	@bash $(SERVICES) ensure $(TEST_SERVICES)
	$(GO) test -race -count=1 -timeout 30m $(PACKAGES)
	@if [ -f python/test.sh ]; then echo "bash python/test.sh"; bash python/test.sh; fi

test-go: ## only the Go tests (the services must answer already)
	$(GO) test -race -count=1 -timeout 30m $(PACKAGES)

test-python: ## only the Python worker's tests (python/test.sh)
	bash python/test.sh

lint: ## gofmt, go vet and staticcheck (pinned)
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PACKAGES)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PACKAGES)

fmt: ## format the code
	gofmt -w .

chaos: ## run the chaos suite (real server and workers; faults on RabbitMQ and PostgreSQL)
	$(GO) run ./chaos

chaos-cluster: ## run the cluster chaos target (three RabbitMQ nodes of its own on 5681-5683; nodes killed mid-job)
	$(GO) run ./chaos -cluster
