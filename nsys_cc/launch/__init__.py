"""Making traces, the host side: vLLM's latency benchmark under `nsys profile`, per model, then the analysis.

- `models`: shipped model shapes (`models/<name>/config.json`) and how model arguments resolve; `pair`: the known-α
  pair's weights.
- `commands`: the exact nsys and benchmark command lines.
- `profile`: `profile` and `dry_run`, the main path (`nsys_cc.profile`, `nsys-cc profile`, sweep cells): interleaved
  runs by default, one process per model where they cannot be interleaved or with `separate`.
- `interleaved`: the interleaved runs (every model in one process, repeated; engines, runs, the precision loop),
  which share `plan` and `process`; `machine`: the machine's state around each run.
- `launcher`: one process per model, orchestrating `plan` (the runs, their labels and commands),
  `process` (nsys subprocesses, timeouts, retries, one model's attempt), `resume` (what a rerun keeps: markers,
  the attempts directory, the publish) and `results` (status.json; the report of the analysis floor's reading of
  the directory written).
- `check`: the checks of a fresh export (its forward range, GPU work, draft ranges); the forward-share check and
  every analysis of what was written are the analysis floor's (`analysis.profile_dir.forward_share`,
  `analysis.coefficient.of_profile`).
- `vllm_plugin`: the plugin's old import path (the plugin is `nsys_cc.vllm.plugin`).

What runs inside vLLM's processes (the plugin, its vLLM fix, the NVTX binding, the benchmark driver run under nsys)
is `nsys_cc.vllm`. Nothing is imported here.
"""
