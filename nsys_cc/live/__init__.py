"""Live c while serving: vLLM's engine steps timed in place and exported with vLLM's own metrics.

Switched on by `NSYS_CC_LIVE=1` (independent of `NSYS_CC_PLUGIN`, the NVTX switch); the vLLM plugin
(`nsys_cc.vllm.plugin`) applies `PATCHES` in every vLLM process. The parts, in the order the numbers travel:
`timing` (worker: forwards and steps timed), `channel` (worker → engine core → API server, inside vLLM's
`SchedulerStats`), `stat_logger` (API server: Prometheus metrics on `/metrics` and a log line), with the estimate in
`nsys_cc.analysis.tune.live` and its words in `nsys_cc.report.live_text`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..contract import ENV_LIVE


def enabled() -> bool:
    """Whether the environment asks for live timing (`NSYS_CC_LIVE` set and not "0")."""
    return os.environ.get(ENV_LIVE, "") not in ("", "0")


def _patch_loggers(module: Any, wrap: Callable) -> bool:
    cls = getattr(module, "StatLoggerManager", None)
    if cls is None or getattr(module, "StatLoggerBase", None) is None:
        return False
    from .stat_logger import with_live_logger

    return wrap(cls, "__init__", with_live_logger)


def _patch_scheduler(module: Any, wrap: Callable) -> bool:
    from .channel import patch_scheduler

    return patch_scheduler(module, wrap)


def _patch_stats(module: Any, wrap: Callable) -> bool:
    from .channel import patch_stats

    return patch_stats(module, wrap)


# vLLM module → patch(module, wrap) where wrap(cls, attr, make) is the plugin's once-only method wrapper.
PATCHES: dict[str, Callable[[Any, Callable], bool]] = {
    "vllm.v1.metrics.stats": _patch_stats,
    "vllm.v1.core.sched.scheduler": _patch_scheduler,
    "vllm.v1.metrics.loggers": _patch_loggers,
}
