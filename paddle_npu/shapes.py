"""Input sizes the user gives (`--input-shape x:1,3,640,640`, `input_shape={'x': [...]}`).

A Paddle program declares its inputs' shapes, -1 for a dimension it leaves open; the
converted model keeps them by default. Paddle programs often declare a fixed size
(`[-1, 3, 960, 960]`) and run at any size, and some ops (adaptive pooling to a grid) need
sizes the program leaves open: both are fixed by setting the input shapes on the program
before mapping. -1 makes a declared dimension dynamic; any fixed size may replace another.
"""
import ast

from .errors import ConversionError

FLAG_HINT = "--input-shape NAME:D0,D1,... (Python: export(..., input_shape={NAME: [D0, D1, ...]}))"


def parse_input_shape(text):
    """'x:1,3,640,640' -> ('x', [1, 3, 640, 640]); -1 (or ?) for a dynamic dimension."""
    name, sep, dims = str(text).rpartition(":")
    try:
        shape = [-1 if d.strip() in ("?", "-1") else int(d) for d in dims.split(",")]
    except ValueError:
        shape = None
    if not sep or not name or not shape or any(d < -1 or d == 0 for d in shape):
        raise ConversionError(f"--input-shape {text!r}: expected NAME:D0,D1,... with positive "
                              "sizes or -1 for a dynamic one, e.g. x:1,3,640,640")
    return name, shape


def parse_input_shapes(texts):
    """The repeated flag's values -> {name: dims}; an input given twice is an error."""
    shapes = {}
    for text in texts or ():
        name, dims = parse_input_shape(text)
        if name in shapes:
            raise ConversionError(f"--input-shape given twice for input {name!r}")
        shapes[name] = dims
    return shapes


def parse_shape_dict(text):
    """paddle2onnx's --input_shape_dict "{'x': [1, 3, 640, 640]}" -> {'x': [1, 3, 640, 640]}."""
    try:
        value = ast.literal_eval(str(text))
    except (ValueError, SyntaxError):
        value = None
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, (list, tuple)) and v
            and all(isinstance(d, int) and not isinstance(d, bool) for d in v)
            for k, v in value.items()):
        raise ConversionError(f"--input_shape_dict {text!r}: expected a dict of input name to "
                              "a list of sizes, e.g. \"{'x': [1, 3, 640, 640]}\"")
    return {k: list(v) for k, v in value.items()}


def inputs_static(program):
    """Whether every model input has all its sizes fixed (then the converter can infer the
    sizes inside the model where it needs them)."""
    if program is None or not program.inputs:
        return False
    for name in program.inputs:
        var = program.var(name)
        if var is None or var.shape is None or any(d < 0 for d in var.shape):
            return False
    return True


def set_input_shapes(program, shapes):
    """Give the program's inputs these shapes ({name: [dims]}, -1 = dynamic), in place.

    Every name must be an input and keep its rank. The sizes Paddle recorded for the other
    variables were worked out from the declared ones: they stay when only open sizes were
    fixed, and are forgotten (ranks kept) when a declared size changed, since e.g. a pool's
    recorded 480x480 input no longer holds for a 64x64 image. The converter infers sizes
    from the inputs where it needs them."""
    if not shapes:
        return program
    unknown = [n for n in shapes if n not in program.inputs]
    if unknown:
        raise ConversionError(f"input shape given for {', '.join(map(repr, unknown))}, which "
                              f"{'is' if len(unknown) == 1 else 'are'} not an input of "
                              f"{program.model_path}; its inputs: {', '.join(program.inputs)}")
    stale = False
    for name, dims in shapes.items():
        dims = [int(d) for d in dims]
        if any(d < -1 or d == 0 for d in dims):
            raise ConversionError(f"input shape of {name!r}: {dims} has a size below 1 "
                                  "(use -1 for a dynamic dimension)")
        var = program.var(name)
        declared = list(var.shape) if var.shape is not None else None
        if declared is not None and len(declared) != len(dims):
            raise ConversionError(f"input shape of {name!r}: {dims} has rank {len(dims)}, the "
                                  f"program declares rank {len(declared)} {declared}")
        if declared is None or any(d >= 0 and d != n for d, n in zip(declared, dims)):
            stale = True
        var.shape = tuple(dims)
    if stale:
        _forget_derived_sizes(program)
    return program


def _forget_derived_sizes(program):
    """Every size Paddle recorded for a variable computed from the inputs becomes -1."""
    for block in program.blocks:
        for name, var in block.vars.items():
            if var.shape is not None and not var.persistable and name not in program.inputs:
                var.shape = tuple(-1 for _ in var.shape)


# Ops whose output has its first input's shape, axis for axis.
_SAME_SHAPE = frozenset("""
    abs assign cast clip cumsum dropout elu exp fill_any_like fill_zeros_like gelu hard_sigmoid
    hard_swish layer_norm leaky_relu log log_softmax logical_not relu relu6 scale sigmoid sign
    silu softmax sqrt swish tanh""".split())
_ELEMENTWISE = frozenset("""
    elementwise_add elementwise_sub elementwise_mul elementwise_div elementwise_max
    elementwise_min elementwise_pow elementwise_floordiv elementwise_mod equal not_equal
    less_than less_equal greater_than greater_equal logical_and logical_or logical_xor""".split())
_OUT_SLOTS = ("Out", "Y")


def input_dim_symbols(program):
    """A symbol for every open (-1) dimension of the program's inputs, shared where the
    program makes them equal: the first axis of every input (the batch), and open axes of
    inputs that meet in an element-wise op (input_ids and token_type_ids of a BERT, both
    [batch, seq], added after their embeddings), followed through ops that keep their
    input's shape. A shared symbol is the first input's own (`input_ids_dim1`).

    Returns {(input name, axis): symbol}."""
    parent = {}

    def find(k):
        while parent[k] != k:
            parent[k] = k = parent[parent[k]]
        return k

    def union(a, b):
        a, b = find(a), find(b)
        if a != b:
            parent[max(a, b)] = min(a, b)   # keys are (input index, axis): the first one wins

    dims = {}                               # var name -> [key or None per axis]
    firsts = []
    for i, name in enumerate(program.inputs):
        var = program.var(name)
        shape = list(var.shape or ()) if var is not None else []
        dims[name] = [(i, a) if d < 0 else None for a, d in enumerate(shape)]
        for key in dims[name]:
            if key is not None:
                parent[key] = key
        if dims[name] and dims[name][0] is not None:
            firsts.append(dims[name][0])
    for key in firsts[1:]:
        union(firsts[0], key)

    for op in program.global_block.ops:
        out = next((op.output(s)[0] for s in _OUT_SLOTS if op.output(s)), None)
        if out is None:
            continue
        if op.type in _ELEMENTWISE:
            x, y = (dims.get(op.input(s)[0]) if op.input(s) else None for s in ("X", "Y"))
            if x is None or y is None:
                continue
            axis = op.attr("axis", -1)
            start = len(x) - len(y) if axis is None or axis < 0 else axis
            for j, key in enumerate(y):
                if key is not None and 0 <= start + j < len(x) and x[start + j] is not None:
                    union(x[start + j], key)
            if len(x) >= len(y):
                dims[out] = list(x)
        elif op.type in ("lookup_table_v2", "lookup_table") and op.input("Ids"):
            ids = dims.get(op.input("Ids")[0])
            if ids is not None:            # v1 ids end in a 1 the output replaces
                dims[out] = (ids[:-1] if op.type == "lookup_table" else list(ids)) + [None]
        elif op.type in _SAME_SHAPE and op.input("X"):
            if op.input("X")[0] in dims:
                dims[out] = list(dims[op.input("X")[0]])

    symbols = {}
    for i, name in enumerate(program.inputs):
        for a, key in enumerate(dims[name]):
            if key is not None:
                j, axis = find(key)
                symbols[name, a] = f"{program.inputs[j]}_dim{axis}"
    return symbols
