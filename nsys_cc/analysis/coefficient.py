"""The cost coefficient c = draft forward time ÷ target forward time (Leviathan et al. 2023, Def. 3.7).

For every model (one trace each) the forward ranges are selected by name, warm-up is dropped and each forward gets a
phase (see `phases`). Per forward, the metrics are (all from `projection.project`):
- wall: the NVTX range's CPU duration, end − start;
- gpu_span: nsys's projected duration, first GPU op start → last GPU op end of the work launched inside the range;
- kernel_sum: the sum of the durations of those kernels (overlapping kernels count twice);
- gpu_busy: the length of the union of those GPU ops' intervals (kernels, copies, fills, graph launches);
- launch_api: time spent in the CUDA API calls inside the range that launched GPU work;
- gpu_idle: gpu_span − gpu_busy, the gaps inside the projected span where none of the range's work ran.
c per draft, phase and metric is the ratio of medians with a seeded 95 % bootstrap interval (`stats`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import InputError, RangeNotFoundError
from ..trace import open_trace
from . import kernels as kernel_mod, phases as phase_mod
from .projection import op_totals, project
from .ranges import closest_names, name_counts, select
from .stats import STAT_NAMES, describe, ratio_of_medians

DEFAULT_RANGE = "model_executable()"
# metric → per-forward column (ns)
METRICS = {
    "wall": "wall_ns",
    "gpu_span": "gpu_span_ns",
    "kernel_sum": "kernel_sum_ns",
    "gpu_busy": "gpu_busy_ns",
    "launch_api": "launch_api_ns",
    "gpu_idle": "gpu_idle_ns",
}
C_METRICS = ("wall", "gpu_span", "kernel_sum", "gpu_busy")
# Longest range name quoted in a message: NVTX names can be kilobytes (whole call stacks, JSON).
NAME_CHARS = 80


@dataclass
class ModelForwards:
    """One model's trace and its forward ranges (`forwards`: every matching range, with `kept` and `phase`)."""

    name: str
    role: str
    path: str
    nsys_version: str | None
    has_cuda: bool
    forwards: pd.DataFrame
    warmup_note: str
    phase_rule: phase_mod.PhaseRule
    # GPU ops of the kept forwards per (group = phase, kind, name): count, duration_ns (`projection.op_totals`).
    op_totals: pd.DataFrame = field(repr=False, default_factory=pd.DataFrame)
    # Why there are no GPU metrics (when has_cuda is False).
    gpu_note: str = ""

    # Per-phase rows of the kept forwards, filtered once: summaries, coefficients, the diagnosis and the report
    # ask for them many times (0.4 s per filter at 5 M kernels). `forwards` is final once the model is built.
    _rows: dict[str, pd.DataFrame] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def kept(self) -> pd.DataFrame:
        return self.phase_rows("all")

    def phase_rows(self, phase: str) -> pd.DataFrame:
        if phase not in self._rows:
            kept = self._rows.get("all")
            if kept is None:
                kept = self._rows["all"] = self.forwards[self.forwards["kept"]]
            self._rows[phase] = kept if phase == "all" else kept[kept["phase"] == phase]
        return self._rows[phase]

    @property
    def phases(self) -> list[str]:
        return [p for p in phase_mod.PHASES if len(self.phase_rows(p))]


def _per_forward(proj: pd.DataFrame, has_cuda: bool) -> pd.DataFrame:
    out = proj.copy()
    out["wall_ns"] = out["duration_ns"].astype(float)
    gpu = {
        "gpu_span_ns": "proj_duration_ns",
        "kernel_sum_ns": "kernel_sum_ns",
        "gpu_busy_ns": "gpu_busy_ns",
        "launch_api_ns": "launch_api_ns",
    }
    for new, old in gpu.items():
        out[new] = pd.to_numeric(out[old], errors="coerce").astype(float) if has_cuda and old in out else np.nan
    out["gpu_idle_ns"] = out["gpu_span_ns"] - out["gpu_busy_ns"]
    out["kernels"] = pd.to_numeric(out["kernels"], errors="coerce") if has_cuda and "kernels" in out else np.nan
    return out


def _quoted(name: str) -> str:
    return repr(name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…")


def _no_such_range(trace, ranges: pd.DataFrame, path: str, range_name: str) -> RangeNotFoundError:
    """The error for a range name that matches nothing, with what the trace does hold."""
    wanted = f"{path}: no NVTX range named {_quoted(range_name)}"
    if not trace.has_table("NVTX_EVENTS"):
        return RangeNotFoundError(f"{wanted}: the trace has no NVTX_EVENTS table (profile with `nsys profile -t nvtx`)")
    if ranges.empty:
        return RangeNotFoundError(f"{wanted}: the trace has no NVTX ranges")
    if ranges["qualified_name"].isna().all():
        return RangeNotFoundError(
            f"{wanted}: none of its {len(ranges)} NVTX ranges has a name (registered names need the StringIds table)"
        )
    near = closest_names(ranges, range_name)
    listed = near or [n for n in name_counts(ranges).index if isinstance(n, str)][:5]
    label = "closest names" if near else "names in the trace"
    return RangeNotFoundError(f"{wanted}; {label}: {', '.join(map(_quoted, listed))} (choose one with --range)")


def load_model(
    path: str,
    *,
    name: str,
    role: str,
    range_name: str = DEFAULT_RANGE,
    skip_ranges: int | None = None,
    output_len: int | None = None,
) -> ModelForwards:
    """Read one trace and return its forward ranges with metrics, warm-up flags and phases."""
    with open_trace(path) as trace:
        ranges = trace.nvtx_ranges()
        matched = select(ranges, range_name).sort_values("start_ns", kind="stable")
        if matched.empty:
            raise _no_such_range(trace, ranges, path, range_name)
        has_cuda = bool(trace.has_cuda)
        forwards = _per_forward(project(trace, matched), has_cuda).reset_index(drop=True)
        warm, warm_note = phase_mod.warmup_mask(forwards, ranges, skip_ranges)
        # A forward still open when the capture ended has no real end: its "duration" runs to the end of the trace.
        unclosed = forwards["open_at_end"].to_numpy(dtype=bool)
        forwards["kept"] = ~warm & ~unclosed
        if unclosed.any():
            warm_note += f"; dropped {int(unclosed.sum())} range(s) never closed (still open when the capture ended)"
        if not forwards["kept"].any():
            if (~warm).any():
                raise RangeNotFoundError(
                    f"{path}: every {_quoted(range_name)} range left after warm-up was never closed (the capture "
                    "ended inside it): let the profiled program finish its forwards"
                )
            raise RangeNotFoundError(
                f"{path}: all {len(forwards)} {_quoted(range_name)} ranges were dropped as warm-up ({warm_note}); "
                "lower --skip-ranges"
            )
        gpu_note = "" if has_cuda else "no CUDA tables in the trace (a CPU run): wall-clock time only, no GPU metrics"
        if has_cuda and forwards.loc[forwards["kept"], "gpu_span_ns"].isna().all():
            has_cuda = False
            gpu_note = (
                f"none of its {int(forwards['kept'].sum())} {_quoted(range_name)} ranges launched GPU work from their "
                "own thread (as in nsys, only CUDA calls made inside a range on its thread count): wall-clock time "
                "only, no GPU metrics"
            )
        phase, rule = phase_mod.assign_phases(forwards, ranges, output_len, forwards["kept"].to_numpy())
        forwards["phase"] = phase
        kept = forwards[forwards["kept"]]
        totals = op_totals(trace, kept, kept["phase"].to_numpy(dtype=object)) if has_cuda else pd.DataFrame()
        return ModelForwards(name, role, str(path), trace.nsys_version, has_cuda, forwards, warm_note, rule, totals,
                             gpu_note)


def model_names(paths: Sequence[str], names: Sequence[str] | None) -> list[str]:
    """Labels for the models: `names` when given, else file names without the extension (made unique)."""
    if names:
        if len(names) != len(paths):
            raise InputError(f"{len(names)} --name label(s) for {len(paths)} traces: give one per trace or none")
        return list(names)
    stems = [os.path.basename(p).removesuffix(".sqlite").removesuffix(".nsys-rep") for p in paths]
    out = []
    for i, s in enumerate(stems):
        out.append(s if stems.count(s) == 1 else f"{s}#{stems[:i + 1].count(s)}")
    return out


def _check_distinct(paths: Sequence[str]) -> None:
    seen: dict[str, str] = {}
    for p in paths:
        key = os.path.realpath(p)
        if key in seen:
            raise InputError(f"{p} is given twice (as {seen[key]!r} too): each model needs its own trace")
        seen[key] = p


def _summary(models: list[ModelForwards]) -> pd.DataFrame:
    rows = []
    for m in models:
        for phase in m.phases:
            sub = m.phase_rows(phase)
            for metric, col in METRICS.items():
                if metric != "wall" and not m.has_cuda:
                    continue
                st = describe(sub[col].to_numpy(dtype=float) / 1e6)
                rows.append({"model": m.name, "role": m.role, "phase": phase, "metric": metric, "count": len(sub),
                             **{f"{k}_ms": v for k, v in st.items()}})
    return pd.DataFrame(rows, columns=["model", "role", "phase", "metric", "count", *[f"{k}_ms" for k in STAT_NAMES]])


def _median_ms(values: np.ndarray) -> float:
    """Median in ms of the finite values (NaN where a forward launched nothing); NaN, silently, when none is."""
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) / 1e6 if finite.size else float("nan")


def _coefficients(target: ModelForwards, drafts: list[ModelForwards], seed: int) -> pd.DataFrame:
    rows = []
    for d in drafts:
        for phase in d.phases:
            if phase not in target.phases:
                continue
            t_rows, d_rows = target.phase_rows(phase), d.phase_rows(phase)
            for metric in C_METRICS:
                if metric != "wall" and not (d.has_cuda and target.has_cuda):
                    continue
                col = METRICS[metric]
                dv, tv = d_rows[col].to_numpy(dtype=float), t_rows[col].to_numpy(dtype=float)
                c, lo, hi = ratio_of_medians(dv, tv, seed=seed)
                rows.append({"draft": d.name, "phase": phase, "metric": metric, "c": c, "ci_low": lo, "ci_high": hi,
                             "draft_median_ms": _median_ms(dv), "target_median_ms": _median_ms(tv),
                             "n_draft": int(np.isfinite(dv).sum()), "n_target": int(np.isfinite(tv).sum())})
    cols = ["draft", "phase", "metric", "c", "ci_low", "ci_high", "draft_median_ms", "target_median_ms",
            "n_draft", "n_target"]
    return pd.DataFrame(rows, columns=cols)


def _kernel_tables(models: list[ModelForwards]) -> tuple[pd.DataFrame, pd.DataFrame]:
    kern, cats = [], []
    for m in models:
        if not m.has_cuda or m.op_totals.empty:
            continue
        totals = m.op_totals
        for phase in m.phases:
            sub = totals if phase == "all" else totals[totals["group"].to_numpy(dtype=object) == phase]
            table = kernel_mod.breakdown_totals(sub, len(m.phase_rows(phase)))
            kern.append(table.assign(model=m.name, role=m.role, phase=phase))
            cats.append(kernel_mod.by_category(table).assign(model=m.name, role=m.role, phase=phase))
    kcols = ["model", "role", "phase", "name", "kind", "category", "calls_per_forward", "time_per_forward_ms",
             "mean_duration_us", "share"]
    ccols = ["model", "role", "phase", "category", "calls_per_forward", "time_per_forward_ms", "share"]
    k = pd.concat(kern, ignore_index=True)[kcols] if kern else pd.DataFrame(columns=kcols)
    c = pd.concat(cats, ignore_index=True)[ccols] if cats else pd.DataFrame(columns=ccols)
    return k, c


def _model_notes(models: list[ModelForwards]) -> list[str]:
    """What was dropped and how phases were decided, one line per distinct statement, naming the models it is
    about ("every model" when it holds for all)."""
    holders: dict[str, list[str]] = {}
    for m in models:
        confidence = "" if m.phase_rule.confidence == "exact" else f" (confidence: {m.phase_rule.confidence})"
        texts = [m.warmup_note, f"phases by {m.phase_rule.rule}: {m.phase_rule.detail}{confidence}"]
        if not m.has_cuda:
            texts.append(m.gpu_note)
        for text in texts:
            holders.setdefault(text, []).append(m.name)
    every = len(models) > 1
    return [f"{'every model' if every and len(names) == len(models) else ', '.join(names)}: {text}"
            for text, names in holders.items()]


@dataclass
class CostCoefficientResult:
    """Everything `analyze` reports; each table is a DataFrame a notebook can use directly.

    - `summary`: per model, phase and metric: count, median/mean/p10/p90/std in ms.
    - `coefficients`: per draft, phase and metric: c, ci_low, ci_high (95 % bootstrap), the two medians in ms.
    - `forwards`: every matching range of every model (`kept`, `phase` and the per-forward metrics in ns).
    - `kernels` / `categories`: per model and phase, GPU ops and categories per forward.
    - `diagnosis`: per draft, plain sentences on where its forward time goes against the target's.
    - `verdicts`: what c means for speculative decoding at the given acceptance rates (None when none given).
    - `notes`: what was dropped and why, how phases were decided, anything the reader must know.
    """

    range_name: str
    models: list[ModelForwards]
    summary: pd.DataFrame
    coefficients: pd.DataFrame
    kernels: pd.DataFrame
    categories: pd.DataFrame
    diagnosis: pd.DataFrame
    notes: list[str]
    seed: int
    acceptance: tuple[float, ...] = ()
    verdicts: pd.DataFrame | None = None

    @property
    def target(self) -> ModelForwards:
        return self.models[0]

    @property
    def drafts(self) -> list[ModelForwards]:
        return self.models[1:]

    @property
    def forwards(self) -> pd.DataFrame:
        keep = ["range_id", "start_ns", "end_ns", "payload", "kept", "phase", "kernels", "gpu_ops",
                *METRICS.values()]
        return pd.concat(
            [m.forwards.reindex(columns=keep).assign(model=m.name, role=m.role) for m in self.models],
            ignore_index=True,
        )[["model", "role", *keep]]

    def to_dict(self) -> dict:
        """The JSON document of `nsys-cc analyze --format json`."""
        from ..report.formats import result_to_dict

        return result_to_dict(self)


def cost_coefficient(
    target: str,
    drafts: Sequence[str],
    *,
    names: Sequence[str] | None = None,
    range_name: str = DEFAULT_RANGE,
    skip_ranges: int | None = None,
    output_len: int | None = None,
    acceptance: Sequence[float] = (),
    seed: int = 0,
) -> CostCoefficientResult:
    """Measure c of each draft against the target, from one trace (`.sqlite` or `.nsys-rep`) per model.

    Args:
        target: the target model's trace.
        drafts: one trace per draft model (at least one).
        names: labels for [target, *drafts]; default: the file names.
        range_name: the NVTX range around each forward (`model_executable()`; vLLM's own: `gpu_model_runner: forward`).
        skip_ranges: drop the first N matching ranges of each model (default: use the trace's warm-up markers).
        output_len: the benchmark's output length, to tell prefill from decode when ranges carry no payload.
        acceptance: acceptance rates α at which to judge each draft (speedup verdicts); empty for none.
        seed: seed of the bootstrap intervals.
    Returns:
        A `CostCoefficientResult`.
    """
    if not drafts:
        raise InputError("give at least one draft trace after the target")
    if skip_ranges is not None and skip_ranges < 0:
        raise InputError(f"--skip-ranges must be ≥ 0, not {skip_ranges}")
    if output_len is not None and output_len < 1:
        raise InputError(f"--output-len must be ≥ 1, not {output_len}")
    paths = [str(target), *map(str, drafts)]
    _check_distinct(paths)
    labels = model_names(paths, names)
    models = [
        load_model(p, name=n, role="target" if i == 0 else "draft", range_name=range_name,
                   skip_ranges=skip_ranges, output_len=output_len)
        for i, (p, n) in enumerate(zip(paths, labels))
    ]
    from .diagnosis import diagnose

    notes = _model_notes(models)
    summary = _summary(models)
    coefficients = _coefficients(models[0], models[1:], seed)
    kernels, categories = _kernel_tables(models)
    result = CostCoefficientResult(
        range_name=range_name, models=models, summary=summary, coefficients=coefficients, kernels=kernels,
        categories=categories, diagnosis=pd.DataFrame(), notes=notes, seed=seed, acceptance=tuple(acceptance),
    )
    result.diagnosis = diagnose(result)
    if acceptance:
        from .speedup import verdicts

        result.verdicts = verdicts(coefficients, list(acceptance))
    return result
