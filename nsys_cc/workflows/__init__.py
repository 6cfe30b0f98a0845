"""The workflows: what `profile` and `tune` do from their arguments to their report, one module each."""
