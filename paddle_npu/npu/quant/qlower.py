"""Quantised lowering: a float ONNX model (or a quantised Paddle model's QDQ one) lowered
with integer matrix layers. The scales, bits and emission of each layer are decided by its
plan (npu/chip/plan.py, where the arithmetic is written out) and emitted with the float ones by
mappers/matrix.emit_matrix; this module gathers what the plans need (calibration table,
precision table, the model's own scales) and reads the records back.
"""
import json

import onnx_ir as ir

from ...errors import ConversionError
from ...onnx_io import load_proto
from .. import graph as g
from ..chip.plan import Quantization, fixed_point  # noqa: F401  (fixed_point: part of this API)
from ..chip.target import load_target
from ..ops import DOMAIN
from ..ops.readout import shift_for
from ..pipeline import lower, quantization_records
from ..verification.reference import Reference
from .calibrate import load_precision, load_table
from .qdq import unquantised
from .samples import open_samples


def _quantization_of(model):
    """The quantisation a lowered model records ({"bits", "layers", "units"}), or None; an
    ir.Model's read in place (serializing it would copy every weight)."""
    if isinstance(model, ir.Model):
        return g.quantization(model)
    for p in load_proto(model).metadata_props:
        if p.key == g.QUANTIZATION:
            return json.loads(p.value)
    return None


def records_of(model):
    """The per-layer quantisation records stored in a quantised model (path / proto / ir)."""
    found = _quantization_of(model)
    return None if found is None else found["layers"]


def unit_records_of(model):
    """The records of the integer lookup tables and written arrays in a quantised model."""
    found = _quantization_of(model)
    return [] if found is None else found.get("units", [])


def float_units_of(model):
    """The lookup tables an integer lowering kept in float, each with why."""
    found = _quantization_of(model)
    return [] if found is None else found.get("float_units", [])


def quantized_lower(model, table=None, bits=8, target=None, plan="packed", precision=None,
                    preprocess=None, adc_data=None, adc_bits=None, **lower_options):
    """Lower an ONNX model and quantise it: (ir.Model, Report, records).
    table: calibration table (path / dict); None for a model already quantised (QDQ) whose
    scales it then keeps. precision: a precision table (path / dict {name: int8|int16}).
    adc_data: sample inputs (quant.samples: .npz, folder, dict) on which the ADCs of a
    target that has them take their ranges (calibrate_adc); without, each reads its full
    scale. adc_bits: {layer: ADC bits} of layers read out finer than the target's."""
    m, qdq_table, weight_scales = unquantised(model)
    if table is None:
        if qdq_table is None:
            raise ConversionError("the model is not quantised: give a calibration table "
                                  "(`paddle-npu calibrate`)")
        table = qdq_table
    else:
        table = load_table(table)
        if qdq_table is not None:          # the model's own scales win over calibration
            table = dict(table, tensors={**table["tensors"], **qdq_table["tensors"]})
    layer_bits = {}
    if precision:
        for name, p in load_precision(precision).items():
            layer_bits[name] = 16 if p == "int16" else 8
    source_weight = {}
    for node in m.graph:
        if node.op_type in ("Conv", "Gemm", "MatMul") and len(node.inputs) > 1 and \
                node.inputs[1] is not None and node.inputs[1].name in weight_scales:
            source_weight[node.name] = weight_scales[node.inputs[1].name]
    quantization = Quantization(table, bits, layer_bits, source_weight,
                                float_outputs=qdq_table is not None,
                                adc_bits=dict(adc_bits or {}))
    if adc_data is not None and load_target(target).adc_bits:
        # (lower copies the graph it is given: m serves the second lowering unchanged)
        first, _ = lower(m, target, plan, preprocess, quantization=quantization,
                         **lower_options)
        quantization.adc_shifts = calibrate_adc(first, target, adc_data)
    lowered, report = lower(m, target, plan, preprocess, quantization=quantization,
                            **lower_options)
    return lowered, report, quantization_records(lowered)


def calibrate_adc(lowered, target, data):
    """{layer: per band, the ADC shift of each pair of slices}: the smallest step whose
    codes hold the largest column sum the NumPy reference sees on the sample inputs `data`
    (the lowered model run at its full-scale steps, which clip nothing), one sample at a
    time."""
    proto = ir.serde.serialize_model(lowered)
    samples = open_samples(proto, data)
    ref = Reference(proto, target)
    ref.array.adc_peaks = {}
    for batch in samples.batches(1):
        ref.run(batch)
    bands = {}
    for node in lowered.graph:
        if node.op_type == "QVMM" and node.domain == DOMAIN:
            peaks = ref.array.adc_peaks.get(node.name)
            if peaks is not None:
                bits = node.attributes["adc_bits"].value
                bands.setdefault(g.source(node), []).append([shift_for(p, bits) for p in peaks])
    return bands
