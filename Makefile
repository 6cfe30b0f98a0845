# nsys_cc — every target installs what it needs itself (CI runs on a clean checkout).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
NSYS_PREFIX ?= .nsys
STAMPS := .stamps
# Tests run in parallel workers; vLLM runs are heavy, so two workers on the 2-core CI machine.
PYTEST_WORKERS ?= 2

.PHONY: setup nsys demo demo-spec lint check test docs fixtures bench bench-cli fuzz notebook clean

setup: $(STAMPS)/venv nsys

$(STAMPS)/venv: pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# setuptools' editable backend always emits an informational "Editable installation." warning (every mode:
	@# lenient warns about folders named like the package, strict about its link tree, compat that compat is
	@# deprecated); pip shows it as a BuildBackendWarning. It is about no choice of ours, so exactly it is filtered.
	PYTHONWARNINGS='ignore:Editable installation.' $(PY) -m pip install -q -e '.[vllm,dask,dev,docs]'
	@# PyPI's torchvision does not import next to torch 2.13.0+cpu and breaks transformers (docs/REAL_STACK.md).
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	@mkdir -p $(STAMPS) && touch $@

# Real Nsight Systems 2022.4 into $(NSYS_PREFIX), unless an nsys is already on PATH or in $$NSYS; linked into the
# environment's bin directory, where nsys_cc looks for it (next to nsys-cc; the library knows no checkout layout).
nsys: $(STAMPS)/venv
	@if [ -n "$$NSYS" ] && [ -x "$$NSYS" ]; then echo "nsys: $$NSYS"; \
	elif command -v nsys >/dev/null 2>&1; then echo "nsys: $$(command -v nsys)"; \
	else scripts/install_nsys.sh $(NSYS_PREFIX) && \
	  ln -sfn "$(abspath $(NSYS_PREFIX))/usr/lib/nsight-systems/bin/nsys" $(VENV)/bin/nsys; fi

# The main job on an embedded default that needs no GPU: profile a tiny target and two tiny drafts
# with vLLM's CPU build under the real nsys, then print the cost-coefficient table.
demo: setup
	$(VENV)/bin/nsys-cc profile --target tiny-llama-target --draft tiny-llama-draft-s --draft tiny-llama-draft-xs -o out/demo

# Speculative decoding measured where it happens: the known-α pair (real weights, built on first use into
# $$NSYS_CC_MODELS) profiled plain and speculating at γ = 1, 2, 3 (128 prompt + 32 generated tokens).
demo-spec: setup
	$(VENV)/bin/nsys-cc profile --target pair-target-a50 --draft pair-draft --speculate 1,2,3 \
		--num-iters-warmup 2 --num-iters 5 -o out/demo-spec

# Lint (ruff) and types (mypy), configured in pyproject.toml.
lint: $(STAMPS)/venv
	$(PY) -m ruff check .
	$(PY) -m mypy

# The edit-test loop (about half a minute): lint, types, and every test that needs neither nsys nor vLLM and is not one
# of the few long end-to-end `slow` tests (the markers are set by tests/conftest.py: a test that asks for the real nsys
# is an `nsys` test). `make test` runs them all.
check: lint
	$(PY) -m pytest -n $(PYTEST_WORKERS) -q -m "not vllm and not nsys and not slow"

# The full suite, as CI runs it: nsys is installed, so a test that needs it fails rather than skips without it; twice
# the fuzz cases of `make check`; and the documentation site, built strictly (a broken link fails the suite).
test: setup lint docs
	NSYS_CC_REQUIRE_NSYS=1 NSYS_CC_FUZZ_CASES=60 $(PY) -m pytest -n $(PYTEST_WORKERS) -q

# The documentation site (mkdocs.yml, pages in docs/) into site/, strict: a broken link or anchor, a page missing from
# the navigation, or a CLI/library reference that does not resolve fails the build. NO_MKDOCS_2_WARNING quiets the
# Material theme's banner about its successor, which is not about this site.
docs: $(STAMPS)/venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# Regenerate fixtures/ from real programs under the real nsys.
fixtures: setup
	scripts/make_fixtures.sh

bench: setup bench-cli
	$(PY) benchmarks/run.py

# The CLI's start-up against the bare imports it stands on (`nsys-cc --help` vs `import click`, `analyze` of two small
# fixture traces vs `import pandas`), side by side in one run; docs/PERFORMANCE.md keeps the latest table.
bench-cli: $(STAMPS)/venv
	$(PY) benchmarks/cli_startup.py

fuzz: setup
	NSYS_CC_FUZZ_CASES=2000 $(PY) -m pytest -n $(PYTEST_WORKERS) -q tests/test_fuzz.py

clean:
	rm -rf $(STAMPS) out build site *.egg-info
