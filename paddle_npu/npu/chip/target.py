"""Targets: what the chip has (array size, precision) and which ops its NPU and CPU run.

A target file is JSON or TOML with the fields of `Target` (nested tables allowed):

    name = "my-npu"
    description = "256 x 256 RRAM arrays, MCU for the rest"
    [array]
    rows = 256
    cols = 256
    count = 64                    # arrays on the chip (0: as many as the model needs)
    [memory]
    activation_bytes = 1048576    # on-chip memory for activations (0: not declared)
    [precision]
    weight_bits = 8
    activation_bits = 8
    cell_bits = 2                 # bits per cell (0: a weight in one cell)
    signed_weights = "differential"            # or "offset" (ops/readout.py)
    dac_bits = 1                  # input bits per cycle (0: the whole input at once)
    adc_bits = 6                  # ADC bits (0: an exact read-out)
    columns_per_adc = 8           # columns sharing one ADC
    [noise]                       # quant-report --noise-draws (off: 0)
    programming_error = 0.02      # a cell's conductance error, of its whole range (sigma)
    read_noise = 0.01             # each read's, of a cell's range, per unit of input (sigma)
    [npu]
    primitives = ["Im2Col", "VMM", "AddInTile", "DimTransform", "Lut"]
    onnx_ops = ["Relu", "Add", "MaxPool"]      # plain ONNX ops its vector unit runs
    scatter_gather = true                      # a unit writing / reading at computed places
    arrays_per_vector_unit = 16                # a vector unit per 16 arrays (0: one unit)
    [cpu]
    onnx_ops = ["*"]                           # what the MCU runs ("*": anything)
    [restruct]                                 # NNIE-style restructuring (restruct.py)
    passes = ["bn_collapse", "fc_to_conv"]     # run by default
    fc_followers = ["Softmax"]                 # an FC feeding anything else becomes a 1x1 Conv
    broadcast = false                          # no broadcast / Tile: Concat repeats instead
    max_npu_segments = 8                       # 0: no limit
    [cost]                                     # what placement weighs (partition.py, cost.py)
    array_vmm_ns = 100                         # one vector through one array tile
    array_write_ns_per_cell = 1                # writing an array at run time (RuntimeVMM)
    array_program_ns_per_row = 1000            # programming a row of weights (groups)
    adc_ns = 1                                 # one ADC conversion
    vector_elements_per_ns = 16                # vector unit, lookup table, moves
    cpu_macs_per_ns = 4                        # the CPU's multiply-accumulates
    cpu_elements_per_ns = 2                    # the CPU's other element work
    link_bytes_per_ns = 4                      # chip <-> CPU bandwidth (GB/s)
    transfer_latency_ns = 20000                # each hand-over between chip and CPU
    [preprocess]                               # used with --fuse-preprocess (preprocess.py)
    mean = [123.675, 116.28, 103.53]
    std = [58.395, 57.12, 57.375]
    pixel_format = "bgr"

`paddle-npu targets` lists the built-in presets; `--target` takes a preset name or a file.
"""
import os
from dataclasses import dataclass, field

from ...errors import ConversionError
from ...naming import read_settings

# How a signed weight sits in cells of unsigned conductance (ops/readout.py)
SIGNED_WEIGHTS = ("differential", "offset")

ALL_PRIMITIVES = ("Im2Col", "VMM", "AddInTile", "DimTransform", "Scale", "ScaleLut",
                  "SwapChannel")
# The restructuring passes a target may ask for (restruct.py), in the order they run.
RESTRUCT_PASSES = ("bn_collapse", "merge_linear", "l2norm", "fc_to_conv")

# Elementwise, activation, pooling and joining ops a vector unit beside the arrays runs.
VECTOR_UNIT_OPS = (
    "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Max", "Min", "Sum",
    "Relu", "LeakyRelu", "PRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu",
    "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
    "Concat", "Identity", "Dropout",
)

# --- what a 2025-era edge NPU runs beside its arrays (the presets but `nnie`) ---------------
# A lookup-table unit for unary activations (primitive Lut, ops/lut.py), and a vector unit
# that also does the moves, normalisations, reductions and resizing transformer, detection
# and segmentation models split into CPU islands otherwise. Arrays that may be written at
# run time (RuntimeVMM: MatMul of two activations, attention) only where a target lists it.
EDGE_PRIMITIVES = ALL_PRIMITIVES + (
    "Lut",                                          # the lookup-table unit
    "Im2Col3D", "Col2Im",                           # Conv3D, ConvTranspose
    "Pool", "AxisResample", "InstanceNorm",         # pooling, resizing, instance / group norm
    "DepthwiseConv",                                # a channel per group: Pool's walk, weighted
    "TableRead", "Crop", "Join",                    # embedding tables; Slice / Split / Concat
    "Reduce", "LayerNorm",                          # reductions, Softmax's sums, LayerNorm
)
RUNTIME_WRITTEN_ARRAYS = ("RuntimeVMM",)

# Every primitive of the operator set (ops/: one module each; a test keeps the two the same):
# what a target file may list, the vocabulary of a target spelled here so that loading one
# needs nothing but this file.
OPERATOR_SET = EDGE_PRIMITIVES + RUNTIME_WRITTEN_ARRAYS + (
    "Quantize", "Dequantize", "QVMM", "Requantize", "QLut", "QRuntimeVMM",   # integer plans
    "QDepthwiseConv")
EDGE_VECTOR_UNIT_OPS = VECTOR_UNIT_OPS + (
    "Pow", "Softmax", "LogSoftmax", "LayerNormalization", "InstanceNormalization",
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2",
    "Split", "Slice", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Pad",
    "Resize", "Upsample",
    # masks and selections (attention masks, box decode): compare, logic, select, cast, broadcast
    "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Not", "And", "Or", "Where",
    "Cast", "Expand",
    # sampling at computed places (TPS rectification, deformable attention): gathers of 4
    # neighbours weighted, which 2025-era edge NPUs run beside the arrays
    "GridSample",
)


# What a scatter / gather unit runs: values written or read at indices computed at run time
# (max-unpooling at a MaxPool's indices, gathers of detection heads). A target declares one
# with `[npu] scatter_gather = true`.
SCATTER_GATHER_OPS = ("ScatterElements", "ScatterND", "GatherElements", "GatherND")


@dataclass(frozen=True)
class Cost:
    """The few numbers placement weighs (partition.py), for a 2025-era edge NPU by default:
    an analog array takes ~100 ns per vector, a vector unit does 16 elements per ns, a
    quad-core application CPU ~4 GMAC/s, and every hand-over between chip and CPU costs a
    driver round trip (~20 us) plus the bytes over a 4 GB/s link."""
    array_vmm_ns: float = 100.0
    array_write_ns_per_cell: float = 1.0
    # programming the non-volatile cells of one array row with write-verify, between groups
    # of layers of a model larger than the chip (assumed: a few program-verify pulses of
    # ~100 ns per row)
    array_program_ns_per_row: float = 1000.0
    adc_ns: float = 1.0             # one conversion of an ADC (with adc_bits)
    vector_elements_per_ns: float = 16.0
    cpu_macs_per_ns: float = 4.0
    cpu_elements_per_ns: float = 2.0
    link_bytes_per_ns: float = 4.0
    transfer_latency_ns: float = 20000.0

    def as_dict(self):
        return dict(vars(self))


@dataclass(frozen=True)
class Target:
    name: str
    rows: int = 256
    cols: int = 256
    array_count: int = 0                  # arrays on the chip; 0 = as many as needed
    activation_bytes: int = 0             # on-chip activation memory; 0 = not declared
    weight_bits: int = 8
    activation_bits: int = 8
    # the analog read-out of an integer plan (ops/readout.py); 0: ideal
    cell_bits: int = 0
    signed_weights: str = "differential"
    dac_bits: int = 0
    adc_bits: int = 0
    columns_per_adc: int = 1
    # the cells' non-idealities, drawn by quant-report --noise-draws (0: none)
    programming_error: float = 0.0
    read_noise: float = 0.0
    primitives: tuple = EDGE_PRIMITIVES
    npu_ops: tuple = EDGE_VECTOR_UNIT_OPS
    cpu_ops: tuple = ("*",)
    scatter_gather: bool = False          # SCATTER_GATHER_OPS on the NPU
    # a vector unit for every this many arrays (a core's, as in PUMA or PIMCOMP's cores of
    # crossbars beside a vector unit): a chip of more arrays has more vector units; 0: one
    # vector unit for the whole chip
    arrays_per_vector_unit: int = 0
    description: str = ""
    source: str = "built-in"
    preprocess: dict = field(default=None, compare=False)   # the file's [preprocess] table
    # NNIE-style restructuring (restruct.py): the passes run by default, the ops an FC may feed
    # ("*": any; else the FC becomes a 1x1 Conv), whether elementwise ops broadcast, and how
    # many NPU segments the chip may run (0: no limit)
    restruct: tuple = ("bn_collapse",)
    fc_followers: tuple = ("*",)
    broadcast: bool = True
    max_npu_segments: int = 0
    cost: Cost = Cost()

    def readout_settings(self):
        """How an integer plan's arrays read out: ops.readout.Readout's fields (all 0:
        an exact read-out)."""
        return {"cell_bits": self.cell_bits, "dac_bits": self.dac_bits,
                "adc_bits": self.adc_bits, "weight_scheme": self.signed_weights}

    def vector_units(self, arrays):
        """The vector units of a chip of `arrays` arrays."""
        if not self.arrays_per_vector_unit:
            return 1
        return max(1, -(-arrays // self.arrays_per_vector_unit))

    def runs_primitive(self, op_type):
        return op_type in self.primitives

    def npu_runs(self, op_type, domain=""):
        """Whether the NPU runs a node of this type (a primitive, or a listed plain op)."""
        if domain == "ai.paddle_npu":
            return op_type in self.primitives
        return domain in ("", "ai.onnx") and (op_type in self.npu_ops or (
            self.scatter_gather and op_type in SCATTER_GATHER_OPS))

    def cpu_runs(self, op_type, domain=""):
        if domain == "ai.paddle_npu":
            return True          # the MCU can always run the NumPy-equivalent of a primitive
        return "*" in self.cpu_ops or op_type in self.cpu_ops

    def as_dict(self):
        return {"name": self.name, "description": self.description, "source": self.source,
                "array": {"rows": self.rows, "cols": self.cols, "count": self.array_count},
                "memory": {"activation_bytes": self.activation_bytes},
                "precision": {"weight_bits": self.weight_bits,
                              "activation_bits": self.activation_bits,
                              "cell_bits": self.cell_bits, "signed_weights": self.signed_weights,
                              "dac_bits": self.dac_bits, "adc_bits": self.adc_bits,
                              "columns_per_adc": self.columns_per_adc},
                "noise": {"programming_error": self.programming_error,
                          "read_noise": self.read_noise},
                "npu": {"primitives": list(self.primitives), "onnx_ops": list(self.npu_ops),
                        "scatter_gather": self.scatter_gather,
                        "arrays_per_vector_unit": self.arrays_per_vector_unit},
                "cpu": {"onnx_ops": list(self.cpu_ops)},
                "restruct": {"passes": list(self.restruct), "fc_followers": list(self.fc_followers),
                             "broadcast": self.broadcast,
                             "max_npu_segments": self.max_npu_segments},
                "cost": self.cost.as_dict(),
                **({"preprocess": dict(self.preprocess)} if self.preprocess else {})}


PRESETS = {
    "npu256": Target(
        "npu256", array_count=1024, primitives=EDGE_PRIMITIVES + RUNTIME_WRITTEN_ARRAYS,
        description="default: 1024 arrays of 256 x 256 (also written at run time for "
                    "attention), a lookup table for activations and a vector unit for "
                    "elementwise / pooling / moves / normalisation / resizing; the rest on "
                    "the CPU"),
    "npu64": Target(
        "npu64", rows=64, cols=64, array_count=4096,
        primitives=EDGE_PRIMITIVES + RUNTIME_WRITTEN_ARRAYS,
        description="4096 small 64 x 64 arrays (exercises row and column tiling)"),
    "npu256-vmm-only": Target(
        "npu256-vmm-only", array_count=1024, primitives=("VMM", "AddInTile"), npu_ops=(),
        description="a cautious chip: 1024 arrays and Add In Tile only; Im2Col, "
                    "DimTransform and every plain op run on the MCU"),
    "nnie": Target(
        "nnie", array_count=512, primitives=ALL_PRIMITIVES,
        npu_ops=VECTOR_UNIT_OPS + ("Sqrt", "Softmax"),
        restruct=("bn_collapse", "merge_linear", "l2norm", "fc_to_conv"),
        fc_followers=("Softmax",), broadcast=False, max_npu_segments=8,
        cost=Cost(array_vmm_ns=200.0, vector_elements_per_ns=8.0, cpu_macs_per_ns=2.0,
                  cpu_elements_per_ns=1.0, link_bytes_per_ns=2.0, transfer_latency_ns=50000.0),
        description="HiSilicon NNIE-like: 512 arrays; an FC may only feed softmax, no "
                    "broadcast or Tile, at most 8 NPU segments; restruct passes on"),
    # The default chip built of cores, as the crossbar compilers' architectures are (PUMA:
    # cores of two crossbars and a vector functional unit; PIMCOMP: cores of crossbars, a
    # vector unit and local memory): a vector unit for every 16 arrays, so a chip of more
    # arrays has more vector units. A design point; its other numbers are the default's.
    "npu256-cores": Target(
        "npu256-cores", array_count=1024, arrays_per_vector_unit=16,
        primitives=EDGE_PRIMITIVES + RUNTIME_WRITTEN_ARRAYS,
        description="npu256 built of cores: a vector unit for every 16 arrays (64 for "
                    "the 1024 arrays)"),
    # IBM's 64-core phase-change-memory chip (Le Gallo et al., "A 64-core mixed-signal
    # in-memory compute chip based on phase-change memory for deep neural network
    # inference", Nature Electronics 6, 680-693, 2023): 64 cores of one 256 x 256 crossbar
    # each; 63.1 TOPS for 8-bit matrix-vector products in the one-phase read mode, so one
    # product of all 64 cores (64 x 2 x 256 x 256 operations) takes 133 ns. Its on-chip
    # activation memory, programming time, vector and link figures are not given there:
    # the default target's.
    "hermes64": Target(
        "hermes64", rows=256, cols=256, array_count=64,
        primitives=EDGE_PRIMITIVES + RUNTIME_WRITTEN_ARRAYS,
        cost=Cost(array_vmm_ns=133.0),
        description="IBM's 64-core PCM chip: 64 arrays of 256 x 256, 133 ns a product"),
    # The default chip read out as analog arrays are: a design point, not a published chip:
    # cells of 2 bits and inputs fed one bit per cycle as in ISAAC (below), ADCs of 6 bits
    # shared by 8 columns; its other numbers are the default target's.
    "npu256-analog": Target(
        "npu256-analog", array_count=1024, cell_bits=2, dac_bits=1, adc_bits=6,
        columns_per_adc=8, primitives=EDGE_PRIMITIVES + RUNTIME_WRITTEN_ARRAYS,
        description="npu256 read out as analog arrays: 2-bit cells, 1-bit inputs, 6-bit "
                    "ADCs shared by 8 columns (integer plans)"),
    # One tile of ISAAC (Shafiee et al., "ISAAC: a convolutional neural network accelerator
    # with in-situ analog arithmetic in crossbars", ISCA 2016): 12 in-situ multiply-
    # accumulate units of 8 crossbars each (96 arrays) of 128 x 128 cells of 2 bits;
    # inputs enter one bit per 100 ns cycle; one 8-bit ADC at 1.28 GS/s (0.78 ns a
    # conversion) per crossbar reads its 128 columns while the next cycle's read goes on;
    # weights are stored unsigned, their bias taken off digitally (our "offset"); a 64 KB
    # eDRAM buffer per tile holds the activations. Vector, programming and link figures:
    # the default target's.
    "isaac-tile": Target(
        "isaac-tile", rows=128, cols=128, array_count=96, activation_bytes=64 * 1024,
        cell_bits=2, dac_bits=1, adc_bits=8, columns_per_adc=128, signed_weights="offset",
        primitives=EDGE_PRIMITIVES + RUNTIME_WRITTEN_ARRAYS,
        cost=Cost(array_vmm_ns=100.0, adc_ns=0.78),
        description="one ISAAC tile: 96 arrays of 128 x 128 2-bit cells, 1-bit inputs, an "
                    "8-bit ADC per array, 64 KiB of activation memory (integer plans "
                    "read out so; a float plan is an ideal array)"),
}
DEFAULT = "npu256"
_ALIASES = {"default": DEFAULT}


def list_targets():
    return [PRESETS[name] for name in sorted(PRESETS)]


def _positive(data, key, default):
    value = data.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0 or \
            (value == 0 and key in ("rows", "cols")):
        raise ConversionError(f"target: {key} must be a positive integer, not {value!r}")
    return value


def _names(data, key, default, path):
    value = data.get(key, default)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConversionError(f"{path}: {key} must be a list of op names")
    return tuple(value)


# The keys of a target file's tables (besides [preprocess], checked by PreprocessSpec when
# the fused preprocessing reads it), and
# the widths the precision table may take.
_TABLE_KEYS = {"array": {"rows", "cols", "count"}, "memory": {"activation_bytes"},
               "precision": {"weight_bits", "activation_bits", "cell_bits", "signed_weights",
                             "dac_bits", "adc_bits", "columns_per_adc"},
               "noise": {"programming_error", "read_noise"},
               "npu": {"primitives", "onnx_ops", "scatter_gather", "arrays_per_vector_unit"},
               "cpu": {"onnx_ops"},
               "restruct": {"passes", "fc_followers", "broadcast", "max_npu_segments"},
               "cost": set(Cost.__dataclass_fields__)}
_BITS = {"weight_bits": (1, 2, 4, 8, 16), "activation_bits": (4, 8, 16),
         "cell_bits": tuple(range(0, 9)), "dac_bits": tuple(range(0, 17)),
         "adc_bits": tuple(range(0, 17))}


def target_from_dict(data, source="<dict>"):
    """A Target from the (possibly nested) dict a JSON / TOML target file holds."""
    if not isinstance(data, dict):
        raise ConversionError(f"{source}: a target is a table / object")
    base = PRESETS.get(data.get("base", DEFAULT))
    if base is None:
        raise ConversionError(f"{source}: unknown base preset {data['base']!r} "
                              f"(known: {', '.join(sorted(PRESETS))})")
    flat = {}
    known = {"name", "description", "base", "array", "memory", "precision", "noise", "npu",
             "cpu", "preprocess", "restruct", "cost"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConversionError(f"{source}: unknown target fields {unknown} (known: {sorted(known)})")
    for table, keys in _TABLE_KEYS.items():
        if not isinstance(data.get(table, {}), dict):
            raise ConversionError(f"{source}: {table} is a table / object")
        unknown = sorted(set(data.get(table, {})) - keys)
        if unknown:
            raise ConversionError(f"{source}: unknown keys {unknown} in [{table}] "
                                  f"(known: {sorted(keys)})")
    flat.update(data.get("array", {}))
    flat.update(data.get("precision", {}))
    for key, allowed in _BITS.items():
        if key in flat and flat[key] not in allowed:
            raise ConversionError(f"{source}: {key} = {flat[key]!r} is not a width arrays "
                                  f"are built with (one of {', '.join(map(str, allowed))})")
    noise = {}
    for key, value in data.get("noise", {}).items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise ConversionError(f"{source}: noise.{key} must be a number >= 0, "
                                  f"not {value!r}")
        noise[key] = float(value)
    scheme = flat.get("signed_weights", base.signed_weights)
    if scheme not in SIGNED_WEIGHTS:
        raise ConversionError(f"{source}: signed_weights = {scheme!r} (known: "
                              f"{', '.join(SIGNED_WEIGHTS)})")
    npu, cpu = data.get("npu", {}), data.get("cpu", {})
    primitives = _names(npu, "primitives", base.primitives, source)
    bad = sorted(set(primitives) - set(OPERATOR_SET))
    if bad:
        raise ConversionError(f"{source}: unknown NPU primitives {bad} "
                              f"(known: {sorted(OPERATOR_SET)})")
    if "VMM" not in primitives:
        raise ConversionError(f"{source}: an NPU without VMM has nothing to lower to")
    scatter_gather = npu.get("scatter_gather", base.scatter_gather)
    if not isinstance(scatter_gather, bool):
        raise ConversionError(f"{source}: npu.scatter_gather must be true or false")
    preprocess = data.get("preprocess")     # its settings are checked where a spec is made
    if preprocess is not None and not isinstance(preprocess, dict):
        raise ConversionError(f"{source}: preprocess is a table / object")
    rs = data.get("restruct", {})
    if not isinstance(rs, dict):
        raise ConversionError(f"{source}: restruct is a table / object")
    passes = _names(rs, "passes", base.restruct, source)
    bad = sorted(set(passes) - set(RESTRUCT_PASSES))
    if bad:
        raise ConversionError(f"{source}: unknown restruct passes {bad} "
                              f"(known: {list(RESTRUCT_PASSES)})")
    broadcast = rs.get("broadcast", base.broadcast)
    if not isinstance(broadcast, bool):
        raise ConversionError(f"{source}: restruct.broadcast must be true or false")
    restruct_fields = dict(restruct=passes, broadcast=broadcast,
                           fc_followers=_names(rs, "fc_followers", base.fc_followers, source),
                           max_npu_segments=_positive(rs, "max_npu_segments",
                                                      base.max_npu_segments))
    costs = dict(base.cost.as_dict())
    for key, value in data.get("cost", {}).items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ConversionError(f"{source}: cost.{key} must be a positive number, "
                                  f"not {value!r}")
        costs[key] = float(value)
    return Target(
        **restruct_fields, cost=Cost(**costs),
        name=str(data.get("name") or os.path.splitext(os.path.basename(source))[0]),
        rows=_positive(flat, "rows", base.rows), cols=_positive(flat, "cols", base.cols),
        array_count=_positive(flat, "count", base.array_count),
        activation_bytes=_positive(data.get("memory", {}), "activation_bytes",
                                   base.activation_bytes),
        weight_bits=_positive(flat, "weight_bits", base.weight_bits),
        activation_bits=_positive(flat, "activation_bits", base.activation_bits),
        cell_bits=_positive(flat, "cell_bits", base.cell_bits),
        dac_bits=_positive(flat, "dac_bits", base.dac_bits),
        adc_bits=_positive(flat, "adc_bits", base.adc_bits), signed_weights=scheme,
        programming_error=noise.get("programming_error", base.programming_error),
        read_noise=noise.get("read_noise", base.read_noise),
        columns_per_adc=max(1, _positive(flat, "columns_per_adc", base.columns_per_adc)),
        primitives=primitives, npu_ops=_names(npu, "onnx_ops", base.npu_ops, source),
        cpu_ops=_names(cpu, "onnx_ops", base.cpu_ops, source), scatter_gather=scatter_gather,
        arrays_per_vector_unit=_positive(npu, "arrays_per_vector_unit",
                                         base.arrays_per_vector_unit),
        description=str(data.get("description", "")), source=source, preprocess=preprocess)


def load_target(spec=None):
    """A Target from a preset name (None: the default) or a .json / .toml file."""
    if isinstance(spec, Target):
        return spec
    spec = _ALIASES.get(spec or DEFAULT, spec or DEFAULT)
    if spec in PRESETS:
        return PRESETS[spec]
    if not os.path.exists(spec):
        raise ConversionError(f"unknown target {spec!r}: not a preset "
                              f"({', '.join(sorted(PRESETS))}) nor a file")
    return target_from_dict(read_settings(spec, "target file"), spec)
