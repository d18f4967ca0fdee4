#!/usr/bin/python3
"""Bytes a decode step must read, per weight storage width, for an optimum-layout decoder.

    /usr/bin/python3 bench/model_info.py MODEL.onnx   -> one JSON object

Reads only the graph (not the external weights). A decode token streams:
  * every constant MatMul/Gemm weight once (also MatMul(x, Transpose(W)) on an initializer,
    the tied lm_head of torch exports): K*N values at the stored width. Sizes follow
    sdk/kernels PackedWeight::weight_bytes: fp32 4*K*N; int8 per channel K*N + 4*N (fp32
    scale per channel); int4 blocks of 32 along K, 16 bytes + one fp32 scale per block;
  * one row of each Gather'ed embedding table (fp32);
  * every other float initializer (norm weights, ...) whole, fp32;
  * the KV cache: 2 * layers * kv_heads * head_dim * 4 bytes per token of context
    (kv_bytes_per_ctx_token; the caller multiplies by the mean context of the run).
"""
import json
import math
import sys

import onnx
from onnx import numpy_helper  # noqa: F401  (onnx import check)

FLOAT_TYPES = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.FLOAT16: 2, onnx.TensorProto.BFLOAT16: 2,
               onnx.TensorProto.DOUBLE: 8}


def main(path):
    m = onnx.load(path, load_external_data=False)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    # Constant nodes count as initializers too (small ones, but be complete).
    for n in g.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    inits[n.output[0]] = a.t
    producer = {o: n for n in g.node for o in n.output}

    def numel(t):
        return math.prod(t.dims) if t.dims else 1

    def const_source(name):
        """(initializer, transposed) when `name` is an initializer, or Transpose of one."""
        if name in inits:
            return inits[name], False
        p = producer.get(name)
        if p is not None and p.op_type == "Transpose" and p.input[0] in inits:
            return inits[p.input[0]], True
        return None, False

    matmul_kn = []        # (K, N) of each constant weight
    used_as_matrix = set()
    gathered = {}
    for n in g.node:
        if n.op_type in ("MatMul", "Gemm") and len(n.input) >= 2:
            t, tr = const_source(n.input[1])
            if t is None or len(t.dims) != 2:
                continue
            trans_b = any(a.name == "transB" and a.i == 1 for a in n.attribute) if n.op_type == "Gemm" else False
            K, N = t.dims
            if tr != trans_b:
                K, N = N, K
            matmul_kn.append((K, N))
            used_as_matrix.add(t.name)
        elif n.op_type == "Gather" and n.input[0] in inits:
            t = inits[n.input[0]]
            if len(t.dims) == 2 and t.data_type in FLOAT_TYPES:
                gathered[t.name] = t.dims[1] * FLOAT_TYPES[t.data_type]

    matmul_params = sum(K * N for K, N in matmul_kn)
    other_bytes = sum(gathered.values())
    for name, t in inits.items():
        if name in used_as_matrix or name in gathered or t.data_type not in FLOAT_TYPES:
            continue
        other_bytes += numel(t) * FLOAT_TYPES[t.data_type]

    def int8_bytes(K, N):
        return K * N + 4 * N

    def int4_bytes(K, N):
        blocks = -(-K // 32)
        return N * blocks * 16 + N * blocks * 4

    # KV: past_key_values.{i}.key|value inputs, shape [batch, kv_heads, past, head_dim].
    kv_per_tok = 0
    n_layers = 0
    for i in g.input:
        if i.name.startswith("past_key_values."):
            d = i.type.tensor_type.shape.dim
            h, hd = d[1].dim_value, d[3].dim_value
            kv_per_tok += h * hd * FLOAT_TYPES.get(i.type.tensor_type.elem_type, 4)
            if i.name.endswith(".key"):
                n_layers += 1
    params = sum(numel(t) for name, t in inits.items() if t.data_type in FLOAT_TYPES)
    vocab = None
    for o in g.output:
        if o.name == "logits":
            vocab = o.type.tensor_type.shape.dim[2].dim_value or None
    print(json.dumps({
        "params": params,
        "matmul_weights": len(matmul_kn),
        "matmul_params": matmul_params,
        "layers": n_layers,
        "vocab": vocab,
        "weight_bytes_per_token": {
            "float32": 4 * matmul_params + other_bytes,
            "int8": sum(int8_bytes(K, N) for K, N in matmul_kn) + other_bytes,
            "int4": sum(int4_bytes(K, N) for K, N in matmul_kn) + other_bytes,
        },
        "kv_bytes_per_ctx_token": kv_per_tok,
    }))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: model_info.py MODEL.onnx")
    main(sys.argv[1])
