"""The rest of a draft's token in the plugin (proposer side): the draft's logits and its sampling
(`nsys_cc:draft_logits`, `nsys_cc:draft_sample`) after each draft forward, and a model-free proposer's proposing
(`nsys_cc:propose`).

Fakes of vLLM's proposer classes first (no vLLM: the exact push/pop sequence each call must give, from the recording
backend of conftest's `events`); then vLLM 0.32's own proposer code (`SpecDecodeBaseProposer._sample_draft_tokens`,
`_greedy_sample`, V2's `DraftModelSpeculator.sample_draft`, `NgramProposer.propose`) called with stand-in inputs in a
child process, marked `vllm`.
"""

from __future__ import annotations

import functools
import textwrap
import types

import pytest

from conftest import LazyModule, scenario_result
from nsys_cc import contract
from nsys_cc.vllm import plugin
from nsys_cc.vllm.hooks import drafts, forwards, ranges

FWD, DRAFT = contract.FORWARD_RANGE, contract.DRAFT_FORWARD_RANGE
LOGITS, SAMPLE, PROPOSE = contract.DRAFT_LOGITS_RANGE, contract.DRAFT_SAMPLE_RANGE, contract.PROPOSE_RANGE
VOCAB = 11
torch = LazyModule("torch")  # imported by the first test that uses it: not by every worker that collects this


@functools.cache
def _head_class():
    class Head(torch.nn.Module):
        """A draft model (or head): its forward returns hidden states, its `compute_logits` the logits of its rows."""

        def forward(self, input_ids=None, positions=None):
            return torch.zeros(positions.shape[0], 4)

        def compute_logits(self, hidden):
            return torch.zeros(hidden.shape[0], VOCAB)

    return Head


def Head():  # noqa: N802 — the fake head, made in a test (torch is imported there, not at collection)
    return _head_class()()


def _v1_proposer():
    class SpecDecodeBaseProposer:
        def load_model(self, target_model):
            self.model = Head()

        def _greedy_sample(self, hidden):
            return self.model.compute_logits(hidden).argmax(dim=-1)

        def _sample_draft_tokens(self, hidden, sampling_metadata):
            return self._greedy_sample(hidden), None

        def propose(self, gamma, batch):
            """Like vLLM's: a first forward over the accepted tokens (the catch-up), then γ − 1 one-token ones."""
            h = self.model(input_ids=torch.zeros(batch * (gamma + 1)), positions=torch.zeros(batch * (gamma + 1)))
            tokens = [self._sample_draft_tokens(h[:batch], None)[0]]
            for _ in range(gamma - 1):
                h = self.model(input_ids=torch.zeros(batch), positions=torch.zeros(batch))
                tokens.append(self._sample_draft_tokens(h, None)[0])
            return tokens

        def dummy_run(self, n):
            h = self.model(positions=torch.zeros(n))
            self._sample_draft_tokens(h, None)

    return SpecDecodeBaseProposer


@pytest.mark.slow
def test_v1_each_draft_forward_is_followed_by_its_logits_then_its_sampling(events):
    cls = _v1_proposer()
    assert plugin._patch_v1_drafter(types.SimpleNamespace(SpecDecodeBaseProposer=cls))
    drafter = cls()
    drafter.load_model(None)
    drafter.dummy_run(8)
    assert events == []  # vLLM's dummy runs: nothing
    drafter.propose(3, batch=2)
    token = [(LOGITS, 2), "pop", (SAMPLE, 2), "pop"]
    assert events == [(DRAFT, 8), "pop", *token, (DRAFT, 2), "pop", *token, (DRAFT, 2), "pop", *token]
    assert ranges.state.draft_sampling == 0 and not ranges.state.draft_sample_open


def test_only_the_draft_models_logits_are_wrapped_not_its_class(events):
    """The draft and the target can share a class (a draft model is a LlamaForCausalLM): the target's logits are the
    target's, never a draft's."""
    cls = _v1_proposer()
    plugin._patch_v1_drafter(types.SimpleNamespace(SpecDecodeBaseProposer=cls))
    drafter = cls()
    drafter.load_model(None)
    target = Head()
    target.compute_logits(torch.zeros(5, 4))
    assert events == []
    drafter.load_model(None)  # a second load: its new model is wrapped, once
    drafter.model.compute_logits(torch.zeros(3, 4))
    assert events == [(LOGITS, 3), "pop"]


def test_logits_of_several_positions_at_once_carry_their_rows(events):
    """Parallel drafting: one logits call over γ positions × requests; its rows say so (the analysis divides)."""
    cls = _v1_proposer()
    plugin._patch_v1_drafter(types.SimpleNamespace(SpecDecodeBaseProposer=cls))
    drafter = cls()
    drafter.load_model(None)
    drafter._sample_draft_tokens(torch.zeros(2 * 3, 4), None)
    assert events == [(LOGITS, 6), "pop", (SAMPLE, 6), "pop"]


def test_sampling_closes_when_it_raises(events):
    cls = _v1_proposer()
    plugin._patch_v1_drafter(types.SimpleNamespace(SpecDecodeBaseProposer=cls))
    drafter = cls()
    drafter.load_model(None)

    def broken(logits, dim=-1):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        drafts.draft_sampling(lambda self, h: broken(self.model.compute_logits(h)))(drafter, torch.zeros(2, 4))
    assert events == [(LOGITS, 2), "pop", (SAMPLE, 2), "pop"]
    assert ranges.state.draft_sampling == 0 and not ranges.state.draft_sample_open


def test_logits_inside_a_forward_range_add_nothing(events):
    """A graph replay holds its logits (V2's fused drafts): inside an open forward no logits range is written."""
    model = Head()
    forwards.hook_module(model, DRAFT, scheduled=False)
    drafts.hook_draft_logits(model)
    ranges.enter(DRAFT, lambda kw: 4, {})
    try:
        model.compute_logits(torch.zeros(4, 4))
    finally:
        ranges.leave()
    assert events == [(DRAFT, 4), "pop"]


def test_v2_speculator_logits_and_sampling_around_the_real_call_order(events):
    class DraftModelSpeculator:
        def load_model(self, target_model):
            self.model = Head()

        def compute_draft_logits(self, hidden, spec_step_idx):
            return self.model.compute_logits(hidden)

        def sample_draft(self, hidden, *args, **kwargs):
            return self.compute_draft_logits(hidden, 0).argmax(dim=-1)

        def capture(self):
            self.sample_draft(torch.zeros(1, 4))

        def propose(self, n, dummy_run=False):
            self.sample_draft(self.model(positions=torch.zeros(n)))

    class MultiModule(DraftModelSpeculator):  # overrides the logits, as multi-module MTP does
        def compute_draft_logits(self, hidden, spec_step_idx):
            return torch.zeros(hidden.shape[0], VOCAB)

    assert plugin._patch_v2_drafter(types.SimpleNamespace(DraftModelSpeculator=DraftModelSpeculator))
    for cls in (DraftModelSpeculator, MultiModule):
        spec = cls()
        spec.load_model(None)
        spec.capture()
        spec.propose(4, dummy_run=True)
        assert events == [], cls.__name__
        spec.propose(3)
        assert events == [(DRAFT, 3), "pop", (LOGITS, 3), "pop", (SAMPLE, 3), "pop"], cls.__name__
        events.clear()


def test_model_free_proposers_get_a_propose_range_with_their_requests(events):
    class NgramProposer:
        def propose(self, num_speculative_tokens, sampled_token_ids, num_tokens_no_spec, token_ids_cpu,
                    slot_mappings=None):
            return [[1, 2, 3] for _ in sampled_token_ids]

    class NgramGPUSpeculator:
        def propose(self, input_batch, *args, dummy_run=False, **kwargs):
            return None

    assert plugin._patching_proposer("NgramProposer")(types.SimpleNamespace(NgramProposer=NgramProposer))
    assert plugin._patching_proposer("SuffixDecodingProposer")(types.SimpleNamespace())  # absent: nothing lost
    plugin._patching_proposer("NgramGPUSpeculator")(types.SimpleNamespace(NgramGPUSpeculator=NgramGPUSpeculator))
    assert NgramProposer().propose(3, [[7], [8]], None, None) == [[1, 2, 3], [1, 2, 3]]
    NgramGPUSpeculator().propose(types.SimpleNamespace(num_reqs=4), dummy_run=True)
    NgramGPUSpeculator().propose(types.SimpleNamespace(num_reqs=4))
    assert events == [(PROPOSE, 2), "pop", (PROPOSE, 4), "pop"]


# ---- vLLM 0.32's own proposer code -----------------------------------------------------------------------------

SCENARIOS = textwrap.dedent('''
    import importlib, json, types
    import numpy as np
    import torch
    from nsys_cc.vllm import plugin as p
    from nsys_cc.vllm.hooks import drafts, forwards, ranges
    from nsys_cc.vllm import nvtx_backend

    log = []
    ranges.backend = nvtx_backend.Backend("record", True, lambda n, v: log.append([n, v]), lambda: log.append("pop"))
    for name in ("vllm.v1.spec_decode.llm_base_proposer", "vllm.v1.worker.gpu.spec_decode.speculator",
                 "vllm.v1.spec_decode.ngram_proposer", "vllm.v1.spec_decode.suffix_decoding",
                 "vllm.v1.spec_decode.ngram_proposer_gpu", "vllm.v1.worker.gpu.spec_decode.ngram.speculator"):
        assert p._PATCHES[name](importlib.import_module(name)), name
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    from vllm.v1.spec_decode.ngram_proposer import NgramProposer
    from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator

    class Head(torch.nn.Module):
        def forward(self, **kw):
            return torch.zeros(2, 4)
        def compute_logits(self, hidden):
            log.append("logits")
            return torch.zeros(hidden.shape[0], 7)

    out = {}
    v1 = object.__new__(SpecDecodeBaseProposer)
    v1.model = Head()
    drafts.hook_draft_logits(v1.model)
    v1.use_local_argmax_reduction = v1.use_heterogeneous_vocab = v1._enable_probabilistic_draft_probs = False
    tokens, probs = v1._sample_draft_tokens(torch.zeros(3, 4), types.SimpleNamespace(all_greedy=True))
    out["v1_greedy"] = [log[:], list(tokens.shape), probs]
    log.clear()

    v2 = object.__new__(EagleSpeculator)
    v2.model = Head()
    v2.use_local_argmax_reduction, v2.acceptance_estimator = False, None
    v2.sample_draft(torch.zeros(5, 4), None, None, None, None, None, None)
    out["v2_greedy"] = log[:]
    log.clear()

    ngram = object.__new__(NgramProposer)
    ngram.k, ngram.min_n, ngram.max_n, ngram.max_model_len = 3, 1, 3, 64
    ngram.num_tokens_threshold, ngram.num_numba_thread_available = 10**9, 1
    ngram.valid_ngram_draft = np.zeros((2, 3), dtype=np.int32)
    ngram.valid_ngram_num_drafts = np.zeros(2, dtype=np.int32)
    tokens = np.array([[1, 2, 3, 1, 2, 0, 0, 0], [4, 4, 4, 4, 0, 0, 0, 0]], dtype=np.int32)
    proposed = ngram.propose(3, [[2], [4]], np.array([5, 4]), tokens)
    out["ngram"] = [log[:], proposed]
    print("RESULT " + json.dumps(out))
''')


@pytest.fixture(scope="module")
def recorded():
    return scenario_result(SCENARIOS)


@pytest.mark.vllm
def test_vllms_v1_proposer_samples_its_drafts_between_the_two_ranges(recorded):
    ranges, shape, probs = recorded["v1_greedy"]
    assert ranges == [[LOGITS, 3], "logits", "pop", [SAMPLE, 3], "pop"]
    assert shape == [3] and probs is None


@pytest.mark.vllm
def test_vllms_v2_speculator_samples_its_drafts_between_the_two_ranges(recorded):
    assert recorded["v2_greedy"] == [[LOGITS, 5], "logits", "pop", [SAMPLE, 5], "pop"]


@pytest.mark.vllm
def test_vllms_ngram_proposer_is_one_propose_range(recorded):
    ranges, proposed = recorded["ngram"]
    assert ranges == [[PROPOSE, 2], "pop"]
    assert proposed[0] == [3, 1, 2]  # the lookup really ran: "1 2" was followed by "3" earlier in the first request
