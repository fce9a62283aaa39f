"""The one error users see for a model file we cannot read."""


class PaddleFormatError(Exception):
    """A Paddle export that cannot be read.

    The message names the file, where in it (byte offset, op or var) and what
    the user can do about it. The CLI prints it and exits with status 2.
    """

    def __init__(self, path, problem, *, offset=None, where=None, hint=None):
        self.path = str(path) if path is not None else None
        self.problem = problem
        self.offset = offset
        self.where = where
        self.hint = hint
        parts = [self.path or "<memory>"]
        if offset is not None:
            parts.append(f"byte {offset}")
        if where:
            parts.append(where)
        msg = ": ".join([", ".join(parts), problem])
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)


class ConversionError(Exception):
    """A model we read but cannot convert as asked (the CLI exits with status 2)."""


class UnsupportedOpsError(ConversionError):
    """Every op of a model that cannot be converted, reported at once."""

    def __init__(self, problems, model=None):
        # problems: {(op type, reason): count}
        self.problems = dict(problems)
        total = sum(self.problems.values())
        kinds = len({t for t, _ in self.problems})
        lines = [f"{model + ': ' if model else ''}{total} op(s) of {kinds} type(s) cannot be converted:"]
        for (op_type, reason), count in sorted(self.problems.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {count:>5} x {op_type}: {reason}")
        lines.append("add a mapper with @paddle_op (see docs/architecture.md, 'Adding an op'), or "
                     "export the model without these ops")
        super().__init__("\n".join(lines))


class OutputError(ConversionError):
    """An output path that cannot (or must not) be written: named, with the reason."""
