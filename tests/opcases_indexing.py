"""Op cases for meshgrid and take_along_axis."""
from opcase_harness import case
from opcase_layers import fn_layer


def _fn2(paddle, fn):
    return fn_layer(paddle, fn, 2)


case("meshgrid_two", {"x": ((3,), "float32"), "y": ((5,), "float32")}, ["meshgrid"])(
    lambda paddle: _fn2(paddle, lambda x, y: paddle.meshgrid(x, y)))
case("meshgrid_three", {"x": ((3,), "float32"), "y": ((5,), "float32")}, ["meshgrid"])(
    lambda paddle: _fn2(paddle, lambda x, y: paddle.meshgrid(x, y, x * 2.0)))


_IDX = {"y": lambda rng, s: rng.randint(-3, 3, s)}
case("take_along_axis_1", {"x": ((None, 3, 5), "float32"), "y": ((None, 4, 5), "int64")},
     ["take_along_axis"], values=_IDX)(
    lambda paddle: _fn2(paddle, lambda x, y: paddle.take_along_axis(x, y, axis=1)))
case("take_along_axis_last", {"x": ((None, 3, 5), "float32"), "y": ((None, 3, 2), "int64")},
     ["take_along_axis"], values={"y": lambda rng, s: rng.randint(0, 5, s)})(
    lambda paddle: _fn2(paddle, lambda x, y: paddle.take_along_axis(x, y, axis=-1)))
case("take_along_axis_broadcast", {"x": ((None, 3, 5), "float32"), "y": ((None, 1, 5), "int64")},
     ["take_along_axis"], values={"y": lambda rng, s: rng.randint(0, 3, s)})(
    lambda paddle: _fn2(paddle, lambda x, y: paddle.take_along_axis(x, y, axis=1)))
