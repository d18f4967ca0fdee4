#!/usr/bin/python3
"""Writes the runner tests' models: one small attention decoder (GQA, learned position
embeddings, pre-LayerNorm, ReLU MLP) as a dynamic HF-layout export and as hand-built
static graphs in the arcl contract, all over one weights.bin.

  /usr/bin/python3 tests/runner/data/make_static_decoder.py   (Debian's onnx 1.12 + numpy)

Files (all in this folder):
  dense.onnx, swa.onnx      dynamic optimum layout (past concatenated, causal mask built
                            inside from position_ids; swa.onnx: layer 1 sees a window)
  <set>__<graph>.onnx       static graphs; <set>.io.json is package.json metadata "io"
    hf     ar{1,4} x cl{16,32}, kv_layout hf
    htp    same, kv_layout htp (key cache transposed)
    split  hf graphs cut in 2 parts (<graph>_1_of_2, <graph>_2_of_2), chained by "hidden_1"
    swa    ar{1,4}_cl32_scl12: layer 1 reads sliding_attention_mask and a SCL-AR cache
The static graphs compute exactly what the dynamic ones do, given the runner's masks.
"""
import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB, HIDDEN, HEADS, KV, HD, MLP, LAYERS, MAXPOS = 96, 32, 4, 2, 8, 64, 2, 64
GROUP = HEADS // KV
WINDOW, SLIDING = 5, [1]
MASK = -65504.0

rng = np.random.default_rng(1234)


def lin(i, o, scale=1.0):
    return (rng.uniform(-1, 1, (i, o)) * scale / np.sqrt(i)).astype(np.float32)


W = {"embed": rng.normal(0, 1, (VOCAB, HIDDEN)).astype(np.float32),
     "pos_embed": (rng.normal(0, 1, (MAXPOS, HIDDEN)) * 0.5).astype(np.float32)}
for l in range(LAYERS):
    p = f"l{l}."
    W[p + "ln1.w"] = (1 + rng.uniform(-0.1, 0.1, HIDDEN)).astype(np.float32)
    W[p + "ln1.b"] = rng.uniform(-0.1, 0.1, HIDDEN).astype(np.float32)
    W[p + "wq"] = lin(HIDDEN, HEADS * HD, 2.0)
    W[p + "bq"] = rng.uniform(-0.1, 0.1, HEADS * HD).astype(np.float32)
    W[p + "wk"] = lin(HIDDEN, KV * HD, 2.0)
    W[p + "wv"] = lin(HIDDEN, KV * HD)
    W[p + "wo"] = lin(HEADS * HD, HIDDEN, 2.0)
    W[p + "ln2.w"] = (1 + rng.uniform(-0.1, 0.1, HIDDEN)).astype(np.float32)
    W[p + "ln2.b"] = rng.uniform(-0.1, 0.1, HIDDEN).astype(np.float32)
    W[p + "w1"] = lin(HIDDEN, MLP)
    W[p + "w2"] = lin(MLP, HIDDEN, 2.0)
W["lnf.w"] = (1 + rng.uniform(-0.1, 0.1, HIDDEN)).astype(np.float32)
W["lnf.b"] = rng.uniform(-0.1, 0.1, HIDDEN).astype(np.float32)
W["lm_head"] = lin(HIDDEN, VOCAB, 4.0)

# One weights.bin shared by every graph (64-byte aligned offsets).
OFFSETS = {}
with open(os.path.join(HERE, "weights.bin"), "wb") as f:
    for name, a in W.items():
        pad = (-f.tell()) % 64
        f.write(b"\0" * pad)
        OFFSETS[name] = f.tell()
        f.write(a.tobytes())


def weight(name):
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=W[name].shape)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "weights.bin"), ("offset", str(OFFSETS[name])), ("length", str(W[name].nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


class Builder:
    def __init__(self):
        self.nodes, self.inits, self.used, self.n = [], [], set(), 0

    def w(self, name):
        if name not in self.used:
            self.used.add(name)
            self.inits.append(weight(name))
        return name

    def const(self, values, dtype=np.int64):
        self.n += 1
        name = f"c{self.n}"
        self.inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    def op(self, op, inputs, out=None, **attrs):
        self.n += 1
        out = out or f"t{self.n}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"n{self.n}", **attrs))
        return out


def layer(b, l, x, mask, past_k, past_v, layout, s_dim):
    """One decoder layer. past_k/past_v are graph inputs in `layout`; returns x and the
    names of present key/value (this call's new rows only when static, else concatenated)."""
    p = f"l{l}."
    h = b.op("LayerNormalization", [x, b.w(p + "ln1.w"), b.w(p + "ln1.b")], axis=-1, epsilon=1e-5)
    q = b.op("Add", [b.op("MatMul", [h, b.w(p + "wq")]), b.w(p + "bq")])
    q = b.op("Transpose", [b.op("Reshape", [q, b.const([1, -1, HEADS, HD])])], perm=[0, 2, 1, 3])
    k = b.op("Transpose", [b.op("Reshape", [b.op("MatMul", [h, b.w(p + "wk")]), b.const([1, -1, KV, HD])])],
             perm=[0, 2, 1, 3])  # [1, KV, S, HD]
    v = b.op("Transpose", [b.op("Reshape", [b.op("MatMul", [h, b.w(p + "wv")]), b.const([1, -1, KV, HD])])],
             perm=[0, 2, 1, 3])
    if layout == "dynamic":
        pk = b.op("Concat", [past_k, k], out=f"present.{l}.key", axis=2)
        pv = b.op("Concat", [past_v, v], out=f"present.{l}.value", axis=2)
        kt = b.op("Transpose", [pk], perm=[0, 1, 3, 2])
        v_all = pv
    elif layout == "hf":
        pk = b.op("Identity", [k], out=f"present.{l}.key")
        pv = b.op("Identity", [v], out=f"present.{l}.value")
        kt = b.op("Transpose", [b.op("Concat", [past_k, k], axis=2)], perm=[0, 1, 3, 2])
        v_all = b.op("Concat", [past_v, v], axis=2)
    else:  # htp: key [KV, 1, HD, T], value [KV, 1, T, HD]
        pk = b.op("Transpose", [k], out=f"present.{l}.key", perm=[1, 0, 3, 2])
        pv = b.op("Transpose", [v], out=f"present.{l}.value", perm=[1, 0, 2, 3])
        kt = b.op("Transpose", [b.op("Concat", [past_k, pk], axis=3)], perm=[1, 0, 2, 3])
        v_all = b.op("Transpose", [b.op("Concat", [past_v, pv], axis=2)], perm=[1, 0, 2, 3])
    # GQA: query heads kv-major ([1, KV, GROUP, S, HD]) against each kv head broadcast.
    q5 = b.op("Reshape", [q, b.const([1, KV, GROUP, s_dim, HD])])
    kt5 = b.op("Expand", [b.op("Unsqueeze", [kt, b.const([2])]), b.const([1, 1, GROUP, 1, 1])])
    v5 = b.op("Expand", [b.op("Unsqueeze", [v_all, b.const([2])]), b.const([1, 1, GROUP, 1, 1])])
    scores = b.op("Mul", [b.op("MatMul", [q5, kt5]), b.const(1.0 / np.sqrt(HD), np.float32)])
    probs = b.op("Softmax", [b.op("Add", [scores, mask])], axis=-1)
    o = b.op("MatMul", [probs, v5])  # [1, KV, GROUP, S, HD]
    o = b.op("Reshape", [b.op("Transpose", [b.op("Reshape", [o, b.const([1, HEADS, -1, HD])])], perm=[0, 2, 1, 3]),
                         b.const([1, -1, HEADS * HD])])
    x = b.op("Add", [x, b.op("MatMul", [o, b.w(p + "wo")])])
    h = b.op("LayerNormalization", [x, b.w(p + "ln2.w"), b.w(p + "ln2.b")], axis=-1, epsilon=1e-5)
    m = b.op("MatMul", [b.op("Relu", [b.op("MatMul", [h, b.w(p + "w1")])]), b.w(p + "w2")])
    return b.op("Add", [x, m]), pk, pv


def embed(b):
    return b.op("Add", [b.op("Gather", [b.w("embed"), "input_ids"]), b.op("Gather", [b.w("pos_embed"), "position_ids"])])


def head(b, x):
    h = b.op("LayerNormalization", [x, b.w("lnf.w"), b.w("lnf.b")], out="hidden_states", axis=-1, epsilon=1e-5)
    return b.op("MatMul", [h, b.w("lm_head")], out="logits")


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def save(b, inputs, outputs, path):
    g = helper.make_graph(b.nodes, "decoder", inputs, outputs, initializer=b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="make_static_decoder")
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(HERE, path))


def dynamic(path, window):
    """The optimum layout: masks built inside from position_ids (key j sits at position j)."""
    b = Builder()
    s, t = "sequence_length", "past_sequence_length + sequence_length"
    total = b.op("Gather", [b.op("Shape", ["attention_mask"]), b.const(1)])
    kpos = b.op("Range", [b.const(0), total, b.const(1)])  # [T]
    qpos = b.op("Reshape", ["position_ids", b.const([-1, 1])])  # [S, 1]
    causal = b.op("LessOrEqual", [kpos, qpos])
    zero, neg = b.const(0.0, np.float32), b.const(MASK, np.float32)
    full = b.op("Where", [causal, zero, neg])
    near = b.op("Greater", [kpos, b.op("Sub", [qpos, b.const(window or 0)])])
    sliding = b.op("Where", [b.op("And", [causal, near]), zero, neg])
    x = embed(b)
    inputs = [vi("input_ids", TensorProto.INT64, [1, s]), vi("attention_mask", TensorProto.INT64, [1, t]),
              vi("position_ids", TensorProto.INT64, [1, s])]
    outputs = [vi("logits", TensorProto.FLOAT, [1, s, VOCAB])]
    for l in range(LAYERS):
        pk, pv = f"past_key_values.{l}.key", f"past_key_values.{l}.value"
        inputs += [vi(pk, TensorProto.FLOAT, [1, KV, "past_sequence_length", HD]),
                   vi(pv, TensorProto.FLOAT, [1, KV, "past_sequence_length", HD])]
        mask = sliding if (window and l in SLIDING) else full
        x, k, v = layer(b, l, x, mask, pk, pv, "dynamic", -1)
        outputs += [vi(k, TensorProto.FLOAT, [1, KV, t, HD]), vi(v, TensorProto.FLOAT, [1, KV, t, HD])]
    head(b, x)
    outputs.append(vi("hidden_states", TensorProto.FLOAT, [1, s, HIDDEN]))
    save(b, inputs, outputs, path)


def cache_specs(l, layout, ar, past):
    if layout == "htp":
        return ([KV, 1, HD, past], [KV, 1, past, HD]), ([KV, 1, HD, ar], [KV, 1, ar, HD])
    return ([1, KV, past, HD], [1, KV, past, HD]), ([1, KV, ar, HD], [1, KV, ar, HD])


def static(set_name, graph, layout, ar, cl, scl=0, split=False):
    """ar{ar}_cl{cl}[_scl{scl}] in the arcl contract; split: two parts chained by hidden_1."""
    parts = [list(range(LAYERS))] if not split else [[0], [1]]
    for i, layers in enumerate(parts):
        b = Builder()
        inputs, outputs = [], []
        first, last = i == 0, i == len(parts) - 1
        masks = {}

        def mask(name, cols):
            if name not in masks:
                inputs.append(vi(name, TensorProto.FLOAT, [1, 1, ar, cols]))
                masks[name] = b.op("Reshape", [name, b.const([ar, cols])])
            return masks[name]

        if first:
            inputs += [vi("input_ids", TensorProto.INT64, [1, ar]), vi("position_ids", TensorProto.INT64, [1, ar])]
            x = embed(b)
        else:
            x = "hidden_1"
            inputs.append(vi(x, TensorProto.FLOAT, [1, ar, HIDDEN]))
        for l in layers:
            sliding = scl and l in SLIDING
            m = mask("sliding_attention_mask", scl) if sliding else mask("attention_mask", cl)
            past = (scl if sliding else cl) - ar
            (kin, vin), (kout, vout) = cache_specs(l, layout, ar, past)
            pk, pv = f"past_key_values.{l}.key", f"past_key_values.{l}.value"
            inputs += [vi(pk, TensorProto.FLOAT, kin), vi(pv, TensorProto.FLOAT, vin)]
            x, k, v = layer(b, l, x, m, pk, pv, layout, ar)
            outputs += [vi(k, TensorProto.FLOAT, kout), vi(v, TensorProto.FLOAT, vout)]
        if last:
            head(b, x)
            outputs = [vi("logits", TensorProto.FLOAT, [1, ar, VOCAB])] + outputs + \
                      [vi("hidden_states", TensorProto.FLOAT, [1, ar, HIDDEN])]
        else:
            b.op("Identity", [x], out="hidden_1")
            outputs.append(vi("hidden_1", TensorProto.FLOAT, [1, ar, HIDDEN]))
        name = graph + (f"_{i + 1}_of_{len(parts)}" if split else "")
        save(b, inputs, outputs, f"{set_name}__{name}.onnx")


def io(layout, variants, window=None, sliding=()):
    return {"layout": "static", "kv_layout": layout, "mask_value": MASK, "layers": LAYERS, "kv_heads": KV,
            "head_dim": HD, "vocab": VOCAB, "sliding_window": window, "sliding_layers": list(sliding),
            "variants": variants}


dynamic("dense.onnx", None)
dynamic("swa.onnx", WINDOW)
for set_name, layout, split in (("hf", "hf", False), ("htp", "htp", False), ("split", "hf", True)):
    variants = []
    for ar in (1, 4):
        for cl in (16, 32):
            g = f"ar{ar}_cl{cl}"
            static(set_name, g, layout, ar, cl, split=split)
            variants.append({"graph": g, "ar": ar, "cl": cl, "scl": None, **({"splits": 2} if split else {})})
    with open(os.path.join(HERE, f"{set_name}.io.json"), "w") as f:
        json.dump(io(layout, variants), f, indent=1)
variants = []
for ar in (1, 4):
    g = f"ar{ar}_cl32_scl12"
    static("swa", g, "hf", ar, 32, scl=12)
    variants.append({"graph": g, "ar": ar, "cl": 32, "scl": 12})
with open(os.path.join(HERE, "swa.io.json"), "w") as f:
    json.dump(io("hf", variants, WINDOW, SLIDING), f, indent=1)
