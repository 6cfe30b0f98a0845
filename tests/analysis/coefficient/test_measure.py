"""The cost coefficient on the project's real vLLM-CPU fixtures, checked against raw SQLite rows.

The expected values are computed here from NVTX_EVENTS with the stdlib only: forward ranges by name, warm-up by
the `nsys_cc:warmup` ranges' time windows, phase by payload vs the iteration's batch, medians with numpy.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import FIXTURES, raw_sql, unchanged
from nsys_cc import cost_coefficient
from nsys_cc.cli import cli
from nsys_cc.errors import InputError, RangeNotFoundError

VLLM = FIXTURES / "vllm"
TARGET = VLLM / "tiny-llama-target.sqlite"
DRAFTS = [VLLM / "tiny-llama-draft-s.sqlite", VLLM / "tiny-llama-draft-xs.sqlite"]
NAMES = ["tiny-llama-target", "tiny-llama-draft-s", "tiny-llama-draft-xs"]

RANGES_SQL = """
SELECT e.start, e.end, e.int64Value, coalesce(e.text, s.value)
FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
WHERE e.eventType IN (59, 60)
"""


def raw_model(path):
    """Per phase: kept forward durations (ms), computed from the raw rows; under "token <phase>" each forward's token:
    its duration + the `nsys_cc:logits` and `nsys_cc:sample` ranges between its end and the next forward's start
    (one thread in these traces)."""
    rows = raw_sql(path, RANGES_SQL)
    fwd = sorted((r for r in rows if r[3] == "model_executable()"), key=lambda r: r[0])
    parts = [r for r in rows if r[3] in ("nsys_cc:logits", "nsys_cc:sample")]
    warm = [(r[0], r[1]) for r in rows if r[3] == "nsys_cc:warmup"]
    iters = [(r[0], r[1], r[2]) for r in rows if r[3] in ("nsys_cc:warmup", "nsys_cc:iteration")]
    out = {"prefill": [], "decode": [], "all": [], "dropped": 0, "token prefill": [], "token decode": [],
           "token all": []}
    for i, (start, end, payload, _) in enumerate(fwd):
        if any(ws <= start <= we for ws, we in warm):
            out["dropped"] += 1
            continue
        (batch,) = [b for s, e, b in iters if s <= start <= e]
        phase = "prefill" if payload / batch > 1 else "decode"
        until = fwd[i + 1][0] if i + 1 < len(fwd) else float("inf")
        mine = [p for p in parts if end <= p[0] < until]
        assert sorted(p[3] for p in mine) == ["nsys_cc:logits", "nsys_cc:sample"]
        token = (end - start + sum(p[1] - p[0] for p in mine)) / 1e6
        for key in (phase, "all"):
            out[key].append((end - start) / 1e6)
            out[f"token {key}"].append(token)
    return out


@pytest.fixture(scope="module")
def result():
    with unchanged(VLLM):
        return cost_coefficient(str(TARGET), [str(p) for p in DRAFTS])


def test_models_named_after_files_with_roles(result):
    assert [m.name for m in result.models] == NAMES
    assert [m.role for m in result.models] == ["target", "draft", "draft"]


@pytest.mark.parametrize("path,name", list(zip([TARGET, *DRAFTS], NAMES)))
def test_phase_counts_and_medians_match_raw_rows(result, path, name):
    raw = raw_model(path)
    model = next(m for m in result.models if m.name == name)
    assert int((~model.forwards["kept"]).sum()) == raw["dropped"] > 0
    for phase in ("all", "prefill", "decode"):
        row = result.summary.query("model == @name and phase == @phase and metric == 'wall'").iloc[0]
        assert row["count"] == len(raw[phase]) > 0
        assert row["median_ms"] == pytest.approx(np.median(raw[phase]), rel=1e-12)
        assert row["p90_ms"] == pytest.approx(np.percentile(raw[phase], 90), rel=1e-12)


def test_coefficients_are_ratios_of_raw_medians(result):
    """c is the token's: the median of each forward + its logits + its sampling; c_forward the forwards'."""
    target = raw_model(TARGET)
    for path, name in zip(DRAFTS, NAMES[1:]):
        draft = raw_model(path)
        for phase in ("all", "prefill", "decode"):
            coef = result.coefficients
            row = coef[(coef["draft"] == name) & (coef["phase"] == phase) & (coef["metric"] == "wall")].iloc[0]
            expected = np.median(draft[f"token {phase}"]) / np.median(target[f"token {phase}"])
            assert row["basis"] == "token" and row["c"] == pytest.approx(expected, rel=1e-12)
            assert row["ci_low"] <= row["c"] <= row["ci_high"]
            assert row["c_forward"] == pytest.approx(np.median(draft[phase]) / np.median(target[phase]), rel=1e-12)
            assert row["c_forward_ci_low"] <= row["c_forward"] <= row["c_forward_ci_high"]
            assert row["draft_median_ms"] == pytest.approx(np.median(draft[f"token {phase}"]), rel=1e-12)
            assert row["target_forward_median_ms"] == pytest.approx(np.median(target[phase]), rel=1e-12)
            assert row["c"] > row["c_forward"]  # the small drafts' logits and sampling weigh more
    # CPU traces: wall only, and the notes say so
    assert set(result.coefficients["metric"]) == {"wall"}
    assert any("no CUDA tables" in n for n in result.notes)


def test_smaller_draft_has_smaller_decode_c(result):
    dec = result.coefficients.query("phase == 'decode' and metric == 'wall'").set_index("draft")["c"]
    assert dec["tiny-llama-draft-xs"] < dec["tiny-llama-draft-s"] < 1.0


def test_skip_ranges_overrides_markers():
    res = cost_coefficient(str(TARGET), [str(DRAFTS[0])], skip_ranges=3)
    fw = res.target.forwards
    assert fw["kept"].tolist() == [False] * 3 + [True] * (len(fw) - 3)
    # the library's notes name its parameter (a notebook user writes skip_ranges=3), never a CLI flag
    assert any("(skip_ranges=3)" in n for n in res.notes)
    assert not any("--" in n for n in res.notes)


@pytest.mark.slow
def test_cli_notes_name_the_flags():
    # the same notes printed by `nsys-cc analyze`: the verb's flags, in every format that shows them
    text = CliRunner().invoke(cli, ["analyze", str(TARGET), str(DRAFTS[0]), "--skip-ranges", "3"])
    assert text.exit_code == 0, text.output
    assert "(--skip-ranges=3)" in text.stdout and "skip_ranges" not in text.stdout
    doc = json.loads(CliRunner().invoke(cli, ["analyze", str(TARGET), str(DRAFTS[0]), "--skip-ranges", "3",
                                              "--format", "json"]).stdout)
    assert any("(--skip-ranges=3)" in n for n in doc["notes"])
    assert all("--skip-ranges=3" in m["warmup"] for m in doc["models"])


@pytest.fixture()
def scopes_pair(tmp_path):
    """vLLM's own-scopes trace and a byte copy of it under another name (only one such trace exists; both sides
    of the comparison need `gpu_model_runner: forward` ranges)."""
    scopes = VLLM / "vllm_scopes.sqlite"
    copy = tmp_path / "vllm_scopes_copy.sqlite"
    copy.write_bytes(scopes.read_bytes())
    return str(scopes), str(copy)


def test_output_len_rule_on_vllm_scopes_fixture(scopes_pair):
    """vLLM's own `gpu_model_runner: forward` ranges carry no payload: with --output-len 4 every 4th forward is a
    prefill, one per measured iteration of the benchmark."""
    bench = json.loads((VLLM / "vllm_scopes.bench.json").read_text())
    res = cost_coefficient(scopes_pair[0], [scopes_pair[1]], range_name="gpu_model_runner: forward",
                           output_len=4, skip_ranges=8)
    assert res.coefficients.query("metric == 'wall'")["c"].tolist() == [1.0, 1.0, 1.0]
    m = res.target
    kept = m.forwards[m.forwards["kept"]]
    assert (kept["phase"] == "prefill").sum() == len(bench["latencies"])
    assert (kept["phase"] == "decode").sum() == 3 * len(bench["latencies"])
    assert m.phase_rule.rule == "output-len"


@pytest.mark.slow
def test_inferred_phases_without_payload_or_output_len(scopes_pair):
    """No payload and no output_len: the phases are inferred from the wall times. In this trace every 4th forward
    (positions 0, 4, 8, …) is a prefill (`--output-len 4`); the kept prefills take several times as long as any kept
    decode (checked here from the raw ranges), well past the rule's 1.5×, so the rule must be `inferred` and must
    find exactly that pattern."""
    rows = raw_sql(scopes_pair[0], "SELECT e.\"end\" - e.start FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
                                   "WHERE s.value = 'gpu_model_runner: forward' ORDER BY e.start")
    walls = np.array([r[0] for r in rows], dtype=float)[8:]
    prefill = np.arange(8, 8 + len(walls)) % 4 == 0
    assert walls[prefill].min() > 3 * walls[~prefill].max()
    res = cost_coefficient(scopes_pair[0], [scopes_pair[1]], range_name="gpu_model_runner: forward", skip_ranges=8)
    m = res.target
    assert (m.phase_rule.rule, m.phase_rule.confidence) == ("inferred", "high")
    kept = m.forwards[m.forwards["kept"]]
    assert kept["phase"].tolist() == np.where(prefill, "prefill", "decode").tolist()
    assert m.phase_rule.detail.endswith("pass output_len to state it")
    # the CLI names its flag in the same note
    out = CliRunner().invoke(cli, ["analyze", *scopes_pair, "--range", "gpu_model_runner: forward", "--skip-ranges",
                                   "8", "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["models"][0]["phase_rule_detail"].endswith("pass --output-len to state it")


def test_json_shape():
    out = CliRunner().invoke(cli, ["analyze", str(TARGET), *map(str, DRAFTS), "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert [m["name"] for m in doc["models"]] == NAMES
    for m in doc["models"]:
        assert m["role"] in ("target", "draft") and m["path"].endswith(".sqlite")
        for phase, entry in m["phases"].items():
            assert phase in ("all", "prefill", "decode")
            assert isinstance(entry["count"], int)
            assert set(entry["wall_ms"]) >= {"median", "mean", "p10", "p90", "std"}
            assert entry["gpu_span_ms"] is None and entry["kernel_sum_ms"] is None and entry["gpu_busy_ms"] is None
    for c in doc["coefficients"]:
        assert c["metric"] in ("wall", "gpu_span", "kernel_sum", "gpu_busy")
        assert c["ci95"][0] <= c["c"] <= c["ci95"][1]
    assert {c["draft"] for c in doc["coefficients"]} == set(NAMES[1:])


@pytest.mark.parametrize("fmt,needle", [("table", "c Wall"), ("markdown", "| Model |"), ("csv", "model,role,phase")])
def test_text_formats(fmt, needle):
    out = CliRunner().invoke(cli, ["analyze", str(TARGET), str(DRAFTS[0]), "--format", fmt])
    assert out.exit_code == 0 and needle in out.output


def test_names_option_labels_models():
    out = CliRunner().invoke(cli, ["analyze", str(TARGET), str(DRAFTS[0]), "--name", "7b", "--name", "68m",
                                   "--format", "json"])
    assert [m["name"] for m in json.loads(out.output)["models"]] == ["7b", "68m"]


@pytest.mark.parametrize("args,needle", [
    (["analyze", "missing.sqlite", str(TARGET)], "missing.sqlite"),
    (["analyze", str(TARGET), str(TARGET)], "given twice"),
    (["analyze", str(TARGET), str(DRAFTS[0]), "--range", "model_executable"], "closest names: 'model_executable()'"),
    (["analyze", str(TARGET), str(DRAFTS[0]), "--skip-ranges", "100"], "dropped as warm-up"),
    (["analyze", str(TARGET), str(DRAFTS[0]), "--name", "only-one"], "--name"),
    (["analyze", str(TARGET), str(DRAFTS[0]), "--acceptance", "1.5"], "outside [0, 1]"),
])
def test_bad_input_one_line_exit_2(args, needle):
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 2, out.output
    assert needle in out.output
    assert "Traceback" not in out.output


def test_library_errors_are_typed():
    with pytest.raises(RangeNotFoundError):
        cost_coefficient(str(TARGET), [str(DRAFTS[0])], range_name="nope")
    with pytest.raises(InputError):
        cost_coefficient(str(TARGET), [])


def test_the_default_forward_range_reads_vllm_scope_because_it_is_the_default():
    """The fallback to vLLM's own forward scope is the default's, said where the default is settled
    (`forwards.ranges.forward_range`) and read because the default asks for it (`forward_names`) — not because a
    list of other markers happens to hold it: a range of the user's own reads no vLLM scope."""
    from nsys_cc.analysis.forwards.ranges import MARKERS, forward_names, forward_range, marked_ranges
    from nsys_cc.contract import FORWARD_RANGE, SCOPES_FORWARD
    from nsys_cc.trace import open_trace

    assert SCOPES_FORWARD not in MARKERS
    assert forward_names(None) == forward_names(FORWARD_RANGE) == (FORWARD_RANGE, SCOPES_FORWARD)
    with open_trace(VLLM / "vllm_scopes.sqlite") as trace:
        default, own = marked_ranges(trace, None), marked_ranges(trace, "my_range")
        n_scope = raw_sql(VLLM / "vllm_scopes.sqlite",
                          "SELECT count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON e.textId = s.id "
                          f"WHERE coalesce(e.text, s.value) = '{SCOPES_FORWARD}'")[0][0]
    assert n_scope > 0
    assert int((default["name"] == SCOPES_FORWARD).sum()) == n_scope
    assert not (own["name"] == SCOPES_FORWARD).any()
    range_name, note = forward_range(default, None, label="m")
    assert range_name == SCOPES_FORWARD and "own forward scope" in note
    assert forward_range(own, "my_range", label="m") == ("my_range", None)
