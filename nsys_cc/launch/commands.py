"""The exact command lines `nsys-cc profile` runs for one model: `nsys profile … bench`, then `nsys export`; on the
torch route (`profiler="torch"`, `profile --profiler torch`) the benchmark alone under plain Python, with
`NSYS_CC_TORCH_RANGES=1` (the plugin's ranges as torch.profiler ranges) and
`NSYS_CC_TORCH_TRACE=<label>.pt.trace.json.gz` (the driver runs the torch profiler and writes its trace there:
`nsys_cc.vllm.torch_profiler`), and no export. vLLM's engine then runs in the driver's process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0` on the GPU too), where the profiler is.

Nothing here runs anything, so `--dry-run` prints what a real run would execute, byte for byte.

nsys options by platform:
- GPU: `-t cuda,nvtx,osrt,cublas,cudnn --trace-fork-before-exec=true` (vLLM's engine and workers are child
  processes) and `--cuda-graph-trace=node`, so each kernel a CUDA graph replays is a row of its own (recent nsys
  record a graph whole by default: one row per launch and no kernel metrics);
- CPU: `-t nvtx,osrt` (there is nothing else to trace).
Tensor parallel (`tp` > 1, one model on N ranks): vLLM gets `--tensor-parallel-size N --distributed-executor-backend mp`
(one worker process per rank) and nsys `--trace-fork-before-exec=true` on the CPU too, so every rank's ranges are
recorded; on the CPU `VLLM_ENABLE_V1_MULTIPROCESSING=0` is then left out (the mp executor runs with the engine in its
own process, verified with vLLM 0.32's CPU build). With several processes (tensor parallel, or any GPU run) vLLM's
workers get 120 s instead of 5 to exit at the end (`SHUTDOWN_ENV`): a worker killed at exit loses its last NVTX records.
Both: `-s none --cpuctxsw=none` (no CPU sampling: smaller traces, less perturbation), `-f true`.

A speculative run is the same benchmark of the target with `--speculative-config JSON` (vLLM's own option) and env
`NSYS_CC_METRICS_OUT=<label>.metrics.json`, where the benchmark driver dumps vLLM's spec-decode counters.

Benchmark defaults are those of the vLLM issue that measured c by hand (#6468): `--input-len 128 --output-len 2
--batch-size 1 --num-iters-warmup 5 --num-iters 5`, dummy weights (`--load-format dummy`: a config.json is enough),
token prompts (`--skip-tokenizer-init --disable-detokenize`). On a GPU vLLM runs as users serve it, with its CUDA
graphs (its default), unless `enforce_eager` (`--enforce-eager`): the graphs change what a forward costs (launch-bound
eager forwards give another c). On CPU hosts `--enforce-eager` always (vLLM's CPU build has no CUDA graphs) and the
settings that make vLLM's CPU build run (docs/REAL_STACK.md) are added: `--gpu-memory-utilization 0.3` (the share of
RAM reserved), `VLLM_ENABLE_V1_MULTIPROCESSING=0`, `VLLM_CPU_KVCACHE_SPACE=1`, and one unbound OpenMP thread
(`VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1`): vLLM's default binds one spinning OpenMP thread to each core,
and on a small machine with any other load a forward then takes 20–50× longer (measured here on 2 cores: 10 ms per
iteration when idle, 520 ms with one core busy, 14 ms with one unbound thread either way). Values the user set in the
environment win.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..contract import (
    BENCH_MODULE,
    ENV_METRICS_OUT,
    ENV_PLUGIN,
    ENV_TORCH_RANGES,
    ENV_TORCH_TRACE,
    ENV_WARMUP_ITERS,
    PROFILERS,
    TORCH_TRACE_SUFFIX,
)

GPU_TRACE = "cuda,nvtx,osrt,cublas,cudnn"
CPU_TRACE = "nvtx,osrt"
# What vLLM's CPU build needs (docs/REAL_STACK.md); setdefault semantics: the user's environment wins.
CPU_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}
# vLLM's profiling guide: spawned workers start cleanly under nsys.
GPU_ENV = {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
CPU_MEMORY_UTILIZATION = "0.3"
# vLLM gives its engine-core and worker processes VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS (default 5) to exit at the end,
# then kills them, and nsys loses what a killed process had not yet handed over. Measured with vLLM 0.32's CPU build:
# tensor-parallel workers need about 3 s to exit when the machine is idle; with a second vLLM run beside them every
# worker was killed at 5 s, and on a loaded machine (load 8 on 2 cores) both ranks' traces lost their last iteration's
# forwards. Only the slow exits wait longer: a worker that is done exits at once.
SHUTDOWN_ENV = {"VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS": "120"}
# The torch route: the torch profiler runs in the driver's process, so vLLM's engine must run there too.
TORCH_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


@dataclass(frozen=True)
class BenchOptions:
    """What one benchmark run does (the same for every model of a `profile` call).

    input_len / output_len: prompt and generated tokens per sequence; batch_size: sequences per iteration;
    warmup_iters / iters: unmeasured and measured iterations (one `LLM.generate` call each);
    enforce_eager: on a GPU, run vLLM eagerly instead of with its CUDA graphs (the default; a CPU run is always
    eager); vllm_args: extra benchmark options.
    """

    input_len: int = 128
    output_len: int = 2
    batch_size: int = 1
    warmup_iters: int = 5
    iters: int = 5
    enforce_eager: bool = False
    vllm_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelFiles:
    """Everything kept for one model in the output directory, named after its label; `profiler` ("nsys" or "torch")
    decides which trace the run leaves (`trace`)."""

    out_dir: Path
    label: str
    profiler: str = "nsys"

    def _path(self, suffix: str) -> Path:
        return self.out_dir / f"{self.label}{suffix}"

    @property
    def base(self) -> Path:
        return self._path("")

    @property
    def report(self) -> Path:
        return self._path(".nsys-rep")

    @property
    def sqlite(self) -> Path:
        return self._path(".sqlite")

    @property
    def trace(self) -> Path:
        """The trace the checks and the analysis read: the SQLite export (nsys) or the torch profiler's Kineto trace."""
        return self.sqlite if self.profiler == "nsys" else self._path(TORCH_TRACE_SUFFIX)

    @property
    def recorded(self) -> Path:
        """What the profiler itself writes: the .nsys-rep report (exported to `sqlite` next), or the torch trace."""
        return self.report if self.profiler == "nsys" else self.trace

    @property
    def bench_json(self) -> Path:
        return self._path(".bench.json")

    @property
    def log(self) -> Path:
        return self._path(".log")

    @property
    def metrics(self) -> Path:
        """vLLM's metrics dump (speculative runs only): `nsys_cc.analysis.profile_dir.acceptance.dump_metrics`
        format."""
        return self._path(".metrics.json")

    @property
    def done(self) -> Path:
        """Written last, after a checked export: its presence (with the same commands) means complete."""
        return self._path(".done.json")


@dataclass(frozen=True)
class ModelCommands:
    """The environment additions and the two command lines for one model."""

    env: Mapping[str, str]
    profile: list[str]
    export: list[str]
    files: ModelFiles = field(compare=False)
    gpu: bool = field(default=False, compare=False)  # made with the GPU settings

    @property
    def trace_option(self) -> str | None:
        """The `nsys profile -t` value (what nsys traces)."""
        return self.profile[self.profile.index("-t") + 1] if "-t" in self.profile else None

    def shell(self) -> str:
        """The commands as a shell would run them (for `--dry-run` and the log); the torch route has no export."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"{env} {shlex.join(self.profile)}" + (f"\n{shlex.join(self.export)}" if self.export else "")


def nsys_profile_args(nsys: str, out_base: Path, *, gpu: bool, trace: str | None = None,
                      extra: Sequence[str] = (), tp: int = 1) -> list[str]:
    """`nsys profile` options for the platform (see the module docstring); `trace` replaces `-t`."""
    args = [nsys, "profile", "-t", trace or (GPU_TRACE if gpu else CPU_TRACE), "-s", "none", "--cpuctxsw=none"]
    if gpu or tp > 1:
        args.append("--trace-fork-before-exec=true")
    if gpu:
        args.append("--cuda-graph-trace=node")
    return [*args, *extra, "-f", "true", "-o", str(out_base)]


def bench_args(model: str, bench_json: Path, opts: BenchOptions, *, gpu: bool,
               python: str = sys.executable, speculative_config: str | None = None,
               load_format: str = "dummy", tp: int = 1) -> list[str]:
    """The benchmark driver's command line (`python -m nsys_cc.vllm.bench …`); `speculative_config` is the
    JSON given to vLLM's `--speculative-config` (None: a plain run); `load_format` vLLM's `--load-format`."""
    args = [
        python, "-m", BENCH_MODULE, "--model", model, "--load-format", load_format,
        "--input-len", str(opts.input_len), "--output-len", str(opts.output_len),
        "--batch-size", str(opts.batch_size), "--num-iters-warmup", str(opts.warmup_iters),
        "--num-iters", str(opts.iters), "--skip-tokenizer-init", "--disable-detokenize",
        "--output-json", str(bench_json),
    ]
    if not gpu or opts.enforce_eager:
        args.append("--enforce-eager")
    if not gpu:
        args += ["--gpu-memory-utilization", CPU_MEMORY_UTILIZATION]
    if speculative_config is not None:
        args += ["--speculative-config", speculative_config]
    if tp > 1:
        args += ["--tensor-parallel-size", str(tp), "--distributed-executor-backend", "mp"]
    return [*args, *opts.vllm_args]


def bench_env(opts: BenchOptions, *, gpu: bool, environ: Mapping[str, str] = os.environ,
              tp: int = 1) -> dict[str, str]:
    """Variables to add to the environment: the plugin's switches and the platform's settings."""
    env = {ENV_PLUGIN: "1", ENV_WARMUP_ITERS: str(opts.warmup_iters)}
    plugins = environ.get("VLLM_PLUGINS")
    if plugins is not None and "nsys_cc" not in plugins.split(","):
        # An allow-list would keep the plugin out of vLLM's engine and worker processes.
        env["VLLM_PLUGINS"] = ",".join(p for p in (plugins, "nsys_cc") if p)
    for key, value in (GPU_ENV if gpu else CPU_ENV).items():
        if tp > 1 and key == "VLLM_ENABLE_V1_MULTIPROCESSING":
            continue  # the mp executor's workers need the engine in its own process
        if key not in environ:
            env[key] = value
    if tp > 1 or gpu:  # vLLM runs in several processes (on the CPU with one rank it runs in this one)
        env.update({k: v for k, v in SHUTDOWN_ENV.items() if k not in environ})
    return env


def known_profiler(profiler: str) -> str:
    """`profiler` when it is one of `contract.PROFILERS`, else InputError naming the parameter."""
    if profiler not in PROFILERS:
        from ..errors import InputError

        raise InputError(f"profiler must be {' or '.join(PROFILERS)}, not {profiler!r}", param="profiler")
    return profiler


# What a route's runs are made under, as the progress lines and a failed run's reason say it.
UNDER = {"nsys": "nsys", "torch": "the torch profiler"}


def nsys_for(profiler: str, *, shown_only: bool = False) -> str:
    """The nsys binary a route runs: on the nsys route `require_nsys()` (NsysNotFoundError when there is none), or
    with `shown_only` (commands printed, not run) `find_nsys()` or plain "nsys"; "" on the torch route, which runs no
    nsys."""
    if profiler != "nsys":
        return ""
    from ..trace.nsys import find_nsys, require_nsys

    return (find_nsys() or "nsys") if shown_only else require_nsys()


def torch_env(trace: Path, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The torch route's additions to a run's environment: the plugin's ranges as torch.profiler ranges, the trace's
    path for the driver's profiler, and vLLM's engine in the driver's process (the user's environment wins)."""
    env = {ENV_TORCH_RANGES: "1", ENV_TORCH_TRACE: str(trace)}
    env.update({k: v for k, v in TORCH_ENV.items() if k not in environ})
    return env


def export_args(nsys: str, report: Path, sqlite: Path) -> list[str]:
    """`nsys export` of one report into SQLite at `sqlite` (overwriting)."""
    return [nsys, "export", "--type", "sqlite", "-f", "true", "-o", str(sqlite), str(report)]


def model_commands(nsys: str, model: str, files: ModelFiles, opts: BenchOptions, *, gpu: bool,
                   trace: str | None = None, nsys_extra: Sequence[str] = (),
                   environ: Mapping[str, str] = os.environ, speculative_config: str | None = None,
                   load_format: str = "dummy", tp: int = 1) -> ModelCommands:
    """Both command lines and the environment for profiling `model` into `files` (speculatively when
    `speculative_config`, vLLM's JSON, is given: then vLLM's metrics are dumped to `files.metrics`), on `tp`
    tensor-parallel ranks; on the torch route (`files.profiler` "torch") the benchmark alone, no export."""
    bench = bench_args(model, files.bench_json, opts, gpu=gpu, speculative_config=speculative_config,
                       load_format=load_format, tp=tp)
    env = bench_env(opts, gpu=gpu, environ=environ, tp=tp)
    if speculative_config is not None:
        env[ENV_METRICS_OUT] = str(files.metrics)
    if files.profiler == "torch":
        env.update(torch_env(files.trace, environ))
        return ModelCommands(env, bench, [], files, gpu=gpu)
    profile = [*nsys_profile_args(nsys, files.base, gpu=gpu, trace=trace, extra=nsys_extra, tp=tp), *bench]
    return ModelCommands(env, profile, export_args(nsys, files.report, files.sqlite), files, gpu=gpu)
