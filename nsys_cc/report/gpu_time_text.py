"""GPU time against launch time, in words: what `analysis.coefficient.gpu_time` found, as the text,
markdown and JSON renderings of a result say it.

On a GPU trace c is headlined on GPU time (`CostCoefficientResult.headline`, the GPU span); a range's CPU time is the
time to launch its work, named so — **launch time** — wherever a person reads it: tables, sentences, plots (`label`,
`words`, `plot_label`). Its data key stays `wall` (the metric's name in DataFrames, CSV and JSON, unchanged for the
programs that read them; JSON `metric_names` maps each key to the name a person reads). On a CPU trace there is no GPU
time and the CPU time is what the user waits for: it stays "wall" ("Wall" in tables, "wall-clock" in plots). `lines`
says, per draft, when c on launch time and c on GPU time
disagree (more than `gpu_time.DISAGREE`× apart), per model when its launch time and its GPU time disagree, and where a
model is launch-bound (its GPU idles between launches: GPU busy well below its GPU span); one line when nothing
disagrees. Nothing on a CPU trace.
"""

from __future__ import annotations

import math

from ..analysis.coefficient.gpu_time import DISAGREE, LAUNCH_TIME
from ..analysis.metrics import BY_NAME, WALL
from .sentence_text import sig3

TITLE = ("GPU time vs launch time (on a GPU trace c is on GPU time; a range's CPU time is the time the CPU took to "
         "launch its work)")
LAUNCH_LABEL = "Launch time"  # its name in a table's headers


def _on_gpu(headline: str | None) -> bool:
    return headline is not None and headline != WALL


def label(metric: str, headline: str | None) -> str:
    """`metric`'s name in a table's headers: wall is "Launch time" in a result headlined on the GPU (`headline`: the
    result's headline metric), "Wall" on a CPU trace; the others their registry label ("GPU span", …)."""
    return LAUNCH_LABEL if metric == WALL and _on_gpu(headline) else BY_NAME[metric].label


def words(metric: str, headline: str | None) -> str:
    """`metric`'s name in a sentence: wall is "launch time" on the GPU, "wall" on a CPU trace; the others their
    registry label ("GPU span", …)."""
    if metric == WALL:
        return LAUNCH_TIME if _on_gpu(headline) else WALL
    return BY_NAME[metric].label


def plot_label(metric: str, headline: str | None) -> str:
    """`metric`'s name in a plot: wall is "launch time" on the GPU, "wall-clock" on a CPU trace."""
    return LAUNCH_TIME if metric == WALL and _on_gpu(headline) else BY_NAME[metric].plot_label


def metric_names(headline: str | None) -> dict[str, str]:
    """Each metric's data key → the name a person reads for it in this result (JSON `metric_names`)."""
    return {m: words(m, headline) for m in BY_NAME}


def _x(ratio: float) -> str:
    return f"{max(ratio, 1 / ratio):.1f}×"


def lines(result) -> list[str]:
    """The sentences (module docstring); empty when the result is not headlined on the GPU."""
    table = getattr(result, "gpu_time", None)
    if result.headline == WALL or table is None or table.empty:
        return []
    gpu = BY_NAME[result.headline].label
    out = []
    for r in table.itertuples(index=False):
        if r.c_disagrees:
            more = "overstates" if r.c_ratio > 1 else "understates"
            out.append(f"{r.model} ({r.phase}): c on {gpu} is {sig3(r.c_gpu)}, c on launch time (CPU) "
                       f"{sig3(r.c_launch)} — {_x(r.c_ratio)} apart: launch time and GPU time disagree; the CPU time "
                       f"of a step is the time to launch its work, so a c read off it {more} the draft's cost "
                       f"{_x(r.c_ratio)} — the answer is the GPU c, {sig3(r.c_gpu)}")
    for r in table.itertuples(index=False):
        said = []
        if r.disagrees:
            if r.launch_ratio < 1:
                said.append(f"launch time and GPU time disagree: its GPU work spans {_x(r.launch_ratio)} its "
                            "launch time (the GPU runs on after the CPU has moved on: the CPU time is not its cost)")
            else:
                said.append(f"launch time and GPU time disagree: its CPU time is {_x(r.launch_ratio)} its GPU span "
                            "(CPU work in the step that launches nothing: the CPU, not the GPU, sets its pace)")
        if r.boundness in ("launch-bound", "partly launch-bound") and math.isfinite(r.busy_share):
            said.append(f"{r.boundness}: its GPU idles between launches — GPU busy {r.busy_ms:.3f} ms of its "
                        f"{r.gpu_ms:.3f} ms {gpu} ({r.busy_share:.0%})")
        if said:
            out.append(f"{r.model} ({r.phase}): launch time {r.launch_ms:.3f} ms (CPU), {gpu} {r.gpu_ms:.3f} ms, GPU "
                       f"busy {r.busy_ms:.3f} ms: " + "; ".join(said))
    if not out:
        out.append(f"launch time and GPU time agree within {DISAGREE:g}× for every model and c, and no model is "
                   f"launch-bound: c on {gpu} and c on launch time tell the same")
    return out


def records(result) -> list[dict]:
    """The `gpu_time` table as JSON records (NaN as null)."""
    table = getattr(result, "gpu_time", None)
    if table is None or table.empty:
        return []
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v.item() if hasattr(v, "item") else v)
             for k, v in row.items()} for row in table.to_dict(orient="records")]
