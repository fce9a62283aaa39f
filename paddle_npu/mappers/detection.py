"""Detection heads: yolo_box decoding and multi-class NMS."""
import numpy as np

from .common import cast, const_i64, reduce, reshape, slice_, squeeze, unsqueeze
from .registry import paddle_op
from .vision import INT_MAX, _first_slot, _shape_slice, _var_shape


def _f32(ctx, value):
    return ctx.const(np.asarray(value, np.float32))


def _scalar_i64(ctx, v):
    return reshape(ctx, v, [])


def _arange(ctx, n_vec):
    """0 .. n-1 (int64) for a length held in a 1-element int64 vector."""
    return ctx.op.Range(ctx.const(np.asarray(0, np.int64)), _scalar_i64(ctx, n_vec),
                        ctx.const(np.asarray(1, np.int64)))


# --- yolo_box ---------------------------------------------------------------------------------

@paddle_op("yolo_box")
class YoloBox:
    """Paddle's YOLOv3 box decoding, element for element.

    Per anchor a, cell (k, l) of an H x W grid and image size (img_h, img_w):
        cx = (l + sigmoid(tx) * s + b) * img_w / W,  b = -0.5 * (s - 1), s = scale_x_y
        cy = (k + sigmoid(ty) * s + b) * img_h / H
        w  = exp(tw) * anchor_w * img_w / (downsample_ratio * W)   (h likewise)
        box = (cx - w/2, cy - h/2, cx + w/2, cy + h/2), clipped to [0, img - 1] if clip_bbox
        conf = sigmoid(obj) (iou_aware: conf^(1-f) * sigmoid(iou)^f), score = conf * sigmoid(cls)
    Boxes and scores are 0 where conf < conf_thresh. Output rows run anchor, row, column.
    """

    @classmethod
    def required_opset(cls, op):
        shape = _var_shape(op, "X")
        return 11 if shape is None or any(d <= 0 for d in shape[2:]) else 9

    @classmethod
    def version_9(cls, ctx, op):
        x = ctx.input(op, "X")
        # float64 is decoded in float32 (the constants below) and the results cast back
        dt = ctx.dtype(op, "X")
        if dt != "float32":
            x = cast(ctx, x, "float32")
        anchors = [int(a) for a in op.attr("anchors")]
        na, nc = len(anchors) // 2, int(op.attr("class_num"))
        scale = float(op.attr("scale_x_y", 1.0))
        bias = -0.5 * (scale - 1.0)
        ds = int(op.attr("downsample_ratio"))
        iou_aware = bool(op.attr("iou_aware", False))
        shape = ctx.shape(op, "X") or [-1] * 4
        h_static, w_static = shape[2], shape[3]

        if iou_aware:   # channels: na IoU maps, then na * (5 + nc)
            iou = slice_(ctx, x, [0], [na], [1])
            x = slice_(ctx, x, [na], [INT_MAX], [1])
        grid = ctx.op.Concat(_shape_slice(ctx, x, 0, 1), const_i64(ctx, [na, 5 + nc]),
                             _shape_slice(ctx, x, 2, 4), axis=0)
        p = reshape(ctx, x, grid)                                      # [N, A, 5+C, H, W]

        def entry(i):
            return ctx.op.Gather(p, const_i64(ctx, i), axis=2)        # [N, A, H, W]

        if h_static > 0 and w_static > 0:
            gx = _f32(ctx, np.arange(w_static, dtype=np.float32).reshape(1, 1, 1, -1))
            gy = _f32(ctx, np.arange(h_static, dtype=np.float32).reshape(1, 1, -1, 1))
            h_f, w_f = _f32(ctx, float(h_static)), _f32(ctx, float(w_static))
        else:
            h_i, w_i = _shape_slice(ctx, x, 2, 3), _shape_slice(ctx, x, 3, 4)
            gx = reshape(ctx, cast(ctx, _arange(ctx, w_i), "float32"), [1, 1, 1, -1])
            gy = reshape(ctx, cast(ctx, _arange(ctx, h_i), "float32"), [1, 1, -1, 1])
            h_f, w_f = cast(ctx, h_i, "float32"), cast(ctx, w_i, "float32")

        img = cast(ctx, ctx.input(op, "ImgSize"), "float32")          # [N, 2] = (h, w)
        img_h = reshape(ctx, ctx.op.Gather(img, const_i64(ctx, 0), axis=1), [-1, 1, 1, 1])
        img_w = reshape(ctx, ctx.op.Gather(img, const_i64(ctx, 1), axis=1), [-1, 1, 1, 1])

        def center(grid_pos, t, img_size, cells):
            offset = ctx.op.Mul(ctx.op.Sigmoid(t), _f32(ctx, scale))
            offset = ctx.op.Add(ctx.op.Add(grid_pos, offset), _f32(ctx, bias))
            return ctx.op.Div(ctx.op.Mul(offset, img_size), cells)

        anchor_w = _f32(ctx, np.asarray(anchors[0::2], np.float32).reshape(1, na, 1, 1))
        anchor_h = _f32(ctx, np.asarray(anchors[1::2], np.float32).reshape(1, na, 1, 1))

        def size(t, anchor, img_size, cells):
            input_size = ctx.op.Mul(cells, _f32(ctx, float(ds)))
            return ctx.op.Div(ctx.op.Mul(ctx.op.Mul(ctx.op.Exp(t), anchor), img_size), input_size)

        cx = center(gx, entry(0), img_w, w_f)
        cy = center(gy, entry(1), img_h, h_f)
        half_w = ctx.op.Div(size(entry(2), anchor_w, img_w, w_f), _f32(ctx, 2.0))
        half_h = ctx.op.Div(size(entry(3), anchor_h, img_h, h_f), _f32(ctx, 2.0))
        x1, y1 = ctx.op.Sub(cx, half_w), ctx.op.Sub(cy, half_h)
        x2, y2 = ctx.op.Add(cx, half_w), ctx.op.Add(cy, half_h)
        if op.attr("clip_bbox", True):
            zero = _f32(ctx, 0.0)
            one = _f32(ctx, 1.0)
            x1, y1 = ctx.op.Max(x1, zero), ctx.op.Max(y1, zero)
            x2 = ctx.op.Min(x2, ctx.op.Sub(img_w, one))
            y2 = ctx.op.Min(y2, ctx.op.Sub(img_h, one))

        conf = ctx.op.Sigmoid(entry(4))
        if iou_aware:
            f = float(op.attr("iou_aware_factor", 0.5))
            conf = ctx.op.Mul(ctx.op.Pow(conf, _f32(ctx, 1.0 - f)),
                              ctx.op.Pow(ctx.op.Sigmoid(iou), _f32(ctx, f)))
        keep = ctx.op.Not(ctx.op.Less(conf, _f32(ctx, float(op.attr("conf_thresh", 0.0)))))

        boxes = ctx.op.Concat(*[unsqueeze(ctx, v, [4]) for v in (x1, y1, x2, y2)], axis=4)
        boxes = ctx.op.Where(unsqueeze(ctx, keep, [4]), boxes, _f32(ctx, 0.0))  # [N,A,H,W,4]
        boxes = reshape(ctx, boxes, [0, -1, 4])
        ctx.set_output(op, "Boxes", _as_x_dtype(ctx, op, "Boxes", boxes, dt))

        cls_p = ctx.op.Sigmoid(slice_(ctx, p, [5], [5 + nc], [2]))        # [N, A, C, H, W]
        scores = ctx.op.Mul(cls_p, unsqueeze(ctx, conf, [2]))
        scores = ctx.op.Where(unsqueeze(ctx, keep, [2]), scores, _f32(ctx, 0.0))
        scores = ctx.op.Transpose(scores, perm=[0, 1, 3, 4, 2])           # [N, A, H, W, C]
        scores = reshape(ctx, scores, [0, -1, nc])
        ctx.set_output(op, "Scores", _as_x_dtype(ctx, op, "Scores", scores, dt))


def _as_x_dtype(ctx, op, slot, v, dt):
    """A float32 result in X's dtype, as Paddle's kernel writes both outputs. Paddle 3.3's PIR
    records float32 Scores for float64 X (its run gives float64): the record is corrected for
    the ops that read it."""
    var = ctx.var(op.output(slot)[0]) if op.output(slot) else None
    if var is not None:
        var.dtype = dt
    return v if dt == "float32" else cast(ctx, v, dt)


# --- multiclass NMS ---------------------------------------------------------------------------

@paddle_op("multiclass_nms3", "multiclass_nms")
class MultiClassNMS:
    """Paddle's per-image, per-class NMS + keep_top_k, on ONNX NonMaxSuppression.

    BBoxes [N, M, 4], Scores [N, C, M]. Per class (background_label skipped): the
    nms_top_k best boxes scoring > score_threshold, greedy NMS at nms_threshold; per image the
    keep_top_k best of all kept; rows ordered by image, label, descending score.
    Out [R, 6] = (label, score, x1, y1, x2, y2), Index [R, 1] = image * M + box,
    NmsRoisNum [N]. multiclass_nms (v1) has only Out, which is [[-1]] when nothing is kept.

    normalized=False (Paddle adds 1 to widths and heights) is done by growing x2, y2 by 1
    for the IoU; that equals Paddle's IoU except for boxes less than a pixel apart, where
    Paddle says 0 and this a value below 1 / (w1 + w2 + 1), so the result is the same when
    boxes are at least 1 wide and nms_threshold >= 1/3. Equal scores may be ordered
    differently; boxes with x2 < x1 or y2 < y1 are not reproduced.
    """

    @classmethod
    def check(cls, op):
        if op.input("RoisNum"):
            return "the LoD form (RoisNum input, 2-D Scores) is not supported"
        shape = _var_shape(op, "Scores")
        if shape is not None and len(shape) != 3:
            return "only 3-D Scores [N, C, M] are supported"
        bshape = _var_shape(op, "BBoxes")
        if bshape is not None and bshape[-1] not in (4, -1):
            return f"boxes with {bshape[-1]} coordinates (polygons) are not supported"
        eta = float(op.attr("nms_eta", 1.0))
        if eta < 1.0 and float(op.attr("nms_threshold", 0.3)) > 0.5:
            return (f"nms_eta={eta} with nms_threshold > 0.5 (an adaptive threshold) is not "
                    "supported")
        return None

    @classmethod
    def version_11(cls, ctx, op):
        boxes, scores = ctx.input(op, "BBoxes"), ctx.input(op, "Scores")
        sshape = ctx.shape(op, "Scores") or [-1] * 3
        neg_inf = _f32(ctx, -np.inf)
        n_vec = _shape_slice(ctx, scores, 0, 1)
        m_vec = _shape_slice(ctx, scores, 2, 3)
        c_vec = _shape_slice(ctx, scores, 1, 2)

        # Scores the NMS may pick from: not the background class, only each class's top k.
        cand = scores
        bg = int(op.attr("background_label", 0))
        if bg >= 0:
            is_bg = ctx.op.Equal(reshape(ctx, _arange(ctx, c_vec), [1, -1, 1]),
                                 ctx.const(np.asarray(bg, np.int64)))
            cand = ctx.op.Where(is_bg, neg_inf, cand)
        top_k = int(op.attr("nms_top_k", -1))
        if top_k > -1 and not (sshape[2] > 0 and top_k >= sshape[2]):
            k_max = const_i64(ctx, [top_k])
            k = ctx.op.Where(ctx.op.Less(m_vec, k_max), m_vec, k_max)   # int64 Min needs 12
            _, idx = ctx.op.TopK(cand, k, axis=2, largest=1, sorted=1, _outputs=2)
            zeros = ctx.op.Expand(_f32(ctx, 0.0), ctx.op.Shape(cand))
            ones = ctx.op.Expand(_f32(ctx, 1.0), ctx.op.Shape(idx))
            in_top = ctx.op.ScatterElements(zeros, idx, ones, axis=2)
            cand = ctx.op.Where(cast(ctx, in_top, "bool"), cand, neg_inf)

        nms_boxes = boxes
        if not op.attr("normalized", True):
            nms_boxes = ctx.op.Add(boxes, _f32(ctx, [0.0, 0.0, 1.0, 1.0]))
        sel = ctx.op.NonMaxSuppression(
            nms_boxes, cand, _shape_slice(ctx, boxes, 1, 2),
            _f32(ctx, [float(op.attr("nms_threshold", 0.3))]),
            _f32(ctx, [float(op.attr("score_threshold", 0.0))]))        # [K, 3] (n, c, m)
        score = ctx.op.GatherND(scores, sel)                              # [K]
        img = ctx.op.Gather(sel, const_i64(ctx, 0), axis=1)
        label = ctx.op.Gather(sel, const_i64(ctx, 1), axis=1)
        k_vec = ctx.op.Shape(score)
        rows = _arange(ctx, k_vec)

        keep_top_k = int(op.attr("keep_top_k", -1))
        if keep_top_k > -1:
            # rows by (image, descending score); keep each image's first keep_top_k
            order = _sort_rows(ctx, score, [img], [n_vec], rows, k_vec)
            img_o = ctx.op.Gather(img, order, axis=0)
            starts = ctx.op.CumSum(_per_image_counts(ctx, img_o, n_vec, "int64"),
                                   ctx.const(np.asarray(0, np.int64)), exclusive=1)
            rank = ctx.op.Sub(_arange(ctx, k_vec), ctx.op.Gather(starts, img_o, axis=0))
            kept = ctx.op.Less(rank, const_i64(ctx, [keep_top_k]))
            rows = ctx.op.Gather(order, squeeze(ctx, ctx.op.NonZero(kept), [0]), axis=0)

        # final order: image, label, descending score
        r_vec = ctx.op.Shape(rows)
        order = _sort_rows(ctx, ctx.op.Gather(score, rows, axis=0),
                           [ctx.op.Gather(img, rows, axis=0), ctx.op.Gather(label, rows, axis=0)],
                           [n_vec, c_vec], rows, r_vec)
        sel = ctx.op.Gather(sel, order, axis=0)
        img = ctx.op.Gather(sel, const_i64(ctx, 0), axis=1)
        box_id = ctx.op.Gather(sel, const_i64(ctx, 2), axis=1)
        label = ctx.op.Gather(sel, const_i64(ctx, 1), axis=1)
        out_box = ctx.op.GatherND(boxes, ctx.op.Gather(sel, const_i64(ctx, [0, 2]), axis=1))
        out = ctx.op.Concat(unsqueeze(ctx, cast(ctx, label, ctx.dtype(op, "Scores")), [1]),
                            unsqueeze(ctx, ctx.op.GatherND(scores, sel), [1]), out_box, axis=1)
        if op.type == "multiclass_nms":
            return ctx.set_output(op, "Out", _minus_one_if_empty(ctx, out))
        ctx.set_output(op, "Out", out)
        index = ctx.op.Add(ctx.op.Mul(img, m_vec), box_id)
        ctx.set_output(op, "Index", cast(ctx, unsqueeze(ctx, index, [1]), "int32"))
        ctx.set_output(op, "NmsRoisNum", _per_image_counts(ctx, img, n_vec, "int32"))


def _per_image_counts(ctx, img, n_vec, dtype):
    """How many rows each image 0..N-1 has (0 for an empty selection)."""
    hits = ctx.op.Equal(unsqueeze(ctx, img, [1]), unsqueeze(ctx, _arange(ctx, n_vec), [0]))
    return cast(ctx, reduce(ctx, "ReduceSum", cast(ctx, hits, "int64"), [0], keepdims=False),
                dtype)


def _sort_rows(ctx, score, keys, key_sizes, rows, count):
    """`rows` reordered by ascending integer keys, then descending score.

    TopK on the score gives each row its score rank; a combined integer key
    (k1 * size2 + k2) * count + rank then has no ties, so a second TopK sorts exactly.
    """
    _, by_score = ctx.op.TopK(score, count, axis=0, largest=1, sorted=1, _outputs=2)
    key = None
    for k, size in zip(keys, key_sizes):
        k = ctx.op.Gather(k, by_score, axis=0)
        key = k if key is None else ctx.op.Add(ctx.op.Mul(key, size), k)
    key = ctx.op.Add(ctx.op.Mul(key, count), _arange(ctx, count))
    _, order = ctx.op.TopK(key, count, axis=0, largest=0, sorted=1, _outputs=2)
    return ctx.op.Gather(ctx.op.Gather(rows, by_score, axis=0), order, axis=0)


def _minus_one_if_empty(ctx, out):
    """Paddle's old NMS returns [[-1]] (shape [1, 1]) when nothing is kept."""
    filler = _f32(ctx, [[-1.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    padded = ctx.op.Concat(out, filler, axis=0)
    empty = cast(ctx, ctx.op.Equal(_shape_slice(ctx, out, 0, 1), const_i64(ctx, [0])), "int64")
    n_rows = ctx.op.Add(_shape_slice(ctx, out, 0, 1), empty)
    n_cols = ctx.op.Sub(const_i64(ctx, [6]), ctx.op.Mul(empty, const_i64(ctx, [5])))
    return slice_(ctx, padded, [0, 0], ctx.op.Concat(n_rows, n_cols, axis=0), [0, 1])


# --- SSD / R-CNN helpers ----------------------------------------------------------------------

def _expand_aspect_ratios(ratios, flip):
    """1.0 first, then each new ratio (and 1/ratio when flipping), as Paddle orders them."""
    out = [1.0]
    for ar in ratios:
        if any(abs(ar - o) < 1e-6 for o in out):
            continue
        out.append(float(ar))
        if flip:
            out.append(float(np.float32(1.0) / np.float32(ar)))
    return out


def _prior_boxes(op, feat_h, feat_w, img_h, img_w):
    """Paddle's prior_box output for static sizes: ([H, W, P, 4], [H, W, P, 4]) float32."""
    f32 = np.float32
    min_sizes = [f32(v) for v in op.attr("min_sizes")]
    max_sizes = [f32(v) for v in (op.attr("max_sizes") or [])]
    ratios = _expand_aspect_ratios([f32(v) for v in (op.attr("aspect_ratios") or [])],
                                   op.attr("flip", False))
    step_w, step_h = f32(op.attr("step_w", 0.0)), f32(op.attr("step_h", 0.0))
    if step_w == 0 or step_h == 0:
        step_w, step_h = f32(img_w) / f32(feat_w), f32(img_h) / f32(feat_h)
    offset = f32(op.attr("offset", 0.5))
    cx = (np.arange(feat_w, dtype=f32) + offset) * step_w            # [W]
    cy = (np.arange(feat_h, dtype=f32) + offset) * step_h            # [H]

    half_sizes = []      # (half width, half height) per prior, in Paddle's order
    for s, mn in enumerate(min_sizes):
        square = [(f32(mn / 2.0), f32(mn / 2.0))]
        if max_sizes:
            side = f32(np.sqrt(mn * max_sizes[s]) / 2.0)
            square.append((side, side))
        shaped = [(f32(mn * np.sqrt(f32(ar)) / 2.0), f32(mn / np.sqrt(f32(ar)) / 2.0))
                  for ar in ratios]
        if op.attr("min_max_aspect_ratios_order", False):
            half_sizes += square + [hw for ar, hw in zip(ratios, shaped) if abs(ar - 1.0) >= 1e-6]
        else:
            half_sizes += shaped + square[1:]
    bw = np.asarray([w for w, _ in half_sizes], f32)                 # [P]
    bh = np.asarray([h for _, h in half_sizes], f32)
    x = cx[None, :, None]
    y = cy[:, None, None]
    shape = (feat_h, feat_w, len(half_sizes))
    boxes = np.stack([np.broadcast_to((x - bw) / f32(img_w), shape),
                      np.broadcast_to((y - bh) / f32(img_h), shape),
                      np.broadcast_to((x + bw) / f32(img_w), shape),
                      np.broadcast_to((y + bh) / f32(img_h), shape)], axis=-1).astype(f32)
    if op.attr("clip", False):
        boxes = np.clip(boxes, 0.0, 1.0)
    variances = np.broadcast_to(np.asarray(op.attr("variances"), f32), boxes.shape)
    return boxes, np.ascontiguousarray(variances)


@paddle_op("prior_box")
class PriorBox:
    """SSD prior boxes depend only on the feature-map and image sizes: a constant."""

    @classmethod
    def check(cls, op):
        feat, img = _var_shape(op, "Input"), _var_shape(op, "Image")
        if feat is None or img is None or any(d <= 0 for d in feat[2:] + img[2:]):
            return "prior_box needs static feature-map and image sizes"
        return None

    @classmethod
    def version_7(cls, ctx, op):
        feat, img = ctx.shape(op, "Input"), ctx.shape(op, "Image")
        boxes, variances = _prior_boxes(op, feat[2], feat[3], img[2], img[3])
        ctx.set_output(op, "Boxes", ctx.const(boxes))
        ctx.set_output(op, "Variances", ctx.const(variances))


def _coords(ctx, box):
    """The four coordinates of [..., 4] boxes, each [..., 1]."""
    return [slice_(ctx, box, [i], [i + 1], [-1]) for i in range(4)]


@paddle_op("box_coder")
class BoxCoder:
    """Center-size box encoding / decoding against priors (Paddle's formulas, in its order).

    PIR keeps this op under its own name with operands in0 (prior), in1 (variance),
    in2 (target) and result out0.
    """

    PRIOR, VAR, TARGET, OUT = ("PriorBox", "in0"), ("PriorBoxVar", "in1"), \
        ("TargetBox", "in2"), ("OutputBox", "out0")

    @classmethod
    def check(cls, op):
        code = op.attr("code_type", "encode_center_size")
        if code not in ("encode_center_size", "decode_center_size"):
            return f"code_type={code!r} is not supported"
        if code == "decode_center_size":
            shape = _var_shape(op, _first_slot(op, cls.TARGET))
            if shape is not None and len(shape) != 3:
                return "decode_center_size needs a 3-D TargetBox"
        return None

    @classmethod
    def version_7(cls, ctx, op):
        prior_slot, var_slot = _first_slot(op, cls.PRIOR), _first_slot(op, cls.VAR)
        dtype = ctx.dtype(op, prior_slot) or "float32"

        def c(v):
            return ctx.const(np.asarray(v, np.dtype(dtype)))

        norm = 0.0 if op.attr("box_normalized", True) else 1.0
        decode = op.attr("code_type", "encode_center_size") == "decode_center_size"
        # priors line up with TargetBox dim 1 (encode, decode axis 0) or dim 0 (decode axis 1)
        prior_axis = 1 if decode and int(op.attr("axis", 0)) == 1 else 0
        prior = unsqueeze(ctx, ctx.input(op, prior_slot), [prior_axis])
        p0, p1, p2, p3 = _coords(ctx, prior)
        pw = ctx.op.Add(ctx.op.Sub(p2, p0), c(norm))
        ph = ctx.op.Add(ctx.op.Sub(p3, p1), c(norm))
        pcx = ctx.op.Add(p0, ctx.op.Div(pw, c(2.0)))
        pcy = ctx.op.Add(p1, ctx.op.Div(ph, c(2.0)))
        if ctx.has_input(op, var_slot):
            var = _coords(ctx, unsqueeze(ctx, ctx.input(op, var_slot), [prior_axis]))
        elif op.attr("variance"):
            var = [c(v) for v in op.attr("variance")]
        else:
            var = None
        target = ctx.input(op, _first_slot(op, cls.TARGET))
        if decode:
            t = _coords(ctx, target)
            if var is None:
                var = [c(1.0)] * 4
            tcx = ctx.op.Add(ctx.op.Mul(ctx.op.Mul(var[0], t[0]), pw), pcx)
            tcy = ctx.op.Add(ctx.op.Mul(ctx.op.Mul(var[1], t[1]), ph), pcy)
            half_w = ctx.op.Div(ctx.op.Mul(ctx.op.Exp(ctx.op.Mul(var[2], t[2])), pw), c(2.0))
            half_h = ctx.op.Div(ctx.op.Mul(ctx.op.Exp(ctx.op.Mul(var[3], t[3])), ph), c(2.0))
            out = [ctx.op.Sub(tcx, half_w), ctx.op.Sub(tcy, half_h),
                   ctx.op.Sub(ctx.op.Add(tcx, half_w), c(norm)),
                   ctx.op.Sub(ctx.op.Add(tcy, half_h), c(norm))]
        else:
            t0, t1, t2, t3 = _coords(ctx, unsqueeze(ctx, target, [1]))    # [N, 1, 1] each
            tcx = ctx.op.Div(ctx.op.Add(t2, t0), c(2.0))
            tcy = ctx.op.Div(ctx.op.Add(t3, t1), c(2.0))
            tw = ctx.op.Add(ctx.op.Sub(t2, t0), c(norm))
            th = ctx.op.Add(ctx.op.Sub(t3, t1), c(norm))
            out = [ctx.op.Div(ctx.op.Sub(tcx, pcx), pw), ctx.op.Div(ctx.op.Sub(tcy, pcy), ph),
                   ctx.op.Log(ctx.op.Abs(ctx.op.Div(tw, pw))),
                   ctx.op.Log(ctx.op.Abs(ctx.op.Div(th, ph)))]
            if var is not None:
                out = [ctx.op.Div(o, v) for o, v in zip(out, var)]
        ctx.set_output(op, _first_slot(op, cls.OUT, inputs=False), ctx.op.Concat(*out, axis=-1))


@paddle_op("roi_align")
class RoiAlign:
    """ONNX RoiAlign (avg): aligned=True is its half_pixel mode (opset 16), aligned=False the
    output_half_pixel one (rois at least 1 wide), sampling_ratio <= 0 its adaptive 0.

    Without RoisNum (LoD rois) every roi is taken from image 0: right for batch 1 only.
    """

    @classmethod
    def required_opset(cls, op):
        return 16 if op.attr("aligned", False) else 11

    @classmethod
    def version_11(cls, ctx, op):
        x, rois = ctx.input(op, "X"), ctx.input(op, "ROIs")
        n_rois = _shape_slice(ctx, rois, 0, 1)
        if ctx.has_input(op, "RoisNum"):
            # image of roi r = how many cumulative counts are <= r
            counts = cast(ctx, ctx.input(op, "RoisNum"), "int64")
            ends = ctx.op.CumSum(counts, ctx.const(np.asarray(0, np.int64)))
            le = ctx.op.Not(ctx.op.Less(unsqueeze(ctx, _arange(ctx, n_rois), [1]),
                                        unsqueeze(ctx, ends, [0])))
            batch = reduce(ctx, "ReduceSum", cast(ctx, le, "int64"), [1], keepdims=False)
        else:
            batch = ctx.op.Expand(ctx.const(np.asarray(0, np.int64)), n_rois)
        attrs = dict(mode="avg", output_height=int(op.attr("pooled_height", 1)),
                     output_width=int(op.attr("pooled_width", 1)),
                     sampling_ratio=max(int(op.attr("sampling_ratio", -1)), 0),
                     spatial_scale=float(op.attr("spatial_scale", 1.0)))
        if ctx.opset >= 16:
            attrs["coordinate_transformation_mode"] = \
                "half_pixel" if op.attr("aligned", False) else "output_half_pixel"
        ctx.set_output(op, "Out", ctx.op.RoiAlign(x, rois, batch, **attrs))


# --- matrix NMS ---------------------------------------------------------------------------------

@paddle_op("matrix_nms")
class MatrixNMS:
    """Matrix NMS (SOLOv2), all images and classes at once.

    Per image and class: the nms_top_k best scores above score_threshold, in descending order;
    IoU of every candidate i with each better one j; each candidate's score multiplied by
    min over j < i of decay(iou_ij, max_iou_j) where max_iou_j is j's largest IoU with the
    candidates before it (linear: (1 - iou) / (1 - max_iou); gaussian:
    exp((max_iou^2 - iou^2) * sigma)); kept above post_threshold. Per image the kept
    detections of every class but background_label, best keep_top_k first, become rows
    [label, score, x1, y1, x2, y2]; Index is the box's position in the batch (image * M + box),
    RoisNum the count per image.
    """

    @classmethod
    def check(cls, op):
        shape = _var_shape(op, "Scores")
        if shape is not None and len(shape) != 3:
            return "matrix_nms with LoD scores (2-D) is not supported"
        return None

    @classmethod
    def version_12(cls, ctx, op):
        boxes, scores = ctx.input(op, "BBoxes"), ctx.input(op, "Scores")
        dtype = np.dtype(ctx.dtype(op, "Scores"))

        def c(v):
            return ctx.const(np.asarray(v, dtype))
        top_k, keep_top_k = int(op.attr("nms_top_k", -1)), int(op.attr("keep_top_k", -1))
        norm = 0.0 if op.attr("normalized", True) else 1.0
        sc_shape = ctx.op.Shape(scores)
        m = slice_(ctx, sc_shape, [2], [3], [0])
        k = m if top_k < 0 else ctx.op.Min(m, const_i64(ctx, [top_k]))
        s, idx = ctx.op.TopK(scores, k, axis=2, largest=1, sorted=1, _outputs=2)  # [N, C, K]
        cand = ctx.op.GatherND(boxes, unsqueeze(ctx, reshape(ctx, idx, [0, -1]), [2]),
                               batch_dims=1)                                  # [N, C*K, 4]
        cand = reshape(ctx, cand, ctx.op.Concat(ctx.op.Shape(s), const_i64(ctx, [4]), axis=0))
        x1, y1, x2, y2 = (ctx.op.Gather(cand, const_i64(ctx, i), axis=3) for i in range(4))

        def pair(v):   # [N, C, K] -> row i [.., K, 1] and column j [.., 1, K]
            return unsqueeze(ctx, v, [3]), unsqueeze(ctx, v, [2])
        (x1i, x1j), (y1i, y1j), (x2i, x2j), (y2i, y2j) = map(pair, (x1, y1, x2, y2))
        w = ctx.op.Add(ctx.op.Sub(ctx.op.Min(x2i, x2j), ctx.op.Max(x1i, x1j)), c(norm))
        h = ctx.op.Add(ctx.op.Sub(ctx.op.Min(y2i, y2j), ctx.op.Max(y1i, y1j)), c(norm))
        inter = ctx.op.Mul(w, h)
        area = ctx.op.Mul(ctx.op.Add(ctx.op.Sub(x2, x1), c(norm)),
                          ctx.op.Add(ctx.op.Sub(y2, y1), c(norm)))
        area = ctx.op.Where(ctx.op.Or(ctx.op.Less(x2, x1), ctx.op.Less(y2, y1)), c(0), area)
        area_i, area_j = pair(area)
        disjoint = ctx.op.Or(ctx.op.Or(ctx.op.Greater(x1j, x2i), ctx.op.Less(x2j, x1i)),
                             ctx.op.Or(ctx.op.Greater(y1j, y2i), ctx.op.Less(y2j, y1i)))
        iou = ctx.op.Where(disjoint, c(0), ctx.op.Div(
            inter, ctx.op.Sub(ctx.op.Add(area_i, area_j), inter)))           # [N, C, K, K]
        r = ctx.op.Range(const_i64(ctx, 0), reshape(ctx, k, []), const_i64(ctx, 1))
        before = ctx.op.Less(unsqueeze(ctx, r, [0]), unsqueeze(ctx, r, [1]))  # j < i
        iou = ctx.op.Where(before, iou, c(0))
        max_iou = unsqueeze(ctx, reduce(ctx, "ReduceMax", iou, [3], False), [2])  # per j
        if op.attr("use_gaussian", False):
            sigma = c(float(op.attr("gaussian_sigma", 2.0)))
            decay = ctx.op.Exp(ctx.op.Mul(ctx.op.Sub(ctx.op.Mul(max_iou, max_iou),
                                                     ctx.op.Mul(iou, iou)), sigma))
        else:
            decay = ctx.op.Div(ctx.op.Sub(c(1), iou), ctx.op.Sub(c(1), max_iou))
        decay = reduce(ctx, "ReduceMin", ctx.op.Where(before, decay, c(1)), [3], False)
        decayed = ctx.op.Mul(s, decay)
        keep = ctx.op.And(ctx.op.Greater(s, c(float(op.attr("score_threshold", 0.0)))),
                          ctx.op.Greater(decayed, c(float(op.attr("post_threshold", 0.0)))))
        background = int(op.attr("background_label", 0))
        n_cls = slice_(ctx, sc_shape, [1], [2], [0])
        classes = ctx.op.Range(const_i64(ctx, 0), reshape(ctx, n_cls, []), const_i64(ctx, 1))
        if background >= 0:
            keep = ctx.op.And(keep, unsqueeze(ctx, ctx.op.Not(ctx.op.Equal(
                classes, const_i64(ctx, background))), [0, 2]))
        # per image: the best keep_top_k kept detections over all classes
        flat_keep = reshape(ctx, keep, [0, -1])
        ranked = ctx.op.Where(flat_keep, reshape(ctx, decayed, [0, -1]), c(-np.inf))
        total = ctx.op.Mul(n_cls, k)
        k2 = total if keep_top_k < 0 else ctx.op.Min(total, const_i64(ctx, [keep_top_k]))
        best, pos = ctx.op.TopK(ranked, k2, axis=1, largest=1, sorted=1, _outputs=2)
        kept = ctx.op.GatherElements(flat_keep, pos, axis=1)                    # [N, K2]
        box_idx = ctx.op.GatherElements(reshape(ctx, idx, [0, -1]), pos, axis=1)
        label = cast(ctx, ctx.op.Div(pos, k), dtype.name)                      # pos // K
        rows = ctx.op.Concat(unsqueeze(ctx, label, [2]), unsqueeze(ctx, best, [2]),
                             ctx.op.GatherND(boxes, unsqueeze(ctx, box_idx, [2]), batch_dims=1),
                             axis=2)                                            # [N, K2, 6]
        where = ctx.op.Transpose(ctx.op.NonZero(kept), perm=[1, 0])           # [T, 2]
        ctx.set_output(op, "Out", ctx.op.GatherND(rows, where))
        image = unsqueeze(ctx, ctx.op.Range(const_i64(ctx, 0), reshape(
            ctx, slice_(ctx, sc_shape, [0], [1], [0]), []), const_i64(ctx, 1)), [1])
        batch_idx = ctx.op.Add(box_idx, ctx.op.Mul(image, m))
        ctx.set_output(op, "Index", cast(ctx, unsqueeze(ctx, ctx.op.GatherND(batch_idx, where), [1]),
                                         "int32"))
        ctx.set_output(op, "RoisNum", cast(ctx, reduce(ctx, "ReduceSum", cast(ctx, kept, "int64"),
                                                       [1], False), "int32"))
