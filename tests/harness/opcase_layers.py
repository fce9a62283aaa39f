"""Helpers for op-case modules: a case from a plain function of paddle and the inputs.

(Kept out of the `opcases_*` modules so importing it registers no cases.)"""
from opcase_harness import case


def fn_layer(paddle, fn, n_inputs=None):
    """A Layer whose forward is `fn(*inputs)` (to_static needs a fixed arity).

    n_inputs defaults to the number of parameters of `fn` without a default value."""
    if n_inputs is None:
        import inspect
        params = inspect.signature(fn).parameters.values()
        n_inputs = max(1, sum(p.default is p.empty and p.kind == p.POSITIONAL_OR_KEYWORD
                              for p in params))
    class Fn1(paddle.nn.Layer):
        def forward(self, x):
            return fn(x)

    class Fn2(paddle.nn.Layer):
        def forward(self, x, y):
            return fn(x, y)

    class Fn3(paddle.nn.Layer):
        def forward(self, x, y, z):
            return fn(x, y, z)
    return {1: Fn1, 2: Fn2, 3: Fn3}[n_inputs]()


def fcase(name, inputs, ops, fn, **kw):
    """A case whose layer computes `fn(paddle, *inputs)`."""
    n = len(inputs)
    case(name, inputs, ops, **kw)(lambda paddle: fn_layer(paddle, lambda *a: fn(paddle, *a), n))


def ints_in(lo, hi):
    """Input values: random integers in [lo, hi) (indices, ids)."""
    return lambda rng, s: rng.randint(lo, hi, s)
