"""Nsight Systems as a profile's recorder (`--profiler nsys`, the default): the benchmark driver under `nsys profile`,
then `nsys export` of its report to SQLite, the trace the analysis reads (`<base>.sqlite`, beside `<base>.nsys-rep`).

nsys options by platform:
- GPU: `-t cuda,nvtx,osrt,cublas,cudnn --trace-fork-before-exec=true` (vLLM's engine and workers are child
  processes) and `--cuda-graph-trace=node`, so each kernel a CUDA graph replays is a row of its own (recent nsys
  record a graph whole by default: one row per launch and no kernel metrics);
- CPU: `-t nvtx,osrt` (there is nothing else to trace).
Tensor parallel (`tp` > 1): `--trace-fork-before-exec=true` on the CPU too, so every rank's ranges are recorded.
Both: `-s none --cpuctxsw=none` (no CPU sampling: smaller traces, less perturbation), `-f true`. `trace` (the request's
`--nsys-trace`) replaces `-t`, `extra` (its `--nsys-arg`s) come before the output.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from ...contract import ENV_TORCH_SETTINGS
from ...errors import InputError, NsysCCError
from .base import Commands, Recorder

GPU_TRACE = "cuda,nvtx,osrt,cublas,cudnn"
CPU_TRACE = "nvtx,osrt"
# nvtx releases whose ranges nsys 2022.4 does not record (docs/REAL_STACK.md).
_NVTX_UNRECORDED_BY_2022 = re.compile(r"^0\.2\.1[2-7]\b")


def profile_args(nsys: str, out_base: Path, *, gpu: bool, trace: str | None = None, extra: Sequence[str] = (),
                 tp: int = 1) -> list[str]:
    """`nsys profile` options for the platform (module docstring); `trace` replaces `-t`."""
    args = [nsys, "profile", "-t", trace or (GPU_TRACE if gpu else CPU_TRACE), "-s", "none", "--cpuctxsw=none"]
    if gpu or tp > 1:
        args.append("--trace-fork-before-exec=true")
    if gpu:
        args.append("--cuda-graph-trace=node")
    return [*args, *extra, "-f", "true", "-o", str(out_base)]


def export_args(nsys: str, report: Path, sqlite: Path) -> list[str]:
    """`nsys export` of one report into SQLite at `sqlite` (overwriting)."""
    return [nsys, "export", "--type", "sqlite", "-f", "true", "-o", str(sqlite), str(report)]


def _shown(value: str) -> str:
    return repr(value if len(value) <= 80 else value[:79] + "…")


class Nsys(Recorder):
    """Nsight Systems: NVTX ranges (and CUDA on a GPU) recorded by `nsys profile`, exported to SQLite."""

    name = "nsys"
    under = "nsys"
    trace_suffix = ".sqlite"
    recorded_suffix = ".nsys-rep"
    suffixes = (".nsys-rep", ".sqlite", ".qdstrm")

    def binary(self, *, shown_only: bool = False) -> str:
        from ...trace.nsys import find_nsys, require_nsys

        return (find_nsys() or "nsys") if shown_only else require_nsys()

    def version(self, binary: str) -> str | None:
        from ...trace.nsys import nsys_version

        try:
            return nsys_version(binary)
        except NsysCCError:
            return None

    def commands(self, binary: str, program: Sequence[str], base: Path, *, gpu: bool, trace: str | None = None,
                 extra: Sequence[str] = (), tp: int = 1, environ: Mapping[str, str] | None = None) -> Commands:
        profile = [*profile_args(binary, base, gpu=gpu, trace=trace, extra=extra, tp=tp), *program]
        report, sqlite = Path(f"{base}{self.recorded_suffix}"), Path(f"{base}{self.trace_suffix}")
        return Commands(profile, export_args(binary, report, sqlite), {})

    def check_environment(self, environ: Mapping[str, str]) -> None:
        settings = environ.get(ENV_TORCH_SETTINGS, "")
        if settings.strip():
            raise InputError(f"{ENV_TORCH_SETTINGS}={_shown(settings)} is set, but the runs are recorded by "
                             f"{self.name}: it chooses what the torch profiler records (--profiler torch); unset it "
                             f"for an {self.name} profile")

    def warnings(self, binary: str) -> list[str]:
        from ...trace.nsys import nsys_version

        try:
            nvtx_version = importlib.metadata.version("nvtx")
        except importlib.metadata.PackageNotFoundError:
            return ["the nvtx package is not installed (pip install nvtx==0.2.11): forward ranges carry no payload "
                    "on CUDA builds of torch and are not recorded at all on CPU builds"]
        year = int(nsys_version(binary).split(".")[0])
        if year <= 2022 and _NVTX_UNRECORDED_BY_2022.match(nvtx_version):
            return [f"nvtx {nvtx_version} is not recorded by nsys {nsys_version(binary)}: pip install nvtx==0.2.11 "
                    "(or use a newer nsys)"]
        return []


NSYS = Nsys()
