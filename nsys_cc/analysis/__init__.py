"""The measurements, as data: rooms by question, each importing only the rooms below it (`tests/test_layers.py`).

Lowest first:

- the top modules, which every room reads: `metrics` (the registry of per-forward metrics and phases), `stats` (medians,
  bootstrap and across-run intervals), `result_values` (a result is a value: tables handed out as copies, compared by
  value);
- `profile_dir`: what a `profile` left beside its traces (status, run folders, vLLM's latencies, spec-decode counters);
- `theory`: the speedup model and the DSI simulation, on numbers;
- `forwards`: one model's forwards in one trace (the range picked and read, engine windows, GPU projection, phases,
  engine steps, tensor-parallel ranks, kernel tables);
- `speculative`: speculative runs measured in place, pooled over runs, their step cost model;
- `coefficient`: c, the result, and the analysis of what `analyze` is given;
- `kernels`: kernel by kernel, one trace or two;
- `tune`: γ per batch size (the tune model, tune directories, the live estimate).

Nothing here renders: a result's views are bound from above (`nsys_cc.views`, registered by `nsys_cc.report`).
"""
