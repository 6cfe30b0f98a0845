"""The exact command lines `nsys-cc profile` runs for one model: the benchmark driver (`bench_args`, its environment
`bench_env`), recorded by the request's recorder (`launch.recorders`: under `nsys profile` then `nsys export`, or the
torch profiler in the driver's own process, no export), into the files named after the model's label (`ModelFiles`).

Nothing here runs anything, so `--dry-run` prints what a real run would execute, byte for byte.

Tensor parallel (`tp` > 1, one model on N ranks): vLLM gets `--tensor-parallel-size N --distributed-executor-backend mp`
(one worker process per rank); on the CPU `VLLM_ENABLE_V1_MULTIPROCESSING=0` is then left out (the mp executor runs
with the engine in its own process, verified with vLLM 0.32's CPU build). With several processes (tensor parallel, or
any GPU run) vLLM's workers get 120 s instead of 5 to exit at the end (`SHUTDOWN_ENV`): a worker killed at exit loses
its last records.

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

from ..contract import BENCH_MODULE, ENV_METRICS_OUT, ENV_PLUGIN, ENV_WARMUP_ITERS
from ..request import BenchOptions
from . import recorders
from .recorders.base import Recorder

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

@dataclass(frozen=True)
class ModelFiles:
    """Everything kept for one model in the output directory, named after its label; `recorder` (the request's
    profiler, `launch.recorders`) decides which trace the run leaves (`trace`)."""

    out_dir: Path
    label: str
    recorder: Recorder = recorders.DEFAULT

    def _path(self, suffix: str) -> Path:
        return self.out_dir / f"{self.label}{suffix}"

    @property
    def base(self) -> Path:
        return self._path("")

    @property
    def trace(self) -> Path:
        """The trace the checks and the analysis read, as its recorder names it (nsys: the SQLite export; the torch
        profiler: its Kineto trace)."""
        return self._path(self.recorder.trace_suffix)

    @property
    def recorded(self) -> Path:
        """What the recorder itself writes: the .nsys-rep report (exported to `trace` next), or the torch trace."""
        return self._path(self.recorder.recorded_suffix)

    @property
    def trace_set(self) -> list[Path]:
        """The files of the model's trace set, replaced together when an attempt completes: what any recorder leaves
        (so that a rerun with another recorder keeps every earlier file proven), vLLM's latencies and metrics dump."""
        names = dict.fromkeys(s for r in recorders.RECORDERS for s in (r.recorded_suffix, r.trace_suffix))
        return [*(self._path(s) for s in names), self.bench_json, self.metrics]

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


def model_commands(binary: str, model: str, files: ModelFiles, opts: BenchOptions, *, gpu: bool,
                   trace: str | None = None, nsys_extra: Sequence[str] = (),
                   environ: Mapping[str, str] = os.environ, speculative_config: str | None = None,
                   load_format: str = "dummy", tp: int = 1) -> ModelCommands:
    """The command lines and the environment for profiling `model` into `files` (speculatively when
    `speculative_config`, vLLM's JSON, is given: then vLLM's metrics are dumped to `files.metrics`), on `tp`
    tensor-parallel ranks, recorded by `files.recorder` (`binary`: the program it runs, "" for none)."""
    bench = bench_args(model, files.bench_json, opts, gpu=gpu, speculative_config=speculative_config,
                       load_format=load_format, tp=tp)
    env = bench_env(opts, gpu=gpu, environ=environ, tp=tp)
    if speculative_config is not None:
        env[ENV_METRICS_OUT] = str(files.metrics)
    recorded = files.recorder.commands(binary, bench, files.base, gpu=gpu, trace=trace, extra=nsys_extra, tp=tp,
                                       environ=environ)
    return ModelCommands({**env, **recorded.env}, recorded.profile, recorded.export, files, gpu=gpu)
