"""Whose files are trusted: the user id files must belong to (the export cache's entries, a report's generations)."""

from __future__ import annotations

import os


def my_uid() -> int:
    """The user id files must belong to, to be trusted (a function, so that a test can play another user)."""
    return os.geteuid()
