"""Reading what a `profile` left on disk, beside its traces: which models and runs completed (`outputs`), vLLM's
latencies (`latencies`, the bench JSON) and the forward share they check (`forward_share`), the spec-decode counters of
a metrics dump and the acceptance rate α from them (`acceptance`), and what labels a run speculative (`spec_labels`).
Nothing here reads a trace: this room sits just above the analysis's top modules (`metrics`, `stats`)."""
