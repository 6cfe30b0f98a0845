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
- `nsys_cc:step_outside_forward_seconds` (histogram): each verify step's period minus its forwards;
- `nsys_cc:engine_steps_total` (counter, label `kind` = verify | decode | mixed): steps timed;
- `nsys_cc:cost_coefficient` (gauge): c of the sliding window (`nsys_cc.analysis.live`);
- `nsys_cc:best_num_speculative_tokens` (gauge): the forecast's best γ at the window's α, 0 when no γ beats plain
  decoding; set once the engine has counted drafts.
Verify steps and the window are defined in `nsys_cc.live.timing` and `nsys_cc.analysis.live`. α is the i.i.d.
acceptance rate (`nsys_cc.analysis.acceptance.AcceptanceStats.alpha_iid`) of vLLM's counts over the same window.
The window is the last `NSYS_CC_LIVE_WINDOW` verify steps (default 256); gauges are refreshed at most once a second
and at each of vLLM's stats logs (every `VLLM_LOG_STATS_INTERVAL` seconds), when the log line is written too.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import deque
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase

from ..analysis.acceptance import AcceptanceStats
from ..analysis.live import LiveEstimate, estimate
from ..report.live import live_line
from . import channel
from .timing import DECODE, MIXED, VERIFY

ENV_WINDOW = "NSYS_CC_LIVE_WINDOW"
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
            "Engine step period minus its forwards, speculative decode steps (nsys_cc).", labels, buckets=BUCKETS,
        )
        self.steps = Counter("nsys_cc:engine_steps", "Engine steps timed by nsys_cc, by kind.", [*labels, "kind"])
        self.c = Gauge(
            "nsys_cc:cost_coefficient", "Median draft forward / median verify forward over a sliding window (nsys_cc).",
            labels, multiprocess_mode="mostrecent",
        )
        self.best_gamma = Gauge(
            "nsys_cc:best_num_speculative_tokens",
            "num_speculative_tokens the nsys_cc step model forecasts fastest at the observed acceptance "
            "(0: none beats plain decoding).", labels, multiprocess_mode="mostrecent",
        )


_metrics: _Metrics | None = None


def _collectors() -> _Metrics:
    global _metrics
    if _metrics is None:
        _metrics = _Metrics()
    return _metrics


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
        self._c = m.c.labels(*labels)
        self._best = m.best_gamma.labels(*labels)
        size = window_size()
        self.window: deque = deque(maxlen=size)
        self.acceptance: deque = deque(maxlen=size)
        self.last: LiveEstimate | None = None
        self._refreshed = 0.0
        self._fresh = False

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0):
        if scheduler_stats is None:
            return
        spec = getattr(scheduler_stats, "spec_decoding_stats", None)
        if spec is not None and spec.num_drafts:
            self.acceptance.append(spec)
        records = channel.decode(channel.payload_of(scheduler_stats))
        for r in records:
            self._steps[r.kind].inc()
            if r.kind != VERIFY:
                if r.kind == DECODE:
                    self.window.append(r)
                continue
            self.window.append(r)
            self._verify.observe(r.target_s)
            for d in r.draft_s:
                self._draft.observe(d)
            if math.isfinite(r.step_s):
                self._outside.observe(max(r.outside_s, 0.0))
        if records:
            self._fresh = True
            if time.monotonic() - self._refreshed >= REFRESH_S:
                self.refresh()

    def alpha(self) -> float:
        """α of vLLM's counts over the window (the i.i.d. estimate; accepted ÷ drafted without per-position counts)."""
        if not self.acceptance:
            return math.nan
        k = max(s.num_spec_tokens for s in self.acceptance)
        per_pos = [0] * k
        for s in self.acceptance:
            for i, v in enumerate(s.num_accepted_tokens_per_pos[:k]):
                per_pos[i] += v
        drafts = sum(s.num_drafts for s in self.acceptance)
        drafted = sum(s.num_draft_tokens for s in self.acceptance)
        accepted = sum(s.num_accepted_tokens for s in self.acceptance)
        stats = AcceptanceStats(
            alpha=accepted / drafted if drafted else math.nan,
            per_position=tuple(v / drafts for v in per_pos),
            num_drafts=drafts,
            num_draft_tokens=drafted,
            num_accepted=accepted,
            accepted_per_position=tuple(per_pos) if all(len(s.num_accepted_tokens_per_pos) == k
                                                         for s in self.acceptance) else (),
        )
        iid = stats.alpha_iid
        return iid if math.isfinite(iid) else stats.alpha

    def refresh(self) -> LiveEstimate | None:
        """Recompute the window's estimate and set the gauges."""
        self._refreshed = time.monotonic()
        self._fresh = False
        est = estimate(list(self.window), self.alpha())
        if est is not None:
            if math.isfinite(est.c):
                self._c.set(est.c)
            if est.num_speculative_tokens is not None:
                self._best.set(est.num_speculative_tokens)
            self.last = est
        return est

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
