"""Making traces: vLLM's latency benchmark under `nsys profile`, with NVTX ranges around every forward.

- `vllm_plugin`: the vLLM general plugin (`NSYS_CC_PLUGIN=1`) that writes `model_executable()`,
  `draft_model_executable()`, `nsys_cc:warmup` and `nsys_cc:iteration` ranges; `nsys_cc.vllm.nvtx_backend` picks
  the binding.
- `bench`: the program run under nsys (`python -m nsys_cc.launch.bench`, vLLM's latency benchmark).
- `models`: shipped model shapes (`models/<name>/config.json`) and how model arguments resolve.
- `commands`: the exact nsys and benchmark command lines; `launcher`: runs them per model, resumes, reports.
- `check`: the forward-share measurement check added to every report.

Nothing is imported here: vLLM imports `vllm_plugin` in each of its processes, which must stay cheap.
"""
