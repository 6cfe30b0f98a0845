"""The engines' step annotations (`analysis.forwards.step_names`): every form vLLM and SGLang write, each name's kind,
batch, tokens and context worked out by hand from the name."""

from __future__ import annotations

import math

import pytest

from nsys_cc.analysis.forwards.step_names import parse

NAN = math.nan


@pytest.mark.parametrize("name, kind, batch, tokens, context", [
    # vLLM's plain form (the counts possibly followed by _<number>s, as on the public B200 trace)
    ("execute_context_1(888_788544)_generation_0(0)", "prefill", 1, 888, NAN),
    ("execute_context_0(0)_generation_4(4)", "decode", 4, 4, NAN),
    ("execute_context_0(0)_generation_2(10)", "verify", 2, 10, NAN),
    ("execute_context_2(640)_generation_30(30)", "mixed", 32, 670, NAN),
    ("execute_context_0(0)_generation_0(0)", "empty", 0, 0, NAN),
    # the detailed form: both parts' KV length summed (sk)
    ("execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086)", "decode", 32, 32, 55086),
    ("execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk34489sqsq37sqsk34489)",
     "mixed", 46, 8192, 8430 + 34489),
    ("execute_14721_context_2(sq14721sk14721sqsq108745533sqsk108745533)_generation_0(sq0sk0sqsq0sqsk0)", "prefill", 2,
     14721, 14721),
    # SGLang's step[…] (ModelRunner.forward), plain and with roofline fields
    ("step[DECODE bs=32]", "decode", 32, 32, NAN),
    ("step[EXTEND bs=2 toks=14721]", "prefill", 2, 14721, NAN),
    ("step[EXTEND bs=2 toks=14721 c_sq=14721 c_sqsq=108745533 c_sqsk=108745533 c_sk=14721]", "prefill", 2, 14721,
     14721),
    ("step[DECODE bs=2 g_sq=2 g_sqsq=2 g_sqsk=30 g_sk=30]", "decode", 2, 2, 30),
    ("step[DECODE bs=64 g_sq=128 g_sqsq=256 g_sqsk=262144 g_sk=131072]", "verify", 64, 128, 131072),  # MTP
    ("step[MIXED bs=2 c=1 g=1 c_sq=5 c_sk=8 c_sqsq=25 c_sqsk=40 g_sq=1 g_sk=12 g_sqsq=1 g_sqsk=12]", "mixed", 2, 6,
     20),
    ("step[MIXED bs=5]", "mixed", 5, NAN, NAN),  # the batch named, not its split
    ("step[TARGET_VERIFY bs=8]", "verify", 8, NAN, NAN),
    ("step[IDLE bs=0]", "empty", 0, 0, NAN),
    ("draft step[DECODE bs=32]", "draft", 32, NAN, NAN),
    ("step[DRAFT_EXTEND bs=4]", "draft", 4, NAN, NAN),
])
def test_a_step_name_says_its_kind_batch_tokens_and_context(name, kind, batch, tokens, context):
    step = parse(name)
    assert step is not None
    assert step.kind == kind
    for got, want in ((step.batch, batch), (step.tokens, tokens), (step.context, context)):
        assert (math.isnan(got) and math.isnan(want)) or got == want, name


@pytest.mark.parametrize("name", ["step[DECODE]", "step[decode bs=1]", "step[FUTURE_MODE bs=3]", "execute_model",
                                  "capture_32_DECODE", "step[DECODE bs=32] ", "## Call CompiledFxGraph x ##"])
def test_what_is_no_step_name_is_none(name):
    assert parse(name) is None


def test_a_mixed_steps_tokens_per_request_are_all_its_tokens_over_all_its_requests():
    step = parse("execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk34489sqsq37sqsk34489)")
    assert step.tokens_per_request == pytest.approx(8192 / 46)
    assert parse("execute_context_0(0)_generation_2(10)").tokens_per_request == 5
