"""Making traces, the host side: vLLM's latency benchmark under a recorder (`nsys profile`, or vLLM's torch profiler) —
the runs of the profile workflow (`nsys_cc.workflows.profile`, which hands the analysis down as `finish`).

- `orchestrator`: the one launch orchestrator (dry run, the checks before the first run, resume, `status.json`, the
  record every run stores, Ctrl-C, the end), with two strategies: `interleaved` (every model in one process, repeated;
  which engines, what stops the runs, the precision loop, what they did), each run made by `interleaved_run` (its
  engines, commands, execution in an attempt folder, its record), and `separate` (one process per model, planned by
  `plan`); `results`: what `profile` returns (`ProfileOutcome`).
- `recorders`: one module per recorder (`nsys`, `torch`) — its commands, environment, trace file name, export, binary
  and version — and the registry, the one list of the values `--profiler` takes.
- `commands`: the exact benchmark command lines and the files named after a model (`ModelFiles`); `models`: shipped
  model shapes (`models/<name>/config.json`) and how model arguments resolve; `pair`: the known-α pair's weights.
- `process` (subprocesses, timeouts, retries, one model's attempt), `resume` (what a rerun keeps, the attempts
  directory, the publish; `recorded`: the one rule a rerun keeps a run by), `attempts` (attempt folders),
  `environment` (what the runs inherit), `machine` (the machine's
  state around each run), `eta` (the time left).
- `check`: the checks of a fresh export (its forward range, GPU work, draft ranges); the forward-share check and
  every analysis of what was written are the analysis floor's (`analysis.profile_dir.forward_share`,
  `analysis.coefficient.of_profile`).

What runs inside vLLM's processes (the plugin, its vLLM fix, the NVTX binding, the benchmark driver run under nsys)
is `nsys_cc.vllm`. Nothing is imported here.
"""
