"""Losses inference programs still carry: softmax_with_cross_entropy."""
import numpy as np

from .common import cast, reduce
from .registry import paddle_op
from .tensor import first_input, first_output


@paddle_op("softmax_with_cross_entropy", "cross_entropy_with_softmax")
class SoftmaxWithCrossEntropy:
    """Softmax (or the given probabilities, use_softmax=False) along `axis`, and the loss
    -sum(label * log p) (soft labels) or -log p[label] (0 where label == ignore_index),
    keeping `axis` as a size-1 dim. PIR names the op cross_entropy_with_softmax."""

    @classmethod
    def version_13(cls, ctx, op):
        logits_slot = first_input(op, "Logits", "in0")
        logits = ctx.input(op, logits_slot)
        label_slot = first_input(op, "Label", "in1")
        label = ctx.input(op, label_slot)
        rank = ctx.rank(op, logits_slot)
        axis = int(op.attr("axis", -1)) % rank
        dtype = np.dtype(ctx.dtype(op, logits_slot))
        if op.attr("use_softmax", True):
            log_p = ctx.op.LogSoftmax(logits, axis=axis)
            probs = ctx.op.Softmax(logits, axis=axis)
        else:
            log_p, probs = ctx.op.Log(logits), logits
        if op.attr("soft_label", False):
            loss = ctx.op.Neg(reduce(ctx, "ReduceSum", ctx.op.Mul(label, log_p), [axis], True))
        else:
            if ctx.dtype(op, label_slot) != "int64":
                label = cast(ctx, label, "int64")
            ignored = ctx.op.Equal(label, ctx.const(np.asarray(op.attr("ignore_index", -100),
                                                               np.int64)))
            safe = ctx.op.Where(ignored, ctx.const(np.zeros((), np.int64)), label)
            picked = ctx.op.GatherElements(log_p, safe, axis=axis)
            loss = ctx.op.Where(ignored, ctx.const(np.zeros((), dtype)), ctx.op.Neg(picked))
        ctx.set_output(op, first_output(op, "Softmax", "out0"), probs)
        ctx.set_output(op, first_output(op, "Loss", "out1"), loss)
