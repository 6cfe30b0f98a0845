"""What a trace says about where it ran (`Trace.describe()`): the device, the platform, the engine and its
version, the rank — what tells two traces apart before their numbers are compared (a CPU export paired with an H100
trace, a B200 tensor-parallel trace with H100 decodes).

`TraceDescription` is the small value both readers give (`ExportTrace.describe`, `KinetoTrace.describe`); the helpers
below turn what each format writes into it, so the readers only gather their own facts:

- a PyTorch-profiler (Kineto) trace: `deviceProperties` (the GPUs; those its GPU ops ran on), `cuda_runtime_version`
  (12090 → CUDA 12.9) or `hip_runtime_version` / `roctracer_version` (ROCm: 70051831 → HIP 7.0.51831; the `hip*`
  runtime calls too), `distributedInfo` (rank, world size), vLLM's own `vllm_version` (written beside its traces), the
  process names (`VLLM::EngineCore`, `sglang::scheduler`) and the names of its ranges and Python frames;
- an Nsight Systems export: `TARGET_INFO_GPU` (the GPUs by device id; those its kernels ran on),
  `TARGET_INFO_SYSTEM_ENV`'s `CudaDriverVersion` (the driver's CUDA version: exports state no runtime version), the
  process and thread names and the NVTX names (the nsys_cc plugin's ranges and vLLM's own scopes are vLLM's).

Nothing here is a measurement; a fact the trace does not state is None (or empty), never guessed.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..contract import (
    DRAFT_FORWARD_RANGE,
    FORWARD_RANGE,
    SCOPES_FORWARD,
    SCOPES_STEP_PREFIX,
    STEP_RANGE,
    VLLM_STEP_PREFIX,
)

CUDA, ROCM, CPU = "CUDA", "ROCm", "CPU"
VLLM, SGLANG = "vLLM", "SGLang"

# The prefixes of vLLM's own NVTX scopes and of the plugin's ranges (written inside vLLM), from the contract.
_VLLM_PREFIXES = (SCOPES_FORWARD.split(": ")[0] + ": ", SCOPES_STEP_PREFIX.split(": ")[0],
                  STEP_RANGE.split(":")[0] + ":")

# Names that only an engine writes: its process titles, module paths in Python frames, its step annotations and
# scopes, the nsys_cc plugin's ranges (written inside vLLM). SGLang is tried first: it imports vLLM's kernels.
# Searched over the names joined a line each (`engine_of`): ^ and $ hold at every name's ends (re.MULTILINE).
_ENGINE_MARKS: tuple[tuple[str, re.Pattern], ...] = (
    (SGLANG, re.compile(r"sglang::|(^|/)sglang/srt/|^step\[(DECODE|EXTEND|PREFILL|MIXED|IDLE)\b",
                        re.IGNORECASE | re.MULTILINE)),
    (VLLM, re.compile("|".join((r"VLLM::", r"(^|/)vllm/(v1/)?\w+", f"^{re.escape(VLLM_STEP_PREFIX)}(\\d+_)?context_\\d",
                                *(f"^{re.escape(prefix)}" for prefix in _VLLM_PREFIXES),
                                *(f"^{re.escape(name)}$" for name in (FORWARD_RANGE, DRAFT_FORWARD_RANGE)))),
                      re.MULTILINE)),
)


@dataclass(frozen=True)
class TraceDescription:
    """Where a trace ran, as it says (`Trace.describe()`; module docstring).

    - `platform`: "CUDA", "ROCm" (GPU work through HIP), or "CPU" (no GPU work in the trace and no GPU described: a
      run on the CPU). A trace of a GPU machine whose GPU work is not recorded (traced without CUDA, its GPUs
      described; or its CUDA calls recorded and their GPU activity lost) is a GPU platform's: its ranges' CPU times
      are launch times, as a GPU trace's.
    - `devices`: the names of the GPUs its GPU work ran on (without GPU work recorded, the GPUs the trace describes;
      empty when it names none, or on a CPU trace); `device` joins them.
    - `runtime`: the runtime's version as the trace states it ("CUDA 12.9", "CUDA driver 13.0", "HIP 7.0.51831"), or
      None.
    - `engine`: "vLLM", "SGLang", or None (the trace names neither: the user's own code, or not said);
      `engine_version` where the trace states it.
    - `rank`, `world_size`: the process's place in a distributed run (`distributedInfo`), None when not stated.
    """

    platform: str
    devices: tuple[str, ...] = ()
    runtime: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    rank: int | None = None
    world_size: int | None = None

    @property
    def device(self) -> str | None:
        """The GPU(s) it ran on in words ("NVIDIA H100 80GB HBM3", "2 × NVIDIA A100-SXM4-80GB"); "CPU" on a CPU trace;
        None when a GPU trace names none."""
        if self.platform == CPU:
            return CPU
        if not self.devices:
            return None
        names = list(dict.fromkeys(self.devices))
        if len(names) == 1:
            return names[0] if len(self.devices) == 1 else f"{len(self.devices)} × {names[0]}"
        return " + ".join(names)

    def __str__(self) -> str:
        """One line: "NVIDIA H100 80GB HBM3 (CUDA 12.4), vLLM 0.32.0, rank 0 of 4"."""
        where = self.device or f"{self.platform} (the trace names no GPU)"
        if self.runtime:
            where += f" ({self.runtime})"
        parts = [where, (f"{self.engine} {self.engine_version}" if self.engine_version else self.engine)
                 if self.engine else "engine not named (own code?)"]
        if self.world_size is not None and self.world_size > 1:
            parts.append(f"rank {self.rank if self.rank is not None else '?'} of {self.world_size}")
        return ", ".join(parts)

    def to_dict(self) -> dict:
        """Plain JSON-able data (the result's `models[].trace`, `nsys-cc info`)."""
        return {"platform": self.platform, "device": self.device, "devices": list(self.devices),
                "runtime": self.runtime, "engine": self.engine, "engine_version": self.engine_version,
                "rank": self.rank, "world_size": self.world_size}


def engine_of(names: Iterable[str]) -> str | None:
    """The engine that wrote some of `names` (process titles, module paths, range and frame names), None for none."""
    # one search per engine over the names joined a line each (`_ENGINE_MARKS` are multi-line): an export's
    # StringIds hold 10⁴–10⁶ names, and a search per name cost seconds
    text = "\n".join(str(n).replace("\n", " ") for n in names if n)
    for engine, mark in _ENGINE_MARKS:
        if mark.search(text):
            return engine
    return None


def cuda_version(value) -> str | None:
    """CUDA's version number as text: 12090 → "12.9", 13000 → "13.0" (major × 1000 + minor × 10); None otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return f"{value // 1000}.{value % 1000 // 10}"


def hip_version(value) -> str | None:
    """HIP's version number as text: 70051831 → "7.0.51831" (major × 10⁷ + minor × 10⁵ + patch); None otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return f"{value // 10_000_000}.{value // 100_000 % 100}.{value % 100_000}"


def device_name(name, major=None, minor=None, sms=None) -> str:
    """A GPU's name, or where the trace leaves it empty (ROCm traces may) what it says of it: "GPU (compute 9.4, 304
    SMs)"."""
    if isinstance(name, str) and name.strip():
        return name.strip()
    facts = []
    if isinstance(major, int) and isinstance(minor, int) and major >= 0:
        facts.append(f"compute {major}.{minor}")
    if isinstance(sms, int) and sms > 0:
        facts.append(f"{sms} SMs")
    return f"GPU ({', '.join(facts)})" if facts else "GPU (unnamed)"


def of_kineto(meta: Mapping, device_ids, api_names: Iterable[str], process_names: Iterable[str],
              range_names: Iterable[str], frame_names: Callable[[], Iterable[str]]) -> TraceDescription:
    """A PyTorch-profiler trace's description from its top-level metadata (`meta`), the device ids of its GPU ops, its
    runtime/driver call names, process names, range names and (asked for only when the rest names no engine: most
    events are frames) its Python frames' names (module docstring)."""
    used = {int(d) for d in device_ids}
    listed = [d for d in meta.get("deviceProperties") or () if isinstance(d, dict)]
    props = [d for d in listed if d.get("id") in used]
    if not props and len(listed) == len(used):  # ROCm may number its devices apart from the list (9 against 0)
        props = listed
    api = [str(n) for n in api_names]
    rocm = "hip_runtime_version" in meta or "roctracer_version" in meta or any(n.startswith("hip") for n in api)
    hip, cuda = hip_version(meta.get("hip_runtime_version")), cuda_version(meta.get("cuda_runtime_version"))
    runtime = f"HIP {hip}" if hip else f"CUDA {cuda}" if cuda and not rocm else None
    engine = engine_of(process_names) or engine_of(range_names) or engine_of(frame_names())
    version = meta.get({VLLM: "vllm_version", SGLANG: "sglang_version"}.get(engine or "", ""))
    dist = meta.get("distributedInfo")
    rank, world = (dist.get("rank"), dist.get("world_size")) if isinstance(dist, Mapping) else (None, None)
    gpu = bool(used) and bool(api)
    if not used:  # no GPU work recorded: the GPUs it describes, if any (a GPU machine traced without its GPU)
        props = listed
    return TraceDescription(
        platform=CPU if not (api or props) else ROCM if rocm else CUDA,
        devices=tuple(device_name(d.get("name"), d.get("computeMajor"), d.get("computeMinor"), d.get("numSms"))
                      for d in props),
        runtime=runtime if gpu or props else None, engine=engine,
        engine_version=version if isinstance(version, str) and version else None,
        rank=rank if type(rank) is int else None, world_size=world if type(world) is int else None)


# The vLLM names an export's NVTX text may hold inline (not as registered strings): the plugin's and vLLM's scopes.
_VLLM_NVTX = (FORWARD_RANGE, DRAFT_FORWARD_RANGE, *(f"{prefix}%" for prefix in _VLLM_PREFIXES))


def of_export(conn: sqlite3.Connection, has_table: Callable[[str], bool], has_cuda: bool) -> TraceDescription:
    """An Nsight Systems export's description (module docstring) from its read-only connection: the GPUs of
    `TARGET_INFO_GPU` its kernels (or copies) ran on, the driver's CUDA version, the engine from the process, thread and
    registered names (then the NVTX text), no rank (an export holds every traced process)."""

    def rows(sql: str, params: tuple = ()) -> list[tuple]:
        try:
            return conn.execute(sql, params).fetchall()
        except sqlite3.Error:  # a column or table this nsys version does not write: the fact is not stated
            return []

    used: set[int] = set()
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"):
        if has_cuda and has_table(table):
            used |= {int(d) for (d,) in rows(f"SELECT DISTINCT deviceId FROM {table}") if isinstance(d, int)}
    gpus = (rows("SELECT id, name, computeMajor, computeMinor, smCount FROM TARGET_INFO_GPU ORDER BY id")
            if has_table("TARGET_INFO_GPU") else [])
    devices = tuple(device_name(n, a, b, s) for i, n, a, b, s in gpus if i in used or not has_cuda)
    driver = (rows("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'CudaDriverVersion'")
              if has_table("TARGET_INFO_SYSTEM_ENV") else [])
    version = cuda_version(int(driver[0][0])) if driver and str(driver[0][0]).isdigit() else None
    names = [n for (n,) in rows("SELECT name FROM PROCESSES")] if has_table("PROCESSES") else []
    names += [n for (n,) in rows("SELECT value FROM StringIds")] if has_table("StringIds") else []
    engine = engine_of(names)
    if engine is None and has_table("NVTX_EVENTS"):
        where = " OR ".join("text LIKE ?" for _ in _VLLM_NVTX)
        engine = VLLM if rows(f"SELECT 1 FROM NVTX_EVENTS WHERE {where} LIMIT 1", _VLLM_NVTX) else None
    # without GPU work recorded, CUDA calls made or GPUs described still make it a GPU platform's trace
    gpu = has_cuda or bool(devices) or has_table("CUPTI_ACTIVITY_KIND_RUNTIME")
    return TraceDescription(platform=CUDA if gpu else CPU, devices=devices,
                            runtime=f"CUDA driver {version}" if version and gpu else None, engine=engine)
