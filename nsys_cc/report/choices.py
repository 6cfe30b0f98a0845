"""The text formats a result renders to (`nsys_cc.report.render`), in a module that imports nothing: every verb's
`--format` lists them, and `--help` loads no renderer for that."""

FORMATS = ("table", "markdown", "csv", "json")
