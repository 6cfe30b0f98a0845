"""Errors a user can cause. Each carries one line of text; the CLI prints it and exits with code 2.

Anything else that escapes the library is a bug in nsys_cc, not a bad input.
"""


class NsysCCError(Exception):
    """Base of every error caused by input, environment or arguments (exit code 2 in the CLI)."""

    exit_code = 2


class InputError(NsysCCError):
    """The file given is missing, unreadable, or not an Nsight Systems export."""


class NsysNotFoundError(NsysCCError):
    """An operation needs the `nsys` binary and none was found."""


class ExportError(NsysCCError):
    """`nsys export` could not turn a .nsys-rep into SQLite (for example, a report newer than nsys)."""


class RangeNotFoundError(NsysCCError):
    """No NVTX range of the requested name, or none left after skipping warm-up."""


class ProfileError(NsysCCError):
    """Profiling (nsys + vLLM) could not run."""
