"""The files nsys-cc writes and reads back, one module per format, its reader and its writer together.

- `status_json`: a profile's `status.json` (its request, recorder, runs and models; one layout for both ways of running
  engines);
- `done_json`: the record a completed run leaves last (`run-<k>/done.json`, `<label>.done.json`: its commands, request,
  recorder, trace), and what the readers take from it;
- `interleaved_json`: the benchmark driver's record of an interleaved run (`run-<k>/interleaved.json`);
- `bench_json`: a model's per-iteration latencies (`X.bench.json`, vLLM's latency benchmark's `--output-json`);
- `cell_json`, `attempts_json`: a sweep cell's outcome and its starts;
- `tune_json`: a tune directory's `tune.json` (the design, then the report's record) and `schedule.json`.

Each module names its file, says what it holds, and gives the shape every reader checks (`inputs.check_shape`): a
file of another shape is a file nsys-cc did not write. vLLM's spec-decode metrics dump is `nsys_cc.acceptance`'s
(`dump_metrics` / `load`, a public API), the report's manifest `files.publishing`'s, a sweep's manifest
`sweep.manifest`'s. Nothing here imports more than the base (`inputs`, `errors`, `files`, `request`).
"""
