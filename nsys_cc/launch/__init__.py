"""Making traces, the host side: vLLM's latency benchmark under `nsys profile`, per model, then the analysis.

- `models`: shipped model shapes (`models/<name>/config.json`) and how model arguments resolve; `pair`: the known-α
  pair's weights.
- `commands`: the exact nsys and benchmark command lines; `launcher`: runs them per model, resumes, reports.
- `check`: the forward-share measurement check added to every report.
- `vllm_plugin`: the plugin's old import path (the plugin is `nsys_cc.vllm.plugin`).

What runs inside vLLM's processes (the plugin, its vLLM fix, the NVTX binding, the benchmark driver run under nsys)
is `nsys_cc.vllm`. Nothing is imported here.
"""
