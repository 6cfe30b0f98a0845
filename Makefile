# nsys_cc — every target installs what it needs itself (CI runs on a clean checkout).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
NSYS_PREFIX ?= .nsys
STAMPS := .stamps
# Tests run in parallel workers; vLLM runs are heavy, so two workers on the 2-core CI machine.
PYTEST_WORKERS ?= 2

.PHONY: setup nsys demo demo-spec lint check test docs fixtures bench bench-cli bench-nvtx bench-kineto bench-torch bench-loops print-demo-profile fuzz notebook clean

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
# with vLLM's CPU build under the real nsys, then print the cost-coefficient table. It stops when it has what it needs:
# runs (3 at least, 8 at most) until every draft's decode c is known to ±10 %, each run one engine per model (a run's
# time is mostly importing vLLM and building engines, not its iterations) with 2 warm-up and 24 measured iterations
# of 8 tokens: many short iterations alternate the models finely, so a slow spell of the machine hits each alike; the
# engines' one OpenMP thread bound to the machine's last CPU (DEMO_BIND; unbound on a 1-CPU machine), the other CPUs
# left to nsys and the rest: on the quiet 2-core machine two bound demos met ±10 % in 6 and 7 runs (145 s each), two
# unbound ones missed it after 6 and 8 (their runs' c spread 12–14 %, the bound ones' 6–11 %). One profile binds one CPU;
# `profile` itself stays unbound (parallel profiles, a sweep's workers, would all share the one CPU).
# Goal ≤ 3 min on a 2-core machine, measured by benchmarks/demo_profile.py (docs/PERFORMANCE.md).
DEMO_BIND = $(shell python3 -c "import os; c = sorted(os.sched_getaffinity(0)); print(c[-1] if len(c) > 1 else 'nobind')")
DEMO_PROFILE = env VLLM_CPU_OMP_THREADS_BIND=$(DEMO_BIND) $(VENV)/bin/nsys-cc profile --target tiny-llama-target \
	--draft tiny-llama-draft-s --draft tiny-llama-draft-xs --precision 0.1 --repeat 3 --max-repeat 8 --replicas 1 \
	--num-iters-warmup 2 --num-iters 24 --output-len 8 -o out/demo
demo: setup
	$(DEMO_PROFILE)

# The demo's profile command, for benchmarks/demo_profile.py.
print-demo-profile:
	@echo '$(DEMO_PROFILE)'

# Speculative decoding measured where it happens: the known-α pair (real weights, built on first use into
# $$NSYS_CC_MODELS) profiled plain and speculating at γ = 1, 2, 3 (128 prompt + 32 generated tokens).
demo-spec: setup
	$(VENV)/bin/nsys-cc profile --target pair-target-a50 --draft pair-draft --speculate 1,2,3 \
		--num-iters-warmup 2 --num-iters 5 -o out/demo-spec

# Lint (ruff) and types (mypy), configured in pyproject.toml.
lint: $(STAMPS)/venv
	$(PY) -m ruff check .
	$(PY) -m mypy

# The edit-test loop (goal ≤ 60 s on 2 cores, benchmarks/check_loop.py; the time measured is in docs/PERFORMANCE.md):
# lint, types, and every test that needs neither nsys nor vLLM and is not one of the long end-to-end `slow` tests
# (the markers are set by tests/conftest.py: a test that asks for the real nsys is an `nsys` test). `make test` runs
# them all. NSYS_CC_TEST_BUDGET: after the run, the tests that took longer than that many seconds are named (a
# warning with where they belong, not a failure).
# `--dist loadscope`: a module's tests go to one worker, so a module-scoped fixture (an analysis of the tune fixture
# grid, the known-α pair's models) is built once, not once per worker (tests/analysis/tune/test_model.py's took ~18 s on each of the
# two workers before). PYTHONDONTWRITEBYTECODE is emptied for pytest only: with it set (some shells and containers
# do), every worker re-compiles and re-rewrites the asserts of every test module at each run, ~4 s of CPU a worker.
check: lint
	PYTHONDONTWRITEBYTECODE= NSYS_CC_TEST_BUDGET=1 $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadscope -q \
		-m "not vllm and not nsys and not slow"

# The full suite, as CI runs it: nsys is installed, so a test that needs it fails rather than skips without it; 60
# fuzz cases (`make check` runs 15); and the documentation site, built strictly (a broken link fails the suite).
# Its junit XML (out/test-junit.xml) gives the suite's time and slowest tests to benchmarks/suite_time.py.
test: setup lint docs
	@mkdir -p out
	NSYS_CC_REQUIRE_NSYS=1 NSYS_CC_FUZZ_CASES=60 $(PY) -m pytest -n $(PYTEST_WORKERS) -q --junitxml=out/test-junit.xml

# The documentation site (mkdocs.yml, pages in docs/) into site/, strict: a broken link or anchor, a page missing from
# the navigation, or a CLI/library reference that does not resolve fails the build. NO_MKDOCS_2_WARNING quiets the
# Material theme's banner about its successor, which is not about this site.
docs: $(STAMPS)/venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# Regenerate fixtures/ from real programs under the real nsys.
fixtures: setup
	scripts/make_fixtures.sh

bench: setup bench-cli bench-nvtx bench-kineto bench-torch bench-loops
	$(PY) benchmarks/run.py

# The loops a developer waits on, each beside its goal: `make check` (≤ 60 s) and the demo's profile (≤ 3 min).
bench-loops: setup
	$(PY) benchmarks/check_loop.py
	$(PY) benchmarks/demo_profile.py

# The CLI's start-up against the bare imports it stands on (`nsys-cc --help` vs `import click`, `analyze` of two small
# fixture traces vs `import pandas`), side by side in one run; docs/PERFORMANCE.md keeps the latest table.
bench-cli: $(STAMPS)/venv
	$(PY) benchmarks/cli_startup.py

# NVTX-heavy exports (millions of ranges, no CUDA): `analyze` and `ranges` of the C program's 6 M-range export
# against a stdlib fetchall of it (goal ≤ 1.0×), nsys stats' nvtxsum checked; the export is built once under
# benchmarks/data/ (the first run profiles it: ~2 min on 2 cores). The 15 M and 16 M-range sizes:
# benchmarks/nvtx_run.py without flags.
bench-nvtx: setup
	$(PY) benchmarks/nvtx_run.py --program 2M --generated "" --repeat 3

# PyTorch-profiler traces: the Kineto reader on a generated 1 GB trace (.json and .json.gz) against a plain json.load
# of it (goal ≤ 0.5× its time, ≤ 0.3× its peak memory), the parsers it could stand on (orjson, msgspec, ijson's C
# backend; pysimdjson where installed) and HTA's parser, each in a fresh process, once; the trace is generated once
# under benchmarks/data/ (~20 min in all on 2 cores, ~12 GB of memory at the peak: HTA's).
bench-kineto: setup
	$(PY) benchmarks/kineto_read.py --mb 1000 --repeat 1

# The torch route against the nsys route on the tiny pair (vLLM's CPU build): decode c and its interval per route, each
# model's overhead under the torch profiler (default settings and ops,stack); ~5 min on 2 cores.
bench-torch: setup
	$(PY) benchmarks/torch_vs_nsys.py --repeat 3

fuzz: setup
	NSYS_CC_FUZZ_CASES=2000 $(PY) -m pytest -n $(PYTEST_WORKERS) -q tests/properties/test_fuzz.py

clean:
	rm -rf $(STAMPS) out build site *.egg-info
