"""The model-local ONNX functions that let onnxruntime run a lowered model as it is."""
import onnx_ir as ir

from . import graph as g
from .ops import DOMAIN, VERSION, get_primitive
from .passes import Pass


def attach_functions(model):
    """Add one FunctionProto per primitive (per specialisation where a node needs one) used
    in the main graph, at the model's default opset; import the NPU domain."""
    opset = model.opset_imports.get("", None)
    done = set()
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.domain != DOMAIN or (node.op_type, node.overload) in done:
            continue
        done.add((node.op_type, node.overload))
        prim = get_primitive(node.op_type)
        attrs = {k: a.value for k, a in node.attributes.items()}
        shapes = [g.dims(v) for v in node.inputs]
        proto = prim.function_proto(opset, attrs, shapes)
        function = ir.serde.deserialize_function(proto)
        model.functions[function.identifier()] = function
    if done:
        model.opset_imports[DOMAIN] = VERSION
    return len(done)


class AttachFunctions(Pass):
    """The function bodies of the primitives the graph uses (`attach_functions`)."""
    name = "functions"

    def run(self, model, result):
        count = attach_functions(model)
        result.modified = bool(count)
        result.info["functions"] = count
