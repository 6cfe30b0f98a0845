"""Sweeps: c as a function of batch size, context length (and γ), over many runs, on one machine or a Dask cluster.

- `grid`: the cells of a sweep (batch size × input length × target ranks) and what each cell profiles (`CellSpec`).
- `manifest`: trace sets — many (target, drafts, parameters) groups of existing traces — read from a sweep
  directory or a manifest file.
- `cell`: one cell: the profile workflow (`nsys_cc.workflows.profile`, what `nsys_cc.profile` runs) in its own
  sub-directory (a profile directory), its tidy table, resume marker
  and attempt count.
- `run`: a whole sweep and the analysis of many trace sets, locally (cells in turn, analyses in a process pool).
- `cluster`: the same on a Dask distributed cluster (`dask[distributed]` is imported only there).

Nothing here imports Dask; the tidy table's columns are `TABLE_COLUMNS` (in `cell`).
"""
