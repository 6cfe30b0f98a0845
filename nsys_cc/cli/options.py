"""Options shared by several verbs."""

from __future__ import annotations

import math

import click

from ..analysis import acceptance as acceptance_mod
from ..errors import InputError

acceptance_option = click.option(
    "--acceptance", "acceptance", multiple=True,
    help="Acceptance rate α (0–1) at which to judge each draft; repeat or comma-separate for several.",
)


def parse_acceptance(values: tuple[str, ...]) -> list[float]:
    """Floats in [0, 1] from repeated and/or comma-separated `--acceptance` values."""
    out = []
    for v in values:
        for part in str(v).split(","):
            part = part.strip()
            if not part:
                continue
            try:
                a = float(part)
            except ValueError:
                raise click.BadParameter(f"{part!r} is not a number", param_hint="--acceptance") from None
            if not 0.0 <= a <= 1.0:
                raise click.BadParameter(f"{a:g} is outside [0, 1]", param_hint="--acceptance")
            out.append(a)
    return out

metrics_option = click.option(
    "--metrics", "metrics_path", type=click.Path(dir_okay=False), default=None,
    help="vLLM spec-decode metrics dump (nsys_cc.analysis.acceptance.dump_metrics) to read α from.",
)


def alphas_from(values: tuple[str, ...], metrics_path: str | None, *,
                required: bool = True) -> tuple[list[float], str | None]:
    """α values from --acceptance and/or a --metrics dump (its i.i.d. estimate), and a note on where α came from."""
    try:
        alphas = parse_acceptance(values)
    except click.BadParameter as exc:
        raise InputError(f"--acceptance: {exc.message}") from None
    note = None
    if metrics_path:
        stats = acceptance_mod.load(metrics_path)
        if math.isnan(stats.alpha_iid):
            raise InputError(f"{metrics_path} has no per-position acceptance counts; give --acceptance instead")
        alphas.append(stats.alpha_iid)
        note = (f"α from {metrics_path}: {stats.alpha_iid:.3g} (i.i.d. maximum likelihood over {stats.num_drafts} "
                f"drafts; vLLM's accepted ÷ draft tokens = {stats.alpha:.3g})")
    if required and not alphas:
        raise InputError("give at least one --acceptance (or --metrics)")
    return alphas, note
