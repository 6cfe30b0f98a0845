"""The workflows, one module each: what a verb does from its arguments to its report (`profile`, `tune`)."""
