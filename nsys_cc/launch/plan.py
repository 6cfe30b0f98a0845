"""Planning the one-process-per-model runs (`launch.separate`): which runs there are (target, drafts, speculative
runs), their labels, roles and exact commands, checked before anything runs; what every profile checks of its
benchmark (`check_options`, `check_context`), its γ values and speculative config; the device choice.

Nothing here starts a process or writes a file (`detect_gpu` asks `nvidia-smi -L` only).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import inputs
from ..contract import FORWARD_RANGE
from ..errors import InputError
from ..request import ProfileRequest
from . import recorders
from .commands import BenchOptions, ModelCommands, ModelFiles, model_commands
from .models import HEADS, MTP_TARGETS, Model, context_length, head_for, resolve, resolve_all

ROLES = ("target", "draft", "speculative")
DEFAULT_SPEC_METHOD = "draft_model"


@dataclass
class ModelLaunch:
    """One model's part of a profile (its launch): its commands and, after running, `status` and `reason`. With one
    process per model it is one run (one process under the profiler); with interleaved runs its status over them.

    role: "target", "draft" or "speculative" (the target run with a speculative config; `model` is then the
    target with the run's label, `draft` the draft's label — or the proposer's method when it has no draft
    model — and `gamma` the tokens proposed per step).
    status: "planned", "done" (profiled now), "resumed" (complete from an earlier run), "failed",
    "interrupted" (Ctrl-C) or "not run" (after an interruption).
    record: what its `<label>.done.json` stores beside what happened (`orchestrator.stamp`).
    """

    role: str
    model: Model
    commands: ModelCommands
    status: str = "planned"
    reason: str = ""
    seconds: float = 0.0
    range_name: str = FORWARD_RANGE
    draft: str | None = None
    gamma: int | None = None
    method: str | None = None  # a speculative run's proposer (vLLM's speculative_config method)
    record: dict = field(default_factory=dict)

    @property
    def files(self) -> ModelFiles:
        return self.commands.files

    @property
    def speculative_config(self) -> str | None:
        """The `--speculative-config` vLLM runs this model with (None: a plain run)."""
        words = self.commands.profile
        return words[words.index("--speculative-config") + 1] if "--speculative-config" in words else None

    @property
    def ok(self) -> bool:
        return self.status in ("done", "resumed")

    @property
    def speculative(self) -> bool:
        return self.role == "speculative"

    def to_dict(self) -> dict:
        """The model as the status lists it (`formats.status_json`): its state, files and forward range."""
        f = self.files
        out = {"role": self.role, "model": self.model.spec, "label": self.model.label, "status": self.status,
               "reason": self.reason, "seconds": round(self.seconds, 1), "range": self.range_name, "log": str(f.log),
               "bench_json": str(f.bench_json), "trace": str(f.trace)}
        if self.speculative:
            out.update(draft=self.draft, gamma=self.gamma, metrics=str(f.metrics),
                       speculative_config=self.speculative_config)
        return out

    def engine(self) -> dict:
        """The model as its run's record lists it (`formats.done_json`'s "models")."""
        return {"label": self.model.label, "role": self.role, "model": self.model.spec,
                **({"draft": self.draft, "gamma": self.gamma, "speculative_config": self.speculative_config}
                   if self.speculative else {})}


def uses_gpu(device: str) -> bool:
    """Whether to use the GPU settings: `device` "gpu", or "auto" on a host where `nvidia-smi -L` lists a GPU."""
    if device not in ("auto", "cpu", "gpu"):
        raise InputError(f"device must be auto, cpu or gpu, not {device!r}", param="device")
    return detect_gpu() if device == "auto" else device == "gpu"


def detect_gpu() -> bool:
    """Whether `nvidia-smi -L` lists a GPU on this host."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def check_speculate_ranks(speculating: bool, target_tp: int, tp_param: str = "target_tp",
                          verb: str = "profile") -> None:
    """Speculative runs keep the target on one process and are measured in place against the plain target's
    one-process decode steps: refused (InputError) with a target on several ranks, before anything runs."""
    if speculating and target_tp > 1:
        raise InputError(f"speculate with {tp_param} {target_tp}: speculative runs are measured against the plain "
                         f"target on one process; {verb} them with {tp_param} 1 and the target's ranks in a {verb} "
                         "without speculate", param="speculate")


def parse_speculative_config(text: str | None) -> dict | None:
    """vLLM's speculative config from its JSON text (None stays None); InputError unless it is a JSON object."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise InputError(f"speculative_config must be JSON text, not {type(text).__name__} {text!r}",
                         param="speculative_config")
    depth = inputs.json_depth(text.encode("utf-8", "surrogatepass"))
    if depth > inputs.MAX_DEPTH:  # 30 000 deep raised RecursionError; vLLM's configs nest 2–3 deep
        raise InputError(f"speculative_config is nested deeper than {inputs.MAX_DEPTH} levels: it is not a "
                         "speculative config", param="speculative_config")
    try:
        config = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"speculative_config is not JSON: {exc}", param="speculative_config") from None
    if not isinstance(config, dict):
        raise InputError(f"speculative_config must be a JSON object, not {text!r}", param="speculative_config")
    return config


def _spec_json(config: dict) -> str:
    return json.dumps(config, separators=(",", ":"))


def with_model_path(target: Model, config: dict | None) -> dict | None:
    """`config` as vLLM needs it: a shipped shape, a known-α pair model or a folder named in its "model" replaced by
    the folder's path (a Hugging Face id stays); an EAGLE/EAGLE-3 config without a model, on a shipped target with a
    shipped head (`models.HEADS`), given that head. InputError for an MTP config on a shipped target without MTP
    layers (vLLM would fail after loading the model)."""
    if config is None:
        return None
    method = config.get("method")
    named = config.get("model")
    if method == "suffix" and importlib.util.find_spec("arctic_inference") is None:
        # vLLM would load the model first and then fail with this (vLLM 0.32, also its CPU build)
        raise InputError("speculative_config: method suffix needs Arctic Inference, which this Python lacks (vLLM: "
                         "\"Arctic Inference is required for suffix decoding. Install via `pip install "
                         "arctic-inference==0.1.1`.\")", param="speculative_config")
    if named is None and isinstance(method, str) and target.kind == "shape":
        head = head_for(target.spec, method)
        if head is not None:
            return {**config, "model": resolve(head).path}
        if method == "mtp" and target.spec not in MTP_TARGETS:
            raise InputError(f"speculative_config: method mtp drafts with the target's own MTP layers, which "
                             f"{target.spec} has none of; profile {', '.join(MTP_TARGETS)} instead",
                             param="speculative_config")
    if isinstance(named, str):
        model = resolve(named)
        if model.kind != "hub":
            return {**config, "model": model.path}
    return config


def config_models(options: Sequence[str]) -> list[Model]:
    """The known-α pair models a run's `--speculative-config` (in vLLM's `options`) loads as its draft, by the folder
    `with_model_path` put there: their weights must be built before vLLM starts (a tune design has no plain draft
    engine whose own model would build them; without this, a fresh machine's every speculative engine failed with
    vLLM's "Invalid repository ID or local directory")."""
    from . import pair

    found: list[Model] = []
    for flag, value in zip(options, options[1:]):
        if flag != "--speculative-config":
            continue
        try:
            named = json.loads(value).get("model")
        except (ValueError, AttributeError):
            continue
        if isinstance(named, str) and Path(named).name in pair.PAIRS and Path(named).parent == pair.models_dir():
            found.append(resolve(Path(named).name))
    return found


def proposer_label(config: dict, drafts: Sequence[Model] = ()) -> str:
    """A speculative config's proposer as labels name it: its draft model's label (one of `drafts` when it names one),
    else its method (`ngram`, `mtp`)."""
    if config.get("model"):
        named = next((d for d in drafts if config["model"] in (d.spec, d.path)), None)
        return named.label if named else resolve(str(config["model"])).label
    return re.sub(r"[^\w.\-]", "_", str(config.get("method", "speculative")))


def speculative_runs(target: Model, drafts: Sequence[Model], gammas: Sequence[int], config: dict | None,
                     make: Callable[[Model, str], ModelCommands]) -> list[ModelLaunch]:
    """The speculative runs (see the module docstring); `make(model, json)` gives a run's commands."""
    runs: list[ModelLaunch] = []
    for draft in drafts:
        if draft.spec in HEADS:
            method, head_target = HEADS[draft.spec]
            kind = {"eagle": "an EAGLE", "eagle3": "an EAGLE-3"}.get(method, f"a {method}")
            raise InputError(f"{draft.spec} is {kind} head on {head_target}'s hidden states: it has no run of "
                             f"its own; profile it with speculative_config '{{\"method\": \"{method}\", \"model\": "
                             f"\"{draft.spec}\"}}' and no draft", param="drafts")
    if gammas and not drafts and config is not None:
        # a proposer without a plain draft (a head, MTP, n-gram): one run per γ of the config as given
        for gamma in gammas:
            runs += speculative_runs(target, (), (), {**config, "num_speculative_tokens": gamma}, make)
        return runs
    config = with_model_path(target, config)
    if gammas:
        base = {"method": DEFAULT_SPEC_METHOD, **(config or {})}
        for draft in drafts:
            if draft.load_format != target.load_format:
                raise InputError(f"speculate: vLLM loads the draft as it loads the target, so {draft.spec} "
                                 f"({draft.load_format} weights) and {target.spec} ({target.load_format} weights) "
                                 "cannot be paired", param="speculate")
            for gamma in gammas:
                label = f"{draft.label}.spec-g{gamma}"
                spec = _spec_json({**base, "model": draft.path, "num_speculative_tokens": gamma})
                spec_model = Model(target.spec, target.path, label, target.kind)
                runs.append(ModelLaunch("speculative", spec_model, make(spec_model, spec), draft=draft.label,
                                     gamma=gamma, method=base["method"]))
    elif config is not None:
        k = config.get("num_speculative_tokens")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InputError("speculative_config needs \"num_speculative_tokens\" (a whole number ≥ 1) when no γ "
                             "values are given", param="speculative_config")
        proposer = proposer_label(config, drafts)
        spec_model = Model(target.spec, target.path, f"{proposer}.spec-g{k}", target.kind)
        runs.append(ModelLaunch("speculative", spec_model, make(spec_model, _spec_json(config)), draft=proposer,
                             gamma=k, method=config.get("method")))
    return runs


def check_options(options: BenchOptions) -> None:
    """InputError (naming the option) unless the benchmark's counts are whole runs: input_len, output_len,
    batch_size and iters ≥ 1, warmup_iters ≥ 0."""
    for name, value in (("input_len", options.input_len), ("output_len", options.output_len),
                        ("batch_size", options.batch_size), ("iters", options.iters)):
        if value < 1:
            raise InputError(f"{name} must be ≥ 1, not {value}", param=name)
    if options.warmup_iters < 0:
        raise InputError(f"warmup_iters must be ≥ 0, not {options.warmup_iters}", param="warmup_iters")


def check_context(models: Sequence[Model], options: BenchOptions) -> None:
    """InputError (naming input_len or output_len) when a sequence of `options` — input_len prompt tokens plus
    output_len generated ones — would not fit in a model's context (`models.context_length`), before vLLM runs:
    `profile --input-len 1000000000` built an 11.4 GB prompt list in the driver, and a length vLLM refuses reached
    it after minutes of engine building."""
    total = options.input_len + options.output_len
    for model in models:
        known = context_length(model, options.vllm_args)
        if known is None or total <= known[0]:
            continue
        length, source = known
        param = "input_len" if options.input_len >= length else "output_len"
        raise InputError(f"input_len {options.input_len} + output_len {options.output_len} = {total} tokens do not "
                         f"fit in {model.spec}'s context of {length} tokens ({source}): give a shorter {param}",
                         param=param)


def plan(request: ProfileRequest, *, binary: str, gpu: bool) -> list[ModelLaunch]:
    """The run of every model of `request` (target first, then the drafts, then the speculative runs: `speculate`'s γ
    values, `speculative_config`, module docstring of `launch.separate`), with its exact commands (`binary`: the
    program its recorder runs); resolves the model names. `target_tp` / `draft_tp`: tensor-parallel ranks of the
    plain target / draft runs (1: one process); a model on N > 1 ranks is labelled `<label>.tpN`. Speculative runs
    stay on one process."""
    config = parse_speculative_config(request.speculative_config)
    gammas = request.gammas
    check_speculate_ranks(bool(gammas) or config is not None, request.target_tp)
    if not request.drafts and config is None:
        raise InputError("give at least one draft (drafts), or a speculative_config that needs none", param="drafts")
    options = request.options
    check_options(options)
    for param, value in (("target_tp", request.target_tp), ("draft_tp", request.draft_tp)):
        if value < 1:
            raise InputError(f"{param} must be ≥ 1, not {value}", param=param)
    out = Path(request.out_dir).resolve()
    models = resolve_all([request.target, *request.drafts])
    check_context(models, options)
    recorder = recorders.get(request.profiler)

    def make(m: Model, spec: str | None = None, tp: int = 1) -> ModelCommands:
        return model_commands(binary, m.path, ModelFiles(out, m.label, recorder), options, gpu=gpu,
                              trace=request.trace, nsys_extra=request.nsys_args, speculative_config=spec,
                              load_format=m.load_format, tp=tp)

    def on_ranks(m: Model, tp: int) -> Model:
        return m if tp == 1 else Model(m.spec, m.path, f"{m.label}.tp{tp}", m.kind)

    tps = [request.target_tp] + [request.draft_tp] * (len(models) - 1)
    plain = [ModelLaunch("target" if i == 0 else "draft", on_ranks(m, tp), make(on_ranks(m, tp), tp=tp))
             for i, (m, tp) in enumerate(zip(models, tps))]
    runs = plain + speculative_runs(models[0], models[1:], gammas, config, make)
    refuse_shared_labels(runs)
    return runs


def refuse_shared_labels(runs: Sequence[ModelLaunch]) -> None:
    """Two runs with one label would write the same files: refused before anything runs. `resolve_all` keeps the
    models' own labels apart; this catches the labels made from them (`<label>.tpN`, `<draft>.spec-g<γ>`) meeting
    another model's (a draft folder named `<target>.tp2`, a draft `x.spec-g1` beside `x` with γ = 1). Compared without
    case, as a case-insensitive file system would."""
    first: dict[str, ModelLaunch] = {}
    for run in runs:
        other = first.setdefault(run.model.label.casefold(), run)
        if other is not run:
            raise InputError(
                f"two runs would both be labelled {run.model.label!r} and write the same files in the output "
                f"directory: {describe(other)} (from {other.model.spec!r}) and {describe(run)} (from "
                f"{run.model.spec!r}); rename one model's folder", param="drafts")


def describe(run: ModelLaunch) -> str:
    """Role and label, and for a speculative run its draft and γ."""
    extra = f" (draft {run.draft}, γ = {run.gamma})" if run.speculative else ""
    return f"{run.role} {run.model.label}{extra}"
