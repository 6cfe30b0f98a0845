"""GPU-shaped PyTorch-profiler (Kineto) traces for tests: a real CPU torch trace with CUDA activity added whose every
range's GPU work is known.

The project's torch fixtures (fixtures/torch/, written by vLLM's own torch profiler on its CPU build) hold no GPU
events. This helper copies one and adds what a GPU run's Kineto trace holds — laid out as Kineto writes it (the
categories, `args` keys and pseudo-processes of real traces such as the public B200 one) — so that tests know the exact
GPU work each `user_annotation` range launched and can check the reader and the projection against it. These are NOT
GPU traces and must never be presented as such.

What is added, for every range `plan` gives launches to:
- `cuda_runtime` (`cudaLaunchKernel`, `cudaGraphLaunch`, `cudaMemcpyAsync`, and a `cudaStreamIsCapturing` that launches
  nothing) or `cuda_driver` (`cuLaunchKernelEx`) calls inside the range, on the range's own thread — or on another
  thread of the process, to model work launched from elsewhere (it belongs to no range of this thread) — each with its
  own `args.correlation` (counting up, as CUPTI does);
- the GPU work, in the device's pseudo-process (pid = device, tid = stream) with `args.device/stream/correlation`:
  `kernel` events, asynchronous (a kernel starts after its call returned and after the stream's previous work ended, so
  work trails its range and may run past its end); a `cudaGraphLaunch` gives several kernels sharing its correlation
  id (a replayed CUDA graph, `args["graph node id"]` set); a `cudaMemcpyAsync` gives a `gpu_memcpy`;
- a flow pair (`ac2g`, "s" at the call, "f" at the GPU op) per launch, and Kineto's own `gpu_user_annotation` per range
  — deliberately NOT the projection (it starts 1 µs late), so a reader that used it would be caught;
- `deviceProperties` (one H100), `cuda_runtime_version`, `cupti_version`, process and thread names for the device.

`add_gpu_work(src, dst, plan)` writes `dst` (.json.gz or .json; `src` is only read) and returns a `GpuShapedKineto`
with, per range, the exact figures the projection must find (`Work`), computed here in plain Python from the events
written. Times are written as Kineto writes them: microseconds with the nanoseconds as three decimals.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

DEVICE = 0
STREAM = 7
CONTEXT = 1
KERNEL_NAMES = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, float*)",
                "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off",
                "void vllm::rms_norm_kernel<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*, float, int, int)")
STEP = "execute_context_0(0)_generation_1(1)"


def us(ns: int) -> str:
    """Nanoseconds as Kineto writes a time: microseconds with three decimals (exact)."""
    sign = "-" if ns < 0 else ""
    return f"{sign}{abs(ns) // 1000}.{abs(ns) % 1000:03d}"


@dataclass(frozen=True)
class Range:
    """A `user_annotation` of the source trace, as the plan sees it (ns; `index` is its position in traceEvents)."""

    index: int
    name: str
    start: int
    end: int
    pid: int
    tid: int

    @property
    def duration(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Launch:
    """One CUDA call made `offset` ns after the range's start and lasting `api_ns`.

    kind: "kernel" (cudaLaunchKernel, one kernel), "driver" (cuLaunchKernelEx, one kernel), "graph" (cudaGraphLaunch:
    the `kernels` share its correlation id), "memcpy" (cudaMemcpyAsync: one copy of `kernels[0]` ns), "none"
    (cudaStreamIsCapturing: no GPU work). `kernels`: durations (ns) run back to back on the stream. `lag`: ns between
    the call's return and the earliest GPU start. `thread`: make the call on this tid of the range's process instead.
    """

    offset: int
    api_ns: int
    kernels: tuple[int, ...] = ()
    kind: str = "kernel"
    lag: int = 1_500
    thread: int | None = None


@dataclass
class Work:
    """The GPU work written for one range and what its projection must be (ns; None where nothing was launched)."""

    range: Range
    ops: list[tuple[int, int, str, str]] = field(default_factory=list)  # (start, end, kind, name)
    launches: int = 0  # calls inside the range on its thread that launched GPU work
    api_ns: int = 0  # their summed durations
    api_calls: int = 0  # every CUDA call inside the range on its thread (launching or not)

    @property
    def span_ns(self) -> int | None:
        return max(o[1] for o in self.ops) - min(o[0] for o in self.ops) if self.ops else None

    @property
    def kernel_sum_ns(self) -> int | None:
        return sum(o[1] - o[0] for o in self.ops if o[2] == "kernel") if self.ops else None

    @property
    def kernels(self) -> int:
        return sum(o[2] == "kernel" for o in self.ops)

    @property
    def busy_ns(self) -> int | None:
        if not self.ops:
            return None
        total, reach = 0, None
        for s, e, *_ in sorted(self.ops):
            if reach is None or s > reach:
                total, reach = total + e - s, e
            elif e > reach:
                total, reach = total + e - reach, e
        return total

    @property
    def gpu_end(self) -> int | None:
        return max(o[1] for o in self.ops) if self.ops else None


@dataclass
class GpuShapedKineto:
    """The trace written (`path`), the work of every range (in trace order), and every GPU op written with the
    range that launched it (`None`: launched from another thread)."""

    path: Path
    work: list[Work]
    all_ops: list[tuple[int, int, str, str, int]]  # (start, end, kind, name, correlation)

    def of(self, name: str) -> list[Work]:
        return [w for w in self.work if w.range.name == name]


def load(path: str | Path) -> dict:
    """The trace's JSON document (gzip or not)."""
    path = Path(path)
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def read_ranges(doc: dict, names: Sequence[str] | None = None,
                frames: Callable[[str], bool] | None = None) -> list[Range]:
    """The `user_annotation` events (those named `names`) and the `python_function` frames whose name `frames`
    accepts, by start — from the raw JSON, times to ns by their text."""
    out = []
    for i, e in enumerate(doc["traceEvents"]):
        if e.get("ph") != "X":
            continue
        kept = (e.get("cat") == "user_annotation" and (names is None or e["name"] in names)) or (
            frames is not None and e.get("cat") == "python_function" and frames(e["name"]))
        if kept:
            start = round(e["ts"] * 1000)  # ranges of the source: re-read exactly by the writer below
            out.append(Range(i, e["name"], start, start + round(e["dur"] * 1000), e["pid"], e["tid"]))
    return sorted(out, key=lambda r: (r.start, r.index))


def _exact(text_doc: str, ranges: list[Range]) -> list[Range]:
    """`ranges` with their times from the JSON text (floats of 16 digits may be off by a ns)."""
    doc = json.loads(text_doc, parse_float=str)
    exact = []
    for r in ranges:
        e = doc["traceEvents"][r.index]
        ts, dur = e["ts"], e["dur"]
        start = int(ts.replace(".", "")) if isinstance(ts, str) else ts * 1000
        d = int(dur.replace(".", "")) if isinstance(dur, str) else dur * 1000
        exact.append(Range(r.index, r.name, start, start + d, r.pid, r.tid))
    return exact


def steady(gpu_factor: float = 1.5, launches: int = 4, names: Sequence[str] = (STEP,),
           kind: str = "kernel") -> Callable[[Range], list[Launch]]:
    """A plan: every range named `names` makes `launches` calls over its first 60 % whose kernels take `gpu_factor` ×
    the range's wall time in all (above ~0.4, the GPU work ends after the range)."""

    def plan(rng: Range) -> list[Launch]:
        if rng.name not in names:
            return []
        total = max(int(rng.duration * gpu_factor), launches)
        each = total // launches
        kernels = [each] * (launches - 1) + [total - each * (launches - 1)]
        step = max(rng.duration * 6 // (10 * launches), 1)
        return [Launch(i * step, min(5_000, max(step - 1, 1)), (k,), kind=kind) for i, k in enumerate(kernels)]

    return plan


def mixed(names: Sequence[str] = (STEP,), other_thread: int = 999_999) -> Callable[[Range], list[Launch]]:
    """A plan with every kind of launch in each range: two runtime kernels, a driver launch, a CUDA graph of three
    kernels (one correlation id), a copy, a call that launches nothing, and a kernel launched from another thread —
    the last kernel of the graph long enough to run past the range's end."""

    def plan(rng: Range) -> list[Launch]:
        if rng.name not in names:
            return []
        d = rng.duration
        return [
            Launch(d // 20, 4_000, (d // 10,)),
            Launch(d // 10, 3_000, (d // 25,), kind="driver"),
            Launch(d // 5, 2_500, (), kind="none"),
            Launch(d // 4, 6_000, (d // 8, d // 9, d), kind="graph"),
            Launch(d // 3, 2_000, (7_000,), kind="memcpy"),
            Launch(d // 2, 3_500, (d // 12,), thread=other_thread),
            Launch(d * 3 // 5, 4_500, (d // 30,)),
        ]

    return plan


API_NAMES = {"kernel": "cudaLaunchKernel", "driver": "cuLaunchKernelEx", "graph": "cudaGraphLaunch",
             "memcpy": "cudaMemcpyAsync", "none": "cudaStreamIsCapturing"}


def _x(cat: str, name: str, pid: int, tid: int, start: int, dur: int, args: dict) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": start, "dur": dur, "args": args}


def add_gpu_work(src: str | Path, dst: str | Path, plan: Callable[[Range], list[Launch]],
                 names: Sequence[str] | None = None, *, gzipped: bool | None = None,
                 frames: Callable[[str], bool] | None = None) -> GpuShapedKineto:
    """Write `src` with the CUDA activity `plan` gives every `user_annotation` (named `names`) and every
    `python_function` frame `frames` accepts (by name) to `dst`; module docstring. `gzipped`: compress (default: when
    `dst` ends in .gz). Ranges are planned in start order, so a range nested in another (a frame inside a frame) must
    launch after the outer range's launches."""
    src, dst = Path(src), Path(dst)
    raw = src.read_bytes()
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8", errors="replace")
    doc = json.loads(text, parse_float=_Raw)  # the source's numbers kept as written
    ranges = _exact(text, read_ranges(json.loads(text), names, frames))
    added: list[dict] = []
    work: list[Work] = []
    all_ops: list[tuple[int, int, str, str, int]] = []
    corr = 0
    stream_free = 0
    for rng in ranges:
        w = Work(rng)
        first_gpu = None
        for launch in plan(rng):
            corr += 1
            tid = rng.tid if launch.thread is None else launch.thread
            start = rng.start + launch.offset
            end = start + launch.api_ns
            assert end <= rng.end, "a plan's call must lie inside its range"
            cat = "cuda_driver" if launch.kind == "driver" else "cuda_runtime"
            added.append(_x(cat, API_NAMES[launch.kind], rng.pid, tid, start, launch.api_ns,
                            {"cbid": 211, "correlation": corr, "External id": corr}))
            own = launch.thread is None or launch.thread == rng.tid
            if own:
                w.api_calls += 1
            if launch.kind == "none":
                continue
            t = max(end + launch.lag, stream_free)
            ops = []
            for node, dur in enumerate(launch.kernels):
                if launch.kind == "memcpy":
                    args = {"device": DEVICE, "context": CONTEXT, "stream": STREAM, "correlation": corr,
                            "bytes": 2048, "memory bandwidth (GB/s)": _Raw("1.5")}
                    added.append(_x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", DEVICE, STREAM, t, dur, args))
                    ops.append((t, t + dur, "memcpy", "[CUDA memcpy Host-to-Device]"))
                else:
                    name = KERNEL_NAMES[(corr + node) % len(KERNEL_NAMES)]
                    args = {"queued": 0, "device": DEVICE, "context": CONTEXT, "stream": STREAM, "correlation": corr,
                            "registers per thread": 32, "shared memory": 1024, "blocks per SM": _Raw("0.5"),
                            "warps per SM": _Raw("2.0"), "grid": [66, 1, 1], "block": [128, 1, 1],
                            "est. achieved occupancy %": 6}
                    if launch.kind == "graph":
                        args["graph id"] = 1
                        args["graph node id"] = node + 1
                    added.append(_x("kernel", name, DEVICE, STREAM, t, dur, args))
                    ops.append((t, t + dur, "kernel", name))
                added.append({"ph": "f", "id": corr, "pid": DEVICE, "tid": STREAM, "ts": t, "cat": "ac2g",
                              "name": "ac2g", "bp": "e"})
                t += dur
            added.append({"ph": "s", "id": corr, "pid": rng.pid, "tid": tid, "ts": start, "cat": "ac2g",
                          "name": "ac2g"})
            stream_free = t
            all_ops += [(*o, corr) for o in ops]
            if own:
                w.ops += ops
                w.launches += 1
                w.api_ns += launch.api_ns
                first_gpu = ops[0][0] if first_gpu is None else min(first_gpu, ops[0][0])
        if w.ops:  # Kineto's own projection of the range, off by a µs: a reader that used it would be caught
            added.append(_x("gpu_user_annotation", rng.name, DEVICE, STREAM, (first_gpu or 0) + 1_000,
                            max((w.gpu_end or 0) - (first_gpu or 0) - 1_000, 0), {"External id": rng.index}))
        work.append(w)
    if added:
        added += [
            {"ph": "M", "name": "process_name", "pid": DEVICE, "tid": 0, "args": {"name": "GPU 0"}},
            {"ph": "M", "name": "thread_name", "pid": DEVICE, "tid": STREAM, "args": {"name": f"stream {STREAM}"}},
        ]
    doc["traceEvents"] += added
    doc["deviceProperties"] = [{"id": DEVICE, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85029158912,
                                "computeMajor": 9, "computeMinor": 0, "numSms": 132}]
    doc["cuda_runtime_version"] = 12040
    doc["cupti_version"] = 24
    _write(dst, doc, gzipped if gzipped is not None else dst.suffix == ".gz")
    return GpuShapedKineto(dst, work, all_ops)


class _Raw(str):
    """A JSON number's text as the source wrote it (the parser's `parse_float`), written back unchanged."""


def _dumps(doc: dict) -> str:
    """`doc` as JSON, numbers exactly as Kineto writes them: the source's decimal texts kept (`_Raw`), our times
    (int ns under "ts"/"dur") as microseconds with three decimals. The common values (strings, plain ints) are written
    inline with the C string encoder that `json.dumps` itself uses: a GPU-shaped trace holds ~10⁵ values, and a call
    of `json.dumps` per value made this helper most of the quick suite's time."""
    out: list[str] = []
    app = out.append

    def key_text(k) -> str:
        return _quote(k) if type(k) is str else json.dumps(k)

    def write(value, key: str | None = None) -> None:
        t = type(value)
        if t is dict:
            app("{")
            sep = ""
            for k, v in value.items():
                app(sep + key_text(k) + ": ")
                sep = ","
                tv = type(v)
                if tv is str:
                    app(_quote(v))
                elif tv is int and k not in _TIMES:
                    app(str(v))
                else:
                    write(v, k)
            app("}")
        elif t is list:
            app("[")
            for i, v in enumerate(value):
                tv = type(v)
                if i:
                    app(",\n" if isinstance(v, dict) else ", ")
                if tv is str:
                    app(_quote(v))
                elif tv is int:
                    app(str(v))
                else:
                    write(v)
            app("]")
        elif isinstance(value, _Raw):
            app(str.__str__(value))
        elif isinstance(value, bool) or value is None:
            app(json.dumps(value))
        elif isinstance(value, int):
            app(us(value) if key in _TIMES else str(value))
        elif isinstance(value, str):
            app(json.dumps(value))
        elif isinstance(value, dict | list):  # a subclass of either: as the type itself
            write(dict(value) if isinstance(value, dict) else list(value), key)
        else:
            raise TypeError(f"cannot write {value!r}")

    write(doc)
    return "".join(out) + "\n"


_TIMES = ("ts", "dur")
_quote = json.encoder.encode_basestring_ascii  # what json.dumps writes a str with (its C version where there is one)


def _write(dst: Path, doc: dict, gzipped: bool) -> None:
    """`doc` written to `dst` as `_dumps` writes it, gzip-compressed (level 1: a test file, written fast) or not."""
    out = _dumps(doc).encode("utf-8")
    dst.write_bytes(gzip.compress(out, compresslevel=1) if gzipped else out)


# ---- vLLM-shaped GPU work: steps, their sampling and the proposer (vLLM's own markers) ------------------------------
# (whatever the install prefix: searched after a "/" or at the start, as `INSTALL_FORMS` write them)
SAMPLE_FRAME = re.compile(r"(?:^|/)vllm/v1/worker/gpu_model_runner\.py\(\d+\): sample_tokens$")
PROPOSE_FRAME = re.compile(r"(?:^|/)vllm/v1/(?:worker/gpu/)?spec_decode/\S+\.py\(\d+\): propose$")


def vllm_frame(name: str) -> bool:
    """The Python frames `vllm_plan` gives GPU work: the runner's `sample_tokens` and the proposer's `propose`."""
    return bool(SAMPLE_FRAME.search(name) or PROPOSE_FRAME.search(name))


def vllm_plan(step_factor: float = 1.5, *, launch_bound: bool = False, sample_kernels: tuple[int, ...] = (20_000,
              12_000), propose_factor: float = 0.5, graph: bool = True) -> Callable[[Range], list[Launch]]:
    """A plan for a vLLM torch trace (`add_gpu_work(..., frames=vllm_frame)`): every step annotation (`execute_…`)
    launches GPU work — `step_factor` × its wall time over its first 60 % in four launches, the second a CUDA graph
    of three kernels sharing its correlation id when `graph` (above ~0.6 the work queues back to back and runs past
    the step: GPU-bound); with `launch_bound`, instead ten launches spread over 90 % of the step, each a kernel of 0.5 %
    of its wall time (the GPU idles between them); its `sample_tokens` frame two kernels of `sample_kernels` ns
    launched in its first 1 % (before any proposing inside it); a proposer frame `propose_factor` × its wall time in
    three launches over its first 60 %."""

    def plan(rng: Range) -> list[Launch]:
        d = rng.duration
        if rng.name.startswith("execute_"):
            if launch_bound:
                return [Launch(i * d * 9 // 100, 1_000, (max(d // 200, 1),)) for i in range(10)]
            total = max(int(d * step_factor), 4)
            each = total // 4
            step = max(d * 6 // 40, 1)
            out = []
            for i in range(4):
                kernels = (each,) if i != 1 or not graph else (each // 3, each // 3, each - 2 * (each // 3))
                out.append(Launch(i * step, min(5_000, max(step - 1, 1)), kernels, kind="graph" if len(kernels) > 1
                                  else "kernel"))
            return out
        if SAMPLE_FRAME.search(rng.name):
            return [Launch(max(d // 200, 1) * (i + 1), 400, (k,)) for i, k in enumerate(sample_kernels)]
        if PROPOSE_FRAME.search(rng.name):
            total = max(int(d * propose_factor), 3)
            step = max(d * 6 // 30, 1)
            return [Launch(i * step, min(4_000, max(step - 1, 1)), (total // 3,)) for i in range(3)]
        return []

    return plan


# ---- frames as other installs name them ------------------------------------------------------------------
# The file of a Python frame as torch writes it for each way of installing an engine: `{}` is the path from the
# package's root (`vllm/v1/…`), as torch writes it for a package under site-packages (the fixtures' form).
INSTALL_FORMS = {
    "pip": "{}",
    "source checkout": "/home/u/code/vllm/{}",
    "editable": "/home/u/src/vllm-dev/{}",
    "container": "/usr/local/lib/python3.12/dist-packages/{}",
    "conda": "/opt/conda/envs/serve/lib/python3.11/site-packages/{}",
    "venv": "/home/u/.venv/lib/python3.12/site-packages/{}",
}


def with_frames_as(src: str | Path, dst: str | Path, form: str, *, package: str = "vllm/",
                   rename: Callable[[str], str] | None = None) -> Path:
    """`src` with every `python_function` frame whose file starts with `package` written as the install `form`
    (INSTALL_FORMS: a template, or a key of it) would name it, and its name through `rename` besides (a proposer's
    module moved, say); `dst` written as JSON (gzip when it ends in .gz), every number as the source wrote it."""
    src, dst = Path(src), Path(dst)
    raw = src.read_bytes()
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8", errors="replace")
    doc = json.loads(text, parse_float=_Raw)
    template = INSTALL_FORMS.get(form, form)
    for e in doc["traceEvents"]:
        if e.get("cat") == "python_function" and e.get("name", "").startswith(package):
            name = rename(e["name"]) if rename else e["name"]
            e["name"] = template.format(name)
    _write(dst, doc, dst.suffix == ".gz")
    return dst


# ---- traces built whole, for what this machine cannot run: a vLLM server, SGLang ------------------------------------
# No real CPU trace of these exists here (vLLM's CPU build serves no `bench serve --profile` here worth the time, and
# SGLang's CPU backend does not run): the CPU events are written from a schedule — the engines' own names, as their
# source and the public traces write them — and the GPU work is added by `add_gpu_work`, so every figure is known.
# These are NOT traces of a real run and must never be presented as such.
BUILT_PID, BUILT_TID = 4242, 4243
BASE_NS = 6_000_000_000_000_000  # a clock of the size Kineto's has (~6e12 µs)


@dataclass
class Span:
    """A CPU event to write: a `user_annotation` or a `python_function` frame, with the launches made inside it
    (offsets from its start: give launches to the innermost span only, `add_gpu_work`)."""

    cat: str
    name: str
    start: int
    end: int
    launches: tuple[Launch, ...] = ()
    tid: int = BUILT_TID


def build_trace(dst: str | Path, spans: Sequence[Span], *, process: str = "VLLM::EngineCore") -> GpuShapedKineto:
    """A Kineto trace of `spans` (CPU events, ns) in one process, with their launches' GPU work (`add_gpu_work`)."""
    dst = Path(dst)
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": BUILT_PID, "tid": 0, "args": {"name": process}},
        {"ph": "M", "name": "thread_name", "pid": BUILT_PID, "tid": BUILT_TID, "args": {"name": "MainThread"}}]
    for s in sorted(spans, key=lambda s: (s.start, -s.end)):
        events.append(_x(s.cat, s.name, BUILT_PID, s.tid, s.start, s.end - s.start, {}))
    doc = {"schemaVersion": 1, "with_stack": 1, "traceEvents": events, "displayTimeUnit": "ms",
           "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}}
    src = dst.parent / (dst.name + ".src.json")
    src.write_text(_dumps(doc), encoding="utf-8")
    plan = {(s.name, s.start): s.launches for s in spans}
    try:
        return add_gpu_work(src, dst, lambda rng: list(plan.get((rng.name, rng.start), ())), frames=lambda n: True)
    finally:
        src.unlink()


def _work(total: int, parts: int, span: int, kind: str = "kernel") -> tuple[Launch, ...]:
    """`parts` launches over the first 60 % of a span of `span` ns whose kernels take `total` ns in all; "graph": one
    CUDA graph of `parts` kernels."""
    each = max(total // parts, 1)
    if kind == "graph":
        return (Launch(span // 20, min(5_000, span // 10), tuple([each] * parts), kind="graph"),)
    step = max(span * 6 // (10 * parts), 1)
    return tuple(Launch(i * step, min(5_000, max(step - 1, 1)), (each,)) for i in range(parts))


def detailed(ctx: Sequence[tuple[int, int]], gen: Sequence[tuple[int, int]]) -> str:
    """vLLM's detailed step annotation of a step: `ctx` (query tokens, KV length after the step) per context request,
    `gen` the same per generation request."""
    def part(reqs: Sequence[tuple[int, int]]) -> str:
        return (f"sq{sum(q for q, _ in reqs)}sk{sum(k for _, k in reqs)}sqsq{sum(q * q for q, _ in reqs)}"
                f"sqsk{sum(q * k for q, k in reqs)}")

    total = sum(q for q, _ in ctx) + sum(q for q, _ in gen)
    return f"execute_{total}_context_{len(ctx)}({part(ctx)})_generation_{len(gen)}({part(gen)})"


VLLM_CONTAINER = "/usr/local/lib/python3.12/dist-packages/vllm/v1/"


@dataclass
class Built:
    """A built trace and its schedule: per step (in order) its kind, batch, tokens, context, annotation name."""

    made: GpuShapedKineto
    steps: list[dict]


def serve_trace(dst: str | Path, *, requests: int = 24, budget: int = 512, max_seqs: int = 16,
                seed: int = 7) -> Built:
    """A `vllm bench serve --profile`-shaped trace: `requests` requests arriving over time with prompts of 64–1,500
    tokens and outputs of 4–40, scheduled as vLLM V1 schedules them (running decodes first, then prompt chunks up to
    `budget` tokens a step, at most `max_seqs` requests): prefill, decode and — most steps — mixed steps of varying
    batch and context, each annotated in the detailed form, its sampling frame after it, the engine core's step frame
    around both (frames as a container image names them); one empty step among them. GPU work per step grows with its
    tokens and its context (a decode-only step one CUDA graph, as a FULL graph replays)."""
    import random

    rnd = random.Random(seed)
    arrive = sorted(rnd.randrange(0, 60) for _ in range(requests))
    prompt = [rnd.randrange(64, 1500) for _ in range(requests)]
    output = [rnd.randrange(4, 40) for _ in range(requests)]
    done_prompt, made_tokens = [0] * requests, [0] * requests
    spans: list[Span] = []
    steps: list[dict] = []
    t, step = BASE_NS, 0
    while any(m < o for m, o in zip(made_tokens, output)):
        running = [r for r in range(requests) if arrive[r] <= step and done_prompt[r] == prompt[r]
                   and 0 < made_tokens[r] < output[r]][:max_seqs]
        gen = [(1, prompt[r] + made_tokens[r]) for r in running]
        left, ctx, chunked = budget - len(gen), [], []
        for r in range(requests):
            if left <= 0 or len(running) + len(ctx) >= max_seqs:
                break
            if arrive[r] <= step and done_prompt[r] < prompt[r]:
                q = min(prompt[r] - done_prompt[r], left)
                ctx.append((q, done_prompt[r] + q))
                chunked.append((r, q))
                left -= q
        if step == 5:
            gen, ctx, chunked, running = [], [], [], []  # an empty step: vLLM annotates it, it launches nothing
        name = detailed(ctx, gen)
        tokens = sum(q for q, _ in ctx) + len(gen)
        context = sum(k for _, k in ctx) + sum(k for _, k in gen)
        kind = "mixed" if ctx and gen else "prefill" if ctx else "decode" if gen else "empty"
        wall = 2_000_000 + 400 * tokens
        a0, a1 = t + 40_000, t + 40_000 + wall
        gpu = 1_500_000 + 3_000 * tokens + 20 * context
        launches = () if kind == "empty" else _work(gpu, 4, wall, "graph" if kind == "decode" else "kernel")
        spans += [Span("python_function", VLLM_CONTAINER + "engine/core.py(391): step", t, a1 + 700_000),
                  Span("user_annotation", name, a0, a1, launches),
                  Span("python_function", VLLM_CONTAINER + "worker/gpu_model_runner.py(3380): execute_model",
                       a0 + 20_000, a1 - 10_000)]
        if kind != "empty":
            spans.append(Span("python_function", VLLM_CONTAINER + "worker/gpu_model_runner.py(4303): sample_tokens",
                              a1 + 50_000, a1 + 650_000, (Launch(2_000, 400, (15_000 + 20 * len(gen + ctx),)),)))
        steps.append({"kind": kind, "batch": len(ctx) + len(gen), "tokens": tokens,
                      "context": context if kind != "empty" else 0, "name": name, "start": a0, "end": a1})
        for r in running:
            made_tokens[r] += 1
        for r, q in chunked:
            done_prompt[r] += q
            if done_prompt[r] == prompt[r]:
                made_tokens[r] = 1  # the step that ends a prompt samples its first token
        t = a1 + 700_000 + max(gpu, 300_000)
        step += 1
    return Built(build_trace(dst, spans), steps)


SGLANG = "/sgl-workspace/sglang/python/sglang/srt/"  # SGLang's dev image, as the public SGLang trace names its frames


def sglang_trace(dst: str | Path, role: str = "target", *, batch: int = 2, prompt: int = 128, output: int = 12,
                 gamma: int = 3, alpha: float = 0.7, scale: float = 1.0, execute: bool = False,
                 seed: int = 1) -> Built:
    """An SGLang-shaped trace (SGLang's names from its source: `ModelRunner.forward`'s `step[…]`, `ModelRunner.sample`,
    the scheduler's `run_batch`, EAGLEWorker's `forward_batch_generation`, `draft`, `verify` with
    `EagleVerifyInput.verify`, `forward_draft_extend(_after_decode)`): `batch` requests of `prompt` tokens each
    generating `output` tokens. role "target"/"draft": a plain run (the draft a smaller model: `scale` × the GPU
    work); "spec": EAGLE speculative decoding with γ = `gamma` and a per-token acceptance `alpha` (seeded), the
    batch shrinking as requests end (each request's last step cut by its output length). `execute`: each scheduler
    step inside vLLM's detailed `execute_…` annotation as newer SGLang writes it. Per step in `steps`: kind, batch,
    the spans' starts (forward, sample, proposing pieces, run_batch window) and the tokens each request took."""
    import random

    rnd = random.Random(seed)
    spans: list[Span] = []
    steps: list[dict] = []
    t = BASE_NS
    left = [output - 1] * batch  # tokens each request still makes after its prefill's first token
    kv = [prompt] * batch
    step = 0
    while step == 0 or any(left):
        live = [r for r in range(batch) if step == 0 or left[r] > 0]
        b = len(live)
        rec: dict = {"batch": b, "propose": [], "taken": {}}
        win0 = t
        cur = t + 30_000
        inner: list[Span] = []
        if step == 0:
            rec["kind"] = "prefill"
            fw = Span("user_annotation", f"step[EXTEND bs={b} toks={b * prompt}]", cur, cur + 3_000_000,
                      _work(int(4_000_000 * scale), 4, 3_000_000))
        elif role == "spec":
            rec["kind"] = "verify"
            fw = Span("user_annotation", f"step[TARGET_VERIFY bs={b}]", 0, 0)
        else:
            rec["kind"] = "decode"
            fw = Span("user_annotation", f"step[DECODE bs={b}]", cur, cur + 1_500_000,
                      _work(int(2_000_000 * scale), 3, 1_500_000, "graph"))
        if role != "spec":
            inner.append(fw)
            cur = fw.end + 40_000
            sample = Span("python_function", SGLANG + "model_executor/model_runner.py(3305): sample", cur,
                          cur + 250_000, (Launch(5_000, 500, (int(40_000 * scale),)),))
            inner.append(sample)
            rec.update(forward=fw.start, sample=sample.start)
            cur = sample.end + 30_000
        else:
            worker = SGLANG + "speculative/eagle_worker.py"
            gen0 = cur
            cur += 20_000
            if step == 0:
                ext0 = cur
                fw = Span("user_annotation", fw.name, cur + 10_000, cur + 3_010_000, fw.launches)
                sample = Span("python_function", SGLANG + "model_executor/model_runner.py(3305): sample",
                              fw.end + 40_000, fw.end + 290_000, (Launch(5_000, 500, (40_000,)),))
                inner += [Span("python_function", f"{worker}(331): forward_target_extend", ext0, sample.end + 10_000),
                          fw, sample]
                cur = sample.end + 30_000
                dx = Span("python_function", f"{worker}(707): forward_draft_extend", cur, cur + 900_000)
                dfw = Span("user_annotation", f"step[EXTEND bs={b} toks={b * prompt}]", cur + 20_000,
                           cur + 820_000, _work(int(900_000 * scale * 0.2 / 0.2), 2, 800_000))
                inner += [dx, dfw]
                rec.update(forward=fw.start, sample=sample.start)
                rec["propose"].append(dx.start)
                cur = dx.end + 30_000
            else:
                draft = Span("python_function", f"{worker}(528): draft", cur, cur + 700_000,
                             _work(250_000 * gamma, gamma, 700_000, "graph"))
                cur = draft.end + 20_000
                fw = Span("user_annotation", f"step[TARGET_VERIFY bs={b}]", cur + 10_000, cur + 1_610_000,
                          _work(2_400_000, 3, 1_600_000, "graph"))
                sample = Span("python_function", SGLANG + "speculative/eagle_info.py(610): verify",
                              fw.end + 30_000, fw.end + 330_000, (Launch(5_000, 500, (60_000,)),))
                ver = Span("python_function", f"{worker}(588): verify", cur, sample.end + 20_000)
                cur = ver.end + 20_000
                ext = Span("python_function", f"{worker}(766): forward_draft_extend_after_decode", cur, cur + 600_000)
                dfw = Span("user_annotation", f"step[DRAFT_EXTEND bs={b}]", cur + 20_000, cur + 520_000,
                           _work(350_000, 2, 500_000))
                inner += [draft, ver, fw, sample, ext, dfw]
                rec.update(forward=fw.start, sample=sample.start)
                rec["propose"] += [draft.start, ext.start]
                cur = ext.end + 30_000
                for r in live:
                    k = 1
                    while k <= gamma and rnd.random() < alpha:
                        k += 1
                    rec["taken"][r] = min(k, left[r])
            inner.insert(0, Span("python_function", f"{worker}(272): forward_batch_generation", gen0, cur - 10_000))
        if role != "spec" and step > 0:
            rec["taken"] = {r: 1 for r in live}
        for r, k in rec["taken"].items():
            left[r] -= k
            kv[r] += k
        win1 = cur + 50_000
        spans.append(Span("python_function", SGLANG + "managers/scheduler.py(2919): run_batch", win0, win1))
        if execute:
            ctx = [(prompt, prompt)] * b if step == 0 else []
            per = 1 if role != "spec" or step == 0 else gamma + 1
            gen = [] if step == 0 else [(per, kv[r]) for r in live]
            spans.append(Span("user_annotation", detailed(ctx, gen), win0 + 10_000, win1 - 10_000))
        spans += inner
        rec.update(window=(win0, win1), forward_name=fw.name)
        steps.append(rec)
        t = win1 + 400_000 + 3_000_000
        step += 1
    return Built(build_trace(dst, spans, process="sglang::scheduler"), steps)


# ---- shaped like the real H100 vLLM traces of a large target, its draft and speculative decoding --------------------
# What the held-out traces of a Qwen3-32B target / small draft pair hold and no CPU run here writes: Python frames under
# the install's absolute path (a source checkout, a container's dist-packages), a decode forward replayed as one CUDA
# graph (one `cudaGraphLaunch` carrying most of its kernels), each of the proposer's draft forwards one graph replay,
# today's kernel names (nvjet and block-scaled MoE batched GEMMs, MoE routing, block quantisation, FlashAttention),
# a blocking device-to-host copy of the sampled tokens inside the verify's sampling (its CPU call waits for every
# queued kernel), and asynchronous scheduling: the plain runs copy their tokens without waiting and wait for a step's
# output only after launching the next step, and the proposer returns before its drafts ran, so a step's GPU work ends
# after the next step has started. Built whole from a schedule by a small stream simulator (`_Stream`: each GPU op
# starts when its call has returned and the stream is free), every op kept with the step and frame that launched it.
# These are NOT traces of a real run and must never be presented as such.
VLLM_PREFIXES = {"source checkout": "/home/user/code/vllm/", "container": "/usr/local/lib/python3.12/dist-packages/"}
MOE_UP = ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_"
          "schedP2x1x2x3_biasM_bN_tma_tmaOpt_clmp_swiGlu_dynBatch_sm100f")
MOE_DOWN = ("bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_"
            "schedP2x1x2x3_biasM_bN_tmaOpt_clmp_dynBatch_sm100f")
NORM = ("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
        "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*, c10::BFloat16 const*, "
        "float, int, int)")
ROUTING = ("void moe::dev::routing::routingIndicesHistogramKernel<moe::dev::routing::routingRenormalize::KernelParams<"
           "__nv_bfloat16, __nv_bfloat16, 128, false, true, true> >("
           "moe::dev::routing::routingRenormalize::KernelParams<__nv_bfloat16, __nv_bfloat16, 128, false, true, true>)")
QUANT = ("void tensorrt_llm::kernels::quantize_with_block_size<(tensorrt_llm::BlockScaleQuantizationType)2, "
         "__nv_bfloat16, 32, true>(int, int, int, int, __nv_bfloat16 const*, float const*, unsigned int*, "
         "unsigned int*, flashinfer::QuantizationSFLayout)")
ROPE = ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, "
        "c10::BFloat16 const*, int, long, long, long, int, int, int)")
GEMM = "nvjet_tst_192x8_64x8_4x1_v_bz_TNT"
SOFTMAX = "softmax_warp_forward"
ARGMAX = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned "
          "int, long, 4, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4, 4>)")
PREP = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<long>, std::array<char*, 1ul> >"
# One layer of each model as its forward runs it (kernel, µs at batch 4, one token each): the target's an MoE layer of
# block-scaled GEMMs, the draft's a dense one. A forward writes `layers` of them (fewer than the real model's: enough).
TARGET_LAYER = ((NORM, 60), (GEMM, 420), (ROPE, 30), ("flash_fwd_kernel", 260), (GEMM, 330), (NORM, 60),
                (ROUTING, 40), (QUANT, 35), (MOE_UP, 1150), (MOE_DOWN, 780))
DRAFT_LAYER = ((NORM, 18), (GEMM, 140), (ROPE, 10), ("flash_fwd_kernel", 90), (GEMM, 110), (NORM, 18), (GEMM, 220),
               (GEMM, 160))
MODEL_SHAPES = {"target": (TARGET_LAYER, 6, 260), "draft": (DRAFT_LAYER, 2, 120)}  # layer, layers, lm_head µs


class _Stream:
    """One CUDA stream of one GPU and the CPU thread that feeds it: calls, their GPU ops, and the frames around them,
    written as Kineto writes them (`_x`, times in ns)."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.corr = 0
        self.free = 0  # when the stream has run everything queued
        self.ops: list[tuple[int, int, str, str, int, int]] = []  # (start, end, kind, name, correlation, call start)

    def call(self, t: int, name: str, api_ns: int, kernels: Sequence[tuple[str, int]] = (), *, graph: bool = False,
             copy: str | None = None, blocking: bool = False) -> int:
        """A runtime call at `t` (ns) launching `kernels` (name, ns) back to back — a graph replay when `graph` — or
        one copy of `copy`'s direction; a blocking copy returns when its GPU op has run. Returns the CPU's time after
        the call."""
        self.corr += 1
        ops: list[tuple[int, int, str, str]] = []
        gpu = max(t + (2_000 if blocking else api_ns + 2_000), self.free)
        for node, (kname, dur) in enumerate(kernels):
            ops.append((gpu, gpu + dur, "kernel", kname))
            args = {"device": DEVICE, "context": CONTEXT, "stream": STREAM, "correlation": self.corr,
                    "registers per thread": 64, "shared memory": 4096, "grid": [132, 1, 1], "block": [256, 1, 1]}
            if graph:
                args.update({"graph id": 7, "graph node id": node + 1})
            self.events.append(_x("kernel", kname, DEVICE, STREAM, gpu, dur, args))
            gpu += dur + (600 if graph else 1_000)
        if copy is not None:
            dur = 4_000
            ops.append((gpu, gpu + dur, "memcpy", copy))
            self.events.append(_x("gpu_memcpy", copy, DEVICE, STREAM, gpu, dur, {
                "device": DEVICE, "context": CONTEXT, "stream": STREAM, "correlation": self.corr, "bytes": 64}))
            gpu += dur
        if ops:
            self.free = ops[-1][1]
        end = t + api_ns if not (blocking and ops) else max(t + api_ns, ops[-1][1] + 3_000)
        self.events.append(_x("cuda_runtime", name, BUILT_PID, BUILT_TID, t, end - t,
                              {"cbid": 211, "correlation": self.corr, "External id": self.corr}))
        self.ops += [(*o, self.corr, t) for o in ops]
        return end

    def wait(self, t: int, until: int) -> int:
        """A `cudaEventSynchronize` at `t` that returns when the GPU has reached `until`."""
        self.corr += 1
        end = max(t + 3_000, until + 3_000)
        self.events.append(_x("cuda_runtime", "cudaEventSynchronize", BUILT_PID, BUILT_TID, t, end - t,
                              {"cbid": 130, "correlation": self.corr, "External id": self.corr}))
        return end

    def span(self, cat: str, name: str, start: int, end: int) -> None:
        self.events.append(_x(cat, name, BUILT_PID, BUILT_TID, start, end - start, {}))

    def launched(self, start: int, end: int) -> list[tuple[int, int, str, str, int, int]]:
        """The ops of the calls made in [start, end] (by call start: the thread is this one)."""
        return [o for o in self.ops if start <= o[5] <= end]


@dataclass
class H100Step:
    """One engine step of a built H100-shaped run: its kind, batch and annotation (start, end), and the GPU ops (start,
    end, kind, name, correlation, call start) launched in its annotation (`forward`), its sampling (`sample`: the
    runner's `sample_tokens` frame less the frame holding the proposer), its proposing (`propose`), and in its window
    from its annotation's start to the next one's (`window`)."""

    kind: str
    batch: int
    name: str
    start: int
    end: int
    forward: list = field(default_factory=list)
    sample: list = field(default_factory=list)
    propose: list = field(default_factory=list)
    window: list = field(default_factory=list)
    sample_frame: tuple[int, int] = (0, 0)
    propose_frame: tuple[int, int] = (0, 0)
    taken: dict = field(default_factory=dict)  # request → tokens it took in this step (a verify step)


@dataclass
class H100Run:
    """A built H100-shaped trace (`path`), its steps, and what it was built with."""

    path: Path
    steps: list[H100Step]
    role: str
    batch: int
    output: int
    gamma: int
    stream: _Stream

    def of(self, kind: str) -> list[H100Step]:
        return [s for s in self.steps if s.kind == kind]


def _forward_kernels(role: str, tokens_each: int, batch: int, prefill: bool) -> list[tuple[str, int]]:
    """A forward's kernels (name, ns): `layers` layers and the LM head, longer with more tokens per request."""
    layer, layers, head = MODEL_SHAPES[role]
    scale = 1 + 0.08 * (tokens_each - 1) + 0.05 * (batch - 4) if not prefill else 6.0 * batch / 4
    out = [(name, int(us_ * 1000 * scale)) for _ in range(layers) for name, us_ in layer]
    return out + [(GEMM, int(head * 1000 * (1 if not prefill else 2.0)))]


def h100_vllm_trace(dst: str | Path, role: str = "target", *, form: str = "source checkout", batch: int = 4,
                    output: int = 12, gamma: int = 3, alpha: float = 0.7, seed: int = 5,
                    scheduling: str = "async") -> H100Run:
    """A vLLM torch trace shaped like a real H100 one (section comment): `batch` requests of 512 prompt tokens making
    `output` tokens each, with vLLM's step annotations and Python frames named as the install `form` names them
    (VLLM_PREFIXES). role "target" (the large model) or "draft" (the small one): a plain run, asynchronous scheduling
    (the sampled tokens copied without waiting; a step's output waited for after the next step is launched); "spec":
    the target verifying `gamma` drafts of the draft model per step (vLLM's draft_model method, V1's proposer frames
    `…/spec_decode/eagle.py(237): propose`), each request accepting each draft with probability `alpha` (seeded), its
    batch shrinking as its requests end (the last step of each cut by its length), the verify's sampling ending in a
    blocking copy of its tokens, the proposer returning before its drafts ran. A plain run ends with a step that
    schedules nothing (`…_0(0)_generation_0(0)`: no GPU work), as vLLM writes one. `scheduling` "sync": no
    asynchronous scheduling — the engine core's `…/engine/core.py(391): step` frame around each step (the async
    engine's is `step_with_batch_queue`), a plain run's sampling ending in a blocking copy too; the proposer still
    returns before its drafts ran, so a verify step's GPU work ends after its step frame."""
    import random

    rnd = random.Random(seed)
    root = VLLM_PREFIXES.get(form, form)
    runner, worker = root + "vllm/v1/worker/gpu_model_runner.py", root + "vllm/v1/worker/gpu_worker.py"
    model = "target" if role == "spec" else role
    s = _Stream()
    steps: list[H100Step] = []
    left = [output - 1] * batch  # the tokens each request makes after its prefill's
    t = BASE_NS
    pending: int | None = None  # a plain run's last step's copy, waited for after the next step's launch
    k = 0
    while k == 0 or any(left):
        live = [r for r in range(batch) if k == 0 or left[r] > 0]
        b = len(live)
        prefill = k == 0
        per = 1 if role != "spec" else gamma + 1
        name = (f"execute_context_{b}({b * 512})_generation_0(0)" if prefill
                else f"execute_context_0(0)_generation_{b}({b * per})")
        step = H100Step("prefill" if prefill else "verify" if role == "spec" else "decode", b, name, 0, 0)
        core0 = t
        t += 250_000  # the scheduler
        w0 = t
        t += 20_000
        step.start = t
        r0 = t + 15_000
        t = s.call(r0 + 40_000, "cudaMemcpyAsync", 8_000, copy="Memcpy HtoD (Pinned -> Device)")
        t = s.call(t + 30_000, "cudaLaunchKernel", 5_000, [(PREP, 4_000)])
        kernels = _forward_kernels(model, per, b, prefill)
        if prefill:  # eager (piecewise): each kernel its own launch
            for kname, dur in kernels:
                t = s.call(t + 60_000, "cudaLaunchKernel", 5_000, [(kname, dur)])
        else:
            t = s.call(t + 900_000, "cudaGraphLaunch", 12_000, kernels[:-1], graph=True)
            t = s.call(t + 40_000, "cudaLaunchKernel", 5_000, [kernels[-1]])  # the logits (LM head), eager
        t += 150_000
        s.span("python_function", f"{runner}(3380): execute_model", r0, t)
        step.end = t + 10_000
        s.span("user_annotation", name, step.start, step.end)
        t = step.end + 20_000
        s.span("python_function", f"{worker}(573): execute_model", w0, t)
        step.forward = s.launched(step.start, step.end)
        # the sampling: the runner's sample_tokens frame (inside the worker's)
        ws0 = t + 30_000
        ss0 = ws0 + 20_000
        t = s.call(ss0 + 60_000, "cudaLaunchKernel", 5_000, [(SOFTMAX, 120_000 * (per if role == "spec" else 1))])
        t = s.call(t + 30_000, "cudaLaunchKernel", 5_000, [(ARGMAX, 45_000)])
        if role == "spec":
            t = s.call(t + 30_000, "cudaLaunchKernel", 5_000, [("rejection_random_sample_kernel", 380_000)])
            t = s.call(t + 40_000, "cudaMemcpyAsync", 10_000, copy="Memcpy DtoH (Device -> Pageable)", blocking=True)
            sample_end = t + 60_000
            step.sample = s.launched(ss0, sample_end)
            p0 = sample_end + 10_000  # propose_draft_token_ids: the inputs, then the proposer
            q = s.call(p0 + 40_000, "cudaLaunchKernel", 5_000, [(PREP, 20_000)])
            s.span("python_function", root + "vllm/v1/spec_decode/eagle.py(512): prepare_inputs_padded", p0 + 20_000,
                   q + 20_000)
            q0 = q + 40_000
            t = q0 + 30_000
            for d in range(gamma):
                first_prefill = prefill and d == 0
                t = s.call(t + 50_000, "cudaLaunchKernel", 5_000, [(PREP, 5_000)])
                draft = _forward_kernels("draft", 1, b, first_prefill)
                if first_prefill:  # the first drafts after the prefill: over the prompt, eagerly
                    for kname, dur in draft[:-1]:
                        t = s.call(t + 40_000, "cudaLaunchKernel", 5_000, [(kname, dur)])
                else:  # one graph replay carries the draft forward's kernels
                    t = s.call(t + 60_000, "cudaGraphLaunch", 12_000, draft[:-1], graph=True)
                t = s.call(t + 20_000, "cudaLaunchKernel", 5_000, [draft[-1]])
                t = s.call(t + 20_000, "cudaLaunchKernel", 5_000, [(ARGMAX, 12_000)])
            q1 = t + 40_000  # returns: its drafts still run on the GPU
            s.span("python_function", root + "vllm/v1/spec_decode/eagle.py(237): propose", q0, q1)
            step.propose, step.propose_frame = s.launched(q0, q1), (q0, q1)
            p1 = q1 + 20_000
            s.span("python_function", f"{runner}(2410): propose_draft_token_ids", p0, p1)
            t = p1 + 30_000
        else:
            if scheduling == "async":  # copied without waiting: waited for after the next step's launch
                t = s.call(t + 30_000, "cudaMemcpyAsync", 8_000, copy="Memcpy DtoH (Device -> Pinned)")
                copy_end = s.ops[-1][1]
                t = s.call(t + 10_000, "cudaEventRecord", 3_000)
            else:
                t = s.call(t + 30_000, "cudaMemcpyAsync", 10_000, copy="Memcpy DtoH (Device -> Pageable)",
                           blocking=True)
            t += 40_000
            step.sample = s.launched(ss0, t)
        s.span("python_function", f"{runner}(4303): sample_tokens", ss0, t)
        step.sample_frame = (ss0, t)
        t += 20_000
        s.span("python_function", f"{worker}(590): sample_tokens", ws0, t)
        if role != "spec" and scheduling == "async":  # the previous step's output, waited for now
            if pending is not None:
                g0 = t + 20_000
                t = s.wait(g0 + 10_000, pending)
                t += 10_000
                s.span("python_function", f"{runner}(231): get_output", g0, t)
            pending = copy_end
        t += 300_000  # the engine's bookkeeping
        s.span("python_function", root + ("vllm/v1/engine/core.py(426): step_with_batch_queue" if scheduling == "async"
                                          else "vllm/v1/engine/core.py(391): step"), core0, t)
        if role == "spec" and not prefill:
            for r in live:
                took = 1
                while took <= gamma and rnd.random() < alpha:
                    took += 1
                step.taken[r] = min(took, left[r])
                left[r] -= step.taken[r]
        elif not prefill:
            for r in live:
                left[r] -= 1
        steps.append(step)
        t += 20_000 if scheduling == "async" else 1_000_000  # sync: the engine loop between its step frames
        k += 1
    if role != "spec":  # a last step that schedules nothing: annotated, no GPU work
        t += 250_000
        empty = H100Step("empty", 0, "execute_context_0(0)_generation_0(0)", t, t + 200_000)
        s.span("python_function", f"{runner}(3380): execute_model", t + 20_000, t + 180_000)
        s.span("user_annotation", empty.name, empty.start, empty.end)
        steps.append(empty)
        t = empty.end + 50_000
    if pending is not None:  # the last step's output
        g0 = t + 20_000
        t = s.wait(g0 + 10_000, pending)
        s.span("python_function", f"{runner}(231): get_output", g0, t + 10_000)
    for i, step in enumerate(steps):  # each step's window: to the next step's annotation (the last: all after it)
        nxt = steps[i + 1].start if i + 1 < len(steps) else t + 10**9
        step.window = [o for o in s.ops if step.start <= o[5] < nxt]
    events = [{"ph": "M", "name": "process_name", "pid": BUILT_PID, "tid": 0, "args": {"name": "VLLM::EngineCore"}},
              {"ph": "M", "name": "thread_name", "pid": BUILT_PID, "tid": BUILT_TID, "args": {"name": "MainThread"}},
              {"ph": "M", "name": "process_name", "pid": DEVICE, "tid": 0, "args": {"name": "GPU 0"}},
              {"ph": "M", "name": "thread_name", "pid": DEVICE, "tid": STREAM, "args": {"name": f"stream {STREAM}"}}]
    events += sorted(s.events, key=lambda e: (e["ts"], -e["dur"]))
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": DEVICE, "name": "NVIDIA H100 80GB HBM3",
                                                     "totalGlobalMem": 85029158912, "computeMajor": 9,
                                                     "computeMinor": 0, "numSms": 132}],
           "with_stack": 1, "vllm_version": "0.11.2", "cuda_runtime_version": 12080, "cupti_version": 26,
           "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}, "traceEvents": events,
           "displayTimeUnit": "ms"}
    dst = Path(dst)
    _write(dst, doc, dst.suffix == ".gz")
    return H100Run(dst, steps, role, batch, output, gamma, s)
