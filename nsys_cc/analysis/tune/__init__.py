"""γ per batch size: the model `nsys-cc tune` fits on a design of measured cells (`model`: the cost across batch size,
the tokens per step; `schedule`: the forecast with its interval, the schedule and the checks on held-out cells), the
cell key every cell, check and table is keyed by (`keys`), the reading of tune and sweep directories into cells
(`directories`) and of how they were profiled (`records`), and the live estimate of c and the best γ from a server's
recent steps (`live`). The top room of the analysis: it reads profile directories as `analyze` does
(`coefficient`)."""
