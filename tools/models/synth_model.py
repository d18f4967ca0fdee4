#!/usr/bin/python3
"""Synthesize a shape-faithful Llama-family ONNX model with random weights.

    /usr/bin/python3 tools/models/synth_model.py CONFIG.json OUT_DIR \
        [--layers N] [--dtype float32|float16] [--seed S] [--tied-layout transpose|duplicate]
        [--attention eager|sdpa] [--verify] [--golden]

Writes OUT_DIR/model.onnx + OUT_DIR/model.onnx.data (external data) and
OUT_DIR/config.json, in the optimum layout (input_ids, attention_mask,
position_ids, past_key_values.N.key|value -> logits, present.N.key|value;
same dynamic axis names as tools/models/hf_decoder.py's exports).

The graph is built with onnx.helper, following the op pattern torch.onnx.export
writes for these models (Gather embedding; Pow/ReduceMean/Add/Sqrt/Div/Mul
RMSNorm; MatMul with pre-transposed [in, out] weights named onnx::MatMul_N;
Reshape/Transpose heads with Shape/Gather/Unsqueeze/Concat shape subgraphs;
Slice/Neg/Concat rotate_half; Concat past; Unsqueeze/Expand/Reshape repeat_kv;
MatMul/Div/Add mask/Softmax/MatMul; Sigmoid*Mul SiLU MLP). Weights are
generated one tensor at a time and streamed into model.onnx.data, so memory
stays at about one tensor (the embedding is the largest).

Tied embeddings: with --tied-layout transpose (default) lm_head is
MatMul(h, Transpose(model.embed_tokens.weight)) on the one shared initializer
(what torch writes without constant folding); with duplicate, a transposed copy
is stored as onnx::MatMul_N (what torch writes with constant folding).

--verify (small configs only) loads the weights into the torch reference
modules of hf_decoder.py and checks greedy decoding through the ONNX graph
(numpy evaluator) against torch.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hf_config  # noqa: E402

ALIGN_BIG = 4096
INLINE_LIMIT = 1024  # bytes; smaller initializers stay inside model.onnx (onnx's default)
NP2ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
           np.dtype(np.int64): TensorProto.INT64}


class ExternalWriter:
    def __init__(self, path, sparse=False):
        self.path = path
        self.sparse = sparse  # all-zero tensors become holes: a sparse file
        self.f = open(path, "wb")
        self.offset = 0
        self.bytes = 0

    def write(self, name, arr):
        arr = np.ascontiguousarray(arr)
        nbytes = arr.nbytes
        t = TensorProto()
        t.name = name
        t.dims.extend(arr.shape)
        t.data_type = NP2ONNX[arr.dtype]
        if nbytes <= INLINE_LIMIT:
            t.raw_data = arr.tobytes()
            return t
        align = ALIGN_BIG if nbytes >= (1 << 20) else 64
        pad = (-self.offset) % align
        if pad:
            self.f.write(b"\0" * pad)
            self.offset += pad
        if self.sparse and not arr.any():
            self.f.seek(nbytes, 1)
        else:
            self.f.write(memoryview(arr).cast("B"))
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", os.path.basename(self.path)), ("offset", str(self.offset)),
                     ("length", str(nbytes))):
            e = t.external_data.add()
            e.key, e.value = k, v
        self.offset += nbytes
        self.bytes += nbytes
        return t

    def close(self):
        self.f.truncate(self.offset)
        self.f.close()


class GraphBuilder:
    """Emits nodes with torch-exporter-like names (/model/layers.0/self_attn/...)."""

    def __init__(self):
        self.nodes = []
        self.counts = {}
        self.n_const = 0

    def _name(self, scope, op):
        key = (scope, op)
        i = self.counts.get(key, 0)
        self.counts[key] = i + 1
        return f"{scope}/{op}" + (f"_{i}" if i else "")

    def op(self, scope, op, inputs, n_out=1, **attrs):
        name = self._name(scope, op)
        outs = [f"{name}_output_{k}" for k in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, scope, value, dtype=np.int64):
        arr = np.array(value, dtype=dtype)
        name = self._name(scope, "Constant")
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node("Constant", [], [out], name=name,
                                           value=numpy_helper.from_array(arr)))
        return out


def llama3_inv_freq(inv_freq, rs):
    """HF's _compute_llama3_parameters: scale low frequencies by 1/factor and
    blend the band between low_freq_factor and high_freq_factor."""
    factor = rs["factor"]
    lf, hf = rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    low_wl, high_wl = old / lf, old / hf
    wavelen = 2 * math.pi / inv_freq
    inv_l = np.where(wavelen > low_wl, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - lf) / (hf - lf)
    smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
    medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
    return np.where(medium, smoothed, inv_l).astype(np.float32)


def build(cfg, out_dir, dtype="float32", seed=0, tied_layout="transpose", log=print, zeros=False, init="normal",
          attention="eager"):
    np_dt = np.dtype(dtype)
    onnx_dt = NP2ONNX[np_dt]
    f32 = np_dt == np.float32
    V, H, I = cfg["vocab_size"], cfg["hidden_size"], cfg["intermediate_size"]
    L = cfg["num_hidden_layers"]
    NH = cfg["num_attention_heads"]
    NKV = cfg.get("num_key_value_heads") or NH
    HD = cfg.get("head_dim") or H // NH
    eps = float(cfg.get("rms_norm_eps", 1e-6))
    theta = float(cfg.get("rope_theta", 10000.0))
    tied = bool(cfg.get("tie_word_embeddings", False))
    bias = bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2"))
    sw = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None
    rs = cfg.get("rope_scaling")
    rope_type = rs.get("rope_type", rs.get("type")) if rs else None
    if rope_type not in (None, "default", "llama3"):
        log(f"note: rope_scaling {rope_type} is not modelled; "
            "plain rope_theta frequencies are used (shapes are unaffected)")
    std = float(cfg.get("initializer_range", 0.02))
    n_rep = NH // NKV

    os.makedirs(out_dir, exist_ok=True)
    data_path = os.path.join(out_dir, "model.onnx.data")
    W = ExternalWriter(data_path, sparse=zeros)
    rng = np.random.default_rng(seed)
    inits = []
    weight_map = {}  # onnx initializer -> [hf name, "T" if stored transposed]
    mm_counter = [1000]

    def normal(shape, scale=std):
        if zeros:  # --zeros: shapes only (estimates); calloc'd, never touched, written as holes
            return np.zeros(shape, dtype=np_dt)
        # generate in float32 row blocks to bound temporary memory, then cast
        out = np.empty(shape, dtype=np_dt)
        flat = out.reshape(shape[0], -1)
        step = max(1, (1 << 24) // max(1, flat.shape[1]))
        for r in range(0, flat.shape[0], step):
            blk = rng.standard_normal((min(step, flat.shape[0] - r), flat.shape[1]), dtype=np.float32)
            blk *= scale
            flat[r:r + blk.shape[0]] = blk
        return out

    def add_init(name, arr, hf=None, transposed=False):
        inits.append(W.write(name, arr))
        if hf:
            weight_map[name] = [hf, "T" if transposed else ""]
        return name

    def linear_weight(hf_name, n_in, n_out):
        # torch stores [out, in]; the exporter folds the transpose -> [in, out]
        name = f"onnx::MatMul_{mm_counter[0]}"
        mm_counter[0] += 1
        # --init test: variance 1/n_in (torch's default init scale), lm_head x4 as the test models
        scale = std if init == "normal" else (4.0 if hf_name == "lm_head.weight" else 1.0) / math.sqrt(n_in)
        w = normal((n_in, n_out), scale)
        add_init(name, w, hf_name, transposed=True)
        del w
        return name

    g = GraphBuilder()
    M = "/model"

    # ---- inputs / outputs -------------------------------------------------
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                            ["batch_size", "past_sequence_length + sequence_length"]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"])]
    outputs = [helper.make_tensor_value_info("logits", onnx_dt, ["batch_size", "sequence_length", V])]
    for i in range(L):
        for kv in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(
                f"past_key_values.{i}.{kv}", onnx_dt, ["batch_size", NKV, "past_sequence_length", HD]))
            outputs.append(helper.make_tensor_value_info(
                f"present.{i}.{kv}", onnx_dt, ["batch_size", NKV, "past_sequence_length + sequence_length", HD]))

    # ---- embedding --------------------------------------------------------
    t0 = time.time()
    emb = normal((V, H), std if init == "normal" else 1.0)
    add_init("model.embed_tokens.weight", emb, "model.embed_tokens.weight")
    lm_dup = None
    if tied and tied_layout == "duplicate":
        lm_dup = f"onnx::MatMul_{mm_counter[0]}"
        mm_counter[0] += 1
        add_init(lm_dup, emb.T, "model.embed_tokens.weight", transposed=True)
    del emb
    x = g.op(f"{M}/embed_tokens", "Gather", ["model.embed_tokens.weight", "input_ids"])

    # ---- mask ---------------------------------------------------------------
    past_len = g.op(M, "Gather", [g.op(M, "Shape", ["past_key_values.0.key"]), g.const(M, 2)], axis=0)
    seq_len = g.op(M, "Gather", [g.op(M, "Shape", ["input_ids"]), g.const(M, 1)], axis=0)
    total = g.op(M, "Gather", [g.op(M, "Shape", ["attention_mask"]), g.const(M, 1)], axis=0)
    q_pos = g.op(M, "Add", [g.op(M, "Range", [g.const(M, 0), g.op(M, "Cast", [seq_len], to=TensorProto.INT64),
                                               g.const(M, 1)]), past_len])
    k_pos = g.op(M, "Range", [g.const(M, 0), g.op(M, "Cast", [total], to=TensorProto.INT64), g.const(M, 1)])
    k_row = g.op(M, "Unsqueeze", [k_pos, g.const(M, [0])])
    q_col = g.op(M, "Unsqueeze", [q_pos, g.const(M, [1])])
    allowed = g.op(M, "LessOrEqual", [k_row, q_col])
    if sw is not None:
        lo = g.op(M, "Sub", [q_col, g.const(M, int(sw))])
        allowed = g.op(M, "And", [allowed, g.op(M, "Greater", [k_row, lo])])
    allowed = g.op(M, "Unsqueeze", [g.op(M, "Unsqueeze", [allowed, g.const(M, [0])]), g.const(M, [0])])
    am = g.op(M, "Unsqueeze", [g.op(M, "Unsqueeze", ["attention_mask", g.const(M, [1])]), g.const(M, [2])])
    allowed = g.op(M, "And", [allowed, g.op(M, "Cast", [am], to=TensorProto.BOOL)])
    mask = g.op(M, "Where", [allowed, g.const(M, 0.0, np_dt), g.const(M, float(np.finfo(np_dt).min), np_dt)])

    # ---- rotary -------------------------------------------------------------
    R = f"{M}/rotary"
    inv_freq = (1.0 / (theta ** (np.arange(0, HD, 2, dtype=np.int64).astype(np.float32) / HD))).astype(np.float32)
    if rope_type == "llama3":
        inv_freq = llama3_inv_freq(inv_freq, rs)
    pos_f = g.op(R, "Cast", [g.op(R, "Unsqueeze", ["position_ids", g.const(R, [2])])], to=TensorProto.FLOAT)
    freqs = g.op(R, "Mul", [pos_f, g.const(R, inv_freq, np.float32)])
    embf = g.op(R, "Concat", [freqs, freqs], axis=-1)
    cos, sin = g.op(R, "Cos", [embf]), g.op(R, "Sin", [embf])
    if not f32:
        cos = g.op(R, "Cast", [cos], to=onnx_dt)
        sin = g.op(R, "Cast", [sin], to=onnx_dt)
    cos = g.op(R, "Unsqueeze", [cos, g.const(R, [1])])
    sin = g.op(R, "Unsqueeze", [sin, g.const(R, [1])])

    def rmsnorm(scope, x, wname):
        add_init(wname, np.ones((H,), dtype=np_dt), wname)
        xf = g.op(scope, "Cast", [x], to=TensorProto.FLOAT)
        var = g.op(scope, "ReduceMean", [g.op(scope, "Pow", [xf, g.const(scope, 2.0, np.float32)])],
                   axes=[-1], keepdims=1)
        inv = g.op(scope, "Div", [g.const(scope, 1.0, np.float32),
                                  g.op(scope, "Sqrt", [g.op(scope, "Add", [var, g.const(scope, eps, np.float32)])])])
        y = g.op(scope, "Cast", [g.op(scope, "Mul", [xf, inv])], to=onnx_dt)
        return g.op(scope, "Mul", [wname, y])

    def dim(scope, t, i):
        return g.op(scope, "Unsqueeze", [g.op(scope, "Gather", [g.op(scope, "Shape", [t]), g.const(scope, i)],
                                              axis=0), g.const(scope, [0])])

    def proj(scope, x, hf, n_in, n_out, with_bias=False):
        w = linear_weight(hf + ".weight", n_in, n_out)
        y = g.op(scope, "MatMul", [x, w])
        if with_bias:
            b = hf + ".bias"
            add_init(b, (rng.standard_normal(n_out, dtype=np.float32) * std).astype(np_dt), b)
            y = g.op(scope, "Add", [b, y])
        return y

    def rotate(scope, t):
        half = HD // 2
        x1 = g.op(scope, "Slice", [t, g.const(scope, [0]), g.const(scope, [half]), g.const(scope, [3]),
                                   g.const(scope, [1])])
        x2 = g.op(scope, "Slice", [t, g.const(scope, [half]), g.const(scope, [np.iinfo(np.int64).max]),
                                   g.const(scope, [3]), g.const(scope, [1])])
        rh = g.op(scope, "Concat", [g.op(scope, "Neg", [x2]), x1], axis=-1)
        return g.op(scope, "Add", [g.op(scope, "Mul", [t, cos]), g.op(scope, "Mul", [rh, sin])])

    def repeat(scope, t, b):
        if n_rep == 1:
            return t
        tl = dim(scope, t, 2)
        e = g.op(scope, "Expand", [g.op(scope, "Unsqueeze", [t, g.const(scope, [2])]),
                                   g.op(scope, "Concat", [b, g.const(scope, [NKV]), g.const(scope, [n_rep]), tl,
                                                          g.const(scope, [HD])], axis=0)])
        return g.op(scope, "Reshape", [e, g.op(scope, "Concat", [b, g.const(scope, [NH]), tl, g.const(scope, [HD])],
                                               axis=0)], allowzero=0)

    for i in range(L):
        P = f"{M}/layers.{i}"
        A = f"{P}/self_attn"
        hfp = f"model.layers.{i}"
        h = rmsnorm(f"{P}/input_layernorm", x, f"{hfp}.input_layernorm.weight")
        b, s = dim(A, h, 0), dim(A, h, 1)
        q = proj(f"{A}/q_proj", h, f"{hfp}.self_attn.q_proj", H, NH * HD, bias)
        k = proj(f"{A}/k_proj", h, f"{hfp}.self_attn.k_proj", H, NKV * HD, bias)
        v = proj(f"{A}/v_proj", h, f"{hfp}.self_attn.v_proj", H, NKV * HD, bias)

        def heads(t, n):
            r = g.op(A, "Reshape", [t, g.op(A, "Concat", [b, s, g.const(A, [n]), g.const(A, [HD])], axis=0)],
                     allowzero=0)
            return g.op(A, "Transpose", [r], perm=[0, 2, 1, 3])
        q, k, v = heads(q, NH), heads(k, NKV), heads(v, NKV)
        q, k = rotate(A, q), rotate(A, k)
        kf = f"present.{i}.key"
        vf = f"present.{i}.value"
        g.nodes.append(helper.make_node("Concat", [f"past_key_values.{i}.key", k], [kf], name=f"{A}/Concat_past_k", axis=2))
        g.nodes.append(helper.make_node("Concat", [f"past_key_values.{i}.value", v], [vf], name=f"{A}/Concat_past_v", axis=2))
        kr, vr = repeat(A, kf, b), repeat(A, vf, b)
        if attention == "sdpa":
            # torch >= 2.1's export of F.scaled_dot_product_attention (transformers' default
            # "sdpa"): scale = 1/sqrt(E) from Shape(q); q and K^T each times Sqrt(scale)
            e = g.op(A, "Cast", [g.op(A, "Slice", [g.op(A, "Shape", [q]), g.const(A, [-1]),
                                                   g.const(A, [2 ** 63 - 1])])], to=onnx_dt)
            scale = g.op(A, "Cast", [g.op(A, "Div", [g.const(A, [1.0], np_dt), g.op(A, "Sqrt", [e])])], to=onnx_dt)
            kt = g.op(A, "Transpose", [kr], perm=[0, 1, 3, 2])
            sc = g.op(A, "MatMul", [g.op(A, "Mul", [q, g.op(A, "Sqrt", [scale])]),
                                    g.op(A, "Mul", [kt, g.op(A, "Sqrt", [scale])])])
            sc = g.op(A, "Add", [sc, mask])
        else:
            sc = g.op(A, "MatMul", [q, g.op(A, "Transpose", [kr], perm=[0, 1, 3, 2])])
            sc = g.op(A, "Add", [g.op(A, "Div", [sc, g.const(A, math.sqrt(HD), np_dt)]), mask])
        if not f32:
            sc = g.op(A, "Cast", [sc], to=TensorProto.FLOAT)
        pr = g.op(A, "Softmax", [sc], axis=-1)
        pr = g.op(A, "Cast", [pr], to=onnx_dt)
        o = g.op(A, "Transpose", [g.op(A, "MatMul", [pr, vr])], perm=[0, 2, 1, 3])
        o = g.op(A, "Reshape", [o, g.op(A, "Concat", [b, s, g.const(A, [NH * HD])], axis=0)], allowzero=0)
        o = proj(f"{A}/o_proj", o, f"{hfp}.self_attn.o_proj", NH * HD, H)
        x = g.op(P, "Add", [x, o])
        h = rmsnorm(f"{P}/post_attention_layernorm", x, f"{hfp}.post_attention_layernorm.weight")
        Mm = f"{P}/mlp"
        gt = proj(f"{Mm}/gate_proj", h, f"{hfp}.mlp.gate_proj", H, I)
        up = proj(f"{Mm}/up_proj", h, f"{hfp}.mlp.up_proj", H, I)
        act = g.op(Mm, "Mul", [gt, g.op(Mm, "Sigmoid", [gt])])
        dn = proj(f"{Mm}/down_proj", g.op(Mm, "Mul", [act, up]), f"{hfp}.mlp.down_proj", I, H)
        x = g.op(P, "Add", [x, dn])
        log(f"  layer {i + 1}/{L} written ({W.bytes / 1e9:.2f} GB, {time.time() - t0:.1f}s)")

    x = rmsnorm(f"{M}/norm", x, "model.norm.weight")
    if tied and tied_layout == "transpose":
        wt = g.op("/lm_head", "Transpose", ["model.embed_tokens.weight"], perm=[1, 0])
        logits_in = [x, wt]
    elif tied:
        logits_in = [x, lm_dup]
    else:
        logits_in = [x, linear_weight("lm_head.weight", H, V)]
    g.nodes.append(helper.make_node("MatMul", logits_in, ["logits"], name="/lm_head/MatMul"))
    W.close()

    graph = helper.make_graph(g.nodes, "main_graph", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="npuforge-synth_model", producer_version="1")
    model.ir_version = 8
    meta = model.metadata_props.add()
    meta.key, meta.value = "npuforge.synth.weight_map", json.dumps(weight_map)
    meta = model.metadata_props.add()
    meta.key, meta.value = "npuforge.synth.seed", str(seed)
    onnx_path = os.path.join(out_dir, "model.onnx")
    onnx.save(model, onnx_path)
    onnx.checker.check_model(onnx_path)
    return onnx_path, data_path, W.bytes


def param_count(cfg):
    V, H, I, L = cfg["vocab_size"], cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    NH = cfg["num_attention_heads"]
    NKV = cfg.get("num_key_value_heads") or NH
    HD = cfg.get("head_dim") or H // NH
    bias = bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2"))
    per = H * NH * HD * 2 + H * NKV * HD * 2 + 3 * H * I + 2 * H
    if bias:
        per += NH * HD + 2 * NKV * HD
    return V * H * (1 if cfg.get("tie_word_embeddings") else 2) + L * per + H


def reference_model(cfg, out_dir):
    """hf_decoder's torch modules holding the synthesized weights as stored (a 16-bit
    model's weights widened exactly to float32)."""
    import torch
    import hf_decoder as hd
    from onnx import numpy_helper
    torch.set_num_threads(1)
    path = os.path.join(out_dir, "model.onnx")
    m = onnx.load(path)  # loads external data
    wm = json.loads({p.key: p.value for p in m.metadata_props}["npuforge.synth.weight_map"])
    c = hd.Config(cfg)
    model = hd.DecoderLM(c)
    sd = model.state_dict()
    new = {}
    for t in m.graph.initializer:
        if t.name not in wm:
            continue
        hf, tr = wm[t.name]
        a = numpy_helper.to_array(t).astype(np.float32)
        key = hf[len("model."):] if hf.startswith("model.") else hf
        new[key] = torch.from_numpy(a.T.copy() if tr else a)
    if c.tie_word_embeddings:
        new["lm_head.weight"] = new["embed_tokens.weight"]
    missing = set(sd) - set(new)
    assert not missing, missing
    model.load_state_dict(new)
    model.eval()
    g = torch.Generator().manual_seed(7)
    prompt = torch.randint(0, c.vocab_size, (7,), generator=g).tolist()
    return model, prompt


def verify(cfg, out_dir, n_new=8):
    """Compare the ONNX graph (numpy interpreter) with the torch reference."""
    from onnx_check import check_onnx
    model, prompt = reference_model(cfg, out_dir)
    # random N(0, 0.02) weights give near-flat logits; the check is about numerics
    return check_onnx(os.path.join(out_dir, "model.onnx"), model, prompt, n_new=n_new)


def write_golden(cfg, out_dir, n_new=16):
    """golden.json (tests/models layout): torch's greedy tokens and logits in float32 on the
    stored weights. Returns the smallest top-1 / top-2 logit gap over the steps."""
    import torch
    import hf_decoder as hd
    import optimum_layout as layout
    model, prompt = reference_model(cfg, out_dir)
    with torch.no_grad():
        toks, prefill_last, last = hd.greedy_with_cache(model, prompt, n_new)
        full = hd.full_logits(model, prompt + toks[:-1])
    cache_diff = float((full[-1] - last).abs().max())
    gaps = full[len(prompt) - 1:].topk(2, dim=-1).values
    golden = layout.greedy_golden(prompt, toks, prefill_last, last, cache_diff)
    golden["note_dtype"] = (f"weights stored in {cfg['torch_dtype']}; generated_ids and logits are those "
                            "weights computed in float32 by torch")
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump(golden, f)
    return float((gaps[:, 0] - gaps[:, 1]).min())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("out_dir")
    ap.add_argument("--layers", type=int, default=None, help="override num_hidden_layers")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", default="normal", choices=["normal", "test"],
                    help="normal: N(0, initializer_range) as HF initializes; test: embeddings N(0, 1), linears "
                         "N(0, 1/fan_in), lm_head x4 (logits far from flat, as the tests/models models)")
    ap.add_argument("--tied-layout", default="transpose", choices=["transpose", "duplicate"])
    ap.add_argument("--attention", default="eager", choices=["eager", "sdpa"],
                    help="sdpa: the nodes torch >= 2.1 exports for F.scaled_dot_product_attention (transformers' "
                         "default attention, what optimum exports): q and K^T scaled by Sqrt(1/sqrt(head_dim)) "
                         "computed from Shape(q)")
    ap.add_argument("--verify", action="store_true", help="compare with torch (small models only)")
    ap.add_argument("--golden", action="store_true",
                    help="write golden.json: torch's float32 greedy tokens and logits on the stored weights")
    ap.add_argument("--zeros", action="store_true",
                    help="all linear/embedding weights zero, stored as holes of a sparse file: the published "
                         "shapes for cost estimates (bench/htp_estimate.sh), useless for text")
    args = ap.parse_args()
    with open(args.config) as f:
        try:
            cfg = hf_config.normalize(json.load(f))
        except ValueError as e:
            raise SystemExit(f"synth_model: {args.config}: {e}")
    if args.layers is not None:
        cfg["num_hidden_layers"] = args.layers
    cfg["torch_dtype"] = args.dtype
    t0 = time.time()
    n = param_count(cfg)
    print(f"synthesizing {cfg.get('architectures', ['?'])[0]}: {cfg['num_hidden_layers']} layers, "
          f"{n / 1e6:.1f}M params, {args.dtype}", flush=True)
    onnx_path, data_path, nbytes = build(cfg, args.out_dir, args.dtype, args.seed, args.tied_layout,
                                         log=lambda *a: print(*a, flush=True), zeros=args.zeros, init=args.init,
                                         attention=args.attention)
    with open(os.path.join(args.out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    print(f"wrote {onnx_path} ({os.path.getsize(onnx_path) / 1e6:.2f} MB) + {data_path} "
          f"({nbytes / 1e9:.3f} GB) in {time.time() - t0:.1f}s; onnx.checker ok", flush=True)
    if args.verify:
        if args.dtype != "float32":
            raise SystemExit("--verify supports float32 only")
        print("verify:", verify(cfg, args.out_dir), flush=True)
    if args.golden:
        print(f"golden.json written; smallest top-1/top-2 logit gap {write_golden(cfg, args.out_dir):.4f}", flush=True)


if __name__ == "__main__":
    main()
