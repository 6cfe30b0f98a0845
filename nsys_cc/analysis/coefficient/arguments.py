"""The checks of what `cost_coefficient` and `cost_coefficient_runs` are given, before any trace is read: counts
(`skip_ranges`, `output_len`), the seed, the models' labels, one forward range and one engine per trace, a trace
given twice, the metrics dumps by trace or label, and the interval of a measured α. Each refusal is an InputError
naming the parameter."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

from ...arguments import file_identity, many
from ...errors import InputError
from ...trace.registry import trace_stem
from ..forwards.ranges import forward_names
from ..profile_dir.acceptance import measured_alpha

PathLike = str | os.PathLike

# The largest skip_ranges or output_len taken: a count of ranges or tokens that int32/int64 arithmetic holds.
MAX_COUNT = 2**31 - 1


def check_range_arguments(skip_ranges: int | None, output_len: int | None) -> None:
    """InputError naming the parameter unless `skip_ranges` is a whole number ≥ 0 and `output_len` one ≥ 1 (None:
    not given); a string, a fraction or a bool is refused, not read as a count."""
    for param, value, least in (("skip_ranges", skip_ranges, 0), ("output_len", output_len, 1)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise InputError(f"{param} must be a whole number ≥ {least} (an int), not {type(value).__name__} "
                             f"{value!r}", param=param)
        if value < least:
            raise InputError(f"{param} must be ≥ {least}, not {value}", param=param)
        if value > MAX_COUNT:  # a count the arrays can hold (10²⁰ raised OverflowError in the phases, issue 45)
            raise InputError(f"{param} must be at most {MAX_COUNT} (2³¹ − 1), not {value}", param=param)


def check_seed(seed) -> int:
    """`seed` when it can seed the bootstrap (a whole number ≥ 0, as NumPy takes it); else InputError naming it."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed must be a whole number ≥ 0, not {seed!r}", param="seed")
    return int(seed)


def model_names(paths: Sequence[str], names: Sequence[str] | None) -> list[str]:
    """Labels for the models: `names` when given (each once, one line), else file names without the extension, each
    of a name met more than once getting the first free `#1`, `#2`, … (never another file's own name)."""
    if names:
        if len(names) != len(paths):
            raise InputError(f"names has {len(names)} label(s) for {len(paths)} traces: give one per trace or none",
                             param="names")
        labels = [str(n) for n in names]
        for label in labels:
            if not label.strip() or any(not ch.isprintable() for ch in label):
                raise InputError(f"names: {label!r} is not a label (one line of printable text)", param="names")
        twice = sorted({n for n in labels if labels.count(n) > 1})
        if twice:
            raise InputError(f"names: {', '.join(map(repr, twice))} given to more than one trace: each trace needs a "
                             "label of its own", param="names")
        return labels
    stems = [trace_stem(os.path.basename(p)) for p in paths]
    stems = [s if s.isprintable() else "".join(ch if ch.isprintable() else "?" for ch in s) for s in stems]
    taken, used, out = set(stems), set(), []
    for s in stems:
        label, n = s, 0
        while stems.count(s) > 1 and (n == 0 or label in used or label in taken):
            n += 1
            label = f"{s}#{n}"
        used.add(label)
        out.append(label)
    return out


def range_name_per_trace(range_name: str | Sequence[str] | Mapping[str, str] | None, paths: list[str],
                         labels: list[str]) -> list[str | None]:
    """One forward range name per trace: the same for all (a string), one per trace in order (a sequence), or by
    model label (a mapping; labels it does not name get the default). None (for all, or for one) is the default, which
    each trace settles when it is read (`forwards.ranges.forward_range`: the plugin's range, else vLLM's own)."""
    if range_name is None:
        return [None] * len(paths)
    if isinstance(range_name, str):
        return [_one_range(range_name)] * len(paths)
    if isinstance(range_name, Mapping):
        unknown = [k for k in range_name if k not in labels]
        if unknown:
            raise InputError(f"range_name names {', '.join(map(repr, unknown))}, which is not a model's label "
                             f"({', '.join(map(repr, labels))})", param="range_name")
        return [_one_range(range_name.get(label)) for label in labels]
    names = [_one_range(r) for r in many(range_name, "range_name")]
    if len(names) == 1:
        return names * len(paths)
    if len(names) != len(paths):
        raise InputError(f"range_name has {len(names)} names for {len(paths)} traces: give one for all or one per "
                         "trace", param="range_name")
    return names


def _one_range(value) -> str | None:
    """One forward range name as given: a non-empty string, or None for the default."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InputError(f"range_name: {value!r} is not an NVTX range name (a non-empty string, or None for the "
                         "default)", param="range_name")
    return value


def check_distinct(paths: Sequence[str], range_names: Sequence[str | None],
                   engines: Sequence[str | None] | None = None) -> None:
    """A trace may appear twice only with a different forward range or engine: the same forwards cannot be compared
    with themselves."""
    seen: dict[tuple[tuple, tuple[str, ...], str | None], str] = {}
    for p, r, engine in zip(paths, range_names, engines or [None] * len(paths)):
        key = (file_identity(p), forward_names(r), engine)  # a link (hard or symbolic) to a trace given is that trace
        if key in seen:
            raise InputError(f"{p} is given twice (as {seen[key]!r} too): each model needs its own trace")
        seen[key] = p


def engine_per_trace(engines: Sequence[str | None] | None, n: int) -> list[str | None]:
    """One engine label per trace ([target, *drafts]; None: the whole trace); None for all when not given."""
    if engines is None:
        return [None] * n
    out = [None if s is None else str(s) for s in many(engines, "engines")]
    if len(out) != n:
        raise InputError(f"engines has {len(out)} entries for {n} traces: give one per trace (None: the whole trace)",
                         param="engines")
    return out


def spec_metrics_per_model(spec_metrics: Mapping | None, paths: Sequence[str], labels: Sequence[str],
                           engines: Sequence[str | None]) -> dict[int, str]:
    """The metrics dumps given (`spec_metrics`: by trace path, or by model label) per model index. A key that is
    neither a trace given (read whole) nor a model's label is refused: its dump would be ignored."""
    if spec_metrics is None:
        return {}
    if not isinstance(spec_metrics, Mapping):
        raise InputError("spec_metrics: give a mapping from a speculative trace (or its label) to its metrics dump",
                         param="spec_metrics")
    out: dict[int, str] = {}
    for key, dump in spec_metrics.items():
        text = os.fspath(key) if isinstance(key, (str, os.PathLike)) else str(key)
        hits = [i for i, label in enumerate(labels) if label == text]
        if not hits:
            hits = [i for i, (p, engine) in enumerate(zip(paths, engines))
                    if engine is None and file_identity(p) == file_identity(text)]
        if not hits:
            raise InputError(f"spec_metrics: {text!r} is neither a trace given (read whole) nor a model's label "
                             f"({', '.join(map(repr, labels))}): its dump would be ignored", param="spec_metrics")
        for i in hits:
            out[i] = os.fspath(dump)
    return out


def alpha_intervals(alphas: list[float], metrics_dump: PathLike | None) -> list[tuple[float, float] | None]:
    """Per α, its interval: the Wilson interval of a metrics dump's α (the last one), None for the α given."""
    out: list[tuple[float, float] | None] = [None] * len(alphas)
    if metrics_dump is not None and alphas:
        out[-1] = measured_alpha(metrics_dump).alpha_iid_ci95
    return out
