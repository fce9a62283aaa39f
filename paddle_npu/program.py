"""The format-neutral program every reader produces and every mapper consumes.

Legacy `.pdmodel` files and PIR `.json` files both become a `Program`: blocks
of `Op`s whose inputs and outputs are named slots holding variable names (the
legacy slot names, e.g. conv2d's `Input`/`Filter`/`Output`, for both formats),
attributes as plain Python values (sub-blocks as `Block` objects), `Var`s with
dtype and shape, and the parameters as NumPy arrays.
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np


@dataclass
class Var:
    name: str
    dtype: Optional[str] = None            # numpy-style name: 'float32', 'bfloat16', 'int64', ...
    shape: Optional[tuple] = None          # -1 for unknown dims; None when not recorded
    persistable: bool = False
    kind: str = "dense_tensor"             # 'dense_tensor', 'tensor_array', 'feed_minibatch', ...
    lod_level: int = 0
    stop_gradient: bool = False


@dataclass(eq=False)
class Op:
    type: str
    inputs: Dict[str, List[str]] = field(default_factory=dict)
    outputs: Dict[str, List[str]] = field(default_factory=dict)
    attrs: Dict[str, Any] = field(default_factory=dict)
    block: Optional["Block"] = field(default=None, repr=False)

    def attr(self, name, default=None):
        return self.attrs.get(name, default)

    def input(self, slot):
        """The variable names in an input slot ([] when absent)."""
        return self.inputs.get(slot, [])

    def output(self, slot):
        return self.outputs.get(slot, [])

    def __repr__(self):
        ins = ", ".join(f"{k}={v}" for k, v in self.inputs.items())
        outs = ", ".join(f"{k}={v}" for k, v in self.outputs.items())
        return f"Op({self.type}: {ins} -> {outs})"


@dataclass(eq=False)
class Block:
    idx: int
    parent_idx: int = -1
    vars: Dict[str, Var] = field(default_factory=dict)
    ops: List[Op] = field(default_factory=list)
    args: List[str] = field(default_factory=list)      # PIR block arguments (loop-carried values)
    program: Optional["Program"] = field(default=None, repr=False)

    @property
    def parent(self):
        return self.program.blocks[self.parent_idx] if self.parent_idx >= 0 else None

    def find_var(self, name):
        """A var by name, looked up through the enclosing blocks as Paddle does."""
        block = self
        while block is not None:
            if name in block.vars:
                return block.vars[name]
            block = block.parent
        return None


@dataclass(eq=False)
class Program:
    format: str                                        # 'legacy' or 'pir'
    blocks: List[Block]
    params: Dict[str, np.ndarray] = field(default_factory=dict)
    inputs: List[str] = field(default_factory=list)    # feed names, in feed order
    outputs: List[str] = field(default_factory=list)   # fetch names, in fetch order
    version: Optional[int] = None
    op_version_map: Dict[str, int] = field(default_factory=dict)
    model_path: Optional[str] = None
    params_path: Optional[str] = None

    @property
    def global_block(self):
        return self.blocks[0]

    def all_ops(self):
        """Every op of every block, sub-blocks included."""
        for block in self.blocks:
            yield from block.ops

    def var(self, name):
        return self.global_block.find_var(name)

    def op_histogram(self):
        hist = {}
        for op in self.all_ops():
            hist[op.type] = hist.get(op.type, 0) + 1
        return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))
