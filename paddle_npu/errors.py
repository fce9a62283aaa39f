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
