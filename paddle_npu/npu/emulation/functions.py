"""The model-local ONNX functions that let onnxruntime run a lowered model as it is."""
import onnx_ir as ir

from .. import graph as g
from ..ops import DOMAIN, VERSION
from . import DEFAULT, KEY, check_emulation
from .body import float32_overload
from .image_rows import image_rows
from .registry import emulation_of_op


def attach_functions(model, float32=False):
    """Add one FunctionProto per primitive (per specialisation where a node needs one) used
    in the main graph, at the model's default opset (specialised also on what
    `Emulated.input_attrs` reads from the inputs, and on the values the main graph's 1x1
    layers are to read as images: image_rows); import the NPU domain. Functions attached
    before are replaced. float32: nodes whose emulation has a float32 body and whose inputs
    are all float32 call it (`Emulated.float32_body`)."""
    opset = model.opset_imports.get("", None)
    for key in [k for k, f in model.functions.items() if f.domain == DOMAIN]:
        del model.functions[key]
    images = image_rows(model.graph)
    done = set()
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.domain != DOMAIN:
            continue
        emulated = emulation_of_op(node.op_type)
        attrs = {k: a.value for k, a in node.attributes.items()}
        attrs.update(emulated.input_attrs(node.inputs, images))
        shapes = [g.dims(v) for v in node.inputs]
        fast = float32 and sums_in_float32(node)
        overload = emulated.overload(attrs, shapes)
        node.overload = float32_overload(overload) if fast else overload
        if (node.op_type, node.overload) in done:
            continue
        done.add((node.op_type, node.overload))
        proto = emulated.function_proto(opset, attrs, shapes, float32=fast)
        function = ir.serde.deserialize_function(proto)
        model.functions[function.identifier()] = function
    if done:
        model.opset_imports[DOMAIN] = VERSION
    return len(done)


def summing_nodes(graph):
    """The nodes of a graph (not its sub-graphs') that can call a float32 body, in order."""
    return [n for n in graph if n.domain == DOMAIN and sums_in_float32(n)]


def sums_in_float32(node):
    """Whether a node of the NPU domain can call its emulation's float32 body: it has one
    and every input is float32."""
    emulated = emulation_of_op(node.op_type)
    return emulated is not None and emulated.float32_body is not None and all(
        v is None or v.dtype == ir.DataType.FLOAT for v in node.inputs)


def emulate(model, emulation=DEFAULT):
    """Attach to a lowered ir.Model (in place) the function bodies of `emulation`, named in
    its metadata (KEY); returns {"emulation": emulation, "float32_nodes": the nodes a float32
    body could serve}."""
    check_emulation(emulation)
    attach_functions(model, float32=emulation == "float32")
    model.metadata_props[KEY] = emulation
    return {"emulation": emulation, "float32_nodes": len(summing_nodes(model.graph))}


def emulation_of(metadata):
    """The emulation a lowered model's metadata ({key: value}) names; a model saved before
    the key existed was emulated exactly."""
    return metadata.get(KEY, DEFAULT)


def npu_program(proto):
    """A lowered ModelProto's NPU program as bytes, without its emulation: the function
    bodies, the overload each node calls and the metadata naming the emulation left out
    (`proto` is changed in place). Two lowerings under different emulations give the same."""
    del proto.functions[:]
    for node in proto.graph.node:
        node.overload = ""
    kept = [p for p in proto.metadata_props if p.key != KEY]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    return proto.SerializeToString(deterministic=True)
