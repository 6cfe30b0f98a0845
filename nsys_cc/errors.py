"""Errors a user can cause. Each carries one line of text; the CLI prints it and exits with code 2.

The library names its own parameters in messages (`skip_ranges must be ≥ 0`) and says which one in `param`; the
CLI's error handler writes that parameter's flag instead (`--skip-ranges must be ≥ 0`).
Anything else that escapes the library is a bug in nsys_cc, not a bad input.
"""

from __future__ import annotations


class NsysCCError(Exception):
    """Base of every error caused by input, environment or arguments (exit code 2 in the CLI).

    `param`: the library parameter the message names, when one is at fault (None otherwise).
    """

    exit_code = 2

    def __init__(self, message: str = "", *, param: str | None = None):
        super().__init__(message)
        self.param = param


class InputError(NsysCCError):
    """The file given is missing, unreadable, or not an Nsight Systems export."""


class NsysNotFoundError(NsysCCError):
    """An operation needs the `nsys` binary and none was found."""


class TraceClosedError(NsysCCError):
    """A closed trace was asked for its tables (after its `with` block, or `close()`)."""


class ExportError(NsysCCError):
    """`nsys export` could not turn a .nsys-rep into SQLite (for example, a report newer than nsys)."""


class RangeNotFoundError(NsysCCError):
    """No NVTX range of the requested name, or none left after skipping warm-up."""


class ProfileError(NsysCCError):
    """Profiling (nsys + vLLM) could not run."""


class NsysCCWarning(UserWarning):
    """A result that stands but may not be what was meant (a default chosen by inference, an empty table), said
    where a notebook shows it; the same text is in the result's notes, which the CLI prints instead."""
