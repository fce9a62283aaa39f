"""Op cases for control flow: data-dependent if/else and while loops written as plain Python
in `forward` and turned into conditional_block/select_input/while (legacy) or if/while (PIR)
by `paddle.jit.to_static`.

Each layer is registered once per format, since the two formats name the ops differently.
Inputs are chosen so that every branch is taken by some case, and loops run a
data-dependent number of times (zero included).
"""
import os

from opcase_harness import case

X = {"x": ((None, 4), "float32")}
POS = {"x": lambda rng, s: rng.uniform(0.1, 2, s)}        # mean > 0
NEG = {"x": lambda rng, s: rng.uniform(-2, -0.1, s)}      # mean < 0
BIG = {"x": lambda rng, s: rng.uniform(1.6, 3, s)}        # max > 1.5
LEGACY = ("conditional_block", "select_input")
PIR_IF = ("if", "yield")


def _legacy_ready(paddle):
    """Legacy to_static needs the zoo's shims: Paddle 3.3's own `cond` calls
    paddle.logical_not, which raises on legacy Variables (see tools/zoo.py)."""
    if os.environ.get("FLAGS_enable_pir_api") != "0" or getattr(paddle, "_npu_shimmed", False):
        return
    import zoo      # (tools/ is on the export process's path)
    zoo._legacy_shims()
    paddle._npu_shimmed = True


def both(name, inputs, legacy_ops, pir_ops, **kw):
    """Register a layer builder as `<name>_legacy` and `<name>_pir`."""
    def deco(make):
        def build(paddle):
            _legacy_ready(paddle)
            return make(paddle)
        case(f"{name}_legacy", inputs, legacy_ops, formats=("legacy",), **kw)(build)
        case(f"{name}_pir", inputs, pir_ops, formats=("pir",), **kw)(build)
        return make
    return deco


def _if_else(paddle):
    class IfElse(paddle.nn.Layer):
        def forward(self, x):
            if paddle.mean(x) > 0:
                y = x * 2.0 + 1.0
            else:
                y = paddle.tanh(x) - 1.0
            return y
    return IfElse()


both("if_else_true", X, LEGACY, PIR_IF, values=POS)(_if_else)
both("if_else_false", X, LEGACY, PIR_IF, values=NEG)(_if_else)


def _if_no_else(paddle):
    class IfNoElse(paddle.nn.Layer):   # two results, one branch keeps the values as they were
        def forward(self, x):
            y = x + 1.0
            z = x * 3.0
            if paddle.mean(x) > 0:
                y = y * 3.0
                z = paddle.tanh(z)
            return y, z
    return IfNoElse()


both("if_no_else_taken", X, LEGACY, PIR_IF, values=POS)(_if_no_else)
both("if_no_else_skipped", X, LEGACY, PIR_IF, values=NEG)(_if_no_else)


def _nested(paddle):
    class Nested(paddle.nn.Layer):
        def forward(self, x):
            if paddle.mean(x) > 0:
                if paddle.max(x) > 1.5:
                    y = x * 2.0
                else:
                    y = x + 3.0
            else:
                y = x - 1.0
            return y
    return Nested()


both("if_nested_tt", X, LEGACY, PIR_IF, values=BIG)(_nested)
both("if_nested_tf", X, LEGACY, PIR_IF,
     values={"x": lambda rng, s: rng.uniform(0.1, 1.4, s)})(_nested)
both("if_nested_f", X, LEGACY, PIR_IF, values=NEG)(_nested)


def _params_in_branches(paddle):
    class Branches(paddle.nn.Layer):   # parameters used inside the branches (outer-scope reads)
        def __init__(self):
            super().__init__()
            self.fc_in, self.fc_a, self.fc_b = (paddle.nn.Linear(4, 6), paddle.nn.Linear(6, 6),
                                                paddle.nn.Linear(6, 6))

        def forward(self, x):
            h = self.fc_in(x)
            if paddle.mean(x) > 0:
                h = paddle.nn.functional.relu(self.fc_a(h))
            else:
                h = self.fc_b(h) * 0.5
            return h
    return Branches()


both("if_params_true", X, LEGACY + ("matmul_v2",), PIR_IF + ("matmul_v2",),
     values=POS)(_params_in_branches)
both("if_params_false", X, LEGACY + ("matmul_v2",), PIR_IF + ("matmul_v2",),
     values=NEG)(_params_in_branches)


def _while_counter(paddle):
    class Counter(paddle.nn.Layer):   # trip count int(mean(x)) + 1, from the data
        def forward(self, x):
            i = paddle.zeros([1], dtype="int64")
            n = paddle.cast(paddle.mean(x), "int64") + 1
            h = x
            while i < n:
                h = h * 0.5 + 1.0
                i = i + 1
            return h, i
    return Counter()


for _trips, _mean in ((0, -1.5), (1, 0.5), (2, 1.5), (4, 3.5)):
    both(f"while_counter_{_trips}_trips", X, ("while",), ("while", "yield"),
         values={"x": lambda rng, s, m=_mean: m + rng.uniform(-0.2, 0.2, s)})(_while_counter)


def _while_tensor_cond(paddle):
    class Until(paddle.nn.Layer):   # repeat x = x * 1.5 + 0.5 until the mean reaches 5
        def forward(self, x):
            while paddle.mean(x) < 5.0:
                x = x * 1.5 + 0.5
            return x
    return Until()


both("while_until", X, ("while",), ("while", "yield"), values=POS)(_while_tensor_cond)
both("while_until_zero_trips", X, ("while",), ("while", "yield"),
     values={"x": lambda rng, s: rng.uniform(5.5, 7, s)})(_while_tensor_cond)


def _while_break(paddle):
    class Break(paddle.nn.Layer):
        def forward(self, x):
            i = paddle.zeros([1], dtype="int64")
            while i < 10:
                x = x * 0.5 + 1.0
                i = i + 1
                if paddle.mean(x) > 1.9:
                    break
            return x, i
    return Break()


both("while_break", X, ("while",) + LEGACY, ("while", "if", "yield"),
     values={"x": lambda rng, s: rng.uniform(-4, -2, s)})(_while_break)
both("while_break_never", X, ("while",) + LEGACY, ("while", "if", "yield"),
     values={"x": lambda rng, s: rng.uniform(-300, -200, s)})(_while_break)


def _if_in_while(paddle):
    class IfInWhile(paddle.nn.Layer):
        def forward(self, x):
            i = paddle.zeros([1], dtype="int32")
            s = paddle.zeros_like(x)
            while i < 5:
                if paddle.mean(s) > 0.5:
                    s = s - x
                else:
                    s = s + x * 0.75
                i += 1
            return s
    return IfInWhile()


both("if_in_while", X, ("while",) + LEGACY, ("while", "if", "yield"), values=POS)(_if_in_while)


def _while_in_if(paddle):
    class WhileInIf(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc = paddle.nn.Linear(4, 4)

        def forward(self, x):
            h = self.fc(x)
            if paddle.mean(x) > 0:
                k = paddle.zeros([1], dtype="int64")
                while k < 3:
                    h = paddle.tanh(self.fc(h)) + h
                    k = k + 1
            else:
                h = h * 2.0
            return h
    return WhileInIf()


both("while_in_if_true", X, ("while",) + LEGACY, ("while", "if", "yield"),
     values=POS)(_while_in_if)
both("while_in_if_false", X, ("while",) + LEGACY, ("while", "if", "yield"),
     values=NEG)(_while_in_if)


# Python lists appended to in a loop become tensor arrays (ONNX sequences, opset 14).
LEGACY_ARRAY = ("while", "write_to_array", "lod_array_length", "tensor_array_to_tensor")
PIR_ARRAY = ("while", "create_array", "write_to_array", "array_length", "array_to_tensor")


def _collect(stack):
    def make(paddle):
        class Collect(paddle.nn.Layer):
            def forward(self, x):
                outs = []
                i = paddle.zeros([1], dtype="int64")
                n = paddle.cast(paddle.sum(paddle.abs(x)) * 10.0, "int64") % 3 + 1
                h = x
                while i < n:
                    h = h * 0.5 + 1.0
                    outs.append(h)
                    i = i + 1
                return paddle.stack(outs, axis=1) if stack else paddle.concat(outs, axis=0)
        return Collect()
    return make


for _lo in (0.1, 0.6):
    both(f"array_stack_{_lo}", X, LEGACY_ARRAY, PIR_ARRAY, opsets=(14, 17),
         values={"x": lambda rng, s, lo=_lo: rng.uniform(lo, lo + 0.3, s)})(_collect(True))
both("array_concat", X, LEGACY_ARRAY, PIR_ARRAY, opsets=(14, 17), values=POS)(_collect(False))


@case("array_append_in_if_legacy", X, LEGACY_ARRAY + LEGACY, formats=("legacy",),
      opsets=(14, 17), values={"x": lambda rng, s: rng.uniform(0.6, 1.2, s)})
def _append_in_if(paddle):
    # (Paddle 3.3 cannot save this one as PIR: "UndefinedType ... when ArrayWrite")
    _legacy_ready(paddle)

    class AppendInIf(paddle.nn.Layer):
        def forward(self, x):
            outs = []
            i = paddle.zeros([1], dtype="int64")
            while i < 4:
                if paddle.mean(x) > 0:      # true for the first 2-3 iterations only
                    outs.append(x * 2.0)
                x = x - 0.5
                i = i + 1
            return paddle.stack(outs, axis=0)
    return AppendInIf()


def _loop_fills_rows(paddle):
    class FillRows(paddle.nn.Layer):
        """SLANet's decoder loop: `step` is first set inside the loop (dy2static carries a
        float64 stand-in for it into the loop) and each step is written into a preallocated
        tensor at the loop index (set_value with computed bounds)."""

        def forward(self, x):
            rows = paddle.zeros([x.shape[0], 4, 4])
            h = x * 1.0         # (legacy dy2static would carry `h = x` as x itself)
            for i in range(paddle.to_tensor(3) + 1):
                step = paddle.tanh(h) * 0.5
                h = step + x
                rows[:, i, :] = step
            return rows, h
    return FillRows()


both("while_fills_rows", X, ("while", "set_value"), ("while", "set_value", "yield"),
     values=POS)(_loop_fills_rows)
