"""The registry of per-forward metrics and of phases: every module that names a metric or a phase reads it here.

A metric is one number per forward range, in ns (its `column` in `CostCoefficientResult.forwards`). Adding a metric
is one `Metric(...)` line in `METRICS` (its per-forward column must come out of `projection.project`, or `derive`
computes it from the other columns); the summary, the coefficients, the JSON/CSV/table renderings and the plots pick
it up from here. Definitions (quoted in docs/definitions.md, "What every number means"):

- wall: the NVTX range's CPU duration, end − start;
- gpu_span: nsys's projected duration, first GPU op start → last GPU op end of the work launched inside the range;
- kernel_sum: the sum of the durations of those kernels (overlapping kernels count twice);
- gpu_busy: the length of the union of those GPU ops' intervals (kernels, copies, fills, graph launches);
- launch_api: time spent in the CUDA API calls inside the range that launched GPU work;
- gpu_idle: gpu_span − gpu_busy, the gaps inside the projected span where none of the range's work ran.

Phases: `all` (every kept forward), `prefill`, `decode` and, in a speculative run, `verify` (see `phases`). A draft
is judged on its decode forwards — c is defined on the per-token step (Leviathan et al. Def. 3.7) — or on `all`
when decode was not told apart (`decision_phase`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..arguments import many

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Metric:
    """One per-forward metric.

    - `name`: the metric's name in tables (`summary.metric`, `coefficients.metric`);
    - `source`: the column of `projection.project` it is read from, or None when `derive` computes it;
    - `gpu`: needs CUDA data (NaN for CPU-only traces, and left out of their summaries);
    - `coefficient`: gets a cost coefficient c (and a column in the printed table);
    - `label`: its name in the printed table's headers; `plot_label`, `color`: in the plots.
    """

    name: str
    source: str | None
    gpu: bool
    coefficient: bool
    label: str
    plot_label: str
    color: str
    derive: Callable[[pd.DataFrame], pd.Series] | None = None

    @property
    def column(self) -> str:
        """The per-forward column, in ns."""
        return f"{self.name}_ns"


# The metrics' names, spelled here once (`tests/analysis/test_metrics.py` fails on a metric's name or column spelled
# anywhere else in the package): a module that names one imports it, its per-forward column is `COLUMNS[name]`.
WALL, GPU_SPAN, KERNEL_SUM, GPU_BUSY, LAUNCH_API, GPU_IDLE = (
    "wall", "gpu_span", "kernel_sum", "gpu_busy", "launch_api", "gpu_idle")

METRICS: tuple[Metric, ...] = (
    Metric(WALL, "duration_ns", False, True, "Wall", "wall-clock", "#4c72b0"),
    Metric(GPU_SPAN, "proj_duration_ns", True, True, "GPU span", "GPU span", "#dd8452"),
    Metric(KERNEL_SUM, "kernel_sum_ns", True, True, "Kernel sum", "kernel sum", "#55a868"),
    Metric(GPU_BUSY, "gpu_busy_ns", True, True, "GPU busy", "GPU busy", "#c44e52"),
    Metric(LAUNCH_API, "launch_api_ns", True, False, "Launch API", "launch API", "#8172b3"),
    Metric(GPU_IDLE, None, True, False, "GPU idle", "GPU idle", "#937860",
           derive=lambda f: f[COLUMNS[GPU_SPAN]] - f[COLUMNS[GPU_BUSY]]),
)
BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}
# The metric c and the in-place figures are headlined on where every trace has GPU work (`gpu_time.headline`; wall
# otherwise): the GPU span — docs/definitions.md, "GPU time is the answer", says why.
GPU_HEADLINE = GPU_SPAN
# A range's CPU time (the metric wall) where the answer is on the GPU: the time the CPU took to launch its work. The one
# name a person reads for it there (`coefficient.gpu_time`, `report.gpu_time_text`); its data key stays wall.
LAUNCH_TIME = "launch time"
METRIC_NAMES: tuple[str, ...] = tuple(BY_NAME)
C_METRICS: tuple[str, ...] = tuple(m.name for m in METRICS if m.coefficient)
COLUMNS: dict[str, str] = {m.name: m.column for m in METRICS}
# The per-forward columns by name, for the modules that build or read them (projection's output columns are these
# same names: `kernel_sum_ns`, `gpu_busy_ns`, `launch_api_ns` are both what `project` writes and the metrics' columns).
WALL_NS, GPU_SPAN_NS, KERNEL_SUM_NS, GPU_BUSY_NS, LAUNCH_API_NS, GPU_IDLE_NS = (
    COLUMNS[m] for m in (WALL, GPU_SPAN, KERNEL_SUM, GPU_BUSY, LAUNCH_API, GPU_IDLE))

# The parts of a token after its forward (issue 29; `token`): the logits, then the sampling. Each part's metric is a
# per-forward column `<part>_<metric>_ns` (the sum of that forward's parts of the kind); a token = forward + parts.
PARTS: tuple[str, ...] = ("logits", "sample")
PART_LABELS: dict[str, str] = {"forward": "forward", "logits": "logits", "sample": "sampling"}


def part_column(part: str, metric: str) -> str:
    """The per-forward column of `part`'s `metric`, in ns (e.g. `logits_wall_ns`)."""
    return f"{part}_{metric}_ns"


PART_COLUMNS: tuple[str, ...] = tuple(part_column(p, m.name) for p in PARTS for m in METRICS)

ALL, PREFILL, DECODE, VERIFY = "all", "prefill", "decode", "verify"
# mixed: an engine step that holds both prefill (context) and decode (generation) requests — chunked prefill beside
# running decodes, the usual step of a serving trace — named so by the engine's step annotation (`vllm_steps`); a
# phase of its own, never a prefill. empty: a step with no tokens (no target forward, or an engine step that schedules
# none): no phase, left out of every figure. (The plugin's steps of several target forwards are "mixed" steps too,
# `steps`, and left out there.)
MIXED, EMPTY = "mixed", "empty"
# verify: a speculative run's target forward checking γ draft tokens (phases.py); no plain draft has it.
PHASES: tuple[str, ...] = (ALL, PREFILL, DECODE, VERIFY, MIXED)


def metrics_for(has_cuda: bool) -> tuple[Metric, ...]:
    """The metrics a trace can give: every one with CUDA data, else the CPU ones (wall)."""
    return tuple(m for m in METRICS if has_cuda or not m.gpu)


def decision_phase(phases: Iterable[str]) -> str | None:
    """The phase a draft is judged on: decode when it was measured, else all; None when neither is among `phases`
    (one phase alone is a list of one)."""
    present = set(many(phases, "phases"))
    for phase in (DECODE, ALL):
        if phase in present:
            return phase
    return None


def in_order(phases: Iterable[str]) -> list[str]:
    """`phases` in the registry's order (all, prefill, decode, verify, mixed), without duplicates or unknown names."""
    present = set(many(phases, "phases"))
    return [p for p in PHASES if p in present]
