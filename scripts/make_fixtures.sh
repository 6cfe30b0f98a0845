#!/usr/bin/env bash
# `make fixtures`: regenerate every file under fixtures/ from real programs run under the real nsys (and, for
# fixtures/torch/, under vLLM's own torch profiler).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/make_nvtx_fixture.sh
if [ -x scripts/make_vllm_fixtures.sh ]; then scripts/make_vllm_fixtures.sh; fi
scripts/make_tp_fixture.sh
if [ -x scripts/make_spec_fixtures.sh ]; then scripts/make_spec_fixtures.sh; fi
scripts/make_interleaved_fixtures.sh
if [ -x scripts/make_tune_fixtures.sh ]; then scripts/make_tune_fixtures.sh; fi
scripts/make_torch_fixtures.sh
scripts/make_context_fixtures.sh
