"""Fixed input sizes for stage 2, as every NPU toolchain asks for them.

    paddle-npu lower M.onnx -o L.onnx --input-shape x:1,3,640,640      (repeatable)
    lower(model, ..., input_shape={"x": [1, 3, 640, 640]})

The sizes are set on the ONNX model's inputs before lowering; every other shape is then
inferred again from them and shape sub-graphs (Shape -> Gather -> Concat -> Reshape) fold
to constants, so a Conv on an input with open height and width gets static sizes and
lowers. A size the model fixes may be replaced by another (exports often declare one size
and run at any). The syntax is stage 1's (`convert --input-shape`): -1 or ? keeps a size
dynamic.
"""
FLAG = "--input-shape NAME:D0,D1,..."    # parsed by paddle_npu.shapes, as for convert


def add_argument(parser):
    """The repeatable --input-shape flag of the stage-2 commands (this module stays light:
    `paddle-npu --help` imports it; the pass is passes.FixInputShapes)."""
    parser.add_argument("--input-shape", action="append", metavar="NAME:D0,D1,...",
                        help="fix an input's sizes before lowering (-1: leave one dynamic); "
                             "repeat per input")


def dynamic_inputs(model):
    """{input name: dims} of the ir.Model's inputs with a size that is not fixed."""
    out = {}
    for v in model.graph.inputs:
        dims = [d if isinstance(d, int) else (d.value or "?") for d in v.shape.dims] \
            if v.shape is not None else None
        if dims is None or not all(isinstance(d, int) for d in dims):
            out[v.name] = dims
    return out
