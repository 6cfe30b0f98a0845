"""The held-out forecast of each profile PREFIX-1 … PREFIX-N (`--format json` output in PREFIX-k.json): γ = 2 measured
against the step cost model fitted on γ 1 and 3; the bar: within 10 % every time.

    python benchmarks/repeatability/spec_check.py PREFIX [N]
"""
import json
import sys

prefix, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
errors = []
for k in range(1, n + 1):
    doc = json.load(open(f"{prefix}-{k}.json"))
    for row in doc["speculative"]:
        p = row["predicted_speedup"]
        if row["gamma"] != 2:
            continue
        lo, hi = row["measured_speedup_ci95"]
        errors.append(row["forecast_error"])
        print(f"profile {k}: γ = 2 measured {row['measured_speedup']:.3f}× [{lo:.3f}–{hi:.3f}], forecast (fit γ "
              f"{p['held_out_fit_gammas']}) {p['cost_model_held_out']:.3f}×: error {row['forecast_error']:+.1%} "
              f"(runs' own ±{row['forecast_tolerance']:.1%}); α = {row['alpha']:.3g}; problem: "
              f"{row.get('measurement_problem') or 'none'}")
ok = errors and all(abs(e) <= 0.10 for e in errors)
print("BAR MET" if ok else "BAR NOT MET", f"(errors {', '.join(f'{e:+.1%}' for e in errors)})")
