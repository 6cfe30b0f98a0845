"""A token's c on the seed's shapes (the models of the hand measurement that motivated nsys_cc): `nsys-cc profile`
of tinyllama-1.1b-shape with llama-68m-shape and llama-160m-shape (shipped in nsys_cc/launch/models/, dummy weights,
vLLM's CPU build under the real nsys), and the token c it reports equals an independent recomputation
from the raw NVTX rows within 1 % — each decode token's forward + logits + sampling (the ranges after the forward on
its thread, before the next), then the medians' ratio — with the forward-only c still shown beside it. Few decode
steps: the 1.1b shape's forward is ~0.4 s on this CPU.
"""

from __future__ import annotations

import json
import math
import sqlite3
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

NSYS_CC = str(Path(sys.executable).parent / "nsys-cc")
TARGET, DRAFTS = "tinyllama-1.1b-shape", ["llama-68m-shape", "llama-160m-shape"]
BENCH = ["--input-len", "32", "--output-len", "6", "--batch-size", "1", "--num-iters-warmup", "1", "--num-iters",
         "2", "--device", "cpu", "--separate-processes"]


def raw_tokens(sqlite: Path) -> list[tuple[float, float]]:
    """(forward ms, token ms) of each measured decode forward (payload 1, outside the warm-up iterations), from the
    raw NVTX rows."""
    with sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT coalesce(e.text, s.value), e.start, e.\"end\", e.int64Value, e.globalTid FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 ORDER BY e.start").fetchall()
    forwards = [r for r in rows if r[0] == "model_executable()"]
    warm = [(r[1], r[2]) for r in rows if r[0] == "nsys_cc:warmup"]
    out = []
    for i, f in enumerate(forwards):
        if f[3] != 1 or any(s <= f[1] <= e for s, e in warm):
            continue
        until = forwards[i + 1][1] if i + 1 < len(forwards) else math.inf
        parts = [r for r in rows if r[0] in ("nsys_cc:logits", "nsys_cc:sample") and r[4] == f[4]
                 and f[2] <= r[1] < until]
        assert sorted(r[0] for r in parts) == ["nsys_cc:logits", "nsys_cc:sample"]
        out.append(((f[2] - f[1]) / 1e6, (f[2] - f[1] + sum(r[2] - r[1] for r in parts)) / 1e6))
    return out


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("seed") / "out"
    cmd = [NSYS_CC, "profile", "--target", TARGET, *[a for d in DRAFTS for a in ("--draft", d)], *BENCH, "-o",
           str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert (out / "report.json").is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    return out, done.stdout, json.loads((out / "report.json").read_text())


def test_token_c_equals_the_raw_nvtx_recomputation_on_the_seed_shapes(profiled):
    out, text, doc = profiled
    target = raw_tokens(out / f"{TARGET}.sqlite")
    assert len(target) >= 8
    coef = {(c["draft"], c["phase"], c["metric"]): c for c in doc["coefficients"]}
    for draft in DRAFTS:
        d = raw_tokens(out / f"{draft}.sqlite")
        row = coef[(draft, "decode", "wall")]
        token = statistics.median(x[1] for x in d) / statistics.median(x[1] for x in target)
        forward = statistics.median(x[0] for x in d) / statistics.median(x[0] for x in target)
        assert row["basis"] == "token"
        assert row["c"] == pytest.approx(token, rel=0.01)
        assert row["c_forward"] == pytest.approx(forward, rel=0.01)
        # The LM head and sampling weigh more in a small draft than in the target: the token c is the higher.
        assert row["c"] > row["c_forward"]
    # The forward-only c is still shown beside the token's, in the printed split.
    split = text[text.index("The token's split"):]
    for draft in DRAFTS:
        line = next(ln for ln in split.splitlines() if ln.startswith(draft))
        row = coef[(draft, "decode", "wall")]
        assert f"{row['c']:.3f} [" in line and f"{row['c_forward']:.3f} [" in line
