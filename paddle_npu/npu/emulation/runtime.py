"""onnxruntime sessions: the one place stage 2 makes them."""
import onnx


def session(model, outputs=(), arena=True):
    """An onnxruntime session (CPU, warnings off) of `model` (a path, serialized bytes or a
    ModelProto) computing, besides the model's outputs, the tensors `outputs` (names of
    tensors inside the graph). arena=False: without onnxruntime's memory arena, for runs
    returning many large tensors (every layer's): the arena keeps a run's peak for the
    session's life, on top of the copies returned."""
    if outputs:
        if not isinstance(model, onnx.ModelProto):
            model = onnx.load(model) if isinstance(model, str) else \
                onnx.load_from_string(model)
        m = onnx.ModelProto()
        m.CopyFrom(model)
        have = {o.name for o in m.graph.output}
        for name in outputs:
            if name not in have:
                # (no type given: onnxruntime infers it, as for any tensor inside the graph;
                # an integer one, a selection's picks, would be refused as float)
                m.graph.output.append(onnx.ValueInfoProto(name=name))
        model = m
    import onnxruntime as ort   # heavy: only when a model is run
    if isinstance(model, onnx.ModelProto):
        model = model.SerializeToString()
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.enable_cpu_mem_arena = arena
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
