"""The acceptance rate α from vLLM's speculative-decoding counters.

vLLM counts, over a run (`LLM.get_metrics()`, `vllm/v1/spec_decode/metrics.py`):

- `vllm:spec_decode_num_drafts`: verification steps that had draft tokens;
- `vllm:spec_decode_num_draft_tokens`: draft tokens proposed (k per draft unless a request was ending);
- `vllm:spec_decode_num_accepted_tokens`: draft tokens accepted;
- `vllm:spec_decode_num_accepted_tokens_per_pos`: per draft position i, the drafts whose first i + 1 tokens were all
  accepted (a vector counter, one entry per position).
Counters repeated with other labels (one per engine under data parallelism) are summed.

Numbers defined here (`AcceptanceStats`):
- `alpha` = accepted ÷ draft tokens: vLLM's "draft acceptance rate".
- `per_position[i]` = accepted at position i ÷ drafts: vLLM's per-position acceptance rate.
- `alpha_iid`: α of Leviathan et al.'s i.i.d. model (the α of Thm 3.8), estimated by maximum likelihood: each draft
  is a run of accepted tokens stopped by a rejection or by the end of its k tokens, so α̂ = accepted ÷ (accepted +
  drafts that met a rejection); the drafts accepted in full are the per-position count at position k − 1 (NaN
  without the per-position vector).
  `alpha` is lower for k > 1 (E[accepted] / k = (α + … + α^k) / k < α), because drafts after the first rejection
  count as not accepted although they were never judged; prefer `alpha_iid` for `speedup`. Both assume every draft
  had k tokens (true unless requests end mid-draft).
- `alpha_iid_ci95`: the 95 % Wilson interval of `alpha_iid` (`stats.wilson`): under the i.i.d. model every judged
  draft token is one Bernoulli(α) trial (accepted + drafts that met a rejection trials, accepted successes), so the
  likelihood is the binomial one. From 45 judged tokens none accepted it is [0, 0.079], not a certain 0.

The dump written by `dump_metrics` and read by `load` is JSON: `{"format": "nsys_cc.vllm_metrics", "version": 1,
"metrics": [...]}`, one object per metric with `name`, `labels` and `value` (counters, gauges), `values` (vector
counters) or `count`, `sum` and `buckets` (histograms) — the fields of `vllm.v1.metrics.reader`'s classes.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ... import inputs
from ...errors import InputError

DUMP_FORMAT = "nsys_cc.vllm_metrics"
DUMP_VERSION = 1
DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
_FIELDS = ("value", "values", "count", "sum", "buckets")


@dataclass(frozen=True)
class AcceptanceStats:
    """Totals of vLLM's spec-decode counters and the acceptance rates they give (see the module docstring)."""

    alpha: float
    per_position: tuple[float, ...]
    num_drafts: int
    num_draft_tokens: int
    num_accepted: int
    accepted_per_position: tuple[int, ...] = ()

    @property
    def num_speculative_tokens(self) -> int:
        """k: the per-position vector's length, else draft tokens ÷ drafts rounded."""
        return len(self.accepted_per_position) or round(self.num_draft_tokens / self.num_drafts)

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens per verification step, the bonus token included: 1 + accepted ÷ drafts (vLLM's definition)."""
        return 1.0 + self.num_accepted / self.num_drafts

    @property
    def judged_tokens(self) -> int:
        """Draft tokens the target judged: the accepted ones and one rejection per draft that met one (the i.i.d.
        model's trials); 0 without the per-position vector."""
        if not self.accepted_per_position:
            return 0
        return self.num_accepted + self.num_drafts - self.accepted_per_position[-1]

    @property
    def alpha_iid_ci95(self) -> tuple[float, float]:
        """The 95 % Wilson interval of `alpha_iid` (NaN without the per-position vector)."""
        from ..stats import wilson

        return wilson(self.num_accepted, self.judged_tokens) if self.judged_tokens else (math.nan, math.nan)

    @property
    def alpha_iid(self) -> float:
        """Maximum-likelihood α of the i.i.d. model: accepted ÷ (accepted + drafts that met a rejection)."""
        if not self.accepted_per_position:
            return math.nan
        rejected = self.num_drafts - self.accepted_per_position[-1]
        return self.num_accepted / (self.num_accepted + rejected) if self.num_accepted + rejected else 1.0


def _record(metric) -> dict:
    if isinstance(metric, Mapping):
        rec = dict(metric)
    else:
        rec = {"name": getattr(metric, "name", None), "labels": dict(getattr(metric, "labels", None) or {})}
        rec.update({f: getattr(metric, f) for f in _FIELDS if hasattr(metric, f)})
    if not isinstance(rec.get("name"), str):
        raise InputError(f"not a vLLM metric (no name): {str(metric)[:80]}")
    if not isinstance(rec.setdefault("labels", {}), Mapping):
        raise InputError(f"metric {rec['name']}: labels must be a mapping, not {rec['labels']!r}")
    return rec


def _records(metrics) -> list[dict]:
    if isinstance(metrics, Mapping):
        if metrics.get("format") != DUMP_FORMAT or "metrics" not in metrics:
            raise InputError(f"not an nsys_cc metrics dump (expected \"format\": \"{DUMP_FORMAT}\")")
        metrics = metrics["metrics"]
    if isinstance(metrics, (str, bytes)) or not isinstance(metrics, Iterable):
        raise InputError("metrics must be the list from LLM.get_metrics() or a metrics dump")
    return [_record(m) for m in metrics]


def _count(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
        raise InputError(f"{name} must be a whole number ≥ 0, not {value!r}")
    return int(value)


def _positions(rec: dict, name: str) -> list[int]:
    if "values" in rec:
        return [_count(v, name) for v in rec["values"]]
    position = (rec.get("labels") or {}).get("position")  # one Prometheus counter per position
    # ASCII digits, at most 4 (γ ≤ 9999): `isdigit()` takes '²', which int() refuses, and a position of 10¹¹
    # would build a list of 10¹¹ zeros
    if not (isinstance(position, str) and re.fullmatch(r"[0-9]{1,4}", position)):
        raise InputError(f"{name} needs a `values` list or a numeric `position` label (0–9999)")
    return [0] * int(position) + [_count(rec.get("value"), name)]


def _add(total: list[int], values: list[int]) -> list[int]:
    width = max(len(total), len(values))
    return [(total[i] if i < len(total) else 0) + (values[i] if i < len(values) else 0) for i in range(width)]


def _of_model(records: list[dict], model: str | None) -> list[dict]:
    labels = [(r.get("labels") or {}).get("model_name") for r in records]
    names = sorted({n for n in labels if n is not None})
    if model is not None:
        if model not in names:
            known = ", ".join(names) or "no named model"
            raise InputError(f"no metrics of model {model!r}; the metrics are of {known}")
        return [r for r in records if (r.get("labels") or {}).get("model_name") == model]
    if len(names) > 1:
        raise InputError(f"the metrics are of several models ({', '.join(names)}): choose one with model=")
    return records


def from_metrics(metrics, model: str | None = None) -> AcceptanceStats:
    """Acceptance statistics from `LLM.get_metrics()`'s list, a list of metric dicts, or a parsed dump.

    `model` selects by the `model_name` label when the metrics hold several models. Raises InputError (one line)
    when the spec-decode counters are missing, zero or inconsistent.
    """
    totals = {DRAFTS: 0, DRAFT_TOKENS: 0, ACCEPTED: 0}
    seen: set[str] = set()
    per_pos: list[int] = []
    for rec in _of_model(_records(metrics), model):
        name = rec["name"].removesuffix("_total")
        if name == PER_POSITION:
            seen.add(name)
            per_pos = _add(per_pos, _positions(rec, name))
        elif name in totals:
            seen.add(name)
            totals[name] += _count(rec.get("value"), name)
    absent = [n for n in totals if n not in seen]
    if absent:
        raise InputError(f"no {', '.join(absent)} in the metrics: was speculative decoding on, "
                         "and the LLM built with disable_log_stats=False?")
    drafts, draft_tokens, accepted = totals[DRAFTS], totals[DRAFT_TOKENS], totals[ACCEPTED]
    if draft_tokens == 0 or drafts == 0:
        raise InputError("the spec-decode counters are zero: no draft token was proposed, so α is undefined")
    if accepted > draft_tokens:
        raise InputError(f"inconsistent spec-decode counters: {accepted} accepted > {draft_tokens} draft tokens")
    if per_pos and sum(per_pos) != accepted:
        raise InputError(f"inconsistent spec-decode counters: per-position accepted tokens sum to {sum(per_pos)}, "
                         f"not {accepted}")
    return AcceptanceStats(
        alpha=accepted / draft_tokens,
        per_position=tuple(p / drafts for p in per_pos),
        num_drafts=drafts, num_draft_tokens=draft_tokens, num_accepted=accepted,
        accepted_per_position=tuple(per_pos),
    )


def dump_metrics(metrics, path: str | os.PathLike) -> None:
    """Write `LLM.get_metrics()`'s list (or metric dicts) to `path` as the JSON dump described above."""
    doc = {"format": DUMP_FORMAT, "version": DUMP_VERSION, "metrics": _records(metrics)}
    try:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
    except OSError as exc:
        raise InputError(f"cannot write the metrics dump {os.fspath(path)}: {exc.strerror}") from None


def load(path: str | os.PathLike, model: str | None = None) -> AcceptanceStats:
    """Acceptance statistics from a dump written by `dump_metrics`."""
    data = inputs.read_bytes(path, "metrics dump")  # a regular file only: a FIFO would wait forever
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested beyond reason
        raise InputError(f"{os.fspath(path)} is not a JSON metrics dump ({str(exc)[:200]})") from None
    if not isinstance(doc, dict):
        raise InputError(f"{os.fspath(path)} is not an nsys_cc metrics dump (expected a JSON object)")
    if doc.get("version") != DUMP_VERSION and doc.get("format") == DUMP_FORMAT:
        raise InputError(f"{os.fspath(path)}: metrics dump version {doc.get('version')!r} is not {DUMP_VERSION}")
    return from_metrics(doc, model)


def parse_alphas(acceptance) -> list[float]:
    """Acceptance rates in [0, 1] as a user writes them: one number (0.8), a string of comma-separated numbers
    ("0.6,0.8"), or a sequence of either. Raises InputError naming `acceptance`."""
    if acceptance is None:
        return []
    items = [acceptance] if isinstance(acceptance, (str, int, float)) else list(acceptance)
    out = []
    for item in items:
        parts = [p.strip() for p in item.split(",")] if isinstance(item, str) else [item]
        for part in parts:
            if isinstance(part, str) and not part:
                continue
            try:
                a = float(part)
            except (TypeError, ValueError):
                raise InputError(f"acceptance: {part!r} is not a number", param="acceptance") from None
            if not 0.0 <= a <= 1.0:
                raise InputError(f"acceptance: {a:g} is outside [0, 1]", param="acceptance")
            out.append(a + 0.0)  # -0 is 0: never printed "α = -0" (issue 45)
    return out


def alphas_with_source(acceptance, metrics_dump: str | os.PathLike | None = None) -> tuple[list[float], str | None]:
    """α values from `acceptance` (see `parse_alphas`) and, when given, the i.i.d. estimate of a `metrics_dump`
    (`dump_metrics`), with a note saying where that α came from (None without a dump)."""
    alphas = parse_alphas(acceptance)
    if metrics_dump is None:
        return alphas, None
    if not isinstance(metrics_dump, (str, os.PathLike)):
        raise InputError(f"metrics_dump must be the path of a vLLM spec-decode metrics dump (a str or path), not "
                         f"{type(metrics_dump).__name__} {metrics_dump!r}", param="metrics_dump")
    stats = measured_alpha(metrics_dump)
    alphas.append(stats.alpha_iid)
    lo, hi = stats.alpha_iid_ci95
    return alphas, (f"α from {os.fspath(metrics_dump)}: {stats.alpha_iid:.3g} [{lo:.3g}–{hi:.3g}] (i.i.d. maximum "
                    f"likelihood over {stats.num_drafts} drafts, 95 % Wilson interval over {stats.judged_tokens} "
                    f"judged tokens; vLLM's accepted ÷ draft tokens = {stats.alpha:.3g})")


def measured_alpha(metrics_dump: str | os.PathLike) -> AcceptanceStats:
    """The counters of a metrics dump whose i.i.d. α is known (InputError naming `acceptance` otherwise)."""
    stats = load(metrics_dump)
    if math.isnan(stats.alpha_iid):
        raise InputError(f"{os.fspath(metrics_dump)} has no per-position counts of accepted tokens; give acceptance "
                         "instead", param="acceptance")
    return stats
