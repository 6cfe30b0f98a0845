"""The models of speculative decoding that need no trace: the speedup of Leviathan et al. 2023 (Thm 3.8; `speedup`:
the best γ, the walltime factor, the verdicts at an acceptance rate) and the DSI simulation of Timor et al. 2024
(`dsi`). They take c and α as numbers; everything that measures them sits above."""
