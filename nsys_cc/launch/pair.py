"""A draft/target pair with a known acceptance rate α: real weights, built on demand, served by vLLM's CPU build.

Dummy weights give α ≈ 0 (flat logits), and vLLM's synthetic acceptance does not run on the CPU build, so a
speculative run that accepts anything needs weights made for it. These are LLaMA models (vocabulary 10,000:
vLLM's latency benchmark draws prompt tokens from 0…9999; hidden 128, 4 heads, float32), built with transformers
from one seed and saved as `config.json` + `model.safetensors` (load with `--load-format auto`).

- `pair-draft`: 1 layer (MLP 256), random weights; its LM head is *grouped*: tokens come in groups of
  `GROUP` = 4 consecutive ids; the first id of group g (its leader) gets row w_g, the other three a zero row. The
  rows are scaled so that logits are very peaked (the top group leads by tens of logits on almost every context).
- `pair-target*`: the draft's layer (MLP padded to 1024 with zero rows and columns), then 7 more layers of random
  weights whose `o_proj` and `down_proj` are zero: they cost a real layer's time but add nothing to the residual
  stream, so the target computes the draft's hidden states exactly. Its LM head gives the first m ids of group g
  the row w_g and the others zero: m identical logits share the group's probability.

vLLM's latency benchmark samples at temperature 1.0, and vLLM's draft proposes its argmax (`draft_sample_method`
"greedy", the default): a draft token x is accepted with probability p_target(x). The draft's argmax is the
leader of the top group; the target gives that group almost all its probability, split evenly over m ids, so
α = p(top group) ÷ m ≈ 1/m on every context: 0.99 for `pair-target` (m = 1), 0.50 for `pair-target-a50`
(m = 2), 0.25 for `pair-target-a25` (m = 4). The knob is m, the target's number of live copies per group;
p(top group) < 1 on the few contexts where two groups come close is why α(m = 1) is a little below 1.
`expected_alpha` measures it without vLLM: it samples continuations from the target with transformers at
temperature 1 and averages p_target(draft's argmax) over them; `BUILT_ALPHA` holds its values for 16 prompts of
128 tokens and 32 generated tokens (496 positions each; that takes minutes on a busy 2-core machine).

Models are written once into `models_dir()` (`$NSYS_CC_MODELS`, default `~/.cache/nsys_cc/models`), each with a
`nsys_cc_pair.json` (how it was built); `path(name)` builds a missing one (a few seconds) and returns its folder.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from .. import inputs
from ..errors import InputError

VOCAB = 10000
HIDDEN = 128
HEADS = 4
GROUP = 4
DRAFT_LAYERS, DRAFT_MLP = 1, 256
TARGET_LAYERS, TARGET_MLP = 8, 1024
CONTEXT = 1024  # max_position_embeddings of every pair model
LOGIT_STD = 1000.0  # standard deviation of a leader's logit over contexts: gaps between groups of tens
SEED = 12
VERSION = 1
ENV_MODELS = "NSYS_CC_MODELS"
META = "nsys_cc_pair.json"

# name -> live copies per group (None: the draft)
PAIRS: dict[str, int | None] = {"pair-draft": None, "pair-target": 1, "pair-target-a50": 2, "pair-target-a25": 4}
# expected_alpha(name, prompts=16): the α each target gives with pair-draft (module docstring)
BUILT_ALPHA = {"pair-target": 0.9959, "pair-target-a50": 0.4986, "pair-target-a25": 0.2494}
DESCRIPTIONS = {
    "pair-draft": "known-α pair: draft (1 layer × 128, real weights built on demand)",
    "pair-target": "known-α pair: target (8 layers × 128), α ≈ 0.99 with pair-draft",
    "pair-target-a50": "known-α pair: target, α ≈ 0.50 with pair-draft",
    "pair-target-a25": "known-α pair: target, α ≈ 0.25 with pair-draft",
}


def models_dir() -> Path:
    """`$NSYS_CC_MODELS`, else `~/.cache/nsys_cc/models`."""
    env = os.environ.get(ENV_MODELS)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "nsys_cc" / "models"


def copies(name: str) -> int | None:
    """m, the target's live copies per group (None for the draft); InputError for a name not in `PAIRS`."""
    if name not in PAIRS:
        raise InputError(f"name: {name!r} is not a known-α pair model ({', '.join(PAIRS)})")
    return PAIRS[name]


def _config(layers: int, mlp: int):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=mlp, num_hidden_layers=layers,
                       num_attention_heads=HEADS, num_key_value_heads=HEADS, max_position_embeddings=CONTEXT,
                       rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, torch_dtype="float32",
                       bos_token_id=1, eos_token_id=2)


def _grouped_head(rows, live: int):
    """LM head of VOCAB rows: the first `live` ids of group g get rows[g], the others zero."""
    import torch

    head = torch.zeros(VOCAB, HIDDEN)
    for k in range(live):
        head[k::GROUP] = rows[: len(head[k::GROUP])]
    return head


def build(name: str):
    """The transformers model `name` (LlamaForCausalLM, eval mode), from `SEED` (see the module docstring)."""
    import torch
    from transformers import LlamaForCausalLM

    live = copies(name)
    gen = torch.Generator().manual_seed(SEED)
    draft = LlamaForCausalLM(_config(DRAFT_LAYERS, DRAFT_MLP))
    params = dict(draft.named_parameters())
    with torch.no_grad():
        for key in sorted(params):  # one seeded stream in a fixed order: the same weights on every machine
            p = params[key]
            if p.ndim == 1:  # norms: ones
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * (0.02 if "embed" not in key else 1.0))
        rows = torch.randn(-(-VOCAB // GROUP), HIDDEN, generator=gen) * (LOGIT_STD / HIDDEN ** 0.5)
        draft.lm_head.weight.copy_(_grouped_head(rows, 1))
    if live is None:
        return draft.eval()
    target = LlamaForCausalLM(_config(TARGET_LAYERS, TARGET_MLP))
    with torch.no_grad():
        for p in target.parameters():
            p.zero_()
            if p.ndim == 1:
                p.fill_(1.0)
        target.model.embed_tokens.weight.copy_(draft.model.embed_tokens.weight)
        target.model.norm.weight.copy_(draft.model.norm.weight)
        target.lm_head.weight.copy_(_grouped_head(rows, live))
        first, src = target.model.layers[0], draft.model.layers[0]
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(first.self_attn, proj).weight.copy_(getattr(src.self_attn, proj).weight)
        first.input_layernorm.weight.copy_(src.input_layernorm.weight)
        first.post_attention_layernorm.weight.copy_(src.post_attention_layernorm.weight)
        first.mlp.gate_proj.weight[:DRAFT_MLP].copy_(src.mlp.gate_proj.weight)
        first.mlp.up_proj.weight[:DRAFT_MLP].copy_(src.mlp.up_proj.weight)
        first.mlp.down_proj.weight[:, :DRAFT_MLP].copy_(src.mlp.down_proj.weight)
        for layer in target.model.layers[1:]:  # real work, zero contribution: o_proj and down_proj stay zero
            for proj in ("q_proj", "k_proj", "v_proj"):
                w = getattr(layer.self_attn, proj).weight
                w.copy_(torch.randn(w.shape, generator=gen) * 0.02)
            for w in (layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight):
                w.copy_(torch.randn(w.shape, generator=gen) * 0.02)
    return target.eval()


def path(name: str, root: str | os.PathLike | None = None) -> Path:
    """The folder of model `name` under `root` (default `models_dir()`), built first when missing or stale."""
    copies(name)
    folder = Path(root) if root is not None else models_dir()
    where = folder / name
    try:
        meta = inputs.load_state(where / META, "model record", shape={"version": (int, str)}) or {}
        if meta.get("version") == VERSION and (where / "model.safetensors").is_file():
            return where
    except (OSError, ValueError):
        pass
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=folder))
    except OSError as exc:
        raise InputError(f"cannot write models into {folder}: {exc.strerror} (set {ENV_MODELS})") from None
    try:
        model = build(name)
        model.save_pretrained(tmp, safe_serialization=True)
        meta = {"version": VERSION, "name": name, "seed": SEED, "group": GROUP, "live_copies": copies(name),
                "logit_std": LOGIT_STD, "built_by": "nsys_cc.launch.pair"}
        (tmp / META).write_text(json.dumps(meta, indent=1) + "\n")
        shutil.rmtree(where, ignore_errors=True)
        try:
            tmp.rename(where)
        except OSError:  # another process built it at the same moment: keep theirs
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return where


def expected_alpha(target: str = "pair-target", draft: str = "pair-draft", *, prompts: int = 32,
                   input_len: int = 128, output_len: int = 32, seed: int = 0) -> tuple[float, int]:
    """α that vLLM's benchmark should measure for this pair, and the number of positions averaged.

    Continuations of `prompts` random prompts (token ids 0…9999, as vLLM's latency benchmark draws them) are sampled
    from the target at temperature 1; at each generated position the acceptance probability of the draft's greedy
    proposal, p_target(argmax draft), is averaged. (vLLM judges draft tokens on contexts its target accepted, which
    are distributed like the target's own samples.)
    """
    import torch

    tgt, drf = build(target), build(draft)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (prompts, input_len), generator=gen)
    with torch.no_grad():
        for _ in range(output_len):
            probs = torch.softmax(tgt(ids).logits[:, -1].double(), dim=-1)
            ids = torch.cat([ids, torch.multinomial(probs.float(), 1, generator=gen)], dim=1)
        p_target = torch.softmax(tgt(ids).logits[:, input_len:-1].double(), dim=-1)
        proposal = drf(ids).logits[:, input_len:-1].argmax(dim=-1)
        accept = p_target.gather(-1, proposal.unsqueeze(-1)).squeeze(-1)
    return float(accept.mean()), int(accept.numel())
