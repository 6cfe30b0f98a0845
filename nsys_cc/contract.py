"""The contract between what runs inside vLLM and what reads its traces: every name spelled once.

The vLLM plugin (`nsys_cc.vllm.plugin`) writes these NVTX ranges, the analysis (`nsys_cc.analysis`) and the
measurement check (`nsys_cc.analysis.profile_dir.forward_share`) read them, and the launcher (`nsys_cc.launch`) sets the
environment variables that the code inside vLLM reads. Every other module imports the names from here; a test
(`tests/test_contract.py`) fails when one of them is spelled anywhere else in the package's code.

This module imports nothing: the plugin imports it in every vLLM process.

Ranges, as the analysis matches them (`nsys_cc.trace.nvtx.matches`, the one rule): a name matches a range whose
name or qualified name ("domain:name") equals it, after dropping one leading ":" from the query.
"""

# ---- NVTX ranges nsys_cc's plugin writes (push/pop, default domain; payloads in the plugin's docstring) ----------
# Each forward of the target model; payload: tokens scheduled in it. The forward range (`range_name`, the CLI's
# `--range`) when none is given; `analysis.forwards.ranges.forward_range` settles that default per trace (this, else
# vLLM's own forward scope, else vLLM's step annotations in a PyTorch-profiler trace).
FORWARD_RANGE = "model_executable()"
# Each forward of a draft model in a speculative run; its presence makes a trace speculative.
DRAFT_FORWARD_RANGE = "draft_model_executable()"
# Each engine step (scheduling done → step end); payload: tokens scheduled for the target.
STEP_RANGE = "nsys_cc:step"
# Inside each step range, opened and closed at once as the step's range opens (a zero-length range: NVTX gives a range
# one payload, the step's tokens): the step's total context (KV) length, payload = Σ over the requests it schedules of
# (tokens computed before the step + tokens scheduled in it) — the K/V its attention reads (vLLM's `seq_len`).
STEP_CONTEXT_RANGE = "nsys_cc:step_context"
# Each measured benchmark iteration (one `LLM.generate` call); payload: the batch size.
ITERATION_RANGE = "nsys_cc:iteration"
# Each warm-up iteration; payload: the batch size. Forwards that start inside one are dropped.
WARMUP_RANGE = "nsys_cc:warmup"
# Each all-reduce of vLLM's CPU build inside a forward (tensor parallel on the CPU); payload: bytes reduced.
ALL_REDUCE_RANGE = "nsys_cc:all_reduce"

# The rest of a token's work after a forward (c is the cost of a token, not of a forward). Each range is
# written on the thread that ran the forward, after it and before the next forward; the analysis ties it to the
# forward that ended last before it on that thread (`analysis.coefficient.token`). Payload: rows, one per position whose
# logits are computed (sampled): a decode forward's requests, a verify forward's (γ + 1) per request — then equal to the
# forward's own payload, which ties them —, a prefill's one per request.
# The target's logits: `compute_logits` (the LM head and vLLM's LogitsProcessor); payload: rows computed.
LOGITS_RANGE = "nsys_cc:logits"
# The target's sampling (the sampler with its logits processors, penalties, top-k/p, the draw), or the rejection
# sampler in a speculative step; payload: rows sampled.
SAMPLE_RANGE = "nsys_cc:sample"
# A draft model's or head's logits (a proposer's `compute_logits`); payload: rows computed.
DRAFT_LOGITS_RANGE = "nsys_cc:draft_logits"
# A draft's sampling: the proposer's argmax or sampler over those logits; payload: tokens drafted (rows).
DRAFT_SAMPLE_RANGE = "nsys_cc:draft_sample"
# A model-free proposer's proposing in a step (n-gram, suffix decoding): CPU work outside any forward; payload: the
# requests it proposes for (an NVTX payload is fixed when the range opens, before the proposer has proposed; the
# tokens it proposed are the next verify forward's beyond one per request).
PROPOSE_RANGE = "nsys_cc:propose"

# ---- vLLM's own NVTX scopes (`VLLM_NVTX_SCOPES_FOR_PROFILING=1`), read when a trace has no plugin ranges ----------
VLLM_SCOPES_ENV = "VLLM_NVTX_SCOPES_FOR_PROFILING"
SCOPES_FORWARD = "gpu_model_runner: forward"
# One range around all of a step's draft forwards (the proposer).
SCOPES_DRAFT = "gpu_model_runner: draft"
# After the forward: the logits (`compute_logits` over the sampled positions), then the sampling.
SCOPES_POSTPROCESS = "gpu_model_runner: postprocess"
SCOPES_SAMPLE = "gpu_model_runner: sample"
# LLMEngine.step's scopes: get_output, then process_outputs, abort_requests, record_stats.
SCOPES_STEP_PREFIX = "llm_engine step: "
SCOPES_STEP = SCOPES_STEP_PREFIX + "get_output"
# vLLM's scheduler scopes slot allocation for running requests only: a step without it schedules a new request.
SCOPES_ALLOCATE = "schedule: allocate_slots"

# ---- vLLM's own markers in a PyTorch-profiler (Kineto) trace, read without the plugin (`analysis.forwards.vllm_steps`)
# --------
# vLLM's worker annotates each engine step (`gpu_worker.py` annotate_profile, a `user_annotation`):
# `execute_context_<n>(<tokens>)_generation_<m>(<tokens>)`, a token count possibly followed by `_<number>`s
# (`(888_788544)`), or the detailed form `execute_<total>_context_<n>(sq<tokens>sk…sqsq…sqsk…)_generation_<m>(sq…)`.
VLLM_STEP_PREFIX = "execute_"
VLLM_STEP_RE = (r"^execute_context_(?P<ctx_req>\d+)\((?P<ctx_tok>\d+)(?:_\d+)*\)"
                r"_generation_(?P<gen_req>\d+)\((?P<gen_tok>\d+)(?:_\d+)*\)$")
# In the detailed form (vLLM's `detailed_trace_annotation`, also written by SGLang) each part names its requests, their
# query tokens (sq), their KV (context) length summed (sk), and the sums of q² and q·k (attention's cost terms).
VLLM_DETAILED_STEP_RE = (r"^execute_(?P<total>\d+)_context_(?P<ctx_req>\d+)\(sq(?P<ctx_tok>\d+)sk(?P<ctx_kv>\d+)"
                         r"sqsq\d+sqsk\d+\)_generation_(?P<gen_req>\d+)\(sq(?P<gen_tok>\d+)sk(?P<gen_kv>\d+)"
                         r"sqsq\d+sqsk\d+\)$")
# Python frames (`python_function`, traces recorded with_stack) read beside the steps, by the prefixes their names
# start with, then by these patterns: the runner's sampling (V1 `gpu_model_runner.py`, V2 `gpu/model_runner.py`), the
# proposer of a speculative run (draft_model, EAGLE, MTP: `…/spec_decode/….py(…): propose`; the module moves between
# versions: `spec_decode/eagle.py`, `spec_decode/llm_base_proposer.py`, V2's `worker/gpu/spec_decode/…`), the engine's
# step. Prefixes and patterns are matched against a frame's MODULE path — its file from the package's root, whatever
# the install prefix (`nsys_cc.trace.frame_paths`: site-packages trimmed or not, a source checkout, an editable
# install, a container's dist-packages, conda, a venv, SGLang's /sgl-workspace/sglang/python/…): the one rule.
# The engine packages whose directory is a package root in an absolute frame path (`frame_paths.module_path`).
FRAME_PACKAGES = ("vllm", "sglang")
VLLM_FRAME_PREFIXES = ("vllm/v1/worker/", "vllm/v1/spec_decode/", "vllm/v1/engine/core.py(")
VLLM_SAMPLE_FRAME_RE = r"^vllm/v1/worker/(?:gpu_model_runner|gpu/model_runner)\.py\(\d+\): sample_tokens$"
VLLM_PROPOSE_FRAME_RE = r"^vllm/v1/(?:worker/gpu/)?spec_decode/\S*\.py\(\d+\): propose$"
VLLM_ENGINE_STEP_FRAME_RE = r"^vllm/v1/engine/core\.py\(\d+\): step$"
# ---- SGLang's own markers in a PyTorch-profiler trace (`/start_profile`, SGLANG_TORCH_PROFILER_DIR), read without a
# plugin (`analysis.forwards.sglang_steps`) ---------------------------------------------------------------------------
# Its model runner annotates each forward (`ModelRunner.forward`, `profile_utils.build_step_span_name`):
# `step[<FORWARD MODE> bs=<requests>]`, a prefill `step[EXTEND bs=<requests> toks=<tokens>]`, with roofline fields
# `c_sq= c_sk= c_sqsq= c_sqsk=` (context part) and `g_sq= g_sk= g_sqsq= g_sqsk=` (generation part), a mixed step's
# `c= g=` (requests of each part) in the detailed form; a draft worker's forwards prefixed `draft ` in newer versions.
# Newer versions also annotate each scheduler step with vLLM's detailed `execute_…` form (around the forward).
SGLANG_STEP_PREFIXES = ("step[", "draft step[")
SGLANG_STEP_RE = r"^(?P<draft>draft )?step\[(?P<mode>[A-Z][A-Z0-9_]*)(?P<fields>(?: [a-z_]+=\d+(?:/\d+)?)*)\]$"
# Its Python frames (module paths, `frame_paths`): the model runner's sampling after a forward; the speculative worker
# (EAGLE, EAGLE-3, MTP/NEXTN, STANDALONE: `sglang/srt/speculative/eagle_worker.py`, V2 `eagle_worker_v2.py`,
# `multi_layer_eagle_worker.py`, `standalone_worker.py`): the proposing of a decode step (`draft`, then after the verify
# the draft's extend over the accepted tokens `forward_draft_extend_after_decode`, V2 `_draft_extend_for_decode`), the
# first proposing after a prefill (`forward_draft_extend`, V2 `_draft_extend_for_prefill`), and the rejection sampling
# after the verify forward (`eagle_info.py` `EagleVerifyInput.verify`, V2 `sample`); the scheduler's step.
SGLANG_FRAME_PREFIXES = ("sglang/srt/model_executor/model_runner.py(", "sglang/srt/speculative/",
                         "sglang/srt/managers/scheduler.py(")
SGLANG_SAMPLE_FRAME_RE = (r"^sglang/srt/(?:model_executor/model_runner\.py\(\d+\): sample"
                          r"|speculative/eagle_info(?:_v2)?\.py\(\d+\): (?:verify|sample))$")
SGLANG_PROPOSE_FRAME_RE = (r"^sglang/srt/speculative/\w+\.py\(\d+\): (?:draft|forward_draft_extend_after_decode"
                           r"|_draft_extend_for_decode|forward_draft_extend|_draft_extend_for_prefill)$")
SGLANG_ENGINE_STEP_FRAME_RE = r"^sglang/srt/managers/scheduler\.py\(\d+\): _?run_batch(?:_inner)?$"

# Both engines annotate a CUDA-graph capture `capture_<batch>_<mode>` (vLLM `capture_32_FULL`, SGLang
# `capture_32_DECODE`): a capture records the kernels a replay runs, none to measure — no step.
CAPTURE_RE = r"^capture_(?P<batch>\d+)_(?P<mode>[A-Za-z][A-Za-z_]*)$"

# The names under which the analysis reads them (rows it makes from the trace; no trace spells them): the steps that
# are forwards (the forward range of a torch trace), their sampling (`sample_tokens` less the proposing inside it),
# the proposing (one range per step around all its draft forwards, as vLLM's draft scope), the engine's steps.
VLLM_STEP_RANGE = "execute_context_…_generation_…"
VLLM_SAMPLE_RANGE = "…/gpu_model_runner.py(…): sample_tokens"
VLLM_PROPOSE_RANGE = "…/spec_decode/…: propose"
VLLM_ENGINE_STEP_RANGE = "…/engine/core.py(…): step"
# How a note names those rows in a trace SGLang wrote (`analysis.forwards.engine_marks.label`; the rows keep the names
# above, whichever engine wrote the trace): its forward annotation, its sampling, its proposing, its scheduler's step.
SGLANG_STEP_LABEL = "step[<MODE> bs=…]"
SGLANG_SAMPLE_LABEL = "…/model_runner.py(…): sample"
SGLANG_PROPOSE_LABEL = "…/speculative/…: draft"
SGLANG_ENGINE_STEP_LABEL = "…/scheduler.py(…): run_batch"
ENGINE_RANGE_LABELS: dict[str, dict[str, str]] = {"SGLang": {
    VLLM_STEP_RANGE: SGLANG_STEP_LABEL, VLLM_SAMPLE_RANGE: SGLANG_SAMPLE_LABEL,
    VLLM_PROPOSE_RANGE: SGLANG_PROPOSE_LABEL, VLLM_ENGINE_STEP_RANGE: SGLANG_ENGINE_STEP_LABEL}}

# The draft-forward range of a speculative run: the plugin's, else vLLM's own scope, else vLLM's proposer frame.
DRAFT_RANGES = (DRAFT_FORWARD_RANGE, SCOPES_DRAFT, VLLM_PROPOSE_RANGE)
# Draft ranges that hold all of a step's draft forwards at once (the proposer), not one forward each.
DRAFT_STEP_RANGES = (SCOPES_DRAFT, VLLM_PROPOSE_RANGE)
# The target-forward range of each kind of trace: the plugin's, else vLLM's own scope, else vLLM's step annotations.
FORWARD_RANGES = (FORWARD_RANGE, SCOPES_FORWARD, VLLM_STEP_RANGE)

# ---- Live timing records (written by `nsys_cc.live.timing` inside vLLM, read by `nsys_cc.analysis.tune.live`) --------
# Step kinds: a prompt (chunk) in the step; every request decoding one token; every request verifying drafts.
LIVE_MIXED, LIVE_DECODE, LIVE_VERIFY = 0, 1, 2

# ---- Environment variables the launcher (or the user) sets and the code inside vLLM reads ----------------------
ENV_PLUGIN = "NSYS_CC_PLUGIN"  # "1": the plugin writes its NVTX ranges
ENV_WARMUP_ITERS = "NSYS_CC_WARMUP_ITERS"  # the first N `LLM.generate` calls are warm-up
ENV_METRICS_OUT = "NSYS_CC_METRICS_OUT"  # where the benchmark driver dumps vLLM's metrics
ENV_VLLM_FIXES = "NSYS_CC_VLLM_FIXES"  # "0": vLLM's CPU build runs without nsys_cc's correction
ENV_LIVE = "NSYS_CC_LIVE"  # "1": live timing and metrics
ENV_LIVE_WINDOW = "NSYS_CC_LIVE_WINDOW"  # verify steps in the live estimate's window
ENV_TORCH_RANGES = "NSYS_CC_TORCH_RANGES"  # "1": the plugin's ranges are torch.profiler ranges instead of NVTX
ENV_TORCH_TRACE = "NSYS_CC_TORCH_TRACE"  # the benchmark driver runs the torch profiler and writes its trace here
ENV_TORCH_SETTINGS = "NSYS_CC_TORCH_SETTINGS"  # the driver's torch-profiler settings (`TORCH_SETTINGS`, by commas)

# ---- The torch route (`profile --profiler torch`): the plugin's ranges as torch.profiler ranges ---------------------
# With `ENV_TORCH_RANGES=1` the plugin opens each of its ranges as a `torch.profiler.record_function` range (a Kineto
# `user_annotation`) under the same name. Kineto keeps no argument of such a range, so its payload travels in its
# name: `PAYLOAD_NAME.format(name=…, payload=…)`, e.g. "model_executable()#128". The Kineto reader splits such a name
# back into the range's name and payload by `PAYLOAD_NAME_RE`, for the plugin's own ranges only (`PAYLOAD_RANGES`, and
# the engine ranges `ENGINE_RANGE_PREFIX` + label): another program's "layer#3" keeps its name.
PAYLOAD_NAME = "{name}#{payload}"
PAYLOAD_NAME_RE = r"^(?P<name>.+)#(?P<payload>-?[0-9]{1,18})$"
PAYLOAD_RANGES = (FORWARD_RANGE, DRAFT_FORWARD_RANGE, STEP_RANGE, STEP_CONTEXT_RANGE, ITERATION_RANGE, WARMUP_RANGE,
                  ALL_REDUCE_RANGE, LOGITS_RANGE, SAMPLE_RANGE, DRAFT_LOGITS_RANGE, DRAFT_SAMPLE_RANGE, PROPOSE_RANGE)
# The driver's profiler settings (`ENV_TORCH_SETTINGS`): nothing by default — the plugin's ranges alone (Kineto's
# user_annotation scope) plus, with CUDA, the launches and GPU work — the least the profiler costs for what the analysis
# reads (benchmarks/torch_vs_nsys.py); "ops" also records every aten operator (cpu_op events), "stack" the Python
# frames (with_stack: python_function events), "shapes" the operators' input shapes (record_shapes).
TORCH_SETTINGS = ("ops", "stack", "shapes")
# The torch profiler's trace, as the driver writes it for the torch route (`launch.recorders.torch`): a Kineto trace per
# run or model, `<label>` + TORCH_TRACE_SUFFIX, `run-<k>/trace` + it.
TORCH_TRACE_SUFFIX = ".pt.trace.json.gz"

# The module vLLM's latency benchmark runs as under nsys (`python -m …`).
BENCH_MODULE = "nsys_cc.vllm.bench"
# The module an interleaved run of `profile` runs as under nsys: several engines in one process (`python -m …`).
INTERLEAVE_MODULE = "nsys_cc.vllm.interleave"
# Around every generate call of the engine labelled L in an interleaved run: `ENGINE_RANGE_PREFIX + L` (payload: the
# engine's index). A model's part of such a trace is the ranges that start inside its engine's ranges.
ENGINE_RANGE_PREFIX = "nsys_cc:engine "
