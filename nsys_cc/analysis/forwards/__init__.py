"""The forwards of one model in one trace: which NVTX ranges are its forwards (`ranges`: the forward range picked and
read once; `vllm_steps`: vLLM's own step markers in a PyTorch-profiler trace), the part of a trace that is one engine's
(`engines`: the `nsys_cc:engine` windows of an interleaved run), each range's GPU work (`projection`), its phase
(`phases`), the engine steps around the forwards (`steps`), a forward over several tensor-parallel ranks (`ranks`), the
GPU work lost without an error (`gpu_loss`) and the kernels per forward (`kernel_tables`). Above the analysis's top
modules and `profile_dir` (a model's latencies sit beside its trace); below everything that computes c."""
