"""What runs inside vLLM's processes (the host side that starts the runs is `nsys_cc.launch`).

- `plugin`: the vLLM general plugin (`NSYS_CC_PLUGIN=1`; entry point `vllm.general_plugins` → `nsys_cc`) that writes
  the NVTX ranges of `nsys_cc.contract` around every forward, step and iteration, and carries the live timing
  (`nsys_cc.live`); `nvtx_backend` picks the NVTX binding.
- `fixes`: the correction of vLLM's CPU `expand` kernel that speculative decoding with sampling needs.
- `bench`: the program `nsys-cc profile` runs under nsys (`python -m nsys_cc.vllm.bench`, vLLM's latency benchmark).
- `interleave`: the program of `profile`'s interleaved runs (`python -m nsys_cc.vllm.interleave`): several engines in
  one process, their iterations alternating.

Nothing is imported here: vLLM imports the plugin in each of its processes, which must stay cheap.
"""
