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

This module is the spec and its arithmetic (light: the command line's parser reads its
vocabularies); the fusion is a stage-2 pass (paddle_npu/npu/passes/preprocess_fusion.py), the
command-line options are in preprocess_args.py.
"""
import os
from dataclasses import asdict, dataclass

from .errors import ConversionError
from .naming import read_settings
from .npu.chip.target import load_target

PIXEL_FORMATS = ("rgb", "bgr", "gray")
CHANNEL_FORMATS = ("nchw", "nhwc")
MODES = ("float", "int8")
KEYS = ("mean", "std", "scale", "pixel_format", "model_pixel_format", "channel_format",
        "resize_dims", "input", "mode")
CHANNELS = {"rgb": 3, "bgr": 3, "gray": 1}


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


# --- config files and the settings of a command ---------------------------------------------
def read_config(path):
    """The preprocess table of a .json / .toml file (its [preprocess] table if it has one)."""
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


def spec_from_settings(settings=None, config=None, target=None, source="--fuse-preprocess"):
    """The PreprocessSpec of settings from, lowest priority first: the target file's
    [preprocess] table (target: a Target, or a preset name / file as --target takes), a
    config file (`read_config`) and `settings` (a dict of KEYS, e.g. the command's flags).
    source: what errors in the merged settings name."""
    merged = {}
    if target is not None:
        t = load_target(target)
        if t.preprocess:
            table = {str(k).replace("-", "_"): v for k, v in t.preprocess.items()}
            PreprocessSpec.from_dict(table, f"{t.source} [preprocess]")   # errors name the file
            merged = _merge(merged, table)
    if config:
        merged = _merge(merged, {str(k).replace("-", "_"): v
                                 for k, v in read_config(config).items()})
    merged = _merge(merged, dict(settings or {}))
    return PreprocessSpec.from_dict(merged, source)


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
    import numpy as np      # numpy on first use: the command line's parser reads this module
    try:
        from PIL import Image   # optional (paddle_npu[images]), needed here only
    except ImportError:
        raise ConversionError("reading images needs Pillow: pip install pillow (or "
                              "'paddle_npu[images]'), or give an .npz of inputs") from None

    c, h, w = model_shape[1:]
    if not all(isinstance(d, int) and d > 0 for d in (c, h, w)) or c not in (1, 3):
        raise ConversionError(f"preprocess: reading images needs a [N, 1 or 3, H, W] input of "
                              f"fixed size, not {list(model_shape)}")
    model_pf = spec.model_pixel_format or ("gray" if c == 1 else "rgb")
    if CHANNELS[model_pf] != c:
        raise ConversionError(f"preprocess: model_pixel_format {model_pf} has "
                              f"{CHANNELS[model_pf]} channel(s) but the input has {c}")
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
    import numpy as np      # on first use (see read_images)

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
    import numpy as np      # on first use (see read_images)

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
