"""What a trace gives beyond the tables every reader has, asked of the trace instead of its format's name:
`Capabilities` (one per format, `format.TraceFormat.capabilities`, `Trace.capabilities`) and `Recorder` (what recorded
the trace and its version, `Trace.recorder`). Imports nothing: the protocol (`source.py`) and the format modules use
it alike.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    """What the analysis may ask of a trace of a format, instead of testing the format's name (`Trace.capabilities`):

    - `range_word`: what one of its ranges is called in a message ("NVTX range", "range");
    - `ranges_are`: what its ranges are in the file ("NVTX", "user_annotation"): "no NVTX ranges in FILE";
    - `no_ranges`: what is said of a trace of it that holds no range at all;
    - `engine_steps`: engines write their step annotations and Python frames into it (vLLM's and SGLang's torch
      profiler): the analysis reads them as forwards (`analysis.forwards.vllm_steps`), and one trace given alone is
      described alone (its steps say their phases).
    """

    range_word: str
    ranges_are: str
    no_ranges: str
    engine_steps: bool = False


@dataclass(frozen=True)
class Recorder:
    """What recorded a trace, as the trace says (`Trace.recorder`): `name` ("nsys", "PyTorch profiler (Kineto)") and
    `version` as the trace states it (nsys's version; a Kineto trace states no torch version, only its trace schema:
    "schema 1"), None when it does not."""

    name: str
    version: str | None = None

    def __str__(self) -> str:
        """"nsys 2024.5.1.113", "PyTorch profiler (Kineto) schema 1", "nsys unknown"."""
        return f"{self.name} {self.version or 'unknown'}"
