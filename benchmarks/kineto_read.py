"""Benchmark: nsys_cc's Kineto reader against a plain `json.load` of the same file (the floor), the fast JSON parsers
it could be built on, and HTA's parser.

Issue 52: on a 1 GB PyTorch-profiler trace the reader should take ≤ 0.5× the time and ≤ 0.3× the peak memory of a
plain `json.load` of the file (issue 42's goal, on 100 MB: ≤ 1.5× and ≤ 2×, and faster than HTA's parser). The trace
is generated once under `benchmarks/data/` (git-ignored), shaped as vLLM's real ones are: mostly `python_function`
frames and `cpu_op`s (with_stack traces hold ~70 % Python frames), engine steps as `user_annotation`s, CUDA runtime
and driver launches with their kernels and copies on a GPU stream, flow events (`ac2g`), Kineto's
`gpu_user_annotation`s, process/thread metadata and `deviceProperties`, written in Kineto's own layout (one key per
line, `ts`/`dur` in microseconds with three decimals on a ~1.7e12 µs clock).

Contenders, each in a fresh process (imports done before the clock starts), the file as `.json` and as `.json.gz`:
- `json.load`: `json.load(open(path))` (`gzip.open` for .gz) — the floor: any reader parses at least that;
- `nsys_cc`: `nsys_cc.open_trace(path)` then every table (`nvtx_ranges`, `cuda_api`, `gpu_ops`, `kernels`,
  `memops`) — everything the reader gives;
- the parsers measured to choose one (the whole document parsed, the file's bytes read — and decompressed — first):
  `orjson` (`orjson.loads`), `msgspec` (`msgspec.json.decode`, untyped), `simdjson` (pysimdjson's `loads`, when
  installed), and `ijson` (`ijson.items(f, "traceEvents.item", use_float=False)` with its C backend, yajl2_c: the
  events streamed one by one). The first three make a float64 of every time — which loses the nanoseconds of a
  ~1.7e12 µs clock — and hold the whole document; ijson's Decimals are exact;
- `hta`: `hta.common.trace_parser.parse_trace_dataframe(path, ParserConfig.get_default_cfg())`, HTA 0.5's parser
  with its default backend (json), what `TraceAnalysis` runs per rank.
Reported: the median wall time of the work over `--repeat` runs and the process's peak RSS (`ru_maxrss`), whole and
above the RSS it had once its imports were done; and the CPU time (user + system) of the work, which another job on
the machine disturbs less than the wall time.

Usage: `python benchmarks/kineto_read.py [--mb 1000] [--repeat 1] [--no-hta] [--only C,…] [--markdown FILE]`
(`make bench-kineto`). Results go to `benchmarks/results/kineto-<time>.json` (git-ignored); the Markdown table
printed is the one kept in docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / "data"
RESULTS = HERE / "results"
CONTENDERS = ("json.load", "nsys_cc", "orjson", "msgspec", "simdjson", "ijson", "hta")
# Contenders measured only where their package is installed (pysimdjson is no dependency of the project).
OPTIONAL = {"simdjson": "simdjson"}

# One engine step of a with_stack vLLM trace, roughly: Python frames and aten ops on the main thread, a few hundred
# launches (runtime and driver API) each with its kernel (some copies), a flow pair per launch.
FRAMES_PER_STEP = 1_400
OPS_PER_STEP = 500
LAUNCHES_PER_STEP = 120
PID, TID, DEVICE, STREAM = 4242, 4242, 0, 7
T0_US = 1_733_456_789_012  # a ~1.7e12 µs clock: 16 significant digits with the ns decimals, as real traces have
PY_FILES = ("vllm/v1/worker/gpu_model_runner.py", "vllm/model_executor/models/llama.py", "torch/nn/modules/module.py",
            "vllm/v1/attention/backends/flash_attn.py", "vllm/v1/sample/sampler.py", "vllm/v1/core/sched/scheduler.py")
PY_FUNCS = ("forward", "_call_impl", "execute_model", "sample_tokens", "_prepare_inputs", "schedule", "__getattr__")
ATEN = ("aten::empty", "aten::mm", "aten::add", "aten::copy_", "aten::slice", "aten::view", "aten::mul", "aten::to")
KERNELS = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, float*)",
           "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
           "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>, true>(Flash_fwd_params)",
           "triton_poi_fused_add_mul_0", "void vllm::rms_norm_kernel<c10::BFloat16>(c10::BFloat16*, float, int)")


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _event(ph: str, cat: str, name: str, pid, tid, ts_ns: int, dur_ns: int | None, args: str | None) -> str:
    lines = ["  {", f'    "ph": "{ph}",', f'    "cat": "{cat}",', f"    \"name\": {json.dumps(name)},",
             f'    "pid": {pid},', f'    "tid": {tid},', f'    "ts": {_us(ts_ns)}']
    if dur_ns is not None:
        lines[-1] += ","
        lines.append(f'    "dur": {_us(dur_ns)}')
    if args is not None:
        lines.append("    ,")
        lines.append('    "args": {')
        lines.append(f"      {args}")
        lines.append("    }")
    lines.append("  }")
    return "\n".join(lines)


def _flow(ph: str, ident: int, pid, tid, ts_ns: int) -> str:
    bp = ',\n    "bp": "e"' if ph == "f" else ""
    return (f'  {{\n    "ph": "{ph}", "id": {ident}, "pid": {pid}, "tid": {tid}, "ts": {_us(ts_ns)},\n'
            f'    "cat": "ac2g", "name": "ac2g"{bp}\n  }}')


def generate(path: Path, megabytes: float, seed: int = 42) -> dict:
    """Write a Kineto trace of about `megabytes` MB (uncompressed) to `path` (.json, or .json.gz); returns counts."""
    rng = random.Random(seed)
    target = int(megabytes * 1e6)
    head = ('{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {"id": 0, "name": "NVIDIA H100 80GB HBM3", '
            '"totalGlobalMem": 85029158912, "computeMajor": 9, "computeMinor": 0, "numSms": 132}\n  ],\n'
            '  "cupti_version": 24, "cuda_runtime_version": 12040, "cuda_driver_version": 12040,\n'
            '  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},\n  "with_stack": 1,\n'
            '  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": 1733400000000000000,\n  "traceEvents": [\n')
    meta = [
        f'  {{"ph": "M", "name": "process_name", "pid": {PID}, "tid": 0, "args": {{"name": "VLLM::EngineCore"}}}}',
        f'  {{"ph": "M", "name": "thread_name", "pid": {PID}, "tid": {TID}, "args": {{"name": "thread {TID} '
        f'(python)"}}}}',
        f'  {{"ph": "M", "name": "process_name", "pid": {DEVICE}, "tid": 0, "args": {{"name": "GPU {DEVICE}"}}}}',
        f'  {{"ph": "M", "name": "thread_name", "pid": {DEVICE}, "tid": {STREAM}, "args": {{"name": "stream '
        f'{STREAM}"}}}}',
    ]
    size = len(head) + sum(len(m) + 2 for m in meta)
    counts: dict[str, int] = {}
    corr = ext = pyid = 0
    t = T0_US * 1000
    gpu_free = t
    chunks: list[str] = []
    step = 0

    def add(text: str, cat: str) -> None:
        nonlocal size
        chunks.append(text)
        size += len(text) + 2
        counts[cat] = counts.get(cat, 0) + 1

    while size < target:
        step += 1
        start = t
        body: list[tuple[int, str, str]] = []  # (ts, text, cat) of the step's events, then written in ts order
        for _ in range(FRAMES_PER_STEP):
            pyid += 1
            ts = t + rng.randint(0, 40_000_000)
            name = f"{rng.choice(PY_FILES)}({rng.randint(10, 4000)}): {rng.choice(PY_FUNCS)}"
            body.append((ts, _event("X", "python_function", name, PID, TID, ts, rng.randint(300, 900_000),
                                    f'"Python parent id": {max(pyid - 3, 1)}, "Python id": {pyid}, '
                                    f'"Ev Idx": {pyid}'), "python_function"))
        for _ in range(OPS_PER_STEP):
            ext += 1
            ts = t + rng.randint(0, 40_000_000)
            body.append((ts, _event("X", "cpu_op", rng.choice(ATEN), PID, TID, ts, rng.randint(1_000, 80_000),
                                    f'"External id": {ext}, "Record function id": 0, "Ev Idx": {ext}'), "cpu_op"))
        for i in range(LAUNCHES_PER_STEP):
            corr += 1
            ts = t + 1_000_000 + i * 300_000 + rng.randint(0, 50_000)
            dur = rng.randint(2_000, 9_000)
            driver = i % 5 == 4
            copy = i % 17 == 0
            api = "cuLaunchKernelEx" if driver else "cudaMemcpyAsync" if copy else "cudaLaunchKernel"
            body.append((ts, _event("X", "cuda_driver" if driver else "cuda_runtime", api, PID, TID, ts, dur,
                                    f'"cbid": {652 if driver else 211}, "correlation": {corr}'),
                         "cuda_driver" if driver else "cuda_runtime"))
            gpu_free = max(gpu_free, ts + dur + 3_000) + rng.randint(200, 2_000)
            kdur = rng.randint(1_500, 400_000)
            if copy:
                body.append((gpu_free, _event("X", "gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", DEVICE, STREAM,
                                              gpu_free, kdur // 20 + 1_000,
                                              f'"device": {DEVICE}, "context": 1, "stream": {STREAM}, '
                                              f'"correlation": {corr}, "bytes": 2048, '
                                              '"memory bandwidth (GB/s)": 1.28'), "gpu_memcpy"))
                gpu_free += kdur // 20 + 1_000
            else:
                body.append((gpu_free, _event("X", "kernel", rng.choice(KERNELS), DEVICE, STREAM, gpu_free, kdur,
                                              f'"queued": 0, "device": {DEVICE}, "context": 1, "stream": {STREAM}, '
                                              f'"correlation": {corr}, "registers per thread": 128, '
                                              '"shared memory": 0, "blocks per SM": 0.5, "warps per SM": 2.0, '
                                              '"grid": [66, 1, 1], "block": [128, 1, 1], '
                                              '"est. achieved occupancy %": 6'), "kernel"))
                gpu_free += kdur
            body.append((ts, _flow("s", corr, PID, TID, ts), "ac2g"))
            body.append((gpu_free, _flow("f", corr, DEVICE, STREAM, gpu_free), "ac2g"))
        t = max(t + 45_000_000, gpu_free) + 1_000_000
        label = "execute_context_0(0)_generation_1(1)" if step % 50 else "execute_context_1(128)_generation_0(0)"
        ext += 1
        add(_event("X", "user_annotation", label, PID, TID, start, t - start - 500_000,
                   f'"External id": {ext}, "Record function id": 0, "Ev Idx": {ext}'), "user_annotation")
        add(_event("X", "gpu_user_annotation", label, DEVICE, STREAM, start + 1_000_000, t - start - 1_500_000,
                   f'"External id": {ext}'), "gpu_user_annotation")
        for _, text, cat in sorted(body, key=lambda b: b[0]):
            add(text, cat)
    text = head + ",\n".join(meta + chunks) + '\n  ],\n  "traceName": "generated.pt.trace.json"\n}\n'
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == ".gz":
        with gzip.open(tmp, "wt", compresslevel=6) as fh:
            fh.write(text)
    else:
        tmp.write_text(text)
    os.replace(tmp, path)
    return {"events": sum(counts.values()) + len(meta), "steps": step, "bytes": len(text), **counts}


# -- one contender, in this (fresh) process -------------------------------------------------------------------------
def _rss_kib() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _current_rss_kib() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _bytes_of(path: str) -> bytes:
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as fh:
        return fh.read()


def run_one(contender: str, path: str) -> dict:
    """Time `contender` on `path` here; the imports come before the clock."""
    if contender == "json.load":
        def work():
            with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as fh:
                doc = json.load(fh)
            return len(doc["traceEvents"])
    elif contender == "nsys_cc":
        import nsys_cc
        from nsys_cc.trace import kineto  # noqa: F401  (the reader's imports, before the clock)

        def work():
            with nsys_cc.open_trace(path) as trace:
                return sum(len(f) for f in (trace.nvtx_ranges(), trace.cuda_api(), trace.gpu_ops(), trace.kernels(),
                                            trace.memops()))
    elif contender in ("orjson", "msgspec", "simdjson"):
        import importlib

        module = importlib.import_module(contender)
        loads = module.json.decode if contender == "msgspec" else module.loads

        def work():
            doc = loads(_bytes_of(path))
            return len(doc["traceEvents"])
    elif contender == "ijson":
        import ijson

        items = ijson.get_backend("yajl2_c").items

        def work():
            with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as fh:
                return sum(1 for _ in items(fh, "traceEvents.item", use_float=False))
    elif contender == "hta":
        import logging

        from hta.common.trace_parser import parse_trace_dataframe
        from hta.configs.parser_config import ParserConfig

        logging.getLogger("hta").setLevel(logging.ERROR)

        def work():
            _meta, df, _symbols = parse_trace_dataframe(path, ParserConfig.get_default_cfg())
            return len(df)
    else:
        raise SystemExit(f"unknown contender {contender!r}")
    base = _current_rss_kib()
    cpu = time.process_time()
    start = time.perf_counter()
    rows = work()
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu
    peak = _rss_kib()
    return {"seconds": seconds, "cpu_s": cpu, "rss_mib": peak / 1024, "above_mib": (peak - base) / 1024, "rows": rows}


def measure(contender: str, path: Path, repeat: int) -> dict:
    runs = []
    for _ in range(repeat):
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        proc = subprocess.run([sys.executable, __file__, "--one", contender, str(path)], capture_output=True, text=True,
                              env=env, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"{contender} on {path.name} failed:\n{proc.stderr[-2000:]}")
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"  {contender:9s} {path.name}: {runs[-1]['seconds']:.2f} s, {runs[-1]['rss_mib']:.0f} MiB",
              file=sys.stderr, flush=True)
    med = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
    return {"seconds": med["seconds"], "cpu_s": sorted(r["cpu_s"] for r in runs)[len(runs) // 2],
            "rss_mib": max(r["rss_mib"] for r in runs),
            "above_mib": max(r["above_mib"] for r in runs), "rows": med["rows"], "runs": runs}


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} × {cpu}, {mem:.0f} GiB, Python {platform.python_version()}"


def markdown(results: dict, info: dict) -> str:
    lines = [f"Machine: {info['machine']}; {info['date']}; load average {info.get('load', '?')} before; trace "
             f"{info['trace']['bytes'] / 1e6:.0f} MB ({info['trace']['events']:,} events, "
             f"{info['trace'].get('python_function', 0):,} Python frames, {info['trace'].get('kernel', 0):,} kernels); "
             f"median of {info['repeat']} run(s).", "",
             "| file | contender | time | × json.load | CPU time | × json.load | peak RSS | × json.load | "
             "RSS above imports |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, per in results.items():
        floor = per["json.load"]
        for c, r in per.items():
            lines.append(f"| {name} | {c} | {r['seconds']:.2f} s | {r['seconds'] / floor['seconds']:.2f}× | "
                         f"{r['cpu_s']:.2f} s | {r['cpu_s'] / floor['cpu_s']:.2f}× | "
                         f"{r['rss_mib']:.0f} MiB | {r['rss_mib'] / floor['rss_mib']:.2f}× | "
                         f"{r['above_mib']:.0f} MiB |")
    return "\n".join(lines) + "\n"


def _installed(contender: str) -> bool:
    import importlib.util

    return OPTIONAL.get(contender) is None or importlib.util.find_spec(OPTIONAL[contender]) is not None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=1000.0, help="size of the generated trace, uncompressed MB")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-hta", action="store_true", help="leave HTA's parser out")
    ap.add_argument("--only", default=None, help="these contenders alone (comma-separated; json.load always runs)")
    ap.add_argument("--markdown", default=None, help="also write the table to this file")
    ap.add_argument("--one", nargs=2, metavar=("CONTENDER", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(*args.one)))
        return 0
    DATA.mkdir(parents=True, exist_ok=True)
    stem = f"kineto-{args.mb:g}MB.pt.trace"
    files = [DATA / f"{stem}.json", DATA / f"{stem}.json.gz"]
    shape_file = DATA / f"{stem}.shape.json"
    if not all(f.exists() for f in files) or not shape_file.exists():
        print(f"generating a {args.mb:g} MB Kineto trace under {DATA} …", file=sys.stderr, flush=True)
        shape = generate(files[0], args.mb)
        with open(files[0], "rb") as src, gzip.open(files[1], "wb", compresslevel=6) as dst:
            dst.write(src.read())
        shape_file.write_text(json.dumps(shape))
    shape = json.loads(shape_file.read_text())
    wanted = set(args.only.split(",")) | {"json.load"} if args.only else set(CONTENDERS)
    contenders = [c for c in CONTENDERS if c in wanted and not (args.no_hta and c == "hta") and _installed(c)]
    load = os.getloadavg()[0]
    results: dict[str, dict] = {}
    for f in files:
        results[f.name.replace(stem, "trace")] = {c: measure(c, f, args.repeat) for c in contenders}
    info = {"machine": machine(), "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "repeat": args.repeat, "trace": shape, "load": f"{load:.1f}"}
    table = markdown(results, info)
    print(table)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"kineto-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    out.write_text(json.dumps({"info": info, "results": results}, indent=2))
    if args.markdown:
        Path(args.markdown).write_text(table)
    slow = [f"{n}: nsys_cc {per['nsys_cc']['seconds'] / per['json.load']['seconds']:.2f}× the time "
            f"({per['nsys_cc']['cpu_s'] / per['json.load']['cpu_s']:.2f}× the CPU time), "
            f"{per['nsys_cc']['rss_mib'] / per['json.load']['rss_mib']:.2f}× the memory of json.load"
            for n, per in results.items() if "nsys_cc" in per and (
                per["nsys_cc"]["seconds"] > 0.5 * per["json.load"]["seconds"]
                or per["nsys_cc"]["rss_mib"] > 0.3 * per["json.load"]["rss_mib"])]
    for line in slow:
        print(f"goal (≤ 0.5× the time, ≤ 0.3× the memory) missed: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
