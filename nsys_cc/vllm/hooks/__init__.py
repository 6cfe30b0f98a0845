"""The wrappers the vLLM plugin (`nsys_cc.vllm.plugin`) puts on vLLM, by what they time; the plugin's `_PATCHES` table
says which vLLM method gets which (docs/plugin.md lists every hook).

- `ranges`: what every wrapper shares — the per-thread state, the NVTX binding, opening and closing a forward's
  range (`enter` / `leave`) or a part range (`part_begin` / `part_end`), wrapping a method once (`wrap`);
- `forwards`: the target's and the drafts' forwards (eager, piecewise and full CUDA graphs), the step's token count,
  the CPU build's all-reduce;
- `sampling`: the rest of a target token — its logits and its sampling;
- `drafts`: the rest of a draft token — a proposer's logits and sampling — and a model-free proposer's proposing;
- `steps`: engine steps and benchmark iterations (warm-up or measured);
- `live`: the live timing's own hooks (`NSYS_CC_LIVE=1`; the forwards' and parts' live calls ride on the ranges).

Nothing here imports vLLM or torch: the wrappers are put on vLLM's classes when vLLM imports them.
"""
