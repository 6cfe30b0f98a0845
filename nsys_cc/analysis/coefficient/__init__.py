"""The cost coefficient c: what one draft token costs in units of one target token (a token = its forward, its
logits and its sampling), measured from one trace per model or pooled over runs.

`measure` reads every trace of a run (the forwards below, `forwards`), measures c per draft, phase and metric with
its interval (`stats`), and assembles the result (`result`: plain data, a value); `token` adds the logits and
sampling to each forward, `gpu_time` says GPU time against launch time, `diagnosis` where a draft's time goes;
`source_kinds` decides what `analyze` was given and analyses it, `of_profile` a profile's output directory. Above the
forwards and the speculative analysis (a speculative run among the drafts is measured in place)."""
