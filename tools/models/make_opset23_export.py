#!/usr/bin/python3
"""zoo/llama3 as a torch export at ONNX opset 23 writes a decoder (torch.onnx.export(...,
dynamo=True, opset_version=23): torchlib's rms_norm, the rotary and scaled_dot_product_attention
as the opset's fused operators): RMSNormalization for every norm, q/k/v each Reshape +
Transpose to [batch, heads, sequence, head_dim], q and k rotated by RotaryEmbedding (the cos /
sin caches gathered at position_ids inside it), and one Attention per layer that appends the
new keys and values to the optimum-named cache itself (its present outputs), groups the KV
heads to the query heads (kv 2, q 4) and takes transformers >= 4.53's boolean mask (key j open
to the row at position p when j <= p and attention_mask[j]). Opset 23, IR 11; every value of
the attention typed, as the dynamo exporter records them (tests/models/legacy/llama3_opset23).
The weights are the zoo's llama3's, so its golden is that model's, and ONNX Runtime checks the
file: its greedy tokens equal the golden (bench/node_modules, `cd bench && npm install
--ignore-scripts`).

    /usr/bin/python3 tools/models/make_opset23_export.py [--out DIR]
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import legacy_export as legacy
import make_genai_export as genai


def build_graph(model, cfg):
    c = model.config
    layers, hd, heads, kv = c.num_hidden_layers, c.head_dim, c.num_attention_heads, c.num_key_value_heads
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    nodes, inits, typed = [], [], []

    def node(op, inputs, name, outputs=None, **attrs):
        outputs = outputs or [f"{name}_output_0"]
        nodes.append(helper.make_node(op, inputs, outputs, name=name, **attrs))
        return outputs[0] if len(outputs) == 1 else outputs

    def init(name, array):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def ints(name, values):
        return init(name, np.array(values, dtype=np.int64))

    def typed_as(value, elem, dims):
        typed.append(helper.make_tensor_value_info(value, elem, dims))
        return value

    batch, seq, total = "batch_size", "sequence_length", "total_sequence_length"
    cache = lambda name, length: helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, kv, length, hd])
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [batch, total]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, [batch, seq])]
    inputs += [cache(f"past_key_values.{i}.{kind}", "past_sequence_length") for i in range(layers) for kind in ("key", "value")]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, seq, c.vocab_size])]
    outputs += [cache(f"present.{i}.{kind}", total) for i in range(layers) for kind in ("key", "value")]

    cos, sin = genai.rope_caches(model, c.max_position_embeddings)
    init("cos_cache", cos)
    init("sin_cache", sin)
    # masking_utils' sdpa_mask: kv_idx <= q_idx (positions) and the padding mask, boolean [b, 1, s, total]
    width = node("Gather", [node("Shape", ["attention_mask"], "mask_shape"), ints("one", 1)], "total_length", axis=0)
    keys = node("Range", [ints("zero", 0), width, ints("step", 1)], "key_index")
    keys = node("Unsqueeze", [keys, ints("key_axes", [0, 1, 2])], "key_index_4d")
    rows = node("Unsqueeze", ["position_ids", ints("row_axes", [1, 3])], "row_position_4d")
    causal = node("LessOrEqual", [keys, rows], "causal")
    tokens = node("Unsqueeze", [node("Cast", ["attention_mask"], "tokens", to=TensorProto.BOOL), ints("token_axes", [1, 2])],
                  "tokens_4d")
    mask = typed_as(node("And", [causal, tokens], "mask"), TensorProto.BOOL, [batch, 1, seq, total])

    def rms_norm(x, name):  # the weight is the module's own, `name`.weight
        return node("RMSNormalization", [x, init(f"{name}.weight", sd[f"{name}.weight"])], name.replace(".", "/"),
                    axis=-1, epsilon=float(c.rms_norm_eps), stash_type=1)

    def linear(x, name):  # nn.Linear's [out, in] weight, stored as the MatMul's [in, out]
        return node("MatMul", [x, init(f"{name}.weight.T", sd[f"{name}.weight"].T)], f"{name}/MatMul")

    def split_heads(x, n, name):
        view = node("Reshape", [x, ints(f"{name}_shape", [0, 0, n, hd])], f"{name}/Reshape")
        return typed_as(node("Transpose", [view], f"{name}/Transpose", perm=[0, 2, 1, 3]), TensorProto.FLOAT, [batch, n, seq, hd])

    hidden = node("Gather", [init("model.embed_tokens.weight", sd["model.embed_tokens.weight"]), "input_ids"], "embed_tokens")
    for i in range(layers):
        p = f"model.layers.{i}"
        x = rms_norm(hidden, f"{p}.input_layernorm")
        q = split_heads(linear(x, f"{p}.self_attn.q_proj"), heads, f"{p}/q")
        k = split_heads(linear(x, f"{p}.self_attn.k_proj"), kv, f"{p}/k")
        v = split_heads(linear(x, f"{p}.self_attn.v_proj"), kv, f"{p}/v")
        q = typed_as(node("RotaryEmbedding", [q, "cos_cache", "sin_cache", "position_ids"], f"{p}/q_rotary"),
                     TensorProto.FLOAT, [batch, heads, seq, hd])
        k = typed_as(node("RotaryEmbedding", [k, "cos_cache", "sin_cache", "position_ids"], f"{p}/k_rotary"),
                     TensorProto.FLOAT, [batch, kv, seq, hd])
        attn = node("Attention", [q, k, v, mask, f"past_key_values.{i}.key", f"past_key_values.{i}.value"], f"{p}/Attention",
                    [f"{p}/Attention_output_0", f"present.{i}.key", f"present.{i}.value"], scale=float(hd ** -0.5))
        merged = node("Reshape", [node("Transpose", [attn[0]], f"{p}/attn/Transpose", perm=[0, 2, 1, 3]),
                                  ints(f"{p}/merged_shape", [0, 0, heads * hd])], f"{p}/attn/Reshape")
        hidden = node("Add", [hidden, linear(merged, f"{p}.self_attn.o_proj")], f"{p}/attn_residual")
        x = rms_norm(hidden, f"{p}.post_attention_layernorm")
        gate = linear(x, f"{p}.mlp.gate_proj")
        act = node("Mul", [gate, node("Sigmoid", [gate], f"{p}/mlp/Sigmoid")], f"{p}/mlp/silu")
        down = linear(node("Mul", [act, linear(x, f"{p}.mlp.up_proj")], f"{p}/mlp/Mul"), f"{p}.mlp.down_proj")
        hidden = node("Add", [hidden, down], f"{p}/mlp_residual")
    x = rms_norm(hidden, "model.norm")
    node("MatMul", [x, init("lm_head.weight.T", sd["lm_head.weight"].T)], "lm_head/MatMul", ["logits"])
    graph = helper.make_graph(nodes, "main_graph", inputs, outputs, inits, value_info=typed)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], producer_name="pytorch")
    m.ir_version = 11
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    out = args.out or legacy.folder("llama3_opset23")
    model, cfg = legacy.zoo_model("llama3", out)
    path = os.path.join(out, "model.onnx")
    for stale in (path, path + ".data"):
        if os.path.exists(stale):
            os.remove(stale)
    onnx.save(build_graph(model, cfg), path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx.data", size_threshold=1024)  # shape constants inline, as torch writes them
    golden = legacy.write_golden(out, "llama3", model, cfg)
    print(f"{out}: ONNX Runtime greedy == the golden {legacy.check_in_ort(path, golden)}")


if __name__ == "__main__":
    main()
