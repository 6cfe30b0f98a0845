"""The program one interleaved run of `nsys-cc profile` runs under nsys (`python -m nsys_cc.vllm.interleave`): several
vLLM engines in ONE process, their benchmark iterations alternating, so that the machine's drift and the process's own
state hit every model alike.

Usage: `python -m nsys_cc.vllm.interleave --output-json RUN.json --engine LABEL [vllm bench latency options] …`,
one `--engine` group per engine, each with the options `nsys_cc.vllm.bench` takes (`vllm bench latency`'s,
`--output-json` excepted). Every engine is an in-process `LLM` (the launcher sets `VLLM_ENABLE_V1_MULTIPROCESSING=0`
on the CPU); vLLM 0.32's CPU build holds several in one process (verified, docs/REPEATABILITY.md). A label given
several times is several instances of one model (its weights at other addresses: on the CPU two instances of one
model in one process differ in speed by up to 10 %, docs/REPEATABILITY.md); they share the model's ranges.

Order: each engine is built in turn; then `--num-iters-warmup` + `--num-iters` rounds, each one `LLM.generate` of
every engine, the first engine of round i being engine i mod K (target, draft, then draft, target, …: ABBA order,
so neither model always runs just after the other); with `--share-batch-sizes`, a seeded permutation per round
(`round_order`: a tune design's ten or twenty labels, rotated, would each follow the same label every round). The
plugin marks the first `NSYS_CC_WARMUP_ITERS` generate calls of the process as warm-up (the launcher sets it to
warm-up rounds × engines).

What the trace holds besides the plugin's ranges: around every generate call of an engine labelled `LABEL`, an NVTX
range `nsys_cc:engine LABEL` (payload: the engine's index, 0-based in the order given), so the analysis keeps each
model's forwards, steps and markers apart (`analysis.forwards.engines`). What the driver writes: `--output-json` (format
"nsys_cc.interleaved", `formats.interleaved_json`: per engine its label, index, latencies of the measured iterations
in seconds, warm-up latencies, and the error when it could not be built) and, per label,
`<dir of --output-json>/<LABEL>.bench.json` in the latency benchmark's format (`formats.bench_json`: avg_latency,
latencies, percentiles; the latencies of every instance of that label in the order they ran, as its iteration ranges
are), so the measurement check reads it as it reads a single model's.
With `NSYS_CC_METRICS_OUT=DIR`, each speculative label's spec-decode counters are dumped to `DIR/<LABEL>.metrics.json`
(`analysis.profile_dir.acceptance.dump_metrics`, vLLM's counter names), summed over its engines and over the whole
benchmark (warm-up included, as `nsys_cc.launch.bench` dumps them). They are counted from each engine's own step
statistics (`SchedulerStats.spec_decoding_stats`, as its stat loggers receive them): `LLM.get_metrics()` reads vLLM's
Prometheus registry, which is the process's, and in a process with several engines it holds the last engine's counters
only (verified with two speculative engines, docs/REPEATABILITY.md).

With `--share-batch-sizes` (before the first `--engine`; `nsys-cc tune`'s design runs), groups whose options differ
only in `--batch-size` and `--input-len` (a design's cell: batch size and prompt length) are one engine: `LLM` is
built once, from the first such group's options (the k-th group of those options at a cell shares with the k-th at
every other, so replicas stay apart) and each group is one label of it, run at its own batch size with prompts of its
own length, with its own latencies, engine windows and counters. One engine then serves every cell of the design, so
every cell is measured on the same weights in the same process (`nsys_cc.workflows.tune`); the engine's context
(`max_model_len`, the model's unless `--max-model-len` says otherwise) must hold every cell's prompt and output, which
the launcher checks for the longest (`launch.interleaved.design_engines`) and the driver for each group
(`_too_long`).

On the torch route (`profile --profiler torch`: `NSYS_CC_TORCH_TRACE=PATH`, no nsys) the driver runs the PyTorch
profiler around the rounds (`torch_profiler`: from the first round's first generate call to the last round's last),
writes its trace to PATH before its records, and the ranges above are torch.profiler ranges, their payloads in their
names (`torch_backend`).

An engine that cannot be built is recorded with its error and left out; the others still run. vLLM's import stays
under `__main__` (vLLM may start processes that re-import the main module).

The end (`leave`): once everything is written, the program leaves through C's `exit` instead of Python's
finalisation when it runs in-process engines only (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, the CPU's) and has no child
process. vLLM's shutdown of in-process engines runs a full `gc.collect()` per engine and frees their caches: measured
on the 2-core machine, 5–7 s of a 23 s demo run between the last JSON written and the process gone, for nothing the
run keeps. C's `exit` still runs the libraries' exit handlers, where nsys's injection hands over its last NVTX events
(measured: every forward, logits and sample range of a run kept, against `os._exit`, which lost the last two
forwards). With engine-core or worker processes (a GPU, tensor parallelism) vLLM's shutdown is what stops them and
lets nsys collect their traces, so it runs as before.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ..contract import ENGINE_RANGE_PREFIX, ENV_METRICS_OUT, INTERLEAVE_MODULE
from ..formats import bench_json, interleaved_json

ENGINE_FLAG = "--engine"
SHARE_FLAG = "--share-batch-sizes"
# vLLM's spec-decode counter names (`analysis.profile_dir.acceptance` reads them).
SPEC_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_accepted_tokens_per_pos")
__all__ = ["ENGINE_RANGE_PREFIX", "ENV_METRICS_OUT", "SHARE_FLAG", "count_spec_decoding", "engine_range", "main",
           "round_order", "shared_engines", "split_argv"]


def engine_range(label: str) -> str:
    """The NVTX range around each generate call of the engine labelled `label`
    (`analysis.forwards.engines.engine_range`)."""
    return ENGINE_RANGE_PREFIX + label


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(options before the first `--engine`, [(label, that engine's options), …])."""
    head: list[str] = []
    groups: list[tuple[str, list[str]]] = []
    i = 0
    while i < len(argv):
        if argv[i] == ENGINE_FLAG:
            if i + 1 >= len(argv):
                raise SystemExit(f"{ENGINE_FLAG} needs a label")
            groups.append((argv[i + 1], []))
            i += 2
            continue
        (groups[-1][1] if groups else head).append(argv[i])
        i += 1
    if not groups:
        raise SystemExit(f"give at least one {ENGINE_FLAG} LABEL [options]")
    return head, groups


# The options a shared engine's groups may differ in (`--share-batch-sizes`): each group's own cell.
CELL_OPTIONS = ("--batch-size", "--input-len")


def _without_cell(options: Sequence[str]) -> tuple[str, ...]:
    """`options` without the cell's (`CELL_OPTIONS`, as `--flag value` or `--flag=value`)."""
    out: list[str] = []
    skip = False
    for a in options:
        if skip:
            skip = False
        elif a in CELL_OPTIONS:
            skip = True
        elif not a.startswith(tuple(f"{flag}=" for flag in CELL_OPTIONS)):
            out.append(a)
    return tuple(out)


def _cell(options: Sequence[str]) -> tuple[str, ...]:
    """The values of `CELL_OPTIONS` in `options` ("" where one is not given)."""
    found = dict.fromkeys(CELL_OPTIONS, "")
    for i, a in enumerate(options):
        for flag in CELL_OPTIONS:
            if a == flag and i + 1 < len(options):
                found[flag] = options[i + 1]
            elif a.startswith(flag + "="):
                found[flag] = a.split("=", 1)[1]
    return tuple(found.values())


def shared_engines(groups: Sequence[tuple[str, Sequence[str]]]) -> list[int]:
    """For each `--engine` group, the index of the group whose engine it runs on (`--share-batch-sizes`): the k-th
    group with given options (its batch size and prompt length aside: `CELL_OPTIONS`) at a cell shares the engine of
    the k-th group with those options at the first cell they came with; a group runs on its own engine when it is the
    first."""
    seen: dict[tuple, int] = {}  # (options without the cell, cell) → groups seen so far
    owner: dict[tuple, int] = {}  # (options without the cell, k) → the group that builds the engine
    out = []
    for i, (_, options) in enumerate(groups):
        key, cell = _without_cell(options), _cell(options)
        k = seen.get((key, cell), 0)
        seen[(key, cell)] = k + 1
        out.append(owner.setdefault((key, k), i))
    return out


def round_order(items: Sequence, i: int, *, shuffle: bool = False) -> list:
    """The order of round `i`: rotated by i (engine i mod K first: target, draft, then draft, target, … with two),
    or with `shuffle` (a tune design's many labels, `--share-batch-sizes`) a permutation drawn for that round (seeded
    by i, so every run makes the same ones): rotated, each label would always run right after the same other label,
    and one engine's state (its caches, the batch just run) would bias the next one's timing the same way in
    every round."""
    k = len(items)
    if not shuffle:
        return [items[(i + j) % k] for j in range(k)]
    import random

    order = list(items)
    random.Random(i).shuffle(order)
    return order


def count_spec_decoding(llm, totals: dict | Callable[[], dict]) -> bool:
    """Add every step's spec-decode statistics of `llm`'s engine to `totals` (num_drafts, num_draft_tokens,
    num_accepted_tokens, per_pos) by wrapping its stat-logger manager's `record`; False when the engine logs no
    statistics (`disable_log_stats`). `totals` may be a callable giving the dict of the moment (an engine shared by
    several labels counts into the label running)."""
    engine = getattr(llm, "llm_engine", None)
    manager = getattr(engine, "logger_manager", None)
    if manager is None:
        return False
    record = manager.record
    current = totals if callable(totals) else (lambda: totals)

    def counting(*args, **kwargs):
        stats = kwargs.get("scheduler_stats", args[0] if args else None)
        spec = getattr(stats, "spec_decoding_stats", None)
        if spec is not None:
            totals = current()
            totals["num_drafts"] = totals.get("num_drafts", 0) + spec.num_drafts
            totals["num_draft_tokens"] = totals.get("num_draft_tokens", 0) + spec.num_draft_tokens
            totals["num_accepted_tokens"] = totals.get("num_accepted_tokens", 0) + spec.num_accepted_tokens
            per_pos = totals.setdefault("per_pos", [])
            for i, n in enumerate(spec.num_accepted_tokens_per_pos):
                if i < len(per_pos):
                    per_pos[i] += n
                else:
                    per_pos.append(n)
        return record(*args, **kwargs)

    manager.record = counting
    return True


def as_metric_records(totals: dict) -> list[dict]:
    """`count_spec_decoding`'s totals as the metric records `analysis.profile_dir.acceptance` reads (vLLM's counter
    names)."""
    return [{"name": SPEC_COUNTERS[0], "labels": {}, "value": int(totals.get("num_drafts", 0))},
            {"name": SPEC_COUNTERS[1], "labels": {}, "value": int(totals.get("num_draft_tokens", 0))},
            {"name": SPEC_COUNTERS[2], "labels": {}, "value": int(totals.get("num_accepted_tokens", 0))},
            {"name": SPEC_COUNTERS[3], "labels": {}, "values": [int(n) for n in totals.get("per_pos", [])]}]


def main(argv: list[str]) -> None:
    """The program (the module docstring): build the engines of `argv`'s `--engine` groups, run their rounds, write
    what they measured."""
    import argparse

    from . import fixes as vllm_fixes, plugin as vllm_plugin, torch_profiler
    from .nvtx_backend import choose

    vllm_plugin.register()
    recording = torch_profiler.from_environment()  # the torch route: the profiler around the iterations
    vllm_fixes.install()
    head_parser = argparse.ArgumentParser(prog=f"python -m {INTERLEAVE_MODULE}")
    head_parser.add_argument("--output-json", required=True)
    head_parser.add_argument(SHARE_FLAG, action="store_true")
    head, groups = split_argv(argv)
    head_args = head_parser.parse_args(head)
    out = Path(head_args.output_json)
    owners = shared_engines(groups) if head_args.share_batch_sizes else list(range(len(groups)))
    metrics_dir = os.environ.get(ENV_METRICS_OUT)
    backend = choose()
    engines: list[dict] = []
    for index, (label, options) in enumerate(groups):
        owner = engines[owners[index]] if owners[index] != index else None
        engines.append(_engine(label, index, options, owner, metrics_dir))
    live = [e for e in engines if "llm" in e]
    if not live:
        raise SystemExit(f"{INTERLEAVE_MODULE}: no engine could be built")
    warmup = max(e["args"].num_iters_warmup for e in live)
    iters = max(e["args"].num_iters for e in live)
    if recording is not None:
        recording.start()
    by_label = _run_rounds(live, warmup, iters, backend, shuffle=head_args.share_batch_sizes)
    if recording is not None:
        recording.stop()  # the trace first: a run without it never has its records
    records = [{"label": e["label"], "index": e["index"], "error": e["error"], "speculative": e["speculative"],
                "latencies": e["latencies"], "warmup_latencies": e["warmup_latencies"]} for e in engines]
    for label, latencies in by_label.items():
        bench_json.write(out.parent / f"{label}.bench.json", latencies)
    _dump_counters(live, metrics_dir)
    interleaved_json.write(out, warmup_iterations=warmup, iterations=iters, engines=records)


def _engine(label: str, index: int, options: list[str], owner: dict | None, metrics_dir: str | None) -> dict:
    """One `--engine` group's entry: its options read as `vllm bench latency` reads them, its `LLM` (built, or its
    `owner`'s with `--share-batch-sizes`; none, and the error, when it cannot be built or its sequences are too long),
    its sampling parameters and prompts; its spec-decode counters counted when `metrics_dir` is set."""
    import numpy as np
    from vllm import LLM, SamplingParams
    from vllm.benchmarks.latency import add_cli_args
    from vllm.engine.arg_utils import EngineArgs
    from vllm.inputs import TokensPrompt
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog=f"--engine {label}")
    add_cli_args(parser)
    args = parser.parse_args(options)
    entry: dict = {"label": label, "index": index, "latencies": [], "warmup_latencies": [], "counters": {},
                   "speculative": bool(getattr(args, "speculative_config", None)), "error": None}
    if owner is not None:  # one engine, several batch sizes (--share-batch-sizes)
        if "llm" in owner:
            entry["llm"], entry["counted"] = owner["llm"], owner.get("counted", False)
        else:
            entry["error"] = owner["error"]
    else:
        try:
            entry["llm"] = LLM.from_engine_args(EngineArgs.from_cli_args(args))
            if entry["speculative"] and metrics_dir:
                holder: list[dict] = [entry["counters"]]  # the label running (set before each generate)
                entry["counting_into"] = holder
                entry["counted"] = count_spec_decoding(entry["llm"], functools.partial(holder.__getitem__, 0))
        except Exception as exc:  # noqa: BLE001 (recorded: the other engines still run)
            entry["error"] = f"{type(exc).__name__}: {exc}"
            print(f"{INTERLEAVE_MODULE}: engine {label} could not be built: {entry['error']}", file=sys.stderr)
    entry["owner"] = owner if owner is not None else entry
    entry["args"] = args
    too_long = _too_long(entry.get("llm"), args.input_len, args.output_len)
    if too_long:  # as vLLM's latency benchmark refuses it, before a prompt list of that length is built
        entry.pop("llm")
        entry["error"] = too_long
        print(f"{INTERLEAVE_MODULE}: engine {label}: {too_long}", file=sys.stderr)
    if "llm" in entry:
        entry["params"] = SamplingParams(n=args.n, temperature=1.0, top_p=1.0, ignore_eos=True,
                                         max_tokens=args.output_len, detokenize=not args.disable_detokenize)
        ids = np.random.randint(10000, size=(args.batch_size, args.input_len))
        entry["prompts"] = [TokensPrompt(prompt_token_ids=row) for row in ids.tolist()]
    return entry


def _run_rounds(live: list[dict], warmup: int, iters: int, backend, *, shuffle: bool) -> dict[str, list[float]]:
    """`warmup` + `iters` rounds of one generate call of every live engine each (`round_order`), each inside its
    engine's range; every latency kept in its entry, and the measured ones returned per label, every instance, in the
    order they ran."""
    by_label: dict[str, list[float]] = {}
    for i in range(warmup + iters):
        for e in round_order(live, i, shuffle=shuffle):
            if "counting_into" in e["owner"]:
                e["owner"]["counting_into"][0] = e["counters"]  # the shared engine counts into this label
            backend.push(engine_range(e["label"]), e["index"])
            t0 = time.perf_counter()
            try:
                e["llm"].generate(e["prompts"], sampling_params=e["params"], use_tqdm=False)
            finally:
                elapsed = time.perf_counter() - t0
                backend.pop()
            (e["warmup_latencies"] if i < warmup else e["latencies"]).append(elapsed)
            if i >= warmup:
                by_label.setdefault(e["label"], []).append(elapsed)
    return by_label


def _dump_counters(live: list[dict], metrics_dir: str | None) -> None:
    """Each speculative label's spec-decode counters, summed over its engines, dumped to `<LABEL>.metrics.json`."""
    counters: dict[str, dict] = {}
    for e in live:
        if e.get("counted"):
            total = counters.setdefault(e["label"], {})
            for key, value in e["counters"].items():
                if key == "per_pos":
                    pos = total.setdefault("per_pos", [])
                    pos.extend([0] * (len(value) - len(pos)))
                    for i, n in enumerate(value):
                        pos[i] += n
                else:
                    total[key] = total.get(key, 0) + value
    for label, total in counters.items():
        from ..analysis.profile_dir.acceptance import dump_metrics

        dump_metrics(as_metric_records(total), Path(metrics_dir or ".") / f"{label}.metrics.json")


def _too_long(llm, input_len: int, output_len: int) -> str:
    """Why a sequence of `input_len` + `output_len` tokens cannot run on `llm`'s engine (its `max_model_len`), "" when
    it can or nothing says: the launcher checks the models' configs first (`launch.plan.check_context`); this is the
    check vLLM's latency benchmark makes, for a model whose config the launcher could not read."""
    config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
    limit = getattr(config, "max_model_len", None)
    if not isinstance(limit, int) or input_len + output_len <= limit:
        return ""
    return (f"input_len {input_len} + output_len {output_len} = {input_len + output_len} tokens exceed the engine's "
            f"max_model_len {limit}")


def _has_children(tasks: Path = Path("/proc/self/task")) -> bool:
    """Whether this process has a child process (its threads' /proc `children` lists); True when it cannot tell
    (no such list: not Linux, or a kernel without them)."""
    try:
        lists = list(tasks.glob("*/children"))
        return not lists or any(p.read_text().strip() for p in lists)
    except OSError:
        return True


def fast_exit_allowed(environ: Mapping[str, str] = os.environ, has_children: Callable[[], bool] = _has_children
                      ) -> bool:
    """Whether `leave` may skip vLLM's shutdown: every engine in this process, no child process (see the module)."""
    return environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0" and not has_children()


def leave() -> None:
    """End the program after `main` returned: through C's `exit` when `fast_exit_allowed`, else as Python ends."""
    if not fast_exit_allowed():
        return
    import ctypes
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.CDLL(None).exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
    leave()
