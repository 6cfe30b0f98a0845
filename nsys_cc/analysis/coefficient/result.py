"""The data model of a cost-coefficient measurement: plain values, built once by `coefficient.measure.cost_coefficient`.

Nothing here reads a trace, computes a statistic (but a phase's medians, remembered: `phase_median`) or writes a
file. The result's few methods are conveniences for a notebook (`render`, `figures`, `write_report`): they hand the
result to the views `nsys_cc.report` binds from above (`nsys_cc.result_views`); the report owns every rendering, and
nothing here imports it.

Units are in the column names: `_ns` for per-forward times (as in the trace), `_ms` for summaries, counts bare.
Every table a result hands out is the caller's own, and results compare by value (`result_values.Value`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ...errors import InputError
from ...result_views import view
from ...trace.capabilities import Recorder
from ...trace.description import TraceDescription
from ...trace.source import handed_out
from ..forwards import kernel_tables as kernel_mod
from ..forwards.phases import PhaseRule
from ..metrics import BY_NAME, COLUMNS, PART_COLUMNS, PHASES, WALL, decision_phase
from ..result_values import Value
from ..stats import pooled_median

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..forwards.gpu_loss import GpuLoss
    from ..forwards.ranks import Ranks
    from ..speculative.tables import SpeculativeAnalysis

# Columns of `CostCoefficientResult.forwards`, after `model, role`.
FORWARD_COLUMNS = ["range_name", "run", "range_id", "start_ns", "end_ns", "payload", "kept", "phase", "kernels",
                   "gpu_ops", *COLUMNS.values(), *PART_COLUMNS]


@dataclass(frozen=True, eq=False)
class ModelForwards(Value):
    """One model's trace and its forward ranges.

    `forwards` holds every range named `range_name` (warm-up included), one row per range: `kept` (False for
    warm-up and ranges never closed), `phase` (prefill | decode, or all where the phases were not told apart) and
    the per-forward metrics in ns (`metrics.METRICS`), beside range_id, qualified_name, pid, tid, start_ns, end_ns,
    payload, open_at_end, kernels and gpu_ops (`coefficient.model.MODEL_COLUMNS`: only these are kept of the trace, so
    a model holds its forwards' columns, not its trace). `op_totals`: the kept forwards' GPU ops per (group = phase,
    kind, name): count, duration_ns. `gpu_note` says why there are no GPU metrics when `has_cuda` is False.
    `speculative`: the trace also holds draft-model forward ranges (a speculative-decoding run).
    `iterations`: the trace's measured benchmark iterations (start_ns, end_ns, payload, run; empty without them),
    which the forward-share check of `profile` pairs with vLLM's latencies (`of_run` for one run of a pooled model).
    `token_parts`: where the logits and sampling tied to each forward came from (`analysis.coefficient.token`: "plugin",
    "scopes", or "" when the trace has none); their per-forward metrics are the columns `logits_<metric>_ns` and
    `sample_<metric>_ns` of `forwards` (NaN for a forward without that part), and `token_note` says what to know.
    `gpu_loss`: on a GPU trace, how much GPU work was lost without an error (`analysis.forwards.gpu_loss`: GPU ops that
    found no launching call, kept forwards that launched no GPU work); `gpu_note` warns when either share is above 1 %.
    which the forward-share check (`profile_dir.forward_share`) pairs with vLLM's latencies (`of_run` for one run of a
    pooled model). `ranks`: when the forward ranges lie in several processes (tensor-parallel ranks,
    `analysis.forwards.ranks`), how they became steps; each row of `forwards` is then a step (one range per rank), and
    `ranks.ranges` has the ranges.
    """

    name: str
    role: str
    path: str
    range_name: str
    nsys_version: str | None
    has_cuda: bool
    forwards: pd.DataFrame = field(repr=False)
    warmup_note: str
    phase_rule: PhaseRule
    op_totals: pd.DataFrame = field(repr=False, default_factory=pd.DataFrame)
    gpu_note: str = ""
    ranks: Ranks | None = field(default=None, repr=False)
    speculative: bool = False  # the trace holds draft-model forward ranges (a speculative-decoding run)
    # The trace's measured benchmark iterations (`nsys_cc:iteration` ranges: start_ns, end_ns, payload, run), by start.
    iterations: pd.DataFrame = field(repr=False, default_factory=pd.DataFrame)
    # Where the logits and sampling after each forward came from (`token`): "plugin" (nsys_cc:logits / nsys_cc:sample),
    # "scopes" (vLLM's postprocess / sample scopes), "" when the trace has none; and what to say about them.
    token_parts: str = ""
    token_note: str = ""
    # On a GPU trace: the share of its GPU ops that found no launch and of the kept forwards without GPU work.
    gpu_loss: GpuLoss | None = None
    # Where its trace ran, as the trace says (`Trace.describe`: platform, GPUs, runtime, engine, rank); None when the
    # trace object could not say.
    description: TraceDescription | None = None
    # Its trace's format ("nsys", "kineto": `Trace.format`) and what recorded it, in which version (`Trace.recorder`:
    # "nsys 2024.5.1.113", "PyTorch profiler (Kineto) schema 1"); None for a model not read from an opened trace.
    trace_format: str | None = None
    recorder: Recorder | None = None
    # A model pooled over runs (`cost_coefficient_runs`): per run (run number, its trace's path, its warm-up note),
    # what `of_run` gives back for that run; empty for one trace.
    run_sources: tuple[tuple[int, str, str], ...] = ()
    # Per-phase rows of the kept forwards, filtered once: summaries, coefficients, the diagnosis and the report
    # ask for them many times (0.4 s per filter at 5 M kernels). `forwards` is final once the model is built.
    _rows: dict[str, pd.DataFrame] = field(default_factory=dict, init=False, repr=False, compare=False)
    # Where the kept forwards of each phase are among `forwards` (a slice when they are one run of rows, as the kept
    # forwards of a trace usually are): counts, a column's values and the frames come from it without filtering
    # every column of `forwards` again (`phase_values`).
    _at: dict[str, slice | np.ndarray] = field(default_factory=dict, init=False, repr=False, compare=False)
    _medians: dict[tuple[str, str], float] = field(default_factory=dict, init=False, repr=False, compare=False)
    # A column of every forward as floats, converted once (read-only: the phases' values are slices of it).
    _floats: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def kept(self) -> pd.DataFrame:
        """The forwards measured: warm-up and ranges never closed left out."""
        return self.phase_rows("all")

    def _positions(self, phase: str) -> slice | np.ndarray:
        """The positions in `forwards` of the kept forwards of `phase` (InputError for another phase)."""
        at = self._at.get(phase)
        if at is None:
            if phase not in PHASES:
                raise InputError(f"phase must be one of {', '.join(PHASES)}, not {phase!r}", param="phase")
            # Every phase's positions at once, from one factorisation of the phase column: the phases are asked for
            # one after another (`phases`, the summaries), and a comparison of the column per phase cost more.
            forwards = object.__getattribute__(self, "forwards")
            kept = forwards["kept"].to_numpy(dtype=bool)
            codes, labels = pd.factorize(forwards["phase"])
            code_of = {str(label): i for i, label in enumerate(labels)}
            for p in PHASES:
                mask = kept if p == "all" else kept & (codes == code_of.get(p, -2))
                idx = np.flatnonzero(mask)
                self._at[p] = (slice(int(idx[0]), int(idx[-1]) + 1)
                               if len(idx) and idx[-1] - idx[0] + 1 == len(idx) else idx)
            at = self._at[phase]
        return at

    def phase_count(self, phase: str) -> int:
        """How many kept forwards `phase` has (`len(phase_rows(phase))`, no frame built)."""
        at = self._positions(phase)
        return at.stop - at.start if isinstance(at, slice) else len(at)

    def phase_rows(self, phase: str) -> pd.DataFrame:
        """The kept forwards of `phase` (all | prefill | decode | verify), a frame of the caller's; another `phase` is
        an InputError (as `kernels(phase=…)` says), not an empty frame."""
        if phase not in self._rows:
            self._rows[phase] = object.__getattribute__(self, "forwards").iloc[self._positions(phase)]
        return handed_out(self._rows[phase])

    def phase_values(self, phase: str, column: str) -> np.ndarray:
        """`phase_rows(phase)[column]` as floats (NaN where a forward has no value): the one column taken, not the
        whole frame (the summaries and coefficients read a column or two of millions of forwards)."""
        at = self._positions(phase)
        values = self._floats.get(column)
        if values is None:
            values = object.__getattribute__(self, "forwards")[column].to_numpy(dtype=float)
            values.setflags(write=False)
            self._floats[column] = values
        return values[at]

    def phase_median(self, phase: str, column: str) -> float:
        """The median of `phase_values(phase, column)` (of the finite values; NaN when none); over several runs each
        run's median, pooled by their geometric mean (`stats.pooled_median`: the rule c is pooled by, so a pooled c
        is the pooled draft median ÷ the pooled target median). Worked out once: the coefficients, the token table
        and the diagnosis each ask for the same medians of millions of forwards."""
        key = (phase, column)
        if key not in self._medians:
            values = self.phase_values(phase, column)
            columns = object.__getattribute__(self, "forwards").columns
            runs = self.phase_values(phase, "run") if "run" in columns else None
            self._medians[key] = pooled_median(values, runs)
        return self._medians[key]

    @property
    def phases(self) -> list[str]:
        """The phases with at least one kept forward, in the registry's order."""
        return [p for p in PHASES if self.phase_count(p)]

    @property
    def runs(self) -> list[int]:
        """The run numbers its forwards come from (1 … R, as `res.runs`, the report and the `run-<k>` folders count
        them; [1] for one trace)."""
        return sorted(int(r) for r in pd.unique(self.forwards["run"]))

    def of_run(self, run: int) -> ModelForwards:
        """This model as run `run` alone saw it (a model pooled over runs by `cost_coefficient_runs` holds every
        run's forwards and iterations, each row with its `run`). InputError for a run it does not hold."""
        if isinstance(run, bool) or not isinstance(run, (int, np.integer)) or int(run) not in self.runs:
            raise InputError(f"run {run!r} is not one of {self.name}'s runs ({', '.join(map(str, self.runs))})",
                             param="run")

        def part(frame: pd.DataFrame) -> pd.DataFrame:
            return frame[frame["run"] == run] if "run" in frame.columns else frame

        own = {number: (path, note) for number, path, note in self.run_sources}
        path, note = own.get(int(run), (self.path, self.warmup_note))
        return replace(self, forwards=part(self.forwards), iterations=part(self.iterations), path=path,
                       warmup_note=note, run_sources=())


@dataclass(frozen=True, repr=False, eq=False)
class CostCoefficientResult(Value):
    """The cost coefficient c of each draft against the target; every table is a pandas DataFrame.

    Tables (columns in order):

    - `summary`: model, role, phase, metric, count (forwards with a value of that metric), median_ms, mean_ms,
      p10_ms, p90_ms, std_ms.
    - `coefficients`: draft, phase, metric, c, ci_low, ci_high (one run: 95 % bootstrap of its forwards, NaN from
      fewer than two values on a side; several runs: c = the geometric mean of the runs' own c, its interval the
      t-interval across runs from three on, NaN from two — `stats`), draft_median_ms, target_median_ms (pooled
      alike: each run's median, their geometric mean; c = their ratio), n_draft, n_target (tokens with a value on
      each side), runs (how many runs the forwards come from), then (`analysis.coefficient.token`) basis ("token": c is
      the token's — forward + logits + sampling —, "forward": either side has no parts, c is the forwards'), c_forward,
      c_forward_ci_low,
      c_forward_ci_high (the forwards alone), draft_forward_median_ms, draft_logits_median_ms,
      draft_sample_median_ms and the same for the target (the split). The medians and counts are the tokens'.
    - `tokens`: per model, phase and metric, the token's median and its split (`token.TOKEN_COLUMNS`: basis, count,
      token_median_ms, forward_median_ms, logits_median_ms, sample_median_ms).
    - `forwards`: model, role, range_name, run (the run a forward came from: 1 for one trace, 1 … R or the
      profile's run numbers for runs pooled by `cost_coefficient_runs`), range_id, start_ns, end_ns, payload, kept,
      phase, kernels, gpu_ops, wall_ns, gpu_span_ns, kernel_sum_ns, gpu_busy_ns, launch_api_ns, gpu_idle_ns, then
      each part's metrics (`logits_wall_ns`, …, `sample_gpu_idle_ns`; NaN where none) — every matching range.
    - `kernel_summary`: model, role, phase, name, kind, category, calls_per_forward, time_per_forward_ms,
      mean_duration_ms, share — GPU ops per forward of the kept forwards (`Trace.kernels()` has the raw rows).
    - `categories`: model, role, phase, category, calls_per_forward, time_per_forward_ms, share.
    - `diagnosis`: per draft, the numbers on where its forward time goes against the target's
      (`analysis.coefficient.diagnosis.DIAGNOSIS_COLUMNS`: phase, medians, c on wall and GPU busy, busy share and its
      class); `render()` and the report say it in sentences (`nsys_cc.report.sentence_text.diagnosis_text`).
    - `verdicts`: draft, metric, alpha, alpha_low, alpha_high, phase, c, c_low, c_high, best_gamma, best_gamma_low,
      best_gamma_high, speedup, speedup_low, speedup_high, break_even_alpha, max_gamma, outcome
      (`speedup.VERDICT_COLUMNS`) — what c means at each acceptance rate given (empty when none was); the sentence
      is `nsys_cc.report.sentence_text.verdict_of(row)`. With speculative runs measured in place, also (for their
      draft) `speculative.IN_PLACE_VERDICT_COLUMNS`: the γ measured (in_place_gammas), the lowest and highest measured
      speedup (measured_low, measured_high), the best γ and speedup at α of the cost model fitted on those runs
      (in_place_best_gamma, in_place_speedup); `outcome` then rests on that forecast, and outcome_c_alone keeps
      Thm 3.8's with c alone.
    - `notes`: what was dropped and why, how phases were decided, anything the reader must know.
    - `speedup_marks`: per draft, the c that speculative decoding is judged on (on the headline metric, decode else
      all).
    - `headline`: the metric c is headlined on — gpu_span where every trace has GPU work (a range's CPU time is the
      time to launch its work; `analysis.coefficient.gpu_time`), else wall.
    - `gpu_time`: on the GPU, per model (`gpu_time.COLUMNS`): its launch time (wall), GPU span and busy time (token
      medians of the phase c is judged on), whether launch and GPU time disagree (more than `gpu_time.DISAGREE`×
      apart), the share of its span the GPU worked and its class (launch-bound: the GPU idles between launches), and
      per draft its c on launch time against its c on GPU time; empty on a CPU trace.
    - `mismatches`: what differs between the target's trace and each other model's (`mismatch.COLUMNS`: kind —
      platform, device, engine, ranks, step kind, phase —, target, model, their values, the sentence), each also a
      "warning:" note; empty when nothing does. Each model's `description` says where its trace ran.
    - `speculative`: the speculative-decoding runs given after the drafts, measured in place
      (`analysis.speculative.in_place.SpeculativeAnalysis`: per-run table, its figures on every metric (`by_metric`;
      headline `metric`: gpu_span on GPU traces), decomposition, step cost models, forecast);
      None when no speculative run was given.
    - `ranks`: per model on several tensor-parallel ranks, phase and rank: `ranks.RANK_COLUMNS` (its own time, its
      communication, how often it finished last and by how much); empty when every model ran in one process.
    - `runs`: c per run when every model was profiled in several runs (`cost_coefficient_runs`): draft, phase,
      metric, run, c, ci_low, ci_high (that run's forwards only), draft_median_ms, target_median_ms, n_draft,
      n_target; empty for one run. `coefficients` then pools the runs (its `runs` column says how many): its c is
      the geometric mean of these, and its interval covers the variation between them (from three runs on).
    - `forward_share`: per run and model whose trace has vLLM's latencies beside it (`X.bench.json`, as `profile`
      leaves it): how much of each benchmark iteration its forward ranges cover (`forward_share.COLUMNS`: run, model,
      iterations, forwards_per_iteration, forward_ms, latency_ms, nvtx_iteration_ms, forward_share, share_min,
      share_max); empty without them.
    - `by_step`: where the forwards are an engine's step annotations (a PyTorch-profiler trace of vLLM or SGLang), each
      model's kept steps grouped by kind (prefill, decode, verify, mixed), batch and context (powers of two) with
      their count, median tokens and median of each metric (`forwards.step_groups.COLUMNS`); empty otherwise.
    - `kernel_diff`: each draft's GPU ops against the target's, per forward of the phase c is judged on: draft, phase,
      then `nsys_cc.kernel_diff(target, draft)`'s columns (`kernel_tables.DIFF_COLUMNS`; a = the target, b = the draft:
      delta < 0 where the draft saves time), the largest difference first; empty without GPU work.
    """

    models: tuple[ModelForwards, ...]
    summary: pd.DataFrame
    coefficients: pd.DataFrame
    kernel_summary: pd.DataFrame
    categories: pd.DataFrame
    diagnosis: pd.DataFrame
    verdicts: pd.DataFrame
    speedup_marks: pd.DataFrame
    notes: tuple[str, ...]
    seed: int
    acceptance: tuple[float, ...] = ()
    # Speculative runs measured in place, their decomposition and the forecast; None without any.
    speculative: SpeculativeAnalysis | None = None
    ranks: pd.DataFrame = field(default_factory=pd.DataFrame)
    runs: pd.DataFrame = field(default_factory=pd.DataFrame)
    tokens: pd.DataFrame = field(default_factory=pd.DataFrame)
    # The forward-share check against vLLM's latencies beside each trace (`profile_dir.forward_share`); empty without
    # them.
    forward_share: pd.DataFrame = field(default_factory=pd.DataFrame)
    # The metric c is headlined on (`gpu_time.headline`: gpu_span when every trace has GPU work, else wall) and, on
    # the GPU, launch time against GPU time per model and draft (`gpu_time.table`).
    headline: str = WALL
    gpu_time: pd.DataFrame = field(default_factory=pd.DataFrame)
    # What differs between the target's trace and each other's (`mismatch`: platform, GPU, engine, ranks, step kind,
    # phase); empty when nothing does.
    mismatches: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def target(self) -> ModelForwards:
        return self.models[0]

    @property
    def drafts(self) -> list[ModelForwards]:
        return list(self.models[1:])

    @property
    def range_name(self) -> str:
        """The forward range's name; names joined by " / " when the traces were given different ones."""
        return " / ".join(dict.fromkeys(m.range_name for m in self.models))

    @property
    def forwards(self) -> pd.DataFrame:
        """Every matching range of every model (see the class docstring for the columns)."""
        return pd.concat(
            [m.forwards.assign(range_name=m.range_name).reindex(columns=FORWARD_COLUMNS)
             .assign(model=m.name, role=m.role) for m in self.models],
            ignore_index=True,
        )[["model", "role", *FORWARD_COLUMNS]]

    @property
    def by_step(self) -> pd.DataFrame:
        """Each model's engine steps by kind, batch and context (see the class docstring), built on access."""
        from ..forwards.step_groups import of_models

        return of_models(self.models)

    @property
    def kernel_diff(self) -> pd.DataFrame:
        """Each draft's GPU ops against the target's (see the class docstring), built from the models on access."""
        frames = []
        target = self.target
        for d in self.drafts:
            phase = decision_phase(p for p in d.phases if p in target.phases)
            if phase is None or target.op_totals.empty or d.op_totals.empty:
                continue
            table = kernel_mod.diff(kernel_mod.of_model(target, phase), kernel_mod.of_model(d, phase))
            frames.append(table.assign(draft=d.name, phase=phase))
        columns = ["draft", "phase", *kernel_mod.DIFF_COLUMNS]
        if not frames:
            return kernel_mod.empty_table(columns)
        return pd.concat(frames, ignore_index=True)[columns]

    def __repr__(self) -> str:
        coef = self.coefficients
        wall = coef[coef["metric"] == self.headline]
        parts = []
        for d in self.drafts:
            rows = wall[wall["draft"] == d.name].set_index("phase")
            phase = decision_phase(rows.index)
            if phase is not None:
                parts.append(f"{d.name}: {rows.at[phase, 'c']:.3g} ({phase})")
        cs = "; ".join(parts) or "no c"
        return (f"<CostCoefficientResult target {self.target.name!r}, {len(self.drafts)} draft(s), range "
                f"{self.range_name!r}; c on {'wall-clock' if self.headline == WALL else BY_NAME[self.headline].label}: "
                f"{cs}>")

    # The views below are `nsys_cc.report`'s functions, bound from above (`nsys_cc.result_views`): the result is data.
    def _repr_html_(self) -> str:
        return view("render_html")(self)

    def render(self, fmt: str = "table") -> str:
        """The result as text: table | markdown | csv | json (`nsys_cc.report.FORMATS`)."""
        return view("render")(self, fmt)

    def to_dict(self) -> dict:
        """The JSON document of `nsys-cc analyze --format json`."""
        return view("to_dict")(self)

    def figures(self) -> dict[str, Figure]:
        """Every plot that has data, by name (matplotlib Figures; see `nsys_cc.report.figure_files`)."""
        return view("figures")(self)

    def write_report(self, out_dir: str | os.PathLike, **kwargs) -> Path:
        """Write the report directory (report.md, report.json, CSVs, plots) and return report.md's path."""
        return view("write_report")(self, out_dir, **kwargs)
