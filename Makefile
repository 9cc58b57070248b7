# warren: run `make help` for the targets.
STATICCHECK_VERSION := v0.8.2
GO ?= go

.PHONY: help build test lint fmt chaos chaos-cluster
.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  %-14s %s\n", $$1, $$2}'

build: ## build the warren binary into ./bin
	$(GO) build -o bin/ ./cmd/...

test: ## run the whole test suite (needs RabbitMQ and PostgreSQL on localhost)
	$(GO) test -race -count=1 -timeout 30m ./...

lint: ## gofmt, go vet and staticcheck (pinned)
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

fmt: ## format the code
	gofmt -w .

chaos: ## run the chaos suite (real server and workers; faults on RabbitMQ and PostgreSQL)
	$(GO) run ./chaos

chaos-cluster: ## run the cluster chaos target (three RabbitMQ nodes of its own on 5681-5683; nodes killed mid-job)
	$(GO) run ./chaos -cluster
