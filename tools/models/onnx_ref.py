"""A small numpy interpreter for the ONNX ops torch.onnx.export writes for
decoder LLMs (opset 13-17, and the opset 18-20 forms of
Reduce* axes and Gelu). It exists to check the exported files against
torch where onnxruntime is not installed; it is slow and only as general as
these models need. Unknown ops raise NotImplementedError.
"""
import math

import numpy as np
import onnx
from onnx import numpy_helper

_DT = {
    onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.FLOAT16: np.float16, onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32, onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.UINT8: np.uint8, onnx.TensorProto.BOOL: np.bool_,
}


def _attrs(node):
    out = {}
    for a in node.attribute:
        out[a.name] = onnx.helper.get_attribute_value(a)
    return out


def _slice(x, starts, ends, axes=None, steps=None):
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    sl = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = int(a) % x.ndim
        dim = x.shape[a]
        s, e, st = int(s), int(e), int(st)
        # clamp like ONNX (python slicing already clamps, but INT64 extremes are fine too)
        if s < 0:
            s += dim
        if e < 0:
            e += dim
        if st > 0:
            s = min(max(s, 0), dim)
            e = min(max(e, 0), dim)
        else:
            s = min(max(s, -1), dim - 1)
            e = min(max(e, -1), dim - 1)
            if e == -1:
                e = None
        sl[a] = slice(s, e, st)
    return x[tuple(sl)]


def _softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def run_node(node, ins):
    op, at = node.op_type, _attrs(node)
    x = ins[0] if ins else None
    if op == "Constant":
        return [numpy_helper.to_array(at["value"])]
    if op == "Identity":
        return [x]
    if op == "Shape":
        shp = np.array(x.shape, dtype=np.int64)
        return [shp[at.get("start", 0):at.get("end", len(shp))]]
    if op == "Gather":
        return [np.take(x, ins[1].astype(np.int64), axis=at.get("axis", 0))]
    if op == "Unsqueeze":
        axes = sorted(int(a) % (x.ndim + len(ins[1])) for a in ins[1])
        for a in axes:
            x = np.expand_dims(x, a)
        return [x]
    if op == "Squeeze":
        if len(ins) > 1 and ins[1] is not None:
            return [np.squeeze(x, axis=tuple(int(a) for a in ins[1]))]
        return [np.squeeze(x)]
    if op == "Concat":
        return [np.concatenate(ins, axis=at["axis"])]
    if op == "Cast":
        return [x.astype(_DT[at["to"]])]
    if op == "Reshape":
        shape = [int(s) for s in ins[1]]
        if not at.get("allowzero", 0):
            shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
        return [x.reshape(shape)]
    if op == "Transpose":
        return [np.transpose(x, at.get("perm"))]
    if op == "Slice":
        return [_slice(x, ins[1], ins[2], ins[3] if len(ins) > 3 else None,
                       ins[4] if len(ins) > 4 else None)]
    if op == "Expand":
        shape = np.broadcast_shapes(x.shape, tuple(int(s) for s in ins[1]))
        return [np.broadcast_to(x, shape).copy()]
    if op == "Clip":  # opset 11+: min and max as optional inputs
        lo = ins[1] if len(ins) > 1 and ins[1] is not None else -np.inf
        hi = ins[2] if len(ins) > 2 and ins[2] is not None else np.inf
        return [np.clip(x, lo, hi).astype(x.dtype)]
    if op == "Tile":
        return [np.tile(x, tuple(int(r) for r in ins[1]))]
    if op == "ConstantOfShape":
        v = numpy_helper.to_array(at["value"]) if "value" in at else np.zeros(1, np.float32)
        return [np.full(tuple(int(s) for s in x), v.reshape(-1)[0], dtype=v.dtype)]
    if op == "CumSum":
        assert not at.get("exclusive", 0) and not at.get("reverse", 0), "CumSum: only the plain form"
        return [np.cumsum(x, axis=int(ins[1])).astype(x.dtype)]
    if op == "Range":
        return [np.arange(ins[0], ins[1], ins[2]).astype(ins[0].dtype)]
    binops = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Pow": np.power,
              "Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal,
              "Greater": np.greater, "GreaterOrEqual": np.greater_equal,
              "And": np.logical_and, "Or": np.logical_or, "Max": np.maximum, "Min": np.minimum}
    if op in binops:
        r = binops[op](x, ins[1])
        if op in ("Add", "Sub", "Mul", "Pow", "Max", "Min"):
            r = r.astype(x.dtype)
        return [r]
    if op == "Div":
        if np.issubdtype(x.dtype, np.integer):
            return [(x // ins[1]).astype(x.dtype)]  # operands here are non-negative
        return [(x / ins[1]).astype(x.dtype)]
    unops = {"Sqrt": np.sqrt, "Neg": np.negative, "Cos": np.cos, "Sin": np.sin, "Exp": np.exp,
             "Tanh": np.tanh, "Not": np.logical_not, "Abs": np.abs, "Log": np.log,
             "Reciprocal": np.reciprocal, "Relu": lambda v: np.maximum(v, 0),
             "Softplus": lambda v: np.logaddexp(np.zeros((), v.dtype), v)}
    if op in unops:
        return [unops[op](x).astype(x.dtype)]
    if op == "Sigmoid":
        return [(1.0 / (1.0 + np.exp(-x))).astype(x.dtype)]
    if op == "Erf":
        return [np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)]
    if op == "Gelu":  # opset 20
        v = x.astype(np.float64)
        if at.get("approximate", b"none") in (b"tanh", "tanh"):
            y = 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))
        else:
            y = 0.5 * v * (1.0 + np.vectorize(math.erf, otypes=[np.float64])(v / math.sqrt(2.0)))
        return [y.astype(x.dtype)]
    if op == "Where":
        return [np.where(x, ins[1], ins[2])]
    if op == "MatMul":
        return [np.matmul(x, ins[1])]
    if op == "Gemm":
        a = x.T if at.get("transA", 0) else x
        b = ins[1].T if at.get("transB", 0) else ins[1]
        y = at.get("alpha", 1.0) * (a @ b)
        if len(ins) > 2:
            y = y + at.get("beta", 1.0) * ins[2]
        return [y.astype(x.dtype)]
    if op == "Softmax":
        return [_softmax(x, at.get("axis", -1)).astype(x.dtype)]
    if op in ("ReduceMean", "ReduceSum", "ReduceMax"):
        axes = at.get("axes")
        if axes is None and len(ins) > 1:
            axes = [int(a) for a in ins[1]]
        axes = tuple(axes) if axes is not None else None
        fn = {"ReduceMean": np.mean, "ReduceSum": np.sum, "ReduceMax": np.max}[op]
        return [fn(x, axis=axes, keepdims=bool(at.get("keepdims", 1))).astype(x.dtype)]
    if op == "LayerNormalization":  # over the axes from `axis` on, in float32 (stash_type 1)
        axis = at.get("axis", -1)
        axes = tuple(range(axis % x.ndim, x.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
        y = (x - mean) / np.sqrt(var + np.float32(at.get("epsilon", 1e-5))) * ins[1]
        return [(y + ins[2] if len(ins) > 2 and ins[2] is not None else y).astype(x.dtype)]
    if op == "TopK":
        k = int(ins[1].reshape(-1)[0])
        axis = at.get("axis", -1)
        assert at.get("largest", 1) == 1
        idx = np.argsort(-x, axis=axis, kind="stable")
        idx = np.take(idx, np.arange(k), axis=axis)
        return [np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)]
    if op == "Split":
        axis = at.get("axis", 0)
        if len(ins) > 1:
            parts = np.cumsum([int(s) for s in ins[1]])[:-1]
        else:
            parts = len(node.output)
        return list(np.split(x, parts, axis=axis))
    # ops added for the family zoo (hf_families.py / make_family_zoo.py)
    if op == "Trilu":
        k = int(ins[1].reshape(-1)[0]) if len(ins) > 1 and ins[1] is not None else 0
        return [np.triu(x, k) if at.get("upper", 1) else np.tril(x, k)]
    if op == "ScatterND":
        assert at.get("reduction", b"none") in ("none", b"none"), at
        idx = ins[1].astype(np.int64)
        q = idx.shape[-1]
        out = x.copy()
        flat = idx.reshape(-1, q)
        upd = ins[2].reshape((flat.shape[0],) + x.shape[q:])
        for i in range(flat.shape[0]):  # in order, so a repeated index keeps the last update
            out[tuple(flat[i])] = upd[i]
        return [out]
    if op in ("ScatterElements", "GatherElements"):
        axis = at.get("axis", 0) % x.ndim
        idx = ins[1].astype(np.int64)
        idx = np.where(idx < 0, idx + x.shape[axis], idx)
        grid = list(np.indices(idx.shape, sparse=True))
        grid[axis] = idx
        if op == "GatherElements":
            return [x[tuple(grid)]]
        reduction = at.get("reduction", b"none")
        reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
        assert reduction in ("none", "add"), at
        out = x.copy()
        if reduction == "add":  # index_add_: repeated indices accumulate
            np.add.at(out, tuple(grid), ins[2])
        else:
            out[tuple(grid)] = ins[2]
        return [out]
    if op == "NonZero":
        return [np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)]
    if op == "Flatten":
        axis = at.get("axis", 1) % max(x.ndim, 1)
        return [x.reshape(int(np.prod(x.shape[:axis])), -1)]
    if op == "OneHot":
        depth = int(ins[1].reshape(-1)[0])
        values = ins[2]
        ind = x.astype(np.int64)
        ind = np.where(ind < 0, ind + depth, ind)
        hot = ind[..., None] == np.arange(depth)
        hot = np.moveaxis(hot, -1, at.get("axis", -1))
        return [np.where(hot, values[1], values[0]).astype(values.dtype)]
    raise NotImplementedError(op)


class Session:
    def __init__(self, path_or_model):
        m = onnx.load(path_or_model) if isinstance(path_or_model, str) else path_or_model
        self.model = m
        self.inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
        self.input_names = [i.name for i in m.graph.input if i.name not in self.inits]
        self.output_names = [o.name for o in m.graph.output]

    def run(self, feeds):
        env = dict(self.inits)
        env.update(feeds)
        for node in self.model.graph.node:
            ins = [env[n] if n else None for n in node.input]
            outs = run_node(node, ins)
            for name, v in zip(node.output, outs):
                if name:
                    env[name] = v
        return {n: env[n] for n in self.output_names}
