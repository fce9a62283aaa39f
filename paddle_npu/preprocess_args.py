"""The command line's preprocessing options: the flags, and their values as keywords for
paddle_npu.preprocess.spec_from_settings (the library never sees an argparse namespace)."""
from .errors import ConversionError
from .preprocess import CHANNEL_FORMATS, MODES, PIXEL_FORMATS, spec_from_settings

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


def settings_given(args):
    """The preprocessing options a command line gives (flag names)."""
    given = sorted(f for f, key, _, _ in _FLAGS if getattr(args, f"pre_{key}", None) is not None)
    return given + (["--preprocess-config"] if getattr(args, "preprocess_config", None) else [])


def spec_from_args(args, target=None, enabled=None, needs="--fuse-preprocess"):
    """The PreprocessSpec a command line asks for, or None without --fuse-preprocess
    (`enabled`, when given, says instead whether preprocessing applies; `needs` is what the
    error names when options are given without it). Settings: the target file's
    [preprocess] table, then --preprocess-config, then the flags (spec_from_settings)."""
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
    return spec_from_settings(flags, config, target)
