"""Options shared by several verbs."""

from __future__ import annotations

import click

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
