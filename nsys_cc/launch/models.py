"""Which model a `--target` / `--draft` argument names, and the label its files get.

An argument is, in this order:
1. a shipped shape: a name in `SHAPES` (a `config.json` under `nsys_cc/launch/models/<name>/`; with
   `--load-format dummy` vLLM needs nothing else). The `*-shape` ones copy the configs of the models measured in
   https://github.com/vllm-project/vllm/issues/6468; the `tiny-llama-*` ones are small LLaMA configs for CPU demos
   (target 4 layers × hidden 512, drafts 2 × 256 and 1 × 128; vocab 10000, the range vLLM's benchmark draws prompt
   tokens from);
   the heads (`HEADS`) are drafters that run on a target's hidden states, not alone: `tiny-llama-eagle` (an EAGLE
   head: 1 LLaMA layer × 512 over the target's last hidden states) and `tiny-llama-eagle3` (an EAGLE-3 head: 1 layer
   × 512 over three of the target's layers, 1, 2 and 3, concatenated) for `tiny-llama-target`, and
   `tiny-mimo-target`, a target of the same shapes with MiMo's architecture (Qwen2 layers) and one MTP layer of its
   own, for `"method": "mtp"` (MTP layers belong to the target's checkpoint: a LLaMA target has none);
2. a model of the known-α pair (`pair-draft`, `pair-target`, `pair-target-a50`, `pair-target-a25`; real weights
   built on demand by `nsys_cc.launch.pair` into `$NSYS_CC_MODELS`, loaded with `--load-format auto`);
3. a local directory holding a `config.json`;
4. a Hugging Face id (`org/name`): passed to vLLM as is (it fetches the config; needs the network or a cache).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from . import pair

MODELS_DIR = Path(__file__).resolve().parent / "models"
SHAPES = {
    "llama-68m-shape": "JackFram/llama-68m",
    "llama-160m-shape": "JackFram/llama-160m",
    "tinyllama-1.1b-shape": "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
    "llama-2-7b-shape": "meta-llama/Llama-2-7b-hf",
    "tiny-llama-target": "tiny CPU demo target (4 layers, hidden 512)",
    "tiny-llama-draft-s": "tiny CPU demo draft (2 layers, hidden 256)",
    "tiny-llama-draft-xs": "tiny CPU demo draft (1 layer, hidden 128)",
    "tiny-llama-eagle": "tiny EAGLE head for tiny-llama-target (1 layer, hidden 512)",
    "tiny-llama-eagle3": "tiny EAGLE-3 head for tiny-llama-target (1 layer, hidden 512, target layers 1, 2, 3)",
    "tiny-mimo-target": "tiny MiMo target with one MTP layer (4 + 1 layers, hidden 512) for method mtp",
}
# Drafters that are heads on a target (speculative config "method", the target they belong to): no standalone run,
# no standalone c. `tiny-mimo-target` is a target whose MTP layer is its own drafter (method mtp, no draft model).
HEADS = {"tiny-llama-eagle": ("eagle", "tiny-llama-target"), "tiny-llama-eagle3": ("eagle3", "tiny-llama-target")}
MTP_TARGETS = ("tiny-mimo-target",)


def head_for(target: str, method: str) -> str | None:
    """The shipped head of `method` for the shipped `target` (None when there is none)."""
    return next((h for h, (m, t) in HEADS.items() if m == method and t == target), None)
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


@dataclass(frozen=True)
class Model:
    """A model to profile: `spec` as the user gave it, `path` as vLLM's `--model`, `label` for file names."""

    spec: str
    path: str
    label: str
    kind: str  # "shape", "pair", "directory" or "hub"

    @property
    def load_format(self) -> str:
        """vLLM's `--load-format`: "auto" for the known-α pair's real weights, else "dummy" (shapes only)."""
        return "auto" if self.kind == "pair" else "dummy"

    def prepare(self) -> None:
        """Make the model's files exist (builds a known-α pair model the first time; nothing for the others)."""
        if self.kind == "pair":
            pair.path(self.spec, Path(self.path).parent)


def resolve(spec: str) -> Model:
    """The model `spec` names (see the module docstring); InputError when it names none."""
    if not isinstance(spec, str) or not spec.strip():  # '' is the current directory: "  is a directory without …"
        raise InputError(f"a model name is empty ({spec!r}): give a shipped shape ({', '.join(SHAPES)}), a directory "
                         "with a config.json, or a Hugging Face id (org/name)")
    if spec in SHAPES:
        return Model(spec, str(MODELS_DIR / spec), spec, "shape")
    if spec in pair.PAIRS:
        return Model(spec, str(pair.models_dir() / spec), spec, "pair")
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise InputError(f"{spec} is a directory without a config.json: not a model")
        return Model(spec, str(path.resolve()), _safe_label(path.resolve().name), "directory")
    if _HF_ID.match(spec) and not path.exists():
        return Model(spec, spec, _safe_label(spec.split("/")[-1]), "hub")
    raise InputError(
        f"unknown model {spec!r}: not a shipped shape ({', '.join([*SHAPES, *pair.PAIRS])}), "
        "a directory with a config.json, or a Hugging Face id (org/name)"
    )


# The keys of a Hugging Face config that bound a model's context (vLLM takes the least of those present), and the
# rope-scaling entries whose "factor" may stretch it (vLLM applies it for most rope types: taken as an upper bound).
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_sequence_length", "max_seq_length", "seq_len")
_ROPE_KEYS = ("rope_scaling", "rope_parameters")


def _tokens(text: str) -> int | None:
    """vLLM's --max-model-len value as a number of tokens (`4096`, `32k`, `1M`, `1e4`); None when it reads none."""
    text = text.strip().lower()
    scale = {"k": 1000, "m": 1000 ** 2, "g": 1000 ** 3}.get(text[-1:], 1)
    try:
        value = float(text[:-1] if scale != 1 else text) * scale
    except ValueError:
        return None
    return int(value) if value == value and 0 < value < 2 ** 63 else None


def context_length(model: Model, vllm_args=()) -> tuple[int, str] | None:
    """The most tokens (prompt + generated) a sequence of `model` may hold in vLLM, and where that comes from: vLLM's
    `--max-model-len` in `vllm_args`, else the least of its config.json's `CONTEXT_KEYS` (times its rope scaling
    factor, where it has one: an upper bound of what vLLM derives). None when unknown (a Hugging Face id's config is
    not read here: vLLM checks it), so that nothing is refused that vLLM would take."""
    args = list(vllm_args)
    for i, a in enumerate(args):
        value = args[i + 1] if a == "--max-model-len" and i + 1 < len(args) else (
            a.split("=", 1)[1] if a.startswith("--max-model-len=") else None)
        if value is not None:
            n = _tokens(value)
            return (n, f"--max-model-len {value}") if n is not None else None
    if model.kind == "pair":
        return pair.CONTEXT, "max_position_embeddings in its config.json"
    if model.kind == "hub":
        return None
    from .. import inputs

    try:
        config = inputs.load_json(Path(model.path) / "config.json", "model config")
    except (OSError, InputError):
        return None  # vLLM says what is wrong with it
    if not isinstance(config, dict):
        return None
    found = {k: v for k, v in config.items() if k in CONTEXT_KEYS and isinstance(v, int) and not isinstance(v, bool)
             and v > 0}
    if not found:
        return None
    key = min(found, key=found.__getitem__)
    length = found[key]
    factors: list[float] = []
    for entry in _ROPE_KEYS:
        rope = config.get(entry)
        factor = rope.get("factor") if isinstance(rope, dict) else None
        if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 1:
            factors.append(float(factor))
    if factors:
        return int(length * max(factors)), f"{key} × rope scaling {max(factors):g} in its config.json"
    return length, f"{key} in its config.json"


def _safe_label(name: str) -> str:
    return re.sub(r"[^\w.\-]", "_", name) or "model"


def resolve_all(specs: list[str]) -> list[Model]:
    """Resolve each spec; a label met again gets the first free suffix `-2`, `-3`, … in order, never one that another
    model's own label already is (`--target x --draft x --draft DIR/x-2` gives x, x-3, x-2). Labels are compared
    without case, as a case-insensitive file system would."""
    resolved = [resolve(spec) for spec in specs]
    taken = {m.label.casefold() for m in resolved}
    used: set[str] = set()
    models: list[Model] = []
    for m in resolved:
        label, n = m.label, 1
        while label.casefold() in used:
            n += 1
            label = f"{m.label}-{n}"
            if label.casefold() in taken:
                label = m.label  # another model's own label: try the next suffix
        used.add(label.casefold())
        models.append(m if label == m.label else Model(m.spec, m.path, label, m.kind))
    return models
