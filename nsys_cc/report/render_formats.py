"""The text formats a result renders to (`nsys_cc.report.render`), in a module that imports nothing: every verb's
`--format` lists them, and `--help` loads no renderer for that."""

FORMATS = ("table", "markdown", "csv", "json")
# What a notebook may also write for a format: any case, and these short names.
ALIASES = {"md": "markdown", "text": "table", "txt": "table"}


def format_of(fmt: object, formats: tuple[str, ...] = FORMATS) -> str:
    """`fmt` as one of `formats` (case-insensitive; `md` is markdown); anything else, None included, is an
    InputError naming the formats (never a silent fall back to the text table)."""
    from ..errors import InputError

    if isinstance(fmt, str):
        key = fmt.strip().lower()
        key = ALIASES.get(key, key)
        if key in formats:
            return key
    raise InputError(f"fmt must be one of {', '.join(formats)} (or md), not {fmt!r}", param="fmt")
