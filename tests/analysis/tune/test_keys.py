"""The cell key (`analysis.tune.keys.CellKey`): every name a cell directory or a design engine is given, read back
whole; its forms in the report, the JSON rows and `--check`; what a design key covers. Expectations by hand."""

from __future__ import annotations

import pytest

from nsys_cc.analysis.tune.keys import CellKey, design_text, keyed, pairs


@pytest.mark.parametrize("name,key", [
    ("bs8", CellKey(8)), ("bs8-in128", CellKey(8, 128)), ("bs4-in1024-tp2", CellKey(4, 1024)),
    ("bs8-schedule", CellKey(8)), ("bs16_old", CellKey(16)), ("bs8-inx", CellKey(8)),
    ("bs", None), ("b8", None), ("bs8x", None), ("xbs8", None), ("bs8.pair-target", None), ("round-1", None),
])
def test_a_name_gives_its_key_whole(name, key):
    assert CellKey.from_name(name) == key


def test_the_forms_of_a_key_and_their_inverse():
    one, two = CellKey(8), CellKey(8, 128)
    assert (one.name, one.label, one.text, one.words) == ("bs8", "B=8", "8", "batch 8")
    assert (two.name, two.label, two.words) == ("bs8-in128", "B=8 L=128", "batch 8 input 128")
    assert (one.beyond_batch, two.beyond_batch) == ("", "L=128")
    assert one.to_dict() == {"batch_size": 8} and two.to_dict() == {"batch_size": 8, "input_len": 128}
    for key in (one, two):
        assert CellKey.from_name(key.name) == key
        assert CellKey.from_dict({**key.to_dict(), "gamma": 3, "forecast": 1.2}) == key
    assert CellKey.from_dict({"batch_size": 8, "input_len": None}) == one  # a JSON null is an axis not named


def test_keys_order_by_batch_size_then_prompt_length():
    keys = [CellKey(16), CellKey(8, 512), CellKey(1), CellKey(8), CellKey(8, 128)]
    assert sorted(keys) == [CellKey(1), CellKey(8), CellKey(8, 128), CellKey(8, 512), CellKey(16)]
    assert len({CellKey(8), CellKey(8), CellKey(8, 128)}) == 2


def test_a_design_of_batch_sizes_covers_every_prompt_length():
    assert CellKey(8).covers(CellKey(8, 128)) and CellKey(8).covers(CellKey(8))
    assert not CellKey(8).covers(CellKey(4, 128))
    assert CellKey(8, 128).covers(CellKey(8, 128)) and not CellKey(8, 128).covers(CellKey(8, 512))
    assert not CellKey(8, 128).covers(CellKey(8))


def test_checks_and_designs_in_their_recorded_and_written_forms():
    cells = keyed([(4, 2), [16, 3]])
    assert cells == [(CellKey(4), 2), (CellKey(16), 3)] and pairs(cells) == [[4, 2], [16, 3]]
    assert design_text([CellKey(8), CellKey(1)], [1, 3]) == "B ∈ [1, 8] × γ ∈ [1, 3]"
    assert design_text([CellKey(8, 128)], [2]) == "B ∈ [8] × L ∈ [128] × γ ∈ [2]"
