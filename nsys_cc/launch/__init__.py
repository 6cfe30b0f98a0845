"""Making traces, the host side: vLLM's latency benchmark under `nsys profile` — the runs of the profile workflow
(`nsys_cc.workflows.profile`, which chooses between interleaved runs and one process per model and hands the
analysis down as `finish`).

- `models`: shipped model shapes (`models/<name>/config.json`) and how model arguments resolve; `pair`: the known-α
  pair's weights.
- `commands`: the exact nsys and benchmark command lines.
- `interleaved`: the interleaved runs (every model in one process, repeated; which engines, the runs one after
  another, the precision loop, what they did), each made by `interleaved_run` (one run: its engines, commands,
  execution in an attempt folder, its record); they share `plan` and `process`; `machine`: the machine's state
  around each run.
- `launcher`: one process per model, orchestrating `plan` (the runs, their labels and commands),
  `process` (nsys subprocesses, timeouts, retries, one model's attempt), `resume` (what a rerun keeps: markers,
  the attempts directory, the publish) and `results` (status.json; the report of the analysis floor's reading of
  the directory written).
- `check`: the checks of a fresh export (its forward range, GPU work, draft ranges); the forward-share check and
  every analysis of what was written are the analysis floor's (`analysis.profile_dir.forward_share`,
  `analysis.coefficient.of_profile`).

What runs inside vLLM's processes (the plugin, its vLLM fix, the NVTX binding, the benchmark driver run under nsys)
is `nsys_cc.vllm`. Nothing is imported here.
"""
