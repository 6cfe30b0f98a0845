"""The labels of a tune design's engines read back (`spec_labels.DESIGN_LABEL_RE`, `design_role`, `design_cell`):
with and without the prompt length, and the schedule and K = 0 engines told apart from a cell at γ = k."""

from __future__ import annotations

import pytest

from nsys_cc.analysis.profile_dir.spec_labels import DESIGN_LABEL_RE, design_cell, design_role, refuse_mixed_batch_sizes
from nsys_cc.errors import InputError


@pytest.mark.parametrize("label, batch, input_len, model", [
    ("bs8.pair-target", "8", None, "pair-target"),
    ("bs8-in128.pair-target", "8", "128", "pair-target"),
    ("bs16-in1024.pair-draft.spec-g3", "16", "1024", "pair-draft.spec-g3"),
    ("bs1-in32.pair-draft.k0.spec-g7", "1", "32", "pair-draft.k0.spec-g7"),
    ("bs2.my-in-house.model", "2", None, "my-in-house.model"),  # "-in" inside a model's name is the model's
])
def test_the_design_label_names_batch_prompt_length_and_model(label, batch, input_len, model):
    m = DESIGN_LABEL_RE.match(label)
    assert m is not None and (m.group("batch"), m.group("input_len"), m.group("model")) == (batch, input_len, model)


@pytest.mark.parametrize("label, role", [
    ("bs4.t", "target"), ("bs4-in64.t", "target"), ("bs4.d.spec-g2", "speculative"),
    ("bs4-in64.d.schedule.spec-g6", "schedule"), ("bs4-in64.d.k0.spec-g3", "k0"), ("bs4.d.k0.spec-g3", "k0"),
    ("d.k0.spec-g3", None), ("pair-target", None),
])
def test_the_k0_and_schedule_engines_are_no_cell_at_their_gamma(label, role):
    assert design_role(label) == role


def test_cells_of_a_design():
    assert design_cell("bs8-in128.t") == (8, 128) and design_cell("bs8.t") == (8, None) and design_cell("t") is None


def test_engines_of_several_cells_are_refused_together_and_one_cells_are_not():
    refuse_mixed_batch_sizes(["bs4-in64.t", "bs4-in64.d.k0.spec-g3"], "runs: x")
    with pytest.raises(InputError, match="cells bs4-in32, bs4-in64"):
        refuse_mixed_batch_sizes(["bs4-in64.t", "bs4-in32.t"], "runs: x")
    with pytest.raises(InputError, match="cells bs1, bs8"):
        refuse_mixed_batch_sizes(["bs1.t", "bs8.t.spec-g1"], "runs: x")
