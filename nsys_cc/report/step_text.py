"""The short table of a result's engine steps by kind, batch and context (`CostCoefficientResult.by_step`: the
engine's step annotations of a PyTorch-profiler trace, `analysis.forwards.step_groups`), in the text formats."""

from __future__ import annotations

import pandas as pd

from ..analysis.metrics import WALL
from . import gpu_time_text

TITLE = "Steps by kind, batch and context (the engine's step annotations; medians per step)"
# At most this many groups are shown; the rest are in `result.by_step`.
MAX_ROWS = 24


def display(result) -> tuple[pd.DataFrame, str]:
    """The table shown (model, kind, batch, context, steps, tokens, the headline metric's and launch time's medians)
    and a line on what was left out (empty when nothing was); an empty frame where the result has no engine steps."""
    table = result.by_step
    if table.empty:
        return table, ""
    headline = result.headline
    shown = pd.DataFrame({"Model": table["model"], "Kind": table["kind"], "Batch": table["batch"],
                          "Context (tokens)": table["context"], "Steps": table["steps"].astype(int),
                          "Tokens": table["tokens_median"].map(lambda x: "?" if x != x else f"{x:,.0f}")})
    for metric in dict.fromkeys((headline, WALL)):
        col = f"{metric}_ms"
        if col in table:
            label = gpu_time_text.label(metric, headline)  # the one name: launch time on a GPU trace
            shown[f"{label} (ms)"] = table[col].map(lambda x: "–" if x != x else f"{x:.3f}")
    left = len(shown) - MAX_ROWS
    return shown.head(MAX_ROWS), (f"… {left} more group(s) in result.by_step" if left > 0 else "")
