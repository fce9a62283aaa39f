"""Op cases for tensor manipulation, indexing and creation (paddle_npu/mappers/tensor.py,
creation.py). Reductions and logic live in opcases_reduce.py / opcases_logic.py."""
from opcase_harness import CASES, case
from opcase_layers import fcase, fn_layer, ints_in

X3 = {"x": ((None, 4, 6), "float32")}
X4 = {"x": ((None, 3, 4, 5), "float32")}


# --- reshape, transpose, flatten, squeeze, unsqueeze ----------------------------------------
fcase("reshape_zero_neg1", X3, ["reshape2"], lambda p, x: p.reshape(x, [0, -1, 3]))
fcase("reshape_flat", X3, ["reshape2"], lambda p, x: x.reshape([-1, 24]))
fcase("reshape_to_1d", X3, ["reshape2"], lambda p, x: p.reshape(x, [-1]))
fcase("reshape_shape_tensor_list", X3, ["reshape2"],
      lambda p, x: p.reshape(x, [p.shape(x)[0], 3, 8]))
fcase("reshape_shape_tensor", X3, ["reshape2"],
      lambda p, x: p.reshape(x, p.concat([p.shape(x)[:1], p.to_tensor([8, 3], "int64")])),
      formats=("pir",))
fcase("transpose", X3, ["transpose2"], lambda p, x: p.transpose(x, [2, 0, 1]))
fcase("transpose_4d", X4, ["transpose2"], lambda p, x: p.transpose(x, [0, 2, 3, 1]))
fcase("flatten_1_last", X4, ["flatten_contiguous_range"], lambda p, x: p.flatten(x, 1, -1))
fcase("flatten_all", X4, ["flatten_contiguous_range"], lambda p, x: p.flatten(x))
fcase("flatten_middle", X4, ["flatten_contiguous_range"], lambda p, x: p.flatten(x, 1, 2))
fcase("flatten_2_last", X4, ["flatten_contiguous_range"], lambda p, x: p.flatten(x, 2, 3))
fcase("flatten_0_1", X4, ["flatten_contiguous_range"], lambda p, x: p.flatten(x, 0, 1))
fcase("flatten_dyn_tail", {"x": ((2, 3, None, 5), "float32")}, ["flatten_contiguous_range"],
      lambda p, x: p.flatten(x, 0, 1), batch=4)
case("flatten2", X4, ["flatten2"], formats=("legacy",),
     raw=("flatten2", {"X": ["x"]}, {"Out": 1, "XShape": 1}, {"axis": 2}))(None)
# The pre-2.0 reshape / transpose (no XShape output) still appear in old exports.
case("reshape_v1", X3, ["reshape"], formats=("legacy",),
     raw=("reshape", {"X": ["x"]}, {"Out": 1}, {"shape": [0, 3, -1]}))(None)
case("transpose_v1", X3, ["transpose"], formats=("legacy",),
     raw=("transpose", {"X": ["x"]}, {"Out": 1}, {"axis": [1, 0, 2]}))(None)

S1 = {"x": ((None, 1, 4, 1), "float32")}
fcase("squeeze_axes", S1, ["squeeze2"], lambda p, x: p.squeeze(x, axis=[1, 3]))
fcase("squeeze_neg", S1, ["squeeze2"], lambda p, x: p.squeeze(x, axis=-1))
fcase("squeeze_all", {"x": ((3, 1, 4, 1), "float32")}, ["squeeze2"], lambda p, x: p.squeeze(x))
fcase("squeeze_not_one", S1, ["squeeze2"], lambda p, x: p.squeeze(x, axis=[2, 3]))
fcase("unsqueeze_1", X3, ["unsqueeze2"], lambda p, x: p.unsqueeze(x, 1))
fcase("unsqueeze_neg", X3, ["unsqueeze2"], lambda p, x: p.unsqueeze(x, -1))
fcase("unsqueeze_multi", X3, ["unsqueeze2"], lambda p, x: p.unsqueeze(x, [0, 3]))
fcase("unsqueeze_order", X3, ["unsqueeze2"], lambda p, x: p.unsqueeze(x, [3, 0, -2]))
fcase("getitem_none", X3, ["unsqueeze2"], lambda p, x: x[:, None, :, None])

# --- shape, size ----------------------------------------------------------------------
fcase("shape", X3, ["shape"], lambda p, x: p.shape(x), formats=("legacy",))
fcase("shape64", X3, ["shape64"], lambda p, x: p.shape(x), formats=("pir",))
fcase("shape_in_math", X3, ["shape"],
      lambda p, x: x * p.shape(x)[1].astype("float32"), formats=("legacy",))
fcase("numel", X3, ["size"], lambda p, x: p.numel(x))

# --- slice, strided_slice ----------------------------------------------------------------
fcase("slice_basic", X3, ["slice"], lambda p, x: x[:, 1:3])
fcase("slice_neg", X3, ["slice"], lambda p, x: x[:, -3:, :-1])
fcase("slice_decrease", X3, ["slice"], lambda p, x: x[:, 1])
fcase("slice_decrease_two", X3, ["slice"], lambda p, x: x[:, 1, 2:5])
fcase("slice_to_scalar", {"x": ((4, 6), "float32")}, ["slice"], lambda p, x: x[1, 2] * x)
fcase("slice_api_big_end", X3, ["slice"],
      lambda p, x: p.slice(x, axes=[1, 2], starts=[1, 2], ends=[100000, 2 ** 31 - 1]))
fcase("slice_tensor_end", X3, ["slice"], lambda p, x: x[:, :, : p.shape(x)[1]])
fcase("slice_tensor_start", X3, ["slice"],
      lambda p, x: x[:, p.shape(x)[1] - 3:])
fcase("strided_step2", X3, ["strided_slice"], lambda p, x: x[:, ::2])
fcase("strided_reverse", X3, ["strided_slice"], lambda p, x: x[:, ::-1])
fcase("strided_neg_step", X3, ["strided_slice"], lambda p, x: x[:, 3:0:-2, 1::3])
fcase("strided_api", X3, ["strided_slice"],
      lambda p, x: p.strided_slice(x, axes=[1, 2], starts=[0, 5], ends=[4, -7], strides=[2, -2]))
fcase("strided_decrease", X3, ["strided_slice"], lambda p, x: x[:, 1, ::2])

# --- concat, stack, split, unbind, unstack ---------------------------------------------------
THREE = {"x": ((None, 3, 4), "float32"), "y": ((None, 2, 4), "float32"),
         "z": ((None, 1, 4), "float32")}
fcase("concat_three", THREE, ["concat"], lambda p, x, y, z: p.concat([x, y, z], axis=1))
fcase("concat_neg_axis", {"x": ((None, 3, 4), "float32"), "y": ((None, 3, 2), "float32")},
      ["concat"], lambda p, x, y: p.concat([x, y], axis=-1))
fcase("concat_axis0", {"x": ((None, 3), "float32"), "y": ((2, 3), "float32")}, ["concat"],
      lambda p, x, y: p.concat([x, y], axis=0))
TWO = {"x": ((None, 3, 4), "float32"), "y": ((None, 3, 4), "float32")}
fcase("stack_axis1", TWO, ["stack"], lambda p, x, y: p.stack([x, y], axis=1))
fcase("stack_neg", TWO, ["stack"], lambda p, x, y: p.stack([x, y, x], axis=-1))
fcase("split_sections", {"x": ((None, 7, 4), "float32")}, ["split"],
      lambda p, x: p.split(x, [2, -1, 1], axis=1))
fcase("split_num", X3, ["split"], lambda p, x: p.split(x, 3, axis=-1))
fcase("split_num_dynamic", {"x": ((None, 4), "float32")}, ["split"],
      lambda p, x: p.split(x, 2, axis=0), opsets=(11, 17, 18), batch=4)
fcase("split_sections_dynamic", {"x": ((None, 4), "float32")}, ["split"],
      lambda p, x: p.split(x, [1, -1, 2, 1], axis=0), batch=6)
fcase("unbind", X3, ["unbind"], lambda p, x: p.unbind(x, axis=1))
fcase("unstack", X3, ["unstack"], lambda p, x: p.unstack(x, axis=-1))

# --- cast, assign, constants ------------------------------------------------------------------
fcase("cast_float_int32", X3, ["cast"], lambda p, x: (x * 3).astype("int32"))
fcase("cast_float_bool", X3, ["cast"], lambda p, x: p.cast(x, "bool"),
      values={"x": lambda rng, s: rng.choice([0.0, 0.25, -1.5], s)})
fcase("cast_int64_float", {"x": ((None, 5), "int64")}, ["cast"],
      lambda p, x: x.astype("float32") * 0.5)
fcase("cast_bool_float", X3, ["cast"], lambda p, x: (x > 0).astype("float32"))
fcase("cast_to_float64", X3, ["cast"], lambda p, x: x.astype("float64"))
fcase("cast_int_bool", {"x": ((None, 5), "int64")}, ["cast"], lambda p, x: x.astype("bool"))
fcase("cast_float_int_negative", X3, ["cast"], lambda p, x: (x * 2.5).astype("int64"))
fcase("assign", X3, ["assign"], lambda p, x: p.assign(x) + 1)
case("share_data", X3, ["share_data"], formats=("legacy",),
     raw=("share_data", {"X": ["x"]}, {"Out": 1}, {}))(None)
fcase("full_static", X3, ["fill_constant"], lambda p, x: x + p.full([6], 2.5))
fcase("full_int64", X3, ["fill_constant"],
      lambda p, x: x.astype("int64") + p.full([4, 1], 3, "int64"))
fcase("full_dynamic_shape", X3, ["fill_constant"],
      lambda p, x: p.full([p.shape(x)[0], 4, 1], -1.5) * x)
fcase("assign_value", X3, ["assign_value"],
      lambda p, x: x + p.to_tensor([1., 2, 3, 4, 5, 6]))
fcase("assign_value_int", X3, ["assign_value"],
      lambda p, x: x.astype("int32") * p.to_tensor([[1], [2], [3], [4]], "int32"))
fcase("full_value_tensor", X3, ["fill_constant"],
      lambda p, x: p.full([p.shape(x)[0], 1, 6], x[0, 0, 0]) + x)

# --- expand, tile -------------------------------------------------------------------------------
fcase("expand_neg1", {"x": ((None, 1, 4), "float32")}, ["expand_v2"],
      lambda p, x: p.expand(x, [-1, 3, 4]))
fcase("expand_lead", {"x": ((3, 1), "float32")}, ["expand_v2"],
      lambda p, x: p.expand(x, [2, 3, 5]))
fcase("expand_dynamic", {"x": ((None, 1, 4), "float32"), "y": ((None, 3, 4), "float32")},
      ["expand_v2"], lambda p, x, y: p.expand(x, [p.shape(y)[0], 3, 4]))
case("expand_as", {"x": ((None, 1, 4), "float32"), "y": ((None, 3, 4), "float32")},
     ["expand_as_v2"],
     raw=("expand_as_v2", {"X": ["x"], "Y": ["y"]}, {"Out": 1}, {"target_shape": [-1, 3, 4]}))(
    lambda paddle: fn_layer(paddle, lambda x, y: paddle.expand_as(x, y), 2))
fcase("tile", X3, ["tile"], lambda p, x: p.tile(x, [1, 2, 1]))
fcase("tile_fewer", {"x": ((None, 3), "float32")}, ["tile"], lambda p, x: p.tile(x, [2]))
fcase("tile_more", {"x": ((None, 3), "float32")}, ["tile"], lambda p, x: p.tile(x, [2, 1, 2]))
fcase("tile_dynamic", {"x": ((None, 3), "float32")}, ["tile"],
      lambda p, x: p.tile(x, [p.shape(x)[0], 2]))

# --- gather, index_select, gather_nd, embedding ---------------------------------------------------
IDX = {"x": ((None, 5, 6), "float32"), "i": ((4,), "int64")}
fcase("gather_axis1", IDX, ["gather"], lambda p, x, i: p.gather(x, i, axis=1),
      values={"i": ints_in(0, 5)})
fcase("gather_axis0_int32", {"x": ((6, 5), "float32"), "i": ((None,), "int32")}, ["gather"],
      lambda p, x, i: p.gather(x, i), values={"i": ints_in(0, 6)}, batch=4)
fcase("index_select", IDX, ["index_select"], lambda p, x, i: p.index_select(x, i, axis=1),
      values={"i": ints_in(0, 5)})
fcase("index_select_neg", IDX, ["index_select"], lambda p, x, i: p.index_select(x, i, axis=-1),
      values={"i": ints_in(0, 6)})
fcase("gather_nd", {"x": ((None, 3, 4), "float32"), "i": ((5, 2), "int64")}, ["gather_nd"],
      lambda p, x, i: p.gather_nd(x, i), values={"i": ints_in(0, 2)})
fcase("gather_nd_full", {"x": ((None, 3, 4), "float32"), "i": ((2, 3, 3), "int32")},
      ["gather_nd"], lambda p, x, i: p.gather_nd(x, i), values={"i": ints_in(0, 2)})
IDS = {"ids": ((None, 5), "int64")}
case("embedding", IDS, ["lookup_table_v2"], values={"ids": ints_in(0, 10)})(
    lambda paddle: paddle.nn.Embedding(10, 8))
case("embedding_padding", IDS, ["lookup_table_v2"], values={"ids": ints_in(0, 10)})(
    lambda paddle: paddle.nn.Embedding(10, 8, padding_idx=3))
case("embedding_padding_neg", IDS, ["lookup_table_v2"], values={"ids": ints_in(0, 10)})(
    lambda paddle: paddle.nn.Embedding(10, 8, padding_idx=-1))
WI = {"w": ((10, 4), "float32"), "ids": ((None, 3), "int64")}
case("lookup_table_v2_input_w", WI, ["lookup_table_v2"], formats=("legacy",),
     values={"ids": ints_in(0, 10)},
     raw=("lookup_table_v2", {"W": ["w"], "Ids": ["ids"]}, {"Out": 1}, {"padding_idx": 2}))(None)
case("lookup_table_v1", {"w": ((10, 4), "float32"), "ids": ((None, 3, 1), "int64")},
     ["lookup_table"], formats=("legacy",), values={"ids": ints_in(0, 10)},
     raw=("lookup_table", {"W": ["w"], "Ids": ["ids"]}, {"Out": 1}, {"padding_idx": 1}))(None)

# --- flip, roll ----------------------------------------------------------------------------------
fcase("flip", X3, ["flip"], lambda p, x: p.flip(x, [1, 2]))
fcase("flip_batch", X3, ["flip"], lambda p, x: p.flip(x, 0), batch=3)
for _name, (_shifts, _axis) in {"axis1": (2, 1), "multi": ([1, -1], [1, 2]),
                                "flat": (3, None), "batch": (1, 0),
                                "big": (-9, 2)}.items():
    _attrs = {"shifts": _shifts if isinstance(_shifts, list) else [_shifts],
              "axis": [] if _axis is None else (_axis if isinstance(_axis, list) else [_axis])}
    case(f"roll_{_name}", X3, ["roll"], batch=3,
         raw=("roll", {"X": ["x"]}, {"Out": 1}, _attrs))(
        lambda paddle, s=_shifts, a=_axis: fn_layer(paddle, lambda x: paddle.roll(x, s, a)))

# --- creation ------------------------------------------------------------------------------------
fcase("full_like", X3, ["fill_any_like"], lambda p, x: p.full_like(x, 2.5) + x)
fcase("zeros_like", X3, ["fill_any_like"], lambda p, x: p.zeros_like(x) + x)
fcase("ones_like_int", X3, ["fill_any_like"], lambda p, x: p.ones_like(x, dtype="int64"))
fcase("full_like_tensor_value", X3, ["fill_any_like"], lambda p, x: p.full_like(x, x[0, 1, 2]))
case("fill_constant_batch_size_like", X3, ["fill_constant_batch_size_like"], formats=("legacy",),
     raw=("fill_constant_batch_size_like", {"Input": ["x"]}, {"Out": 1},
          {"shape": [-1, 7], "value": 1.5, "dtype": 5, "input_dim_idx": 0,
           "output_dim_idx": 0}))(None)
case("fill_constant_batch_size_like_idx", X3, ["fill_constant_batch_size_like"],
     formats=("legacy",),
     raw=("fill_constant_batch_size_like", {"Input": ["x"]}, {"Out": 1},
          {"shape": [2, 3, -1], "value": 4.0, "dtype": 5, "input_dim_idx": 2,
           "output_dim_idx": 2}))(None)
fcase("full_batch_size_like", X3, ["fill_constant_batch_size_like"],
      lambda p, x: p._C_ops.full_batch_size_like(x, [-1, 7], p.float32, 1.5, 0, 0,
                                                   p.CPUPlace()) + x[:, 0, :1],
      formats=("pir",))
fcase("arange_const", X3, ["range"], lambda p, x: x + p.arange(0, 12, 2, dtype="float32"))
fcase("arange_dynamic", X3, ["range"],
      lambda p, x: p.arange(p.shape(x)[1]).astype("float32").unsqueeze(-1) + x)
fcase("arange_float_step", X3, ["range"], lambda p, x: x + p.arange(0.5, 3.4, 0.5))
fcase("linspace_const", X3, ["linspace"], lambda p, x: x + p.linspace(-1, 1, 6))
fcase("linspace_dynamic", X3, ["linspace"],
      lambda p, x: x + p.linspace(0, 2, p.shape(x)[2]))
fcase("one_hot", {"ids": ((None, 5), "int64")}, ["one_hot_v2"],
      lambda p, ids: p.nn.functional.one_hot(ids, 7), values={"ids": ints_in(0, 7)})
fcase("one_hot_int32_ids", {"ids": ((None,), "int32")}, ["one_hot_v2"],
      lambda p, ids: p.nn.functional.one_hot(ids, 4), values={"ids": ints_in(0, 4)}, batch=6)


# --- a tiny BERT block: everything an ERNIE/BERT export needs, working together ----------------
def _ids_with_padding(rng, shape):
    ids = rng.randint(1, 30, shape)
    ids[0, -3:] = 0       # the first sequence is padded
    return ids


_BERT_OPS = ["lookup_table_v2", "range", "layer_norm", "not_equal", "cast", "unsqueeze2", "scale",
             "matmul_v2", "softmax", "reshape2", "transpose2", "slice", "tanh", "elementwise_add"]


# PIR only: nn.TransformerEncoderLayer calls paddle.matmul / F.gelu, which raise in Paddle 3's
# legacy static mode ("must be Value, but got Variable"); bert_block_manual below is the same
# block written with the APIs that still work there, exported in both formats.
@case("bert_block_dynamic_seq", {"ids": ((None, None), "int64")}, _BERT_OPS, formats=("pir",),
      values={"ids": _ids_with_padding}, tolerance=1e-4, batch=4)
@case("bert_block", {"ids": ((None, 7), "int64")}, _BERT_OPS + ["gelu"], formats=("pir",),
      values={"ids": _ids_with_padding}, tolerance=1e-4)
def _bert_block(paddle):
    nn = paddle.nn

    class TinyBert(nn.Layer):
        def __init__(self, vocab=30, hidden=16, heads=2, max_pos=16):
            super().__init__()
            self.word = nn.Embedding(vocab, hidden, padding_idx=0)
            self.pos = nn.Embedding(max_pos, hidden)
            self.norm = nn.LayerNorm(hidden)
            self.encoder = nn.TransformerEncoderLayer(hidden, heads, 32, dropout=0.0,
                                                      activation="gelu")
            self.pool = nn.Linear(hidden, hidden)
            self.act = nn.Tanh()

        def forward(self, ids):
            pos_ids = paddle.arange(paddle.shape(ids)[1], dtype="int64").unsqueeze(0)
            emb = self.norm(self.word(ids) + self.pos(pos_ids))
            # additive attention mask: 0 for tokens, -1e4 for padding, shaped [B, 1, 1, S]
            keep = (ids != 0).astype("float32").unsqueeze([1, 2])
            mask = paddle.scale(keep, scale=1e4, bias=-1.0, bias_after_scale=False)
            h = self.encoder(emb, mask)
            return h, self.act(self.pool(h[:, 0]))
    return TinyBert()


def legacy_safe(paddle, op_type, fn, x):
    """fn(x), except in Paddle 3's legacy static mode, where the functional API raises: there the
    op is appended by hand, as a legacy-era export holds it."""
    if not isinstance(x, paddle.static.Variable):
        return fn(x)
    helper = paddle.base.layer_helper.LayerHelper(op_type)
    out = helper.create_variable_for_type_inference(dtype=x.dtype)
    helper.append_op(type=op_type, inputs={"X": [x]}, outputs={"Out": [out]})
    return out


@case("bert_block_manual", {"ids": ((None, 7), "int64")}, _BERT_OPS + ["split", "relu"],
      values={"ids": _ids_with_padding}, tolerance=1e-4)
def _bert_block_manual(paddle):
    nn = paddle.nn
    hidden, heads = 16, 2

    class TinyBertManual(nn.Layer):
        def __init__(self):
            super().__init__()
            self.word = nn.Embedding(30, hidden, padding_idx=0)
            self.pos = nn.Embedding(16, hidden)
            self.norm0 = nn.LayerNorm(hidden)
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.out = nn.Linear(hidden, hidden)
            self.norm1 = nn.LayerNorm(hidden)
            self.ffn1 = nn.Linear(hidden, 32)
            self.ffn2 = nn.Linear(32, hidden)
            self.norm2 = nn.LayerNorm(hidden)
            self.relu = nn.ReLU()
            self.softmax = nn.Softmax(-1)
            self.pool = nn.Linear(hidden, hidden)

        def heads(self, t):   # [B, S, H] -> [B, heads, S, H / heads]
            return t.reshape([0, 0, heads, hidden // heads]).transpose([0, 2, 1, 3])

        def forward(self, ids):
            pos_ids = paddle.arange(paddle.shape(ids)[1], dtype="int64").unsqueeze(0)
            h = self.norm0(self.word(ids) + self.pos(pos_ids))
            keep = (ids != 0).astype("float32").unsqueeze([1, 2])
            mask = paddle.scale(keep, scale=1e4, bias=-1.0, bias_after_scale=False)
            q, k, v = paddle.split(self.qkv(h), 3, axis=-1)
            scores = paddle.scale(self.heads(q) @ self.heads(k).transpose([0, 1, 3, 2]),
                                  (hidden // heads) ** -0.5) + mask
            ctx = (self.softmax(scores) @ self.heads(v)).transpose([0, 2, 1, 3])
            h = self.norm1(h + self.out(ctx.reshape([0, 0, hidden])))
            h = self.norm2(h + self.ffn2(self.relu(self.ffn1(h))))
            return h, legacy_safe(paddle, "tanh", paddle.tanh, self.pool(h[:, 0]))
    return TinyBertManual()


# Mappers whose oldest version is below 11 are also checked at opset 7 (older forms of Slice,
# Squeeze, Split, ReduceX ... and the auto-upgrade for what needs more).
LOW_OPSET_CASES = (
    "reshape_zero_neg1", "reshape_shape_tensor_list", "transpose", "flatten_middle",
    "flatten_dyn_tail", "flatten2", "squeeze_axes", "squeeze_all", "unsqueeze_order", "shape",
    "slice_basic", "slice_decrease", "slice_to_scalar", "slice_tensor_end", "concat_three",
    "stack_axis1", "split_sections", "split_num", "split_sections_dynamic", "unbind", "unstack",
    "cast_float_int32", "cast_bool_float", "full_static", "full_dynamic_shape", "assign_value",
    "expand_neg1", "tile_more", "gather_axis1", "index_select", "embedding_padding",
    "lookup_table_v1", "numel", "full_like", "fill_constant_batch_size_like", "flip",
)
for _name in LOW_OPSET_CASES:
    CASES[_name].opsets = (7,) + tuple(CASES[_name].opsets)
