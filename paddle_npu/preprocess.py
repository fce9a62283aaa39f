"""Image preprocessing fused into the model: raw uint8 images in.

    spec = PreprocessSpec(mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375),
                          pixel_format="bgr", channel_format="nhwc", resize_dims=(256, 256))
    model, info = fuse_preprocess("model.onnx", spec)          # or mode="int8"

The model's image input (a float [N, C, H, W] input) becomes a uint8 input of the raw
image's shape and layout, under the same name, and these are inserted in front of the model,
in this order (each only when it does something):

    Transpose    NHWC -> NCHW                              (channel_format "nhwc")
    Slice        center crop of the resize_dims image to the model's H x W: the window starts
                 at ((RH - H) // 2, (RW - W) // 2)
    Cast         uint8 -> the model's float type           (float mode)
    Scale        y = x * a[c] + b[c], a = 1 / std (or scale), b = -mean * a, ONE multiply-add
                 per channel; left out when every a is 1 and every b is 0
    ScaleLut     int8 mode, instead of Cast and Scale: a 256-entry table per channel maps the
                 pixel to its quantised normalised value (see `lut_tables`), followed by a
                 DequantizeLinear back to the model's float input (written as Cast and Mul
                 before opset 10 and with primitives=True: the NumPy reference of a lowered
                 model runs on onnx.reference, which has no DequantizeLinear before opset 19);
                 left out when every table is the identity (uint8, step = the pixel's own)
    SwapChannel  RGB <-> BGR (pixel_format != model_pixel_format); folded into the weights of
                 the first op when that is a Conv of group 1 (its input-channel axis permuted)

mean / std / scale are in 0-255 pixel units and in the MODEL's channel order (what it was
trained with: for an RGB model, the R, G, B means), one value each or one per channel.
With `primitives=False` (the default, what `convert` writes) the steps are standard ONNX ops
any runtime runs; with `primitives=True` (what `lower` uses) Scale, ScaleLut and SwapChannel
are the NPU primitives of the same names (paddle_npu/npu/ops/).

Cast pairs that cancel are removed: when the model itself quantises its input (its first op
is a per-tensor QuantizeLinear, a QDQ model: the "cast pair" of an int8 first layer)
the table quantises with that op's scale and zero point and both the DequantizeLinear we
would insert and the model's QuantizeLinear go, in either mode; a Cast from uint8 to a float
type followed by the model's own Cast back is merged into one Cast (or none).

This module is imported by the command line's parser: it imports nothing heavy at load.
"""
from dataclasses import asdict, dataclass

from .errors import ConversionError
from .naming import UniqueNames

PIXEL_FORMATS = ("rgb", "bgr", "gray")
CHANNEL_FORMATS = ("nchw", "nhwc")
MODES = ("float", "int8")
KEYS = ("mean", "std", "scale", "pixel_format", "model_pixel_format", "channel_format",
        "resize_dims", "input", "mode")
_CHANNELS = {"rgb": 3, "bgr": 3, "gray": 1}
_FLOAT_TYPES = ("FLOAT", "FLOAT16", "DOUBLE", "BFLOAT16")
_HOLDS_UINT8 = _FLOAT_TYPES + ("UINT8", "INT16", "UINT16", "INT32", "UINT32", "INT64", "UINT64")


def _numbers(value, key, source, kind=float):
    """A tuple of numbers from a list or a comma-separated string."""
    if isinstance(value, str):
        parts = [p.strip() for p in value.replace(" ", ",").split(",") if p.strip()]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        parts = [value]
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        raise ConversionError(f"{source}: {key} must be a list of numbers, not {value!r}")
    out = []
    for p in parts:
        try:
            if isinstance(p, bool):
                raise ValueError
            x = kind(p)
            if kind is int and float(p) != x:
                raise ValueError
        except (TypeError, ValueError):
            what = "integers" if kind is int else "numbers"
            raise ConversionError(f"{source}: {key} must be {what} separated by commas, "
                                  f"not {value!r}") from None
        if x != x or x in (float("inf"), float("-inf")):
            raise ConversionError(f"{source}: {key} must be finite, not {value!r}")
        out.append(x)
    if not out:
        raise ConversionError(f"{source}: {key} is empty")
    return tuple(out)


def _choice(value, key, choices, source):
    if value is None:
        return None
    text = str(value).strip().lower()
    if text not in choices:
        raise ConversionError(f"{source}: {key} must be one of {', '.join(choices)}, "
                              f"not {value!r}")
    return text


@dataclass(frozen=True)
class PreprocessSpec:
    """What the raw image is and how the model wants it (see the module docstring).

    mean, std, scale:    per model channel (or one for all), 0-255 pixel units; give std or
                         scale, not both (neither: 1); mean defaults to 0
    pixel_format:        rgb | bgr | gray, the raw image's channel order (None: the model's)
    model_pixel_format:  what the model was trained on (None: rgb, gray for 1 channel)
    channel_format:      nchw | nhwc, the raw image's layout
    resize_dims:         (H, W) of the raw image, center-cropped to the model's input size
                         (None: the model's size)
    input:               the image input's name (None: the model's only 4-D float input)
    mode:                float | int8 (int8: normalisation by ScaleLut tables)
    """
    mean: tuple = None
    std: tuple = None
    scale: tuple = None
    pixel_format: str = None
    model_pixel_format: str = None
    channel_format: str = "nchw"
    resize_dims: tuple = None
    input: str = None
    mode: str = "float"

    def __post_init__(self):
        self.validate("preprocess")

    def validate(self, source):
        if self.std is not None and self.scale is not None:
            raise ConversionError(f"{source}: give std or scale, not both "
                                  "(y = (x - mean) / std, or (x - mean) * scale)")
        for key in ("std", "scale"):
            values = getattr(self, key)
            if values is not None and any(v <= 0 for v in values):
                raise ConversionError(f"{source}: every {key} must be positive, "
                                      f"not {list(values)}")
        if self.resize_dims is not None and (len(self.resize_dims) != 2 or
                                             any(d <= 0 for d in self.resize_dims)):
            raise ConversionError(f"{source}: resize_dims is two positive sizes H,W, not "
                                  f"{list(self.resize_dims)}")
        for key, choices in (("pixel_format", PIXEL_FORMATS),
                             ("model_pixel_format", PIXEL_FORMATS),
                             ("channel_format", CHANNEL_FORMATS), ("mode", MODES)):
            value = getattr(self, key)
            if (value is not None or key in ("channel_format", "mode")) and value not in choices:
                raise ConversionError(f"{source}: {key} must be one of {', '.join(choices)}, "
                                      f"not {value!r}")
        lengths = {len(getattr(self, k)) for k in ("mean", "std", "scale")
                   if getattr(self, k) is not None} - {1}
        if len(lengths) > 1:
            raise ConversionError(f"{source}: mean, std and scale have different numbers of "
                                  f"channels ({self.mean}, {self.std or self.scale})")

    @classmethod
    def from_dict(cls, data, source="<dict>"):
        """From a config / target file's table or the command line's values (keys as in
        KEYS, '-' or '_'); numbers as lists or comma-separated strings."""
        if not isinstance(data, dict):
            raise ConversionError(f"{source}: preprocess settings are a table / object")
        data = {str(k).replace("-", "_"): v for k, v in data.items()}
        unknown = sorted(set(data) - set(KEYS))
        if unknown:
            raise ConversionError(f"{source}: unknown preprocess settings {unknown} "
                                  f"(known: {', '.join(KEYS)})")
        get = data.get
        resize = get("resize_dims")
        inp = get("input")
        if inp is not None and (not isinstance(inp, str) or not inp):
            raise ConversionError(f"{source}: input must be the name of a graph input")
        spec = cls.__new__(cls)       # validated below, naming the source
        for key, value in (
                ("mean", None if get("mean") is None else _numbers(get("mean"), "mean", source)),
                ("std", None if get("std") is None else _numbers(get("std"), "std", source)),
                ("scale", None if get("scale") is None else
                 _numbers(get("scale"), "scale", source)),
                ("pixel_format", _choice(get("pixel_format"), "pixel_format", PIXEL_FORMATS,
                                         source)),
                ("model_pixel_format", _choice(get("model_pixel_format"), "model_pixel_format",
                                               PIXEL_FORMATS, source)),
                ("channel_format", _choice(get("channel_format") or "nchw", "channel_format",
                                           CHANNEL_FORMATS, source)),
                ("resize_dims", None if resize is None else
                 _numbers(resize, "resize_dims", source, int)),
                ("input", inp),
                ("mode", _choice(get("mode") or "float", "mode", MODES, source))):
            object.__setattr__(spec, key, value)
        spec.validate(source)
        return spec

    def as_dict(self):
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()
                if v is not None}


# --- command line and config files -----------------------------------------------------------
_FLAGS = (  # (flag, key, metavar / choices, help)
    ("--mean", "mean", "M0,M1,M2", "per-channel mean in 0-255 pixel units, model channel "
                                   "order (default 0)"),
    ("--std", "std", "S0,S1,S2", "per-channel std in pixel units: y = (x - mean) / std"),
    ("--scale", "scale", "K0,K1,K2", "per-channel scale instead of std: y = (x - mean) * scale"),
    ("--pixel-format", "pixel_format", PIXEL_FORMATS,
     "channel order of the raw image (default: the model's)"),
    ("--model-pixel-format", "model_pixel_format", PIXEL_FORMATS,
     "channel order the model was trained on (default rgb; gray for 1 channel)"),
    ("--channel-format", "channel_format", CHANNEL_FORMATS, "layout of the raw image "
                                                            "(default nchw)"),
    ("--resize-dims", "resize_dims", "H,W", "size of the raw image; center-cropped to the "
                                            "model's input size (default: that size)"),
    ("--preprocess-input", "input", "NAME", "the image input (default: the only 4-D float one)"),
    ("--preprocess-mode", "mode", MODES, "float: Cast + Scale; int8: ScaleLut tables "
                                         "(default float)"),
)


def add_arguments(parser, fuse=True):
    """The --fuse-preprocess options, on an argparse parser or argument group. fuse=False:
    the same settings without --fuse-preprocess (`calibrate --data FOLDER` reads images)."""
    title = "fused preprocessing (raw uint8 images in)" if fuse else \
        "image preprocessing (for --data FOLDER: the model's normalisation)"
    g = parser.add_argument_group(title) if hasattr(parser, "add_argument_group") else parser
    if fuse:
        g.add_argument("--fuse-preprocess", action="store_true",
                       help="make the model take the raw uint8 image: layout, center crop, "
                            "normalisation and channel order run inside it")
    g.add_argument("--preprocess-config", metavar="FILE",
                   help="a .json / .toml file with the settings below (keys mean, std, scale, "
                        "pixel_format, model_pixel_format, channel_format, resize_dims, input, "
                        "mode; top level or in a [preprocess] table); flags override it")
    for flag, key, meta, text in _FLAGS:
        if isinstance(meta, tuple):
            g.add_argument(flag, dest=f"pre_{key}", choices=meta, default=None, help=text)
        else:
            g.add_argument(flag, dest=f"pre_{key}", metavar=meta, default=None, help=text)
    return g


def read_config(path):
    """The preprocess table of a .json / .toml file (its [preprocess] table if it has one)."""
    from .naming import read_settings
    data = read_settings(path, "preprocess config")
    if isinstance(data, dict) and isinstance(data.get("preprocess"), dict):
        data = data["preprocess"]
    PreprocessSpec.from_dict(data, path)      # errors name the file
    return data


def _merge(base, top):
    out = dict(base)
    if "std" in top or "scale" in top:        # the later source's choice of std / scale wins
        out.pop("std", None)
        out.pop("scale", None)
    out.update(top)
    return out


def settings_given(args):
    """The preprocessing options a command line gives (flag names)."""
    given = sorted(f for f, key, _, _ in _FLAGS if getattr(args, f"pre_{key}", None) is not None)
    return given + (["--preprocess-config"] if getattr(args, "preprocess_config", None) else [])


def spec_from_args(args, target=None, enabled=None, needs="--fuse-preprocess"):
    """The PreprocessSpec a command line asks for, or None without --fuse-preprocess
    (`enabled`, when given, says instead whether preprocessing applies; `needs` is what the
    error names when options are given without it).

    Settings come from, lowest priority first: the target file's [preprocess] table (target:
    a Target, or a preset name / file as --target takes), --preprocess-config, the flags."""
    flags = {key: getattr(args, f"pre_{key}") for _, key, _, _ in _FLAGS
             if getattr(args, f"pre_{key}", None) is not None}
    config = getattr(args, "preprocess_config", None)
    if enabled is None:
        enabled = getattr(args, "fuse_preprocess", False)
    if not enabled:
        if flags or config:
            raise ConversionError(f"{', '.join(settings_given(args))}: preprocessing "
                                  f"options, they need {needs}")
        return None
    merged = {}
    if target is not None:
        from .npu.target import load_target
        table = load_target(target).preprocess
        if table:
            merged = _merge(merged, {str(k).replace("-", "_"): v for k, v in table.items()})
    if config:
        merged = _merge(merged, {str(k).replace("-", "_"): v
                                 for k, v in read_config(config).items()})
    merged = _merge(merged, flags)
    return PreprocessSpec.from_dict(merged, "--fuse-preprocess")


def as_spec(spec):
    if isinstance(spec, PreprocessSpec):
        return spec
    if isinstance(spec, dict):
        return PreprocessSpec.from_dict(spec)
    raise TypeError(f"a PreprocessSpec or a dict, not {type(spec).__name__}")


def crop_window(h, w, resize_dims):
    """((RH, RW), (top, left) or None): the raw image's size and where the model's H x W
    window starts in it (centered; None when they are the same size)."""
    raw = tuple(resize_dims) if resize_dims else (h, w)
    if raw[0] < h or raw[1] < w:
        raise ConversionError(f"preprocess: resize_dims {raw[0]},{raw[1]} is smaller than "
                              f"the model's input {h}x{w} (the image is center-cropped to "
                              "it, not padded)")
    return raw, (None if raw == (h, w) else ((raw[0] - h) // 2, (raw[1] - w) // 2))


# --- image files (calibration sets) -----------------------------------------------------------
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp")


def image_files(folder):
    """The image files of `folder` (not recursive), sorted by name."""
    import os

    names = sorted(n for n in os.listdir(folder) if n.lower().endswith(IMAGE_EXTENSIONS))
    if not names:
        raise ConversionError(f"{folder}: no image files ({' '.join(IMAGE_EXTENSIONS)})")
    return [os.path.join(folder, n) for n in names]


def read_images(paths, spec, model_shape, limit=None):
    """The model's float32 input [N, C, H, W] for image files, as the fused preprocessing
    would compute it from the camera's raw image: each file decoded (Pillow) into the model's
    channel order (spec.model_pixel_format; a file carries its own channel order, so
    spec.pixel_format / channel_format, which describe the deployed raw input, do not apply),
    resized (bilinear) to resize_dims or else the model's H x W, center-cropped to H x W at the
    window fused preprocessing uses, and normalised x * a + b with `affine(spec)`."""
    import numpy as np
    try:
        from PIL import Image
    except ImportError:
        raise ConversionError("reading images needs Pillow: pip install pillow (or "
                              "'paddle_npu[images]'), or give an .npz of inputs") from None

    c, h, w = model_shape[1:]
    if not all(isinstance(d, int) and d > 0 for d in (c, h, w)) or c not in (1, 3):
        raise ConversionError(f"preprocess: reading images needs a [N, 1 or 3, H, W] input of "
                              f"fixed size, not {list(model_shape)}")
    model_pf = spec.model_pixel_format or ("gray" if c == 1 else "rgb")
    if _CHANNELS[model_pf] != c:
        raise ConversionError(f"preprocess: model_pixel_format {model_pf} has "
                              f"{_CHANNELS[model_pf]} channel(s) but the input has {c}")
    (rh, rw), origin = crop_window(h, w, spec.resize_dims)
    top, left = origin or (0, 0)
    a, b = affine(spec, c)
    paths = list(paths)[:limit] if limit else list(paths)
    out = np.empty((len(paths), c, h, w), np.float32)
    for i, path in enumerate(paths):
        try:
            with Image.open(path) as img:
                img = img.convert("L" if c == 1 else "RGB").resize((rw, rh), Image.BILINEAR)
                pixels = np.asarray(img, np.float64).reshape(rh, rw, c)
        except (OSError, ValueError) as exc:
            raise ConversionError(f"{path}: cannot read the image ({exc})") from None
        if model_pf == "bgr":
            pixels = pixels[..., ::-1]
        pixels = pixels[top:top + h, left:left + w].transpose(2, 0, 1)
        out[i] = pixels * a[:, None, None] + b[:, None, None]
    return out


# --- the arithmetic ---------------------------------------------------------------------------
def affine(spec, channels):
    """(a, b) float64 [channels] in the model's channel order: normalised = x * a + b."""
    import numpy as np

    def per_channel(values, key, default):
        if values is None:
            return np.full(channels, default, dtype=np.float64)
        if len(values) not in (1, channels):
            raise ConversionError(f"preprocess: {key} has {len(values)} values for a model "
                                  f"input of {channels} channels")
        return np.broadcast_to(np.asarray(values, dtype=np.float64), (channels,)).copy()

    mean = per_channel(spec.mean, "mean", 0.0)
    if spec.scale is not None:
        a = per_channel(spec.scale, "scale", 1.0)
    else:
        a = 1.0 / per_channel(spec.std, "std", 1.0)
    return a, -mean * a + 0.0      # (+ 0.0: no -0 for a zero mean)


def lut_tables(a, b, quant=None):
    """Per-channel tables of the quantised normalised value of every uint8 pixel.

    a, b: float64 [C] (normalised = p * a[c] + b[c], p = 0..255). Returns
    (tables [C, 256], q, zero_point, dtype name). Without `quant`:
      - every b is 0 (every mean 0): unsigned, uint8 with q = max normalised value / 255;
      - otherwise signed, symmetric int8 in [-127, 127] with q = max |normalised| / 127;
    zero point 0 either way, so no value is clipped and every entry is within q / 2 of the
    value it stands for. `quant` = (q, zero_point, "int8" | "uint8") takes a given
    quantisation (the model's own QuantizeLinear) and saturates to its type's range.
    q is rounded to float32 first (what a DequantizeLinear holds) and the entries are
    round-half-to-even of value / q, computed in float64.
    """
    import numpy as np

    pixels = np.arange(256, dtype=np.float64)
    values = pixels[None, :] * a[:, None] + b[:, None]
    if quant is None:
        if not np.any(b):
            dtype, zero = "uint8", 0
            q = float(np.float32(values.max() / 255.0))
        else:
            dtype, zero = "int8", 0
            q = float(np.float32(np.abs(values).max() / 127.0))
        lo, hi = (0, 255) if dtype == "uint8" else (-127, 127)
    else:
        q, zero, dtype = float(np.float32(quant[0])), int(quant[1]), quant[2]
        lo, hi = (0, 255) if dtype == "uint8" else (-128, 127)
    if not q > 0:
        raise ConversionError("preprocess: the normalised values are all 0: nothing to quantise")
    table = np.clip(np.rint(values / q) + zero, lo, hi).astype(dtype)
    return table, q, zero, dtype


# --- the graph rewrite ------------------------------------------------------------------------
class _Chain:
    """Builds the nodes inserted in front of the model, with types and shapes."""

    def __init__(self, graph):
        import onnx_ir as ir

        self.ir, self.graph = ir, graph
        self.nodes = []
        self.unique = UniqueNames.of_graph(graph)

    def const(self, array, suffix):
        import numpy as np

        ir = self.ir
        array = np.asarray(array)
        if not array.flags.c_contiguous:     # (np.ascontiguousarray would make a scalar 1-D)
            array = array.copy()
        name = self.unique(f"preprocess/{suffix}")
        value = ir.Value(name=name, type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
                         shape=ir.Shape(array.shape), const_value=ir.tensor(array, name=name))
        self.graph.register_initializer(value)
        return value

    def op(self, op_type, inputs, attrs, dtype, shape, name, domain=""):
        ir = self.ir
        node = ir.Node(domain, op_type, inputs, ir.convenience.convert_attributes(attrs),
                       name=self.unique(f"preprocess/{name}"))
        if domain:
            from .npu.ops import get_primitive

            prim = get_primitive(op_type)
            in_shapes = [[d if isinstance(d, int) else str(d) for d in v.shape] for v in inputs]
            node.overload = prim.overload(attrs, in_shapes)
        out = node.outputs[0]
        out.name, out.type, out.shape = node.name, ir.TensorType(dtype), ir.Shape(shape)
        self.nodes.append(node)
        return out


def _load(model, primitives):
    """An ir.Model to rewrite (the given one when it is an ir.Model that can be used as is)."""
    import onnx_ir as ir

    from .onnx_io import load_model

    if isinstance(model, ir.Model) and (not primitives or
                                        model.opset_imports.get("", 1) >= _body_opset()):
        return model
    return load_model(model, _body_opset() if primitives else None, infer=False)


def _body_opset():
    from .npu.ops import MIN_BODY_OPSET
    return MIN_BODY_OPSET


def _image_input(graph, name):
    candidates = []
    for v in graph.inputs:
        if v.name in graph.initializers:
            continue
        if name is not None and v.name != name:
            continue
        ok = v.shape is not None and len(v.shape) == 4 and v.dtype is not None and \
            v.dtype.name in _FLOAT_TYPES
        if name is not None and not ok:
            raise ConversionError(f"preprocess: input {name!r} is not a 4-D float image input "
                                  f"(shape {v.shape}, type {v.dtype})")
        if ok:
            candidates.append(v)
    if name is not None and not candidates:
        raise ConversionError(f"preprocess: the model has no input {name!r} (inputs: "
                              f"{', '.join(v.name for v in graph.inputs)})")
    if not candidates:
        raise ConversionError("preprocess: the model has no 4-D float input to take an image")
    if len(candidates) > 1:
        raise ConversionError(f"preprocess: several image-like inputs "
                              f"({', '.join(v.name for v in candidates)}): choose one with "
                              f"--preprocess-input / input")
    return candidates[0]


def _only_consumer(value):
    """The node and input index reading `value`, when exactly one node reads it once."""
    uses = list(value.uses())
    if len(uses) != 1 or value.is_graph_output():
        return None, None
    return uses[0][0], uses[0][1]


def _const_of(value):
    return None if value is None or value.const_value is None else value.const_value.numpy()


def _quantize_consumer(node, index):
    """(q, zero_point, dtype) of a per-tensor QuantizeLinear reading the image, else None."""
    if node is None or index != 0 or node.op_type != "QuantizeLinear" or \
            node.domain not in ("", "ai.onnx") or node.outputs[0].is_graph_output():
        return None
    scale = _const_of(node.inputs[1])
    zp = _const_of(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None \
        else None
    if scale is None or scale.size != 1 or (len(node.inputs) > 2 and node.inputs[2] is not None
                                            and zp is None):
        return None
    if zp is not None and (zp.size != 1 or zp.dtype.name not in ("int8", "uint8")):
        return None
    if node.attributes.get_int("saturate", 1) != 1 or \
            node.attributes.get_int("output_dtype", 0) not in (0, 2, 3):
        return None
    dtype = zp.dtype.name if zp is not None else \
        {2: "uint8", 3: "int8"}.get(node.attributes.get_int("output_dtype", 0), "uint8")
    return float(scale.reshape(())), int(zp.reshape(())) if zp is not None else 0, dtype


def _foldable_conv(node, index, channels):
    """The Conv whose weights can absorb the channel swap, or None."""
    if node is None or index != 0 or node.op_type != "Conv" or \
            node.domain not in ("", "ai.onnx") or node.attributes.get_int("group", 1) != 1:
        return None
    w = _const_of(node.inputs[1])
    if w is None or w.ndim < 3 or w.shape[1] != channels:
        return None
    return node


def fuse_preprocess(model, spec, mode=None, primitives=False):
    """Fuse the preprocessing `spec` describes in front of the model's image input.

    model: path, bytes, ModelProto or ir.Model (an ir.Model is rewritten in place when no
    opset upgrade is needed). spec: a PreprocessSpec or a dict of its fields. mode: "float" |
    "int8" (None: spec.mode). primitives: emit the NPU primitives Scale / ScaleLut /
    SwapChannel (domain ai.paddle_npu, the model raised to their function bodies' opset)
    instead of standard ONNX ops. Returns (ir.Model, info): info says what was fused.
    """
    m = _load(model, primitives)
    info = fuse_into(m, spec, mode, primitives)
    if primitives:   # standalone: the primitives' function bodies (lowering attaches its own)
        from .npu.functions import attach_functions
        attach_functions(m)
        m.ir_version = max(m.ir_version or 0, 10)
    return m, info


def fuse_into(model, spec, mode=None, primitives=False):
    """The fusion of `fuse_preprocess` on an ir.Model, in place; returns the info."""
    spec = as_spec(spec)
    mode = mode or spec.mode
    if mode not in MODES:
        raise ConversionError(f"preprocess: mode must be one of {', '.join(MODES)}, "
                              f"not {mode!r}")
    return _Fusion(model, spec, mode, primitives).run()


def _dims(shape):
    return [d if isinstance(d, int) else str(d) for d in shape]


class _Fusion:
    """One fusion: what the spec means for this model's input, then the nodes, in order."""

    def __init__(self, model, spec, mode, primitives):
        import numpy as np
        import onnx_ir as ir

        self.np, self.ir = np, ir
        self.graph, self.spec, self.mode, self.primitives = model.graph, spec, mode, primitives
        self.opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1))
        self.chain = _Chain(self.graph)
        self.steps, self.removed, self.quantisation = [], [], None
        self.image = image = _image_input(self.graph, spec.input)
        self.n, c, self.h, self.w = self.model_dims = list(image.shape)
        if not isinstance(c, int) or c not in (1, 3):
            raise ConversionError(f"preprocess: input {image.name!r} has {c} channels; an image "
                                  f"input has 1 (gray) or 3 (rgb / bgr)")
        self.c = c
        self.model_pf = spec.model_pixel_format or ("gray" if c == 1 else "rgb")
        self.raw_pf = spec.pixel_format or self.model_pf
        for key, pf in (("model_pixel_format", self.model_pf), ("pixel_format", self.raw_pf)):
            if _CHANNELS[pf] != c:
                raise ConversionError(f"preprocess: {key} {pf} has {_CHANNELS[pf]} channel(s) "
                                      f"but input {image.name!r} has {c}")
        # order[j]: the raw channel model channel j is taken from
        self.order = None if self.raw_pf == self.model_pf else [2, 1, 0]
        a, b = affine(spec, c)          # model channel order
        self.a, self.b = a.copy(), b.copy()        # raw channel order: Scale runs before the swap
        if self.order is not None:
            self.a[self.order], self.b[self.order] = a, b
        self.raw_hw, self.crop = self._crop_window()
        self.float_type = image.dtype

    def _crop_window(self):
        h, w, resize = self.h, self.w, self.spec.resize_dims
        if not (isinstance(h, int) and isinstance(w, int)):    # any size: the raw one, no crop
            return (tuple(resize) if resize else (h, w)), None
        return crop_window(h, w, resize)

    def op(self, op_type, inputs, attrs, dtype, name, primitive=False):
        from .npu.ops import DOMAIN

        return self.chain.op(op_type, inputs, attrs, dtype, self.dims, name,
                             DOMAIN if primitive else "")

    def const(self, array, name):
        return self.chain.const(array, name)

    def run(self):
        ir, spec, c = self.ir, self.spec, self.c
        raw_dims = [self.n, c, *self.raw_hw] if spec.channel_format == "nchw" \
            else [self.n, *self.raw_hw, c]
        self.raw = ir.Value(name=self.image.name, type=ir.TensorType(ir.DataType.UINT8),
                            shape=ir.Shape(raw_dims))
        self.dims = [self.n, c, *self.raw_hw]
        cur = self.layout(self.raw)
        cur = self.center_crop(cur)
        consumer, index = _only_consumer(self.image)
        quant = _quantize_consumer(consumer, index)
        if self.mode == "int8" or quant is not None:
            cur = self.scale_lut(cur, quant)
        else:
            cur = self.scale(self.cast(cur))
        if self.order is not None:
            cur = self.swap(cur, None if quant else _foldable_conv(consumer, index, c))
        if quant is not None:
            self.cancel_quantize(cur, consumer)
        elif self.quantisation is not None:
            cur = self.dequantize(cur)
        else:
            cur = self.cancel_casts(cur, consumer)
        self.rewire(cur)
        return {"input": self.raw.name, "mode": self.mode,
                "raw": {"shape": _dims(raw_dims), "dtype": "uint8",
                        "channel_format": spec.channel_format, "pixel_format": self.raw_pf},
                "model": {"shape": _dims(self.model_dims),
                          "dtype": self.float_type.name.lower(), "pixel_format": self.model_pf},
                "steps": self.steps, "removed": self.removed, "quantisation": self.quantisation,
                "ops": "npu primitives" if self.primitives else "standard onnx",
                "spec": spec.as_dict()}

    # --- the steps, in their order -------------------------------------------------------------
    def layout(self, cur):
        if self.spec.channel_format != "nhwc":
            return cur
        self.steps.append({"op": "Transpose", "detail": "NHWC -> NCHW", "perm": [0, 3, 1, 2]})
        return self.op("Transpose", [cur], {"perm": [0, 3, 1, 2]}, self.ir.DataType.UINT8,
                       "transpose")

    def center_crop(self, cur):
        if self.crop is None:
            return cur
        np, (top, left), h, w = self.np, self.crop, self.h, self.w
        self.dims = [self.n, self.c, h, w]
        starts, ends = [top, left], [top + h, left + w]
        u8 = self.ir.DataType.UINT8
        if self.opset >= 10:
            cur = self.op("Slice", [cur, self.const(np.array(starts, np.int64), "crop.starts"),
                                    self.const(np.array(ends, np.int64), "crop.ends"),
                                    self.const(np.array([2, 3], np.int64), "crop.axes")],
                          {}, u8, "crop")
        else:                      # Slice-1: the window as attributes
            cur = self.op("Slice", [cur], {"starts": starts, "ends": ends, "axes": [2, 3]}, u8,
                          "crop")
        rh, rw = self.raw_hw
        self.steps.append({"op": "Slice", "detail": f"center crop {rh}x{rw} -> {h}x{w} at "
                                                    f"({top}, {left})",
                           "offset": [top, left], "size": [h, w]})
        return cur

    def cast(self, cur):
        t = self.float_type
        self.steps.append({"op": "Cast", "detail": f"uint8 -> {t.name.lower()}",
                           "to": t.name.lower()})
        return self.op("Cast", [cur], {"to": int(t)}, t, "cast")

    def scale(self, cur):
        np = self.np
        if np.all(self.a == 1.0) and not np.any(self.b):
            self.steps.append({"op": "Scale", "skipped": "every scale is 1 and every mean 0"})
            return cur
        npt = self.float_type.numpy()
        a, b = self.a.astype(npt), self.b.astype(npt)
        if self.primitives:
            cur = self.op("Scale", [cur, self.const(a, "scale.a"), self.const(b, "scale.b")],
                          {}, self.float_type, "scale", primitive=True)
        else:                      # Mul and Add, each left out when it does nothing
            shape = (1, self.c, 1, 1)
            if np.any(a != 1):
                cur = self.op("Mul", [cur, self.const(a.reshape(shape), "scale.a")], {},
                              self.float_type, "scale")
            if np.any(b != 0):
                cur = self.op("Add", [cur, self.const(b.reshape(shape), "scale.b")], {},
                              self.float_type, "scale_add")
        fmt = lambda v: "[" + ", ".join(f"{float(x):.6g}" for x in v) + "]"  # noqa: E731
        self.steps.append({"op": "Scale", "detail": f"x * a + b per raw-image channel, "
                                                    f"a = {fmt(a)}, b = {fmt(b)}",
                           "a": [float(v) for v in a], "b": [float(v) for v in b]})
        return cur

    def scale_lut(self, cur, quant):
        np, ir, c = self.np, self.ir, self.c
        table, q, zero, qtype = lut_tables(self.a, self.b, quant)
        qdt = ir.DataType.from_numpy(np.dtype(qtype))
        self.quantisation = {
            "scale": q, "zero_point": zero, "dtype": qtype,
            "source": "the model's QuantizeLinear" if quant else
            ("unsigned: every mean is 0" if qtype == "uint8" else
             "signed, symmetric: a mean is not 0")}
        if qtype == "uint8" and np.array_equal(
                table, np.broadcast_to(np.arange(256, dtype=np.uint8), table.shape)):
            self.steps.append({"op": "ScaleLut", "skipped": "every table is the identity: the "
                                                            "pixel is its quantised value"})
            return cur
        if self.primitives:
            cur = self.op("ScaleLut", [cur, self.const(table, "scale_lut.tables")], {}, qdt,
                          "scale_lut", primitive=True)
        else:                      # table[c * 256 + pixel] of the flattened tables
            i64 = ir.DataType.INT64
            offsets = (np.arange(c, dtype=np.int64) * 256).reshape(1, c, 1, 1)
            idx = self.op("Cast", [cur], {"to": int(i64)}, i64, "scale_lut_index")
            idx = self.op("Add", [idx, self.const(offsets, "scale_lut.offsets")], {}, i64,
                          "scale_lut_entry")
            cur = self.op("Gather", [self.const(table.reshape(-1), "scale_lut.tables"), idx],
                          {"axis": 0}, qdt, "scale_lut")
        self.steps.append({"op": "ScaleLut", "detail": f"{c} x 256 {qtype} tables",
                           "tables": [c, 256], "dtype": qtype})
        return cur

    def swap(self, cur, conv):
        np, order = self.np, self.order
        what = f"{self.raw_pf} -> {self.model_pf}"
        if conv is not None:      # Conv(swap(x), W) == Conv(x, W') with W'[:, order[j]] = W[:, j]
            weight = conv.inputs[1]
            wt = _const_of(weight)
            folded = np.empty_like(wt)
            folded[:, order] = wt
            conv.replace_input_with(1, self.const(folded, f"{conv.name or 'conv'}.swapped_w"))
            _drop_if_unused(self.graph, weight)
            self.steps.append({"op": "SwapChannel", "order": order, "folded_into": conv.name,
                               "detail": f"{what}, folded into the input channels of "
                                         f"Conv {conv.name!r}'s weights"})
            return cur
        dt = cur.type.dtype
        if self.primitives:
            cur = self.op("SwapChannel", [cur], {"order": order}, dt, "swap_channel",
                          primitive=True)
        else:
            cur = self.op("Gather", [cur, self.const(np.array(order, np.int64),
                                                     "swap_channel.order")],
                          {"axis": 1}, dt, "swap_channel")
        self.steps.append({"op": "SwapChannel", "order": order,
                           "detail": f"{what} (the first op is not a Conv of group 1)"})
        return cur

    def dequantize(self, cur):
        np, ir = self.np, self.ir
        q, f32 = self.quantisation["scale"], ir.DataType.FLOAT
        scale = self.const(np.array(q, np.float32), "dequantize.scale")
        if self.opset >= 10 and not self.primitives:
            zero = self.const(np.array(0, np.dtype(self.quantisation["dtype"])),
                              "dequantize.zero_point")
            cur = self.op("DequantizeLinear", [cur, scale, zero], {}, f32, "dequantize")
        else:   # the same product (zero point 0): before opset 10, and for the NumPy reference
            # of a lowered model (onnx.reference has no DequantizeLinear before opset 19)
            cur = self.op("Cast", [cur], {"to": int(f32)}, f32, "dequantize_cast")
            cur = self.op("Mul", [cur, scale], {}, f32, "dequantize")
        self.steps.append({"op": "DequantizeLinear", "detail": f"x {q:.6g} -> float"
                           + ("" if cur.producer().op_type == "DequantizeLinear" else
                              " (as Cast and Mul)"), "scale": q})
        if self.float_type != f32:
            cur = self.op("Cast", [cur], {"to": int(self.float_type)}, self.float_type,
                          "to_model_type")
            self.steps.append({"op": "Cast", "detail": f"float -> "
                                                       f"{self.float_type.name.lower()}"})
        return cur

    # --- cast pairs that cancel -----------------------------------------------------------------
    def cancel_quantize(self, cur, quantize):
        """The model's own QuantizeLinear: the tables used its scale and zero point, so our
        DequantizeLinear and it cancel: neither is there."""
        self.ir.convenience.replace_all_uses_with(quantize.outputs[0], cur)
        params = list(quantize.inputs[1:])
        self.graph.remove(quantize, safe=True)
        for v in params:
            _drop_if_unused(self.graph, v)
        self.removed.append({"ops": ["DequantizeLinear", "QuantizeLinear"],
                             "detail": f"the model's QuantizeLinear {quantize.name!r}: the "
                                       "tables quantise with its scale and zero point"})

    def cancel_casts(self, cur, consumer):
        """Our Cast uint8 -> float straight into the model's Cast to a type holding every
        uint8 value: the model's Cast alone does both (and it goes too when it casts back to
        uint8)."""
        ir = self.ir
        mine = cur.producer()
        if consumer is None or consumer.op_type != "Cast" or \
                consumer.domain not in ("", "ai.onnx") or mine is None or \
                mine.op_type != "Cast" or mine not in self.chain.nodes or \
                ir.DataType(consumer.attributes.get_int("to")).name not in _HOLDS_UINT8:
            return cur
        to = ir.DataType(consumer.attributes.get_int("to"))
        before = mine.inputs[0]
        mine.replace_input_with(0, None)
        self.chain.nodes.remove(mine)
        self.steps = [s for s in self.steps if s["op"] != "Cast"]
        consumer.replace_input_with(0, before)
        ops = ["Cast"]
        if to == ir.DataType.UINT8 and not consumer.outputs[0].is_graph_output():
            ir.convenience.replace_all_uses_with(consumer.outputs[0], before)
            self.graph.remove(consumer, safe=True)
            ops.append("Cast")
        self.removed.append({"ops": ops,
                             "detail": f"our Cast to {self.float_type.name.lower()}"
                                       + (f" and the model's Cast {consumer.name!r} back"
                                          if len(ops) == 2 else
                                          f": the model's Cast {consumer.name!r} to "
                                          f"{to.name.lower()} reads the uint8 image")})
        return before

    def rewire(self, cur):
        """The raw image takes the float input's place and name; the new nodes go first."""
        graph, image = self.graph, self.image
        position = list(graph.inputs).index(image)
        image.name = self.chain.unique(f"{self.raw.name}/preprocessed")
        if image.uses() or image.is_graph_output():
            self.ir.convenience.replace_all_uses_with(image, cur, replace_graph_outputs=True)
        graph.inputs.pop(position)
        graph.inputs.insert(position, self.raw)
        if self.chain.nodes:
            first = next(iter(graph), None)
            if first is None:
                graph.extend(self.chain.nodes)
            else:
                graph.insert_before(first, self.chain.nodes)


def _drop_if_unused(graph, value):
    """Remove an initializer nothing reads any more."""
    if value is not None and value.name in graph.initializers and not value.uses() and \
            not value.is_graph_output():
        del graph.initializers[value.name]


def describe(info):
    """What was fused, as a few lines for the terminal."""
    raw, mdl = info["raw"], info["model"]
    shape = lambda s: "[" + ", ".join(str(d) for d in s) + "]"  # noqa: E731
    lines = [f"fused preprocessing ({info['mode']}, {info['ops']}) into input "
             f"{info['input']!r}: uint8 {shape(raw['shape'])} {raw['channel_format'].upper()} "
             f"{raw['pixel_format'].upper()} -> {mdl['dtype']} {shape(mdl['shape'])} "
             f"{mdl['pixel_format'].upper()}"]
    for s in info["steps"]:
        if "skipped" in s:
            lines.append(f"  {s['op']:<17} not inserted: {s['skipped']}")
        else:
            lines.append(f"  {s['op']:<17} {s.get('detail', '')}")
    for r in info["removed"]:
        lines.append(f"  removed {' + '.join(r['ops'])}: {r['detail']}")
    qz = info.get("quantisation")
    if qz:
        lines.append(f"  quantisation: {qz['dtype']}, scale {qz['scale']:.6g}, zero point "
                     f"{qz['zero_point']} ({qz['source']})")
    return "\n".join(lines)


def fused_reference(model, args, target=None):
    """What a lowered model with fused preprocessing is verified against: the model fused
    with standard ONNX ops (a ModelProto), or the model itself without --fuse-preprocess."""
    spec = spec_from_args(args, target)
    if spec is None:
        return model
    import onnx_ir as ir

    return ir.serde.serialize_model(fuse_preprocess(model, spec)[0])


def save_fused(onnx_bytes, spec, save_file, check=True):
    """`convert --fuse-preprocess`: fuse with standard ONNX ops, check, write, say what."""
    import onnx_ir as ir

    from .api import check_model, save_model

    if onnx_bytes is None:
        raise ConversionError("--fuse-preprocess: the model is over 2 GB (external data); "
                              "convert it first, then fuse with `paddle-npu lower`")
    model, info = fuse_preprocess(onnx_bytes, spec)
    if check:
        check_model(ir.serde.serialize_model(model))
    save_model(model, save_file)
    print(describe(info))
    print(f"wrote {save_file}")
    return info
