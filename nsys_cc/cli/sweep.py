"""`nsys-cc sweep`: c over a grid of batch sizes × input lengths (× target ranks), one `profile` run per cell.

Each cell is profiled as `nsys-cc profile` profiles (interleaved runs by default, `--repeat`, `--precision`,
`--replicas`; `--separate-processes`, or a target on several ranks, one process per model), and its directory is a
profile directory that `nsys-cc analyze CELL_DIR` reads.

Exit codes: 0 every cell complete; 1 the table was written but some cell failed (the notes say which, and where
its files are); 2 bad input or no row at all; 130 Ctrl-C (the table of the cells completed is written first).
"""

from __future__ import annotations

import click

from ..errors import InputError
from .flags import in_flags
from .options import ADDRESS, MODEL, NUMBERS, OUTPUT_DIR, SECONDS, TRACE_LIST, WORD, format_option, profiler_option


@click.command()
@click.option("--target", required=True, metavar="MODEL", type=MODEL,
              help="Target model (as for `profile`).")
@click.option("--draft", "drafts", multiple=True, required=True, metavar="MODEL", type=MODEL,
              help="Draft model (repeat for several), as for `profile`.")
@click.option("--batch-size", "batch_sizes", default="1", show_default=True, metavar="N[,N…]", type=NUMBERS,
              help="Batch sizes of the grid, comma-separated.")
@click.option("--input-len", "input_lens", default="128", show_default=True, metavar="N[,N…]", type=NUMBERS,
              help="Prompt lengths of the grid (context length), comma-separated.")
@click.option("--speculate", default=None, metavar="G[,G…]", type=NUMBERS,
              help="γ values handed to each cell's `profile --speculate` (speculative runs per draft and γ).")
@click.option("--target-tp", "target_tps", default=None, metavar="N[,N…]", type=NUMBERS,
              help="Target tensor-parallel sizes (`profile --target-tp`); several make another axis of the grid.")
@click.option("-o", "--output", "out_dir", type=OUTPUT_DIR, default="out/sweep", show_default=True,
              help="Sweep directory: one sub-directory per cell (bs4-in1024), the table and plots; a rerun resumes.")
@click.option("--output-len", type=int, default=2, show_default=True, help="Generated tokens per sequence.")
@click.option("--num-iters-warmup", "warmup_iters", type=int, default=5, show_default=True,
              help="Warm-up iterations (marked).")
@click.option("--num-iters", "iters", type=int, default=5, show_default=True, help="Measured iterations.")
@click.option("--enforce-eager", is_flag=True,
              help="On a GPU, run vLLM eagerly instead of with its CUDA graphs (the default, as users serve; a CPU "
                   "run is always eager).")
@click.option("--vllm-arg", "vllm_args", multiple=True, metavar="ARG", type=WORD,
              help="Extra vLLM benchmark option (repeatable).")
@click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True,
              help="Platform settings for nsys and vLLM (auto: GPU when nvidia-smi lists one, decided per worker).")
@profiler_option("sweep")
@click.option("--nsys-trace", "trace", default=None, metavar="LIST", type=TRACE_LIST,
              help="nsys -t value instead of the platform default.")
@click.option("--nsys-arg", "nsys_args", multiple=True, metavar="ARG", type=WORD,
              help="Extra `nsys profile` option (repeatable).")
@click.option("--repeat", type=int, default=None, metavar="R",
              help="Interleaved runs per cell (as `profile --repeat`): every model in one process per run. "
                   "[default: 6]")
@click.option("--precision", type=float, default=None, metavar="P",
              help="Per cell, add runs until every draft's decode c interval lies within ±P·c (as `profile "
                   "--precision`), at most --max-repeat runs.")
@click.option("--max-repeat", type=int, default=None, metavar="N",
              help="The most runs --precision may make in a cell. [default: 30]")
@click.option("--replicas", type=int, default=None, metavar="N",
              help="Engines of each model in every run (as `profile --replicas`). [default: 2]")
@click.option("--separate-processes", "separate", is_flag=True,
              help="One process per model in each cell, one after another (as `profile --separate-processes`; no "
                   "--repeat).")
@click.option("--timeout", type=SECONDS, default=1800, show_default=True,
              help="Seconds allowed per run of a cell (per model with --separate-processes; benchmark, then "
                   "export); 0 for no limit.")
@click.option("--force", is_flag=True, help="Profile again cells (and models) that an earlier run completed.")
@click.option("--scheduler", default=None, metavar="ADDRESS", type=ADDRESS,
              help="Dask scheduler (tcp://host:8786): each cell runs on a worker with the resource GPU=1; -o must "
                   "be a path the workers share.")
@click.option("--dry-run", is_flag=True, help="Print the cells and the exact commands of each, and exit.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap intervals.")
@format_option(help="Format of the table printed at the end.")
def sweep(batch_sizes, input_lens, target_tps, scheduler, dry_run, fmt, **fields):
    """Profile TARGET and each DRAFT in every cell of a batch-size × input-length grid; one tidy table of c."""
    from ..report.sweep_text import render_sweep
    from ..sweep.grid import SweepSpec, cells
    from ..sweep.run import check_cells, sweep as run_sweep

    grid = cells(batch_sizes, input_lens, target_tps)
    spec = SweepSpec.of(**fields)  # the flags are the sweep's fields of the same names
    out_dir = spec.out_dir
    check_cells(spec, grid)
    if dry_run:
        from ..files.folder import check_out_dir

        check_out_dir(out_dir, "the sweep")  # what the run would refuse
        for c in grid:
            cs = spec.cell(c)
            extra = {k: v for k, v in cs.profile_kwargs().items() if k in ("speculate", "target_tp")}
            note = f" ({', '.join(f'{k}={v}' for k, v in extra.items())})" if extra else ""
            click.echo(f"## cell {c.name}: {cs.dir}{note}")
            click.echo(cs.dry_run())
        return
    result = run_sweep(spec, grid, scheduler=scheduler)
    click.echo(render_sweep(result.table, fmt, [in_flags(n) for n in result.notes]), nl=False)
    from ..progress import one_line

    click.echo(one_line(f"table: {result.files['csv']} (and {result.files['parquet'].name})"), err=True)
    if result.table.empty:
        raise InputError(f"no cell completed: see {result.files.get('cells')}")
    if result.failed:
        click.echo(f"nsys-cc: {len(result.failed)} of {len(result.cells)} cells did not complete: see the notes "
                   "above (a rerun retries them)", err=True)
        raise SystemExit(1)
