"""Each band of a matrix layer gathers its own rows (a stage-2 pass, after the layout pass).

A layer whose kernel matrix has more rows than an array has is written as bands of tiles,
each band's VMMs reading R of its Im2Col's columns from their row_offset. Run so, the whole
layer's rows are gathered and then every band's columns cut out of them: in onnxruntime a
Split, a copy of all the rows at memory speed, a large part of a big layer's time. This
pass gives each band an Im2Col of its own columns (Im2Col's `columns`), which its VMMs
read whole: the same values, gathered once and moved no more.

A float layer only (an integer layer's Im2Col moves int8 before its QVMMs read it), whose
Im2Col is read by nothing but VMMs of tiles [R, M] whose column ranges cut its rows into
bands, each VMM reading one band, and whose rows take MIN_BYTES or more: on smaller ones
the copy saved is less than what the band's own nodes cost (onnxruntime's dispatch of each
at every run, and its session's work on them once).
"""
import math

import onnx_ir as ir

from . import graph as g
from .ops import DOMAIN
from .ops.im2col import column_range
from .passes import Pass

MIN_BYTES = 1 << 20


class RowBands(Pass):
    """See the module docstring. `fired`: the Im2Cols split into bands, and how."""
    name = "row_bands"

    def run(self, model, result):
        graph = model.graph
        builder = g.Builder(graph)
        for node in list(graph):
            if node.domain != DOMAIN or node.op_type != "Im2Col":
                continue
            bands = _bands(node)
            if bands is None:
                continue
            rows = node.outputs[0]
            attrs = {k: a.value for k, a in node.attributes.items()}
            made = {}
            for start, end in bands:
                band = builder.node("Im2Col", list(node.inputs),
                                    {**attrs, "columns": [start, end - start]},
                                    name=f"{node.name}_{start}", domain=DOMAIN,
                                    shape=list(rows.shape[:-1]) + [end - start],
                                    dtype=rows.dtype)
                g.copy_annotations(node, band)
                graph.insert_before(node, band)
                made[start] = band.outputs[0]
            for reader, _ in list(rows.uses()):
                offset = reader.attributes.get_int("row_offset", 0)
                reader.replace_input_with(0, made[offset])
                reader.attributes["row_offset"] = ir.AttrInt64("row_offset", 0)
            graph.remove(node, safe=True)
            result.fired.append(f"{node.name}: {len(bands)} bands of "
                                f"{', '.join(str(e - s) for s, e in bands)} columns")


def _bands(node):
    """[(start, end)] of the columns an Im2Col's readers cut its rows into, at least two,
    when its rows are float and read only by VMMs of tiles [R, M] (row_offset fixed), each
    reading one band whole; else None."""
    rows = node.outputs[0]
    shape = list(rows.shape) if rows.shape is not None else [None]
    total = shape[-1]
    if column_range({k: a.value for k, a in node.attributes.items()}) or \
            rows.dtype != ir.DataType.FLOAT or not all(isinstance(d, int) for d in shape[1:]) or \
            rows.is_graph_output() or not rows.uses() or \
            4 * math.prod(shape[1:]) < MIN_BYTES:
        return None
    spans = set()
    for reader, index in rows.uses():
        tile = reader.inputs[1] if len(reader.inputs) > 1 else None
        if reader.domain != DOMAIN or reader.op_type != "VMM" or index != 0 or \
                tile is None or tile.shape is None or len(tile.shape) != 2 or \
                not isinstance(tile.shape[0], int):
            return None
        offset = reader.attributes.get_int("row_offset", 0)
        spans.add((offset, offset + tile.shape[0]))
    cuts = sorted({0, total} | {c for span in spans for c in span})
    bands = list(zip(cuts, cuts[1:]))
    if len(bands) < 2 or cuts[0] < 0 or cuts[-1] > total or set(bands) != spans:
        return None
    return bands
