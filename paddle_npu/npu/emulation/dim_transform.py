"""DimTransform's function bodies."""
from .body import Emulated, Ref, emulates, float_input_attrs


def keeps_shape(src, shape):
    """Whether Reshape to `shape` (0 copies, one -1 inferred) gives back `src` on every input
    of these dims: each entry 0 or the same fixed size, but one -1 which is then the rest."""
    if len(src) != len(shape):
        return False
    kept = [s == 0 or (isinstance(d, int) and s == d) for d, s in zip(src, shape)]
    return all(kept) or (kept.count(False) == 1 and shape[kept.index(False)] == -1)


def _moves_axis0_last(perm):
    """Whether perm moves axis 0 behind the others (or behind all but the last), keeping
    their order. onnxruntime 1.32 crashes at ORT_ENABLE_ALL (its NCHWc pass reads a node the
    MatMul-Transpose fusion made for float64, which has no schema: onnxruntime issue 28392)
    on such a Transpose read by an exact VMM body (Cast to float64, MatMul), an RNN's
    time-major output before a Linear. A float X is moved by an Einsum instead, which no
    fusion takes into the MatMul; any other keeps its Reshape, which stops the fusion while
    a dim is open."""
    rank = len(perm)
    rest = list(range(1, rank))
    return rank >= 3 and list(perm) in (rest + [0], rest[:-1] + [0, rank - 1])


@emulates("DimTransform")
class DimTransform(Emulated):
    """Transpose then Reshape, or only the one of them a call needs; an Einsum where a float
    X's axis 0 moves behind the others (`_moves_axis0_last`)."""

    @classmethod
    def input_attrs(cls, inputs, images=()):
        return float_input_attrs(inputs)

    @classmethod
    def overload(cls, attrs, in_shapes):
        """"" (Transpose, then Reshape), or the calls that need one of them only: "reshape"
        (perm is the identity), "transpose" (the reshape keeps the permuted shape),
        "identity" (both); "einsum_<perm>" (and "_reshape") for a float X whose axis 0
        moves behind the others (`_moves_axis0_last`), its body written for that perm."""
        a = cls.attrs_of(attrs)
        perm, shape = list(a["perm"]), list(a["shape"])
        moves = perm != list(range(len(perm)))
        axis0_last = _moves_axis0_last(perm)
        einsum = axis0_last and attrs.get("_float", False)
        src = None if in_shapes[0] is None else [in_shapes[0][p] for p in perm]
        reshapes = src is None or not keeps_shape(src, shape) or (axis0_last and not einsum)
        if einsum:
            return "einsum_" + "_".join(map(str, perm)) + ("_reshape" if reshapes else "")
        return {(True, True): "", (False, True): "reshape", (True, False): "transpose",
                (False, False): "identity"}[moves, reshapes]

    @classmethod
    def body(cls, b, attrs, in_shapes):
        overload = cls.overload(attrs, in_shapes)
        x = "X"
        if overload.startswith("einsum"):       # the perm is the body's own: no Ref
            letters = "abcdefghij"[:len(attrs["perm"])]
            moved = "".join(letters[p] for p in attrs["perm"])
            x = b.op("Einsum", x, equation=f"{letters}->{moved}")
        elif overload in ("", "transpose"):
            x = b.op("Transpose", x, perm=Ref("perm", "ints"))
        if overload in ("", "reshape") or overload.endswith("_reshape"):
            b.op("Reshape", x, b.attr("shape", "ints"), out="Y")
        else:
            b.op("Identity", x, out="Y")
