"""Helpers for op-case modules: a case from a plain function of paddle and the inputs.

(Kept out of the `opcases_*` modules so importing it registers no cases.)"""
from opcase_harness import case


def fn_layer(paddle, fn, n_inputs=1):
    """A Layer whose forward is `fn(*inputs)` (to_static needs a fixed arity)."""
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
