"""The front end's half: a vLLM stat logger that turns the step records into Prometheus metrics and a log line.

`LiveStatLogger` is a per-engine `vllm.v1.metrics.loggers.StatLoggerBase`. The plugin hands it to every
`StatLoggerManager` vLLM builds (the API server's `AsyncLLM`, the offline `LLM`'s engine), so it sees each
`SchedulerStats` that reaches the front end, with the records the engine put in it (`channel`), and vLLM's own
speculative-decoding counts of the same steps. Its metrics live in the default Prometheus registry of the process,
which is what vLLM's `/metrics` serves (in Prometheus's multiprocess mode, with several API servers, they are
written to `PROMETHEUS_MULTIPROC_DIR` like vLLM's own, the gauges in "mostrecent" mode).

Metrics (labels `model_name` = the served model name and `engine` = the engine index, as vLLM's):
- `nsys_cc:draft_forward_seconds` (histogram): each draft forward of a verify step;
- `nsys_cc:verify_forward_seconds` (histogram): each verify forward (the target forward of a verify step);
- `nsys_cc:step_outside_forward_seconds` (histogram): each verify step's period minus its tokens' work (forwards,
  logits, sampling);
- `nsys_cc:engine_steps_total` (counter, label `kind` = verify | decode | mixed): steps timed;
- `nsys_cc:cost_coefficient` (gauge): c of the window, of a token (forward + logits + sampling,
  `nsys_cc.analysis.tune.live`); `nsys_cc:cost_coefficient_forward` (gauge): the forwards' alone;
- `nsys_cc:best_num_speculative_tokens` (gauge): the forecast's best γ at the window's α; 0 when no γ beats plain
  decoding at that α (a real answer, never a placeholder);
- `nsys_cc:best_num_speculative_tokens_per_batch_size` (gauge, labels `batch_size_min`, `batch_size_max`): the best
  γ for each batch-size range, vLLM's `num_speculative_tokens_per_batch_size` read off `/metrics`: the
  window's verify steps grouped by batch size, fitted with `nsys_cc.analysis.tune.model`'s model
  (`analysis.tune.live.batch_schedule`), tokens per step from vLLM's per-position counts; ranges up to the engine's
  max_num_seqs; one batch size seen: the model is flat in B (one range, its γ);
- `nsys_cc:window_verify_steps` (gauge): how many verify steps the two gauges above rest on.
A gauge without an estimate is absent from `/metrics` (never 0): the three appear with the first estimate (the first
verify step; the best γ once vLLM has also counted drafts), and a value that stops being defined reads NaN.
Verify steps are defined in `nsys_cc.live.timing`, the estimate in `nsys_cc.analysis.tune.live`.

The window (`NSYS_CC_LIVE_WINDOW` = N, default 256): the last N verify steps, from which c, the draft, verify and
outside medians and the forecast's step costs come; beside it the last N plain decode steps (their periods are the
forecast's plain decode step when there are enough, `analysis.tune.live.MIN_STEPS`); and α, the i.i.d. acceptance rate
(`nsys_cc.analysis.profile_dir.acceptance.AcceptanceStats.alpha_iid`) of vLLM's counts in the statistics that carried
the window's verify steps (vLLM hands both over in the same `SchedulerStats`, the records one step late: the window's α
may count a step more or less than its steps). Steps with a prompt in them (`mixed`) are counted, never in the window.
The gauges are refreshed when records arrive (at most once a second once an estimate exists) and at each of vLLM's
stats logs (every `VLLM_LOG_STATS_INTERVAL` seconds), when the log line is written too.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import deque
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase

from ..analysis.profile_dir.acceptance import AcceptanceStats
from ..analysis.tune.live import LiveEstimate, batch_schedule, estimate
from ..contract import ENV_LIVE_WINDOW
from ..report.live_text import live_line
from . import channel
from .timing import DECODE, MIXED, VERIFY

ENV_WINDOW = ENV_LIVE_WINDOW
DEFAULT_WINDOW = 256
REFRESH_S = 1.0
BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)
KIND_NAMES = {VERIFY: "verify", DECODE: "decode", MIXED: "mixed"}

log = logging.getLogger("vllm.nsys_cc.live")


# The largest window taken: beyond it the window would hold the server's memory, not a recent c.
MAX_WINDOW = 100_000
_warned: set[str] = set()


def window_size() -> int:
    """Steps in the sliding window, from `NSYS_CC_LIVE_WINDOW` (default 256). A value that is not a whole number in
    1…MAX_WINDOW gives the default and one warning in vLLM's log: live mode never takes the server down."""
    text = os.environ.get(ENV_WINDOW)
    if text is None or not text.strip():
        return DEFAULT_WINDOW
    try:
        size = int(text.strip())
    except ValueError:
        size = 0
    if 1 <= size <= MAX_WINDOW:
        return size
    if text not in _warned:
        _warned.add(text)
        shown = text if len(text) <= 40 else text[:39] + "…"
        log.warning("nsys_cc live: %s=%r is not a whole number of steps in 1…%d; using %d", ENV_WINDOW, shown,
                    MAX_WINDOW, DEFAULT_WINDOW)
    return DEFAULT_WINDOW


class _Metrics:
    """The process's nsys_cc collectors, registered once (vLLM may build several loggers in one process)."""

    def __init__(self):
        from prometheus_client import Counter, Gauge, Histogram

        labels = ["model_name", "engine"]
        self.draft = Histogram(
            "nsys_cc:draft_forward_seconds", "Draft-model forward time in speculative decode steps (nsys_cc).",
            labels, buckets=BUCKETS,
        )
        self.verify = Histogram(
            "nsys_cc:verify_forward_seconds", "Target-model verify forward time in speculative decode steps (nsys_cc).",
            labels, buckets=BUCKETS,
        )
        self.outside = Histogram(
            "nsys_cc:step_outside_forward_seconds",
            "Engine step period minus its tokens' work (forwards, logits, sampling), speculative decode steps "
            "(nsys_cc).", labels, buckets=BUCKETS,
        )
        self.steps = Counter("nsys_cc:engine_steps", "Engine steps timed by nsys_cc, by kind.", [*labels, "kind"])
        self.c = Gauge(
            "nsys_cc:cost_coefficient", "Median draft token / median verify token (forward + logits + sampling) over "
            "a sliding window (nsys_cc).", labels, multiprocess_mode="mostrecent",
        )
        self.c_forward = Gauge(
            "nsys_cc:cost_coefficient_forward", "Median draft forward / median verify forward (the forwards alone) "
            "over a sliding window (nsys_cc).", labels, multiprocess_mode="mostrecent",
        )
        self.best_gamma = Gauge(
            "nsys_cc:best_num_speculative_tokens",
            "num_speculative_tokens the nsys_cc step model forecasts fastest at the observed acceptance "
            "(0: none beats plain decoding; absent: no estimate yet).", labels, multiprocess_mode="mostrecent",
        )
        self.schedule = Gauge(
            "nsys_cc:best_num_speculative_tokens_per_batch_size",
            "num_speculative_tokens the nsys_cc step model forecasts fastest for each batch-size range "
            "[batch_size_min, batch_size_max] (vLLM's num_speculative_tokens_per_batch_size; 0: do not speculate), "
            "fitted on the window's steps grouped by batch size (nsys_cc).",
            [*labels, "batch_size_min", "batch_size_max"], multiprocess_mode="mostrecent",
        )
        self.window_steps = Gauge(
            "nsys_cc:window_verify_steps",
            "Verify steps in the sliding window the nsys_cc gauges rest on (absent: no estimate yet).", labels,
            multiprocess_mode="mostrecent",
        )


_metrics: _Metrics | None = None


def _collectors() -> _Metrics:
    global _metrics
    if _metrics is None:
        _metrics = _Metrics()
    return _metrics


class _LazyGauge:
    """One labelled child of a gauge, created at its first value: a gauge nobody set is absent from `/metrics`
    (prometheus_client shows a child at 0 from its creation). After the first, a value that is not finite is NaN."""

    def __init__(self, gauge: Any, labels: tuple[str, ...]):
        self._gauge, self._labels = gauge, labels
        self._child: Any = None

    def set(self, value: float | None) -> None:
        finite = value is not None and math.isfinite(value)
        if self._child is None:
            if not finite:
                return
            self._child = self._gauge.labels(*self._labels)
        self._child.set(value if finite else math.nan)


class LiveStatLogger(StatLoggerBase):
    """Per-engine stat logger (see the module docstring)."""

    def __init__(self, vllm_config: Any, engine_index: int = 0):
        self.engine_index = engine_index
        model_config = getattr(vllm_config, "model_config", None)
        labels = (str(getattr(model_config, "served_model_name", "") or ""), str(engine_index))
        m = _collectors()
        self._draft = m.draft.labels(*labels)
        self._verify = m.verify.labels(*labels)
        self._outside = m.outside.labels(*labels)
        self._steps = {kind: m.steps.labels(*labels, name) for kind, name in KIND_NAMES.items()}
        self._c = _LazyGauge(m.c, labels)
        self._c_forward = _LazyGauge(m.c_forward, labels)
        self._best = _LazyGauge(m.best_gamma, labels)
        self._window_steps = _LazyGauge(m.window_steps, labels)
        self._labels = labels
        self._schedule_gauge = m.schedule
        self._schedule_set: list[tuple[str, str]] = []
        self.schedule: list[list[int]] | None = None
        sched = getattr(vllm_config, "scheduler_config", None)
        self.max_batch_size = int(getattr(sched, "max_num_seqs", 0) or 256)
        size = window_size()
        self.window: deque = deque(maxlen=size)  # the last `size` verify steps
        self.decode: deque = deque(maxlen=size)  # the last `size` plain decode steps
        # vLLM's counts per SchedulerStats, with the verify steps that came in it: (SpecDecodingStats | None, steps)
        self.acceptance: deque = deque()
        self._acceptance_steps = 0
        self.last: LiveEstimate | None = None
        self._refreshed = 0.0
        self._fresh = False

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0):
        if scheduler_stats is None:
            return
        records = channel.decode(channel.payload_of(scheduler_stats))
        verify = 0
        for r in records:
            self._steps[r.kind].inc()
            if r.kind == DECODE:
                self.decode.append(r)
            if r.kind != VERIFY:
                continue
            verify += 1
            self.window.append(r)
            self._verify.observe(r.target_s)
            for d in r.draft_s:
                self._draft.observe(d)
            if math.isfinite(r.step_s):
                self._outside.observe(max(r.outside_s, 0.0))
        spec = getattr(scheduler_stats, "spec_decoding_stats", None)
        counted = spec if spec is not None and spec.num_drafts else None
        if counted is not None or verify:
            self._count(counted, verify)
        if records:
            self._fresh = True
            if self.last is None or time.monotonic() - self._refreshed >= REFRESH_S:
                self.refresh()

    def _count(self, spec: Any, verify: int) -> None:
        """Keep vLLM's counts of the statistics that carried the window's verify steps (module docstring): the
        oldest are dropped while the newer ones still cover a full window."""
        self.acceptance.append((spec, verify))
        self._acceptance_steps += verify
        full = self.window.maxlen or 0
        while len(self.acceptance) > 1 and self._acceptance_steps - self.acceptance[0][1] >= full:
            self._acceptance_steps -= self.acceptance.popleft()[1]

    def alpha(self) -> float:
        """α of vLLM's counts over the window (the i.i.d. estimate; accepted ÷ drafted without per-position counts)."""
        stats = self.acceptance_stats()
        if stats is None:
            return math.nan
        iid = stats.alpha_iid
        return iid if math.isfinite(iid) else stats.alpha

    def acceptance_stats(self) -> AcceptanceStats | None:
        """vLLM's counts over the window summed (None without any)."""
        counts = [s for s, _ in self.acceptance if s is not None]
        if not counts:
            return None
        k = max(s.num_spec_tokens for s in counts)
        per_pos = [0] * k
        for s in counts:
            for i, v in enumerate(s.num_accepted_tokens_per_pos[:k]):
                per_pos[i] += v
        drafts = sum(s.num_drafts for s in counts)
        drafted = sum(s.num_draft_tokens for s in counts)
        accepted = sum(s.num_accepted_tokens for s in counts)
        stats = AcceptanceStats(
            alpha=accepted / drafted if drafted else math.nan,
            per_position=tuple(v / drafts for v in per_pos),
            num_drafts=drafts,
            num_draft_tokens=drafted,
            num_accepted=accepted,
            accepted_per_position=tuple(per_pos) if all(len(s.num_accepted_tokens_per_pos) == k
                                                         for s in counts) else (),
        )
        return stats if stats.num_drafts and stats.num_draft_tokens else None

    def refresh(self) -> LiveEstimate | None:
        """Recompute the window's estimate and set the gauges (one without a value stays absent: `_LazyGauge`)."""
        self._refreshed = time.monotonic()
        self._fresh = False
        est = estimate([*self.window, *self.decode], self.alpha())
        if est is not None:
            self._c.set(est.c)
            self._c_forward.set(est.c_forward)
            self._best.set(est.num_speculative_tokens)
            self._window_steps.set(est.steps)
            self.last = est
            self._set_schedule()
        return est

    def _set_schedule(self) -> None:
        """The per-batch-size gauge: the ranges of the latest schedule, the earlier ranges' children removed."""
        stats = self.acceptance_stats()
        per_pos = stats if stats is not None and stats.accepted_per_position else None
        sched = batch_schedule([*self.window, *self.decode], per_pos, self.alpha(), self.max_batch_size)
        if sched is None:
            return
        for lo, hi in self._schedule_set:
            try:
                self._schedule_gauge.remove(*self._labels, lo, hi)
            except KeyError:
                pass
        self._schedule_set = []
        for start, end, g in sched:
            key = (str(start), str(end))
            self._schedule_gauge.labels(*self._labels, *key).set(g)
            self._schedule_set.append(key)
        self.schedule = sched

    def log(self):
        if self._fresh:
            self.refresh()
            if self.last is not None:
                log.info("%s", live_line(self.last))

    def log_engine_initialized(self):
        pass


def with_live_logger(original):
    """Wrap `StatLoggerManager.__init__` so that its custom stat loggers include `LiveStatLogger` (first)."""

    def __init__(self, vllm_config, *args, **kwargs):
        if "custom_stat_loggers" in kwargs or len(args) < 2:
            loggers = kwargs.get("custom_stat_loggers") or []
            kwargs["custom_stat_loggers"] = [LiveStatLogger, *[f for f in loggers if f is not LiveStatLogger]]
        else:
            args = (args[0], [LiveStatLogger, *[f for f in args[1] or [] if f is not LiveStatLogger]], *args[2:])
        return original(self, vllm_config, *args, **kwargs)

    return __init__
