"""A Python frame's module path: the one rule by which every frame pattern and frame name is read.

torch's profiler names a `python_function` frame `<file>(<line>): <function>`, the file as Python knows it
(`co_filename`): trimmed to the path below the site directory only for a package installed under site-packages
(`vllm/v1/worker/gpu_model_runner.py(4303): sample_tokens`), absolute otherwise — a source checkout or an editable
install (`/home/u/code/vllm/vllm/v1/spec_decode/eagle.py(237): propose`), a container image
(`/usr/local/lib/python3.12/dist-packages/vllm/v1/…`), a conda or venv environment where torch did not trim it
(`/opt/conda/lib/python3.11/site-packages/vllm/…`, `…/.venv/lib/python3.12/site-packages/vllm/…`), SGLang's dev
image (`/sgl-workspace/sglang/python/sglang/srt/…`). The module path is the file from its package's root, the same
for all of them (`vllm/v1/spec_decode/eagle.py`, `sglang/srt/…`):

1. a path with a `site-packages/` or `dist-packages/` directory: what follows the last one;
2. else a relative path (already trimmed by torch): itself, less a leading `./`;
3. else (an absolute path: a checkout, an editable install, a workspace): from the directory named after an engine
   package (`contract.FRAME_PACKAGES`: `vllm`, `sglang`) — for each engine its last such directory (a checkout
   `…/vllm/vllm/…` holds the package inside the repository of the same name), and of the engines found the outermost
   one (a package that vendors a directory named after another engine keeps its own root);
4. else the path as written.

Directory names are matched whole: `myproj/vllm_utils/…` is no vLLM path, nor is `vllm_bench/run.py`. A user's own
package that happens to hold a directory named `vllm` gets a module path starting `vllm/…` only outside site-packages
(inside, rule 1 keeps its own root), and the engine patterns ask for the engine's layout besides (`vllm/v1/worker/…`).
Backslashes (a Windows path) read as slashes. A name that is not a frame's (`<built-in method …>`, an NVTX range)
has no module path: `module_name` gives it back unchanged.

`module_name(name)` is a frame's name with its file so rewritten; `nvtx.matches` compares frame names this way (a
frame asked for by its full name from one install matches the same frame from another, and a prefix such as
`vllm/v1/spec_decode/` matches whatever the install prefix), and every frame pattern of the contract
(`VLLM_*_FRAME_RE`, `SGLANG_*_FRAME_RE`) is matched against `module_name` of the frame (`hits`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

import numpy as np
import pandas as pd

from ..contract import FRAME_PACKAGES

# `<file>(<line>): <function>`: the file ends in .py (a frame of `<string>` or a built-in has no module path).
FRAME_NAME_RE = re.compile(r"^(?P<file>[^()]*?\.py)\((?P<line>\d+)\): (?P<function>.*)$", re.DOTALL)
_SITE_DIRS = ("/site-packages/", "/dist-packages/")


def module_path(path: str) -> str:
    """The file `path` from its package's root (module docstring: the one rule)."""
    p = path.replace("\\", "/")
    for site in _SITE_DIRS:
        at = p.rfind(site)
        if at >= 0:
            return p[at + len(site):]
    if not (p.startswith("/") or re.match(r"^[A-Za-z]:/", p)):
        while p.startswith("./"):
            p = p[2:]
        return p
    roots = [at for eng in FRAME_PACKAGES if (at := p.rfind(f"/{eng}/")) >= 0]
    return p[min(roots) + 1:] if roots else p


@lru_cache(maxsize=65536)
def module_name(name: str) -> str:
    """A frame's name with its file as its module path (`module_path`): `/usr/local/lib/python3.12/dist-packages/
    vllm/v1/worker/gpu_model_runner.py(4303): sample_tokens` → `vllm/v1/worker/gpu_model_runner.py(4303):
    sample_tokens`; any other name unchanged."""
    if ".py(" not in name:
        return name
    m = FRAME_NAME_RE.match(name)
    if m is None:
        return name
    return f"{module_path(m['file'])}({m['line']}): {m['function']}"


def module_prefix(prefix: str) -> str:
    """A prefix of frame names asked for (`nvtx_ranges(prefixes=…)`) as a prefix of module names: a whole frame name
    through `module_name`, a path (`/opt/venv/lib/python3.12/site-packages/vllm/v1/`) through `module_path`, one
    already from the package root (`vllm/v1/engine/core.py(`) as it is."""
    if FRAME_NAME_RE.match(prefix):
        return module_name(prefix)
    return module_path(prefix)


def is_path_like(query: str) -> bool:
    """Whether a name or prefix asked for may name a frame's file (it holds a `/` or a `.py(`): only such queries are
    compared by module path (`nvtx.matches`), so a read of NVTX ranges by their names never pays for the rule."""
    return "/" in query or "\\" in query or ".py(" in query


def hits(names: Iterable[str] | pd.Series, pattern: re.Pattern) -> np.ndarray:
    """Which of `names` (frame names) match `pattern` (a contract frame pattern, anchored at the module path) by
    their `module_name`: a boolean array, worked out per distinct name."""
    series = names if isinstance(names, pd.Series) else pd.Series(list(names), dtype=object)
    series = series.astype(str)
    ok = {n: bool(pattern.match(module_name(n))) for n in pd.unique(series)}
    return series.map(ok).to_numpy(dtype=bool)
