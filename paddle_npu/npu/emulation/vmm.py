"""VMM's function bodies."""
import math

import numpy as np

from .body import DOUBLE, Emulated, emulates


@emulates("VMM")
class VMM(Emulated):
    """The exact body multiplies X and W in float64 (one MatMul) and rounds each output to
    X's type once, as the reference does; the float32 body is onnxruntime's float32 MatMul.

    A block-diagonal W (a depthwise or grouped layer's tile) gets a body that multiplies
    only its diagonal blocks (`diagonal_blocks`); the array still holds W. (A depthwise tile
    read tap by tap, Im2Col's channel_block, keeps the dense body: there onnxruntime's
    MatMul of its zeros is faster than the products of its groups, whose sum over the taps
    is not over X's last axis.)

    A stack W [T, R, M] is one batched MatMul: no rows sliced per tile, and one node instead
    of one per tile (thousands for the per-channel plan).

    An X onnxruntime is to run as an image [N, H, W, C] (image_rows.py: a 1x1 layer's rows
    next to depthwise or pooling layers) gets a float32 body that is a 1x1 Conv between two
    transposes, which onnxruntime cancels against its neighbours' (DepthwiseConv's, Pool's,
    the other such VMMs') and runs in its blocked layout, as it runs the Conv the layer came
    from (a MatMul there is slower)."""

    @classmethod
    def overload(cls, attrs, in_shapes):
        """"whole" when the array reads all of X's columns, "rows_<offset>_<R>_rank<n>" when
        the columns it reads are known at lowering (the Slice bounds one per axis of X),
        else "" (the slice computed at every run); "stack" for a stack. "_image" follows
        when X is run as an image (input_attrs): the float32 body is a 1x1 Conv."""
        if len(in_shapes[1]) == 3:
            cls.primitive.check_stack(attrs, in_shapes[0], in_shapes[1])
            return "stack"
        span = cls._static_span(attrs, in_shapes)
        if span is None:
            return ""
        offset, r, total = span
        name = "whole" if offset == 0 and r == total else \
            f"rows_{offset}_{r}_rank{len(in_shapes[0])}"
        blocks = attrs.get("_blocks")
        if blocks is None:
            return name + "_image" if attrs.get("_image") else name
        name += "_blocks{}x{}x{}".format(*blocks)
        # the aligned block body reshapes all of X: its width is part of the specialisation
        return name + f"_of{total}" if cls._aligned(attrs, in_shapes) else name

    @classmethod
    def input_attrs(cls, inputs, images=()):
        """{"_blocks": (n, k, m)} when W is a constant made of n diagonal blocks of k rows by
        m columns, zero elsewhere (`diagonal_blocks`); {"_image": True} when X is one of
        `images` (image_rows.py) and W a tile [R, M]; else {}."""
        w = inputs[1] if len(inputs) > 1 else None
        if w is None or w.const_value is None:
            return {}
        blocks = diagonal_blocks(w.const_value.numpy())
        if blocks is not None:
            return {"_blocks": blocks}
        return {"_image": True} if inputs[0] in images and len(w.shape) == 2 else {}

    @classmethod
    def body(cls, b, attrs, in_shapes):
        def double(v):
            return b.op("Cast", v, to=DOUBLE)
        if len(in_shapes[1]) == 3:
            y = b.op("MatMul", double("X"), double("W"))
        elif cls._blocks(attrs, in_shapes):
            y = cls._block_products(b, attrs, in_shapes, double)
        else:
            y = b.op("MatMul", double(cls._rows(b, attrs, in_shapes)), double("W"))
        b.op("CastLike", y, "X", out="Y")

    @classmethod
    def float32_body(cls, b, attrs, in_shapes):
        if len(in_shapes[1]) == 3:
            b.op("MatMul", "X", "W", out="Y")
        elif cls._blocks(attrs, in_shapes):
            cls._block_products(b, attrs, in_shapes, lambda v: v, out="Y")
        elif attrs.get("_image") and cls._static_span(attrs, in_shapes):
            image = b.op("Transpose", cls._rows(b, attrs, in_shapes), perm=[0, 3, 1, 2])
            kernel = b.op("Reshape", b.op("Transpose", "W", perm=[1, 0]), b.const([0, 0, 1, 1]))
            b.op("Transpose", b.op("Conv", image, kernel), perm=[0, 2, 3, 1], out="Y")
        else:
            b.op("MatMul", cls._rows(b, attrs, in_shapes), "W", out="Y")

    @classmethod
    def _blocks(cls, attrs, in_shapes):
        """W's diagonal blocks (n, k, m) when the body can use them (X's rank fixed)."""
        return attrs.get("_blocks") if cls._static_span(attrs, in_shapes) else None

    @classmethod
    def _block_products(cls, b, attrs, in_shapes, cast, out=None):
        """The rows the tile reads times W's n diagonal blocks [k, m], skipping W's zero
        blocks: block j of the rows times W's block j, for every j at once. The blocks are
        gathered from W by one GatherND of constant indices (onnxruntime folds that once, at
        session creation); `cast` converts rows and blocks to the sums' type. The exact body
        adds in float64 what the dense one adds, less exact zeros."""
        n, k, m = attrs["_blocks"]
        j, i, c = np.ogrid[:n, :k, :m]
        at = np.stack(np.broadcast_arrays(j * k + i, j * m + c), axis=-1)  # W[j*k + i, j*m + c]
        keep = [0] * (len(in_shapes[0]) - 1)          # X's leading axes, as they are
        if m == 1:      # depthwise: each output column sums its own k rows
            w = cast(b.op("GatherND", "W", b.const(at[:, :, 0])))             # [n, k]
            x = cast(cls._block_rows(b, attrs, in_shapes, []))                # [..., n, k]
            return b.op("ReduceSum", b.op("Mul", x, w), b.const([-1]), keepdims=0, out=out)
        w = cast(b.op("GatherND", "W", b.const(at)))                          # [n, k, m]
        x = cast(cls._block_rows(b, attrs, in_shapes, [1]))                   # [..., n, 1, k]
        return b.op("Reshape", b.op("MatMul", x, w), b.const(keep + [n * m]), out=out)

    @classmethod
    def _block_rows(cls, b, attrs, in_shapes, middle):
        """The columns the tile reads as its n blocks of k: [..., n, *middle, k]. Where the
        blocks lie on X's grid of k columns (`_aligned`: every tile of a depthwise or grouped
        layer), all of X is reshaped to [..., X's columns / k, *middle, k] and the tile's
        blocks sliced from that: the tiles of a layer then make the same Reshape, which
        onnxruntime merges into one, and their Slices of it into one Split (a Slice and a
        Reshape per tile fewer)."""
        n, k, _ = attrs["_blocks"]
        offset, r, total = cls._static_span(attrs, in_shapes)
        keep = [0] * (len(in_shapes[0]) - 1)
        if not cls._aligned(attrs, in_shapes):
            return b.op("Reshape", cls._rows(b, attrs, in_shapes),
                        b.const(keep + [n] + middle + [k]))
        x = b.op("Reshape", "X", b.const(keep + [total // k] + middle + [k]))
        if r == total:
            return x
        return b.op("Slice", x, b.const([offset // k]), b.const([offset // k + n]),
                    b.const([len(keep)]))

    @classmethod
    def _aligned(cls, attrs, in_shapes):
        """Whether a block tile's rows start on X's grid of k columns and X's columns are
        whole blocks of k (the body then reads X as [..., columns / k, k])."""
        offset, _, total = cls._static_span(attrs, in_shapes)
        k = attrs["_blocks"][1]
        return offset % k == 0 and total % k == 0

    @classmethod
    def _static_span(cls, attrs, in_shapes):
        """(row_offset, R, X's columns) when X's last size and W's rows are fixed, else None."""
        x, w = in_shapes[0], in_shapes[1]
        if not x or not w or not isinstance(x[-1], int) or not isinstance(w[0], int):
            return None
        return cls.attrs_of(attrs)["row_offset"], w[0], x[-1]

    @classmethod
    def _rows(cls, b, attrs, in_shapes):
        """X[..., row_offset : row_offset + R] in as few nodes as it takes: every VMM node
        inlines them, and a per-channel plan has thousands (X itself when the array reads
        all of it; one Slice of constant bounds when the sizes are fixed). The Slice names
        its one axis: onnxruntime then fuses the Slices that a layer's tiles take of the
        same X into one Split (it fuses no Slice that lists every axis)."""
        span = cls._static_span(attrs, in_shapes)
        if span is not None:
            offset, r, total = span
            if offset == 0 and r == total:
                return "X"
            return b.op("Slice", "X", b.const([offset]), b.const([offset + r]),
                        b.const([len(in_shapes[0]) - 1]))
        offset = b.attr("row_offset", "int")                   # a scalar
        start = b.op("Add", offset, b.const([0]))               # [row_offset]
        end = b.op("Add", offset, b.op("Shape", "W", end=1))    # [row_offset + R]
        return b.op("Slice", "X", start, end, b.const([-1]))


def diagonal_blocks(w):
    """(n, k, m) when the tile w [R, M] is n >= 2 blocks of k rows by m columns along its
    diagonal (block j: rows [j*k, (j+1)*k), columns [j*m, (j+1)*m)) and zero elsewhere, the
    most such blocks; else None. Checked on the values: every weight a compact body skips is
    an exact zero. A split into n blocks implies one into each divisor of n, so a divisor
    that fails rules out its multiples (a dense tile costs one check)."""
    if w.ndim != 2:
        return None
    r, cols = w.shape
    if w[0, cols - 1] != 0 or w[r - 1, 0] != 0:   # off every diagonal: a dense tile, at once
        return None
    g = math.gcd(r, cols)
    nonzero = None
    found, failed = None, []
    for n in range(2, g + 1):
        if g % n or any(n % d == 0 for d in failed):
            continue
        if nonzero is None:
            nonzero = np.count_nonzero(w)
        j = np.arange(n)
        diagonal = w.reshape(n, r // n, n, cols // n)[j, :, j, :]
        if np.count_nonzero(diagonal) == nonzero:
            found = (n, r // n, cols // n)
        else:
            failed.append(n)
    return found
