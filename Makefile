# Developer and CI entry points. `make test` is what CI runs (.ci/run).

GO       ?= go
GOFMT    ?= gofmt
FUZZTIME ?= 30s

# bash with pipefail, so that a failing command in a pipe fails the target.
SHELL       := /bin/bash
.SHELLFLAGS := -euo pipefail -c

# The seed of the chaos round in `make test` (tools/chaos), drawn once per
# make and printed, so that a round that fails can be replayed with
# `make chaos SEED=...`.
CHAOS_SEED ?= $(shell date +%s%N)
CHAOS_SEED := $(CHAOS_SEED)
export CHAOS_SEED

# staticcheck, pinned, installed into bin/ by `make test` on first use (the
# Go module proxy serves it; nothing else is needed).
STATICCHECK_VERSION := v0.8.2
STATICCHECK         := bin/staticcheck-$(STATICCHECK_VERSION)

$(STATICCHECK):
	mkdir -p bin
	GOBIN="$$(pwd)/bin/.staticcheck" $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv bin/.staticcheck/staticcheck $@
	rmdir bin/.staticcheck

# promtool, Prometheus's own checker, runs on a node's /metrics in `make
# test` (engine's TestPromtool, which PROMTOOL makes required). One on PATH
# is used; otherwise bin/promtool is taken out of Debian's prometheus
# package, downloaded and unpacked, not installed: installing would bring a
# Prometheus server and its service.
PROMTOOL := $(or $(shell command -v promtool 2>/dev/null),bin/promtool)

bin/promtool:
	rm -rf bin/.promtool && mkdir -p bin/.promtool
	cd bin/.promtool && { apt-get download prometheus || { apt-get update -q && apt-get download prometheus; }; }
	dpkg-deb -x bin/.promtool/prometheus_*.deb bin/.promtool/root
	mv bin/.promtool/root/usr/bin/promtool $@
	rm -rf bin/.promtool

.PHONY: build run test bench fuzz clean

build:
	$(GO) build -o bin/ ./cmd/...

# One single-node cluster on the default ports, data in ./baton-data.
run: build
	./bin/batond

test: $(STATICCHECK) $(PROMTOOL)
	$(GO) vet ./...
	$(STATICCHECK) ./...
	@unformatted="$$($(GOFMT) -l .)"; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt needed on:"; echo "$$unformatted"; exit 1; \
	fi
	# -count=1: the end-to-end tests run a batond they build themselves, so
	# Go's test cache cannot see a change to the server and would replay a pass.
	@echo "chaos seed: $(CHAOS_SEED) (replay: make chaos SEED=$(CHAOS_SEED))"
	PROMTOOL="$(abspath $(PROMTOOL))" $(GO) test -race -count=1 -timeout 9m ./...
	# tools/compare is a module of its own (etcd and Redis clients stay out
	# of baton's), so ./... does not reach it.
	cd tools/compare && $(GO) vet ./... && $(GO) test ./...
	$(MAKE) --no-print-directory python-test

# The Python client (python/): mypy --strict (the client and its tests), ruff and its tests (which build
# batond and run it), in python/.venv, made on first use with pinned tools
# from PyPI. pytest's exit status 5 (no tests collected) fails too.
PYTHON      ?= python3
PY_VENV     := python/.venv
PY_TOOLS    := pytest==8.3.4 pytest-asyncio==1.3.0 mypy==1.13.0 ruff==0.8.4
# The stamp names the tools, so that a venv made with another list is brought
# up to date (pip installs what is missing) instead of being trusted.
PY_STAMP    := $(PY_VENV)/.installed-$(shell echo '$(PY_TOOLS)' | cksum | cut -d' ' -f1)

$(PY_STAMP): python/pyproject.toml
	test -x $(PY_VENV)/bin/python || $(PYTHON) -m venv $(PY_VENV)
	$(PY_VENV)/bin/python -m pip install -q $(PY_TOOLS) -e ./python
	rm -f $(PY_VENV)/.installed*
	touch $@

.PHONY: python-test
python-test: $(PY_STAMP)
	cd python && .venv/bin/mypy --strict src tests
	cd python && .venv/bin/ruff check .
	cd python && GO="$(GO)" .venv/bin/pytest -q

# cmd/ and tools/ hold only end-to-end tests, whose TestMain would build
# batond for nothing.
bench:
	$(GO) test -run='^$$' -bench . -benchmem $$($(GO) list ./... | grep -v -e /cmd/ -e /tools/)

# Every fuzz target of the module, each for FUZZTIME. go test -list prints a
# package's matching names, then its "ok <package>" line.
fuzz:
	@targets="$$($(GO) test -list '^Fuzz' ./... | awk '/^Fuzz/ { names = names " " $$1 } \
		/^ok/ { k = split(names, a, " "); for (i = 1; i <= k; i++) print $$2 ":" a[i]; names = "" }')"; \
	if [ -z "$$targets" ]; then echo "no fuzz targets found"; exit 1; fi; \
	for target in $$targets; do \
		pkg="$${target%%:*}"; name="$${target##*:}"; \
		echo "== $$name ($$pkg) for $(FUZZTIME)"; \
		$(GO) test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) "$$pkg"; \
	done

clean:
	rm -rf bin/
	$(GO) clean -testcache

# baton side by side with a 3-member etcd and Redis on this machine, in one
# run (tools/compare/README.md). Installs etcd-server and redis-server from
# Debian packages when missing. DURATION and WARMUP (whole seconds) per
# measurement; about 12 minutes with the defaults. ROUNDS, SYSTEMS and ALONE:
# see the README there.
.PHONY: compare
compare:
	tools/compare/run.sh

# One chaos round (tools/chaos, docs/testing.md): a cluster under faults and
# a checked workload. SEED replays a round (default: a new one), DURATION
# is its workload time, e.g. DURATION=30m; CHAOS_TIMEOUT must exceed it by
# a few minutes (start-up, the end of the run and the checks). -v shows the
# schedule and the summary; with CHAOS_OUT=DIR the summary and any
# visualization are kept in DIR/TestChaos-<seed>.
SEED          ?= $(CHAOS_SEED)
DURATION      ?= 60s
CHAOS_TIMEOUT ?= 2h
.PHONY: chaos
chaos:
	@echo "chaos seed: $(SEED), duration $(DURATION)"
	CHAOS_SEED=$(SEED) CHAOS_DURATION=$(DURATION) $(GO) test -race -count=1 -v -timeout $(CHAOS_TIMEOUT) -run '^TestChaos$$' ./tools/chaos
