"""Speculative decoding measured where it happens: runs of vLLM speculating at γ, their engine steps read in place
(`runs`), analysed against the plain target's (`in_place`: the in-place c, the measured speedup and its
decomposition; `tables`: its columns and the `SpeculativeAnalysis` that holds them), pooled over interleaved runs
(`pooled`), the step cost model fitted on them and the speedup it forecasts (`forecast`), and the speedups that cannot
be (`plausibility`). Above the forwards (a run's steps are read from its forward ranges) and the speedup model
(`theory`); imported only when a speculative run is among the inputs."""
