"""Crop's and Join's function bodies."""
from .body import Emulated, emulates


def _one_index(a, dims):
    """Whether a crop with unit steps keeps one index of one axis, inside its fixed size."""
    if len(a["axes"]) != 1 or dims is None:
        return False
    size, start = dims[a["axes"][0]], a["starts"][0]
    return isinstance(size, int) and 0 <= start < size and a["ends"][0] == start + 1


@emulates("Crop")
class Crop(Emulated):
    """A Slice given only the inputs the call needs, or a Gather of one index."""

    @classmethod
    def overload(cls, attrs, in_shapes):
        """Which of Slice's optional inputs the call needs: "" all, "unit_steps" no steps
        (all 1), "leading_axes" neither steps nor axes (0, 1, ..., as Slice's default);
        "index_axis<a>" for one index of axis a: a Gather of it (one input fewer)."""
        a = cls.attrs_of(attrs)
        if any(k != 1 for k in a["steps"]):
            return ""
        if _one_index(a, in_shapes[0]):
            return f"index_axis{a['axes'][0]}"
        return "leading_axes" if list(a["axes"]) == list(range(len(a["axes"]))) else \
            "unit_steps"

    @classmethod
    def body(cls, b, attrs, in_shapes):
        overload = cls.overload(attrs, in_shapes)
        if overload.startswith("index_axis"):     # starts holds the index, in range
            b.op("Gather", "X", b.attr("starts", "ints"), axis=attrs["axes"][0], out="Y")
            return
        inputs = [b.attr("starts", "ints"), b.attr("ends", "ints")]
        if overload != "leading_axes":
            inputs.append(b.attr("axes", "ints"))
        if overload == "":
            inputs.append(b.attr("steps", "ints"))
        b.op("Slice", "X", *inputs, out="Y")


@emulates("Join")
class Join(Emulated):

    @classmethod
    def overload(cls, attrs, in_shapes):
        return f"n{len(in_shapes)}_axis{cls.attrs_of(attrs)['axis']}"

    @classmethod
    def body(cls, b, attrs, in_shapes):
        b.op("Concat", *(f"P{i}" for i in range(len(in_shapes))), axis=attrs["axis"], out="Y")
