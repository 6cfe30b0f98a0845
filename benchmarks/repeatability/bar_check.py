"""Check the bar of issue 22 on profiles PREFIX-1 … PREFIX-N (their `--format json` output in PREFIX-k.json):
decode forwards per model, each decode c interval contains the median of the N c's, and the c's agree within 10 %.

    python benchmarks/repeatability/bar_check.py PREFIX [N]
"""
import json
import statistics
import sys

prefix, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
rows = []
for k in range(1, n + 1):
    doc = json.load(open(f"{prefix}-{k}.json"))
    coef = next(c for c in doc["coefficients"] if c["phase"] == "decode" and c["metric"] == "wall")
    counts = {m["name"]: m["phases"]["decode"]["count"] for m in doc["models"]}
    rows.append((coef["c"], coef["ci95"], counts))
cs = [r[0] for r in rows]
med = statistics.median(cs)
for k, (c, ci, counts) in enumerate(rows, 1):
    print(f"profile {k}: decode c {c:.4f} [{ci[0]:.4f}–{ci[1]:.4f}] (±{max(c - ci[0], ci[1] - c) / c:.1%}); "
          f"decode forwards {counts}; contains the median {med:.4f}: {ci[0] <= med <= ci[1]}")
spread = (max(cs) - min(cs)) / med
far = max(abs(c / med - 1) for c in cs)
print(f"spread (max − min) / median = {spread:.1%}; largest distance from the median {far:.1%}")
ok = all(min(r[2].values()) >= 100 for r in rows) and all(r[1][0] <= med <= r[1][1] for r in rows) and spread <= 0.10
print("BAR MET" if ok else "BAR NOT MET")
