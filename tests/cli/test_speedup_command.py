"""`nsys-cc speedup` through click's CliRunner: JSON shape and values, table verdicts, one-line errors."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from nsys_cc.analysis.profile_dir import acceptance
from nsys_cc.cli import cli


def thm_3_8(alpha, gamma, c):
    return (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1))


def best(alpha, c, max_gamma=99):
    g = max(range(1, max_gamma + 1), key=lambda g: (thm_3_8(alpha, g, c), -g))
    return g, thm_3_8(alpha, g, c)


def run(*args):
    return CliRunner().invoke(cli, ["speedup", *args])


def test_json_single_object_has_the_documented_fields():
    r = run("--c", "0.0662", "--acceptance", "0.8", "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    g, s = best(0.8, 0.0662)
    assert {"c": 0.0662, "acceptance": 0.8, "gamma": None, "speedup": None, "best_gamma": g}.items() <= out.items()
    assert out["best_speedup"] == pytest.approx(s)
    assert out["break_even_alpha"] == 0.0662 and out["speedup_low"] is None and out["best_gamma_low"] is None


def test_json_list_with_gamma_and_interval():
    r = run("--c", "0.05", "--acceptance", "0.6,0.8", "--acceptance", "0.9", "--gamma", "3", "--ci", "0.03,0.08",
            "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert [o["acceptance"] for o in out] == [0.6, 0.8, 0.9]
    for o in out:
        a = o["acceptance"]
        assert o["gamma"] == 3
        assert (o["speedup_low"], o["speedup"], o["speedup_high"]) == pytest.approx(
            (thm_3_8(a, 3, 0.08), thm_3_8(a, 3, 0.05), thm_3_8(a, 3, 0.03)))
        assert (o["best_gamma_low"], o["best_gamma"], o["best_gamma_high"]) == (
            best(a, 0.08)[0], best(a, 0.05)[0], best(a, 0.03)[0])
        assert o["best_speedup_low"] == pytest.approx(best(a, 0.08)[1])


def test_table_says_plainly_that_the_seed_draft_loses_at_half_acceptance():
    r = run("--c", "0.688", "--acceptance", "0.5", "--ci", "0.65,0.72")
    assert r.exit_code == 0, r.output
    assert "α = 0.5: slows decoding down at α = 0.50: c = 0.688 > α; needs α > 0.688" in r.stdout
    assert "c = 0.688 (interval 0.650–0.720)" in r.stdout


def test_alpha_from_a_metrics_dump(tmp_path):
    path = tmp_path / "metrics.json"
    # Records with the fields of vLLM's metric classes (tests/analysis/profile_dir/test_acceptance.py checks those
    # classes themselves).
    acceptance.dump_metrics([
        {"name": acceptance.DRAFTS, "labels": {}, "value": 100},
        {"name": acceptance.DRAFT_TOKENS, "labels": {}, "value": 300},
        {"name": acceptance.ACCEPTED, "labels": {}, "value": 150},
        {"name": acceptance.PER_POSITION, "labels": {}, "values": [80, 45, 25]},
    ], path)
    r = run("--c", "0.1", "--metrics", str(path), "--format", "json")
    assert r.exit_code == 0, r.output
    alpha = 150 / (150 + 100 - 25)
    out = json.loads(r.stdout)
    assert out["acceptance"] == pytest.approx(alpha) and out["best_gamma"] == best(alpha, 0.1)[0]


@pytest.mark.parametrize("args, message", [
    (["--c", "-0.2", "--acceptance", "0.5"], "--c must be a number ≥ 0"),
    (["--c", "0", "--acceptance", "0.5", "--ci", "0.1,0.2"], "must satisfy 0 < LOW"),
    (["--c", "0.3", "--acceptance", "1.5"], "--acceptance: 1.5 is outside [0, 1]"),
    (["--c", "0.3", "--acceptance", "-0.1"], "outside [0, 1]"),
    (["--c", "0.3"], "give at least one --acceptance"),
    (["--c", "0.3", "--acceptance", "0.5", "--ci", "0.4,0.5"], "must satisfy 0 < LOW ≤ c = 0.3 ≤ HIGH"),
    (["--c", "0.3", "--acceptance", "0.5", "--ci", "0.2"], "--ci must be LOW,HIGH"),
    (["--c", "0.3", "--acceptance", "0.5", "--gamma", "0"], "--gamma must be ≥ 1"),
    (["--c", "0.3", "--acceptance", "0.5", "--max-gamma", "0"], "--max-gamma must be ≥ 1"),
    (["--c", "0.3", "--metrics", "/no/such/dump.json"], "metrics dump not found"),
])
def test_bad_values_give_one_line_and_exit_2(args, message):
    r = run(*args)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nsys-cc: error: ") and message in lines[0]


def test_c_zero_is_a_free_draft_whose_best_gamma_is_unbounded():
    # c = 0: S(α, γ, 0) = (1 − α^(γ+1)) / (1 − α) rises with every γ towards 1/(1 − α); no γ is best.
    r = run("--c", "0", "--acceptance", "0.5", "--gamma", "3", "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["best_gamma"] is None and out["best_gamma_unbounded"] is True
    assert out["best_speedup"] == pytest.approx(2.0)  # the limit 1/(1 − 0.5)
    assert out["speedup"] == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert "unbounded" in out["verdict"] and "γ = 6" in out["verdict"]  # 1 − 0.5^7 ≥ 0.99 first at γ = 6
    table = run("--c", "0", "--acceptance", "0.5,0")
    assert table.exit_code == 0, table.output
    assert "unbounded" in table.stdout and "→ 2× (γ → ∞)" in table.stdout
    assert "S = 1 at every γ" in table.stdout  # α = 0: nothing to gain even from a free draft


def test_the_verb_is_the_librarys_judgements_in_the_reports_words():
    # one library call (analysis.theory.speedup.judge_all) and one rendering (report.speedup_text): the verb adds
    # nothing of its own
    from nsys_cc.analysis.theory.speedup import DEFAULT_MAX_GAMMA, judge_all
    from nsys_cc.cli import speedup as verb
    from nsys_cc.report.speedup_text import render_judgements

    assert verb.DEFAULT_MAX_GAMMA == DEFAULT_MAX_GAMMA  # the verb's --help shows it without importing numpy
    judged = judge_all(0.0662, [0.5, 0.8], 3, 0.05, 0.08)
    for fmt in ("table", "json"):
        out = run("--c", "0.0662", "--acceptance", "0.5,0.8", "--gamma", "3", "--ci", "0.05,0.08", "--format", fmt)
        assert out.exit_code == 0 and out.output == render_judgements(judged, fmt)
    table = render_judgements(judged)
    assert table.splitlines()[0] == "c = 0.0662 (interval 0.0500–0.0800); best γ searched over 1…99"
    assert [line.split()[0] for line in table.splitlines()[3:5]] == ["0.5", "0.8"]
    g, s = best(0.8, 0.0662)
    assert table.splitlines()[-1].startswith(f"α = 0.8: best γ = {g} (6–8) gives {s:.3g}×")
