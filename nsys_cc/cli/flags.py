"""Library sentences in the words of a verb: parameter names written as its flags (`skip_ranges` → `--skip-ranges`).

The library's messages and notes name its parameters; the CLI writes the verb's flags instead, by one function
(`in_flags`) for the error handler and for the notes the verbs print.
"""

from __future__ import annotations

import re

import click


def _flags(command: click.Command | None) -> dict[str, str]:
    """Library parameter name → the verb's flag, from the options' destinations (which are the library's names)."""
    if command is None:
        return {}
    out = {}
    for p in command.params:
        longs = [o for o in p.opts if o.startswith("--")]
        if isinstance(p, click.Option) and p.name and longs:
            out[p.name] = longs[0]
            if p.name.endswith("s") and p.multiple is False and p.name[:-1] not in out:
                # a list-valued option (`--input-len 128,512`, dest input_lens) whose one value the library names
                # in the singular (a sweep cell's input_len, a tune cell's batch_size)
                out.setdefault(p.name[:-1], longs[0])
    return out


def in_flags(text: str, command: click.Command | None = None, param: str | None = None) -> str:
    """A library sentence (an error's message or a note) with the library's parameter names written as the verb's
    flags (`command`, default: the verb running now): any snake_case parameter name of the verb, any of its parameters
    written `name=value` (`timeout=3` → `--timeout=3`; `force=True` → `--force` for an on/off flag), and `param` (the
    parameter at fault of an error) — never a plain word such as `acceptance` elsewhere in the sentence."""
    if command is None:
        ctx = click.get_current_context(silent=True)
        command = ctx.command if ctx is not None else None
    flags = _flags(command)
    switches = {p.name for p in command.params if isinstance(p, click.Option) and p.is_flag} if command else set()
    for name in sorted(flags, key=len, reverse=True):
        flag = flags[name]
        if name in switches:
            text = re.sub(rf"(?<![\w-]){re.escape(name)}=True(?![\w-])", flag, text)
        bare = "_" in name or name == param
        pattern = rf"(?<![\w-]){re.escape(name)}(?![\w-])" if bare else rf"(?<![\w-]){re.escape(name)}(?==)"
        text = re.sub(pattern, flag, text)
    return text


def result_in_flags(result):
    """An analysis result as the CLI shows it: its notes, each model's warm-up note and phase rule, and the speculative
    runs' notes written with the verb's flags (`in_flags`); every number untouched."""
    import dataclasses

    models = tuple(dataclasses.replace(m, warmup_note=in_flags(m.warmup_note), phase_rule=dataclasses.replace(
        m.phase_rule, detail=in_flags(m.phase_rule.detail))) for m in result.models)
    spec = result.speculative
    if spec is not None:
        spec = dataclasses.replace(spec, notes=tuple(in_flags(n) for n in spec.notes))
    return dataclasses.replace(result, models=models, notes=tuple(in_flags(n) for n in result.notes), speculative=spec)
