"""`nsys-cc kernels A [B]`: the GPU ops per forward range of a trace, or two sets of ranges compared kernel by kernel
(two traces, or two ranges of one trace with --range-b): `nsys_cc.kernels` and `nsys_cc.kernel_diff`."""

from __future__ import annotations

import click

from ..contract import FORWARD_RANGE, SCOPES_FORWARD
from .options import export_timeout_option, format_option


@click.command()
@click.argument("a", type=click.Path(dir_okay=True))
@click.argument("b", required=False, type=click.Path(dir_okay=True))
@click.option("--range", "range_name", default=FORWARD_RANGE, show_default=True,
              help=f"NVTX range around each forward of A (vLLM's own '{SCOPES_FORWARD}' is used, with a note, when "
                   "the trace has only that).")
@click.option("--range-b", "range_name_b", default=None,
              help="The range of B (default: --range); without B, a second range of A to compare with --range.")
@click.option("--phase", type=click.Choice(["all", "prefill", "decode", "verify"]), default=None,
              help="Phase of the forwards (of A's alone with --phase-b; default: the one c is judged on: decode when "
                   "told apart, else all).")
@click.option("--phase-b", type=click.Choice(["all", "prefill", "decode", "verify"]), default=None,
              help="Phase of B's forwards when it differs from A's, e.g. --phase decode --phase-b verify: a target's "
                   "decode against a speculative run's verify (default: --phase).")
@click.option("--skip-ranges", type=int, default=None,
              help="Drop the first N matching ranges as warm-up (default: the trace's warm-up marks).")
@click.option("--output-len", type=int, default=None,
              help="Benchmark output length, to tell prefill from decode when ranges carry no payload.")
@format_option(("table", "json", "csv", "markdown"))
@export_timeout_option
def kernels(a, b, range_name, range_name_b, phase, phase_b, skip_ranges, output_len, fmt):
    """GPU operations launched inside the kept forward ranges of A, one row per kernel name (count, calls and ms per
    range, share); with B (a draft's trace) or --range-b (a second range of A), both side by side with the
    difference B − A per range, the largest first: where B saves time, and where it does not.

    Warm-up is dropped as `analyze` drops it; JSON and CSV are the rows alone (notes on stderr).
    """
    import warnings

    from ..analysis.kernels.compare import kernel_diff
    from ..analysis.kernels.per_kernel import kernels as kernel_table
    from ..errors import NsysCCWarning
    from ..progress import one_line
    from ..report import kernel_text
    from .flags import in_flags

    options = {"range_name": range_name, "phase": phase, "skip_ranges": skip_ranges, "output_len": output_len}
    with warnings.catch_warnings():  # what they warn of is in the table's notes, printed below
        warnings.simplefilter("ignore", NsysCCWarning)
        if b is None and range_name_b is None:
            if phase_b is not None:
                from ..errors import InputError

                raise InputError("phase_b is the phase of B's ranges: give B (another trace) or range_name_b",
                                 param="phase_b")
            table = kernel_table(a, **options)
        else:
            table = kernel_diff(a, b, range_name_b=range_name_b, phase_b=phase_b, **options)
    table.attrs["notes"] = tuple(in_flags(n) for n in table.attrs.get("notes", ()))
    click.echo(kernel_text.render(table, fmt), nl=False)
    if fmt in ("json", "csv"):
        for note in table.attrs["notes"]:
            click.echo(one_line(f"note: {note}"), err=True)
