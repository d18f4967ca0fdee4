#!/usr/bin/python3
"""Llama-3 as ONNX Runtime GenAI's model builder writes it for the CPU at fp32
(`python -m onnxruntime_genai.models.builder -p fp32 -e cpu`; builders/base.py): one packed
q/k/v MatMul and a GroupQueryAttention (com.microsoft) per layer that applies the rotary from
cos/sin caches and appends to the cache itself, SimplifiedLayerNormalization for the first norm
and SkipSimplifiedLayerNormalization (the residual Add inside, its sum as output 3) for every
later one, SiLU as Sigmoid and Mul, seqlens_k and total_sequence_length computed from
attention_mask by Constant-node operands, no position_ids input, every past key before every
past value, opset 21, IR 10, all weights in model.onnx.data (tests/models/legacy/llama3_genai).
The weights are the zoo's llama3's, so its golden is that model's, and ONNX Runtime checks the
file: its greedy tokens equal the golden (bench/node_modules, `cd bench && npm install
--ignore-scripts`).

--int4 writes the `-p int4 -e cpu` form (tests/models/legacy/llama3_genai_int4): every MatMul
with a weight (the LM head's too) quantized as the builder's default does it, by ONNX Runtime's
MatMulNBitsQuantizer (4 bits, blocks of 32 along K, symmetric: scale = the block's
largest-magnitude value / -8, codes round(w / scale) + 8 in 0..15, no zero-point input) into a
MatMulNBits (com.microsoft) node `<name>_Q4` reading `<weight>_Q4` (uint8 [N, K / 32, 16], two
codes a byte, the first in the low nibble) and `<weight>_scales` (float32 [N * K / 32]). Its
golden is the torch model holding the dequantized weights. accuracy_level=4 (the builder's CPU
default) lets ONNX Runtime round the activations to int8 inside MatMulNBits, which moves its
greedy tokens from the 13th on; the check runs a copy without it (float activations), which
must give the golden exactly.

--qwen2-tied writes zoo/qwen2_untied's config with tied embeddings, initialized as the zoo's
tied models (tests/models/legacy/qwen2_genai_tied): the q/k/v biases packed into one Add after
the packed MatMul, and, the builder's fp32 form of a tied model, the table stored once as the
LM head's [H, V] weight and the embeddings gathered from its Transpose.

--qwen2-tied --int4 writes that tied model in the -p int4 form with the builder's shared embeddings
(tests/models/legacy/qwen2_genai_int4_shared): the LM head a MatMulNBits and the embeddings a
GatherBlockQuantized (com.microsoft) of the head's own codes and scales, viewed as [V, H / 2] and
[V, H / 32] by Reshapes (share_embeddings).

--gemma2 writes zoo/gemma2 as the builder's Gemma2Model does (builders/gemma.py): the
embeddings x round(sqrt(hidden), 2) by a Mul, RMSNorm weights stored as 1 + w, the norm after
attention and after the MLP plain SimplifiedLayerNormalizations and the one before the MLP the
residual's Skip norm, GQA's scale query_pre_attn_scalar^-0.5 and softcap, Gelu(tanh) for
gelu_pytorch_tanh, the final logit soft-capping as Div, Tanh, Mul (tests/models/legacy/
gemma2_genai). local_window_size is set on the even layers, transformers' sliding ones (one
version of gemma.py sets it on the odd layers); the zoo's window (4096) is beyond its context.

--mistral-swa writes tests/models/mistral_swa (a sliding window of 8 on every layer, a 12-token
prompt that it cuts into) as the builder writes Mistral: local_window_size = sliding_window on
each GroupQueryAttention (tests/models/legacy/mistral_swa_genai). ONNX Runtime gives its
windowed golden exactly (with a window of 7 or 9 the tokens differ from the 10th or 4th on).

--gemma3 writes zoo/gemma3 as the builder's Gemma3Model does: Gemma-2's layout without soft-capping,
q and k normalized per head as --qwen3's (weights 1 + w), two table pairs (cos_cache_global /
sin_cache_global at rope_theta, cos_cache_local / sin_cache_local at rope_local_base_freq) and
on the sliding layers (all but every sliding_window_pattern-th: one version of gemma.py fixes the
pattern at 6, the zoo's is 3) the local pair and local_window_size (tests/models/legacy/gemma3_genai).

--phi4-mini writes zoo/phi4_mini's layout (partial rotary 0.75, tied) at head_dim 64 (hidden 128, two
heads, one KV head) as the builder writes Phi-4-mini: GroupQueryAttention rotating the first 48
dims from tables of 24 columns; ONNX Runtime takes partial tables of a multiple of 8 columns
only, which the zoo's head_dim 16 does not give (tests/models/legacy/phi4_mini_genai).

--qwen3 writes zoo/qwen3 as the builder writes Qwen3 (Qwen3Model: q_norm and k_norm): q, k and v
as three MatMuls (the builder packs them only without q/k norms), q and k each viewed as
[batch, rows x heads, head_dim] by a Reshape, RMS-normalized per head by a
SimplifiedLayerNormalization and viewed back as [batch, rows, heads x head_dim], the three given
to GroupQueryAttention unpacked (tests/models/legacy/qwen3_genai). The zoo's qwen3 is tied: the
table is stored once, as --qwen2-tied's.

--phi3-longrope writes zoo/phi3 as the builder writes a LongRoPE Phi-3 (Phi-3.5-mini, Phi-4-mini):
q/k/v and gate/up unpacked from Phi-3's packed weights, and the rotary tables chosen at run time
(make_rotary_embedding_multi_cache): If(total length > original_max_position_embeddings, 256
here) holds the long-factor tables (2 x max_position_embeddings rows, frequencies divided by
LONG_FACTORS) in its then-branch and the short ones (the zoo's own: factors 1) in its
else-branch, as Constant nodes (tests/models/legacy/phi3_genai_longrope). The golden is the
zoo's; golden.json's "long_prompt" (300 tokens) is ONNX Runtime's, with the long tables, and
"switch_in_decode" (250 tokens, 16 decoded) ONNX Runtime's across the switch.

--glm writes zoo/glm as the builder writes ChatGLM (builders/chatglm.py: partial_rotary_factor 0.5
and rope_attrs interleaved = 1): GroupQueryAttention rotating the first half of each head by
neighbouring pairs (x[2i], x[2i+1]) from tables of a quarter head_dim (rotary_interleaved=1), the
q/k/v biases packed into one Add, gate_up_proj unpacked (tests/models/legacy/glm_genai). GLM-4 /
GLM-Edge rotate so (modeling_glm.py); ONNX Runtime gives the zoo's golden.

--dml writes zoo/llama3 in the layout of the builder's DirectML exports (ep "dml": use_packed_matmul
and use_rope_in_attn off): q, k and v as three MatMuls, q and k each rotated by a RotaryEmbedding
(com.microsoft) node that reads a position_ids graph input and the cos/sin caches, and
GroupQueryAttention without do_rotary (tests/models/legacy/llama3_genai_dml).

--fp16 writes zoo/llama3 in the builder's float16 form (`-p fp16`, as the cuda and directml downloads
are: to_fp16; tests/models/legacy/llama3_genai_fp16): float16 weights, cos/sin tables, cache and
logits, the norms and GroupQueryAttention on float16. Its golden is the float16 weights computed in
float32; ONNX Runtime (float16 compute) gives its tokens.

--int4 --fp16 writes the int4 form in float16 (the cuda and directml int4 downloads): MatMulNBits
with float16 scales over float16 activations (tests/models/legacy/llama3_genai_int4_fp16); its
golden is the torch model with the float16 weights and (code - 8) x the float16 scales.

--int4 --zero-points uint8 writes the int4 form with a zero point per block (tests/models/legacy/
llama3_genai_int4_zero_points): ONNX Runtime's MatMulNBitsQuantizer with is_symmetric=False (its
default) stores the block's range (0 inside it) over 15 levels and the zero point as a 4-bit code,
packed two a byte ([N * ceil(K / 32 / 2)] uint8, MatMulNBits' fourth input). --int4 --zero-points
float stores the zero points as float32, one per block, not rounded (tests/models/legacy/
llama3_genai_int4_float_zero_points): the layout ONNX Runtime's HQQ quantizer writes (HQQ's
optimized values aside), dequantized as ONNX Runtime computes it, code x scale + (-scale x zero
point).

--zeros CONFIG (with --out, and --int4 for the int4 form) writes a config.json's shapes with zero
weights and unit norms, untied, 4096 positions, no golden: the size benches' GenAI models
(bench/RESULTS.md, "ONNX Runtime GenAI's int4 export at 1B").

    /usr/bin/python3 tools/models/make_genai_export.py [--int4 [--zero-points uint8|float] | --qwen2-tied | --gemma2 | --gemma3 | --qwen3 |
                                                        --phi3-longrope | --phi4-mini | --glm | --dml | --fp16 | --mistral-swa] [--out DIR]
    /usr/bin/python3 tools/models/make_genai_export.py --zeros tools/models/configs/llama-3.2-1b.json --int4 --out DIR
"""
import argparse
import json
import os
import tempfile
import types

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

import hf_families as hf
import legacy_export as legacy
import make_family_zoo as zoo

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# --phi3-longrope's long factors (zoo/phi3's head_dim 16: one per rotary frequency), in the
# range Phi-3.5-mini's long_factor spans; its short factors are all 1 (the zoo's own tables).
LONG_FACTORS = [1.0, 1.2, 1.9, 3.4, 6.5, 12.0, 22.0, 36.0]
LONG_PROMPT = 300  # tokens of the long-prompt golden: past original_max_position_embeddings (256)
SWITCH_PROMPT = 250  # tokens of a prompt whose 16-token decode passes the switch


class Writer:
    """Nodes and initializers named as the builder names them."""

    def __init__(self):
        self.nodes, self.inits, self.constants = [], [], {}

    def node(self, op, inputs, name, outputs=None, domain="", **attrs):
        outputs = outputs or [f"{name}/output_0"]
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, domain=domain or None, **attrs))
        return outputs[0] if len(outputs) == 1 else outputs

    def weight(self, name, array):
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array, dtype=np.float32), name))
        return name

    def float(self, value):
        """/model/constants/FLOAT/<value>, a scalar from a Constant node."""
        key = f"FLOAT/{value}"
        if key not in self.constants:
            out = f"/model/constants/{key}"
            self.nodes.append(helper.make_node("Constant", [], [out], name=f"/model/constant_nodes/{key}",
                                               value=numpy_helper.from_array(np.array(value, dtype=np.float32), "")))
            self.constants[key] = out
        return self.constants[key]

    def int64(self, values):
        """The builder's shared constants: /model/constants/INT64/[1] from a Constant node."""
        key = str(values).replace(" ", "")
        if key not in self.constants:
            out = f"/model/constants/INT64/{key}"
            tensor = numpy_helper.from_array(np.array(values, dtype=np.int64), "")
            self.nodes.append(helper.make_node("Constant", [], [out], name=f"/model/constant_nodes/INT64/{key}",
                                               value=tensor))
            self.constants[key] = out
        return self.constants[key]


def rope_caches(model, max_positions, factors=None, inv_freq=None):
    """cos_cache / sin_cache [max_positions, head_dim / 2]: the rotary's angles at each position,
    from the model's own inverse frequencies (Llama-3's scaled ones; Qwen2's per layer, the same
    in each; or `inv_freq`), each divided by its LongRoPE factor when given."""
    if inv_freq is None:
        inv_freq = next(m.inv_freq for m in model.modules() if hasattr(m, "inv_freq"))
    inv_freq = inv_freq.double()
    if factors is not None:
        inv_freq = inv_freq / torch.tensor(factors, dtype=torch.float64)
    freqs = torch.outer(torch.arange(max_positions, dtype=torch.float64), inv_freq)
    return freqs.cos().float().numpy(), freqs.sin().float().numpy()


def build_graph(model, cfg, longrope=None, dml=False):
    """The builder's graph of `model`; `longrope`: (original_max_position_embeddings, the long
    tables' rows, their factors) for LongRoPE's run-time choice of tables; `dml`: the layout of
    its DirectML exports (q, k and v unpacked, rotated by RotaryEmbedding nodes reading a
    position_ids input, GroupQueryAttention without do_rotary)."""
    c, w = model.config, Writer()
    layers, hd = c.num_hidden_layers, c.head_dim
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    for i in range(layers):  # Phi-3's packed qkv_proj and gate_up_proj: the builder unpacks both
        p = f"model.layers.{i}"
        if f"{p}.self_attn.qkv_proj.weight" in sd:
            rows = np.cumsum([c.num_attention_heads * hd, c.num_key_value_heads * hd])
            for n, part in zip("qkv", np.split(sd.pop(f"{p}.self_attn.qkv_proj.weight"), rows)):
                sd[f"{p}.self_attn.{n}_proj.weight"] = part
        if f"{p}.mlp.gate_up_proj.weight" in sd:
            sd[f"{p}.mlp.gate_proj.weight"], sd[f"{p}.mlp.up_proj.weight"] = np.split(sd.pop(f"{p}.mlp.gate_up_proj.weight"), 2)
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"])
    cache = lambda name, length: helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                                               ["batch_size", c.num_key_value_heads, length, hd])
    positions = [helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"])]
    inputs = [ids, mask] + (positions if dml else []) + [cache(f"past_key_values.{i}.{kind}", "past_sequence_length")
                                                         for kind in ("key", "value") for i in range(layers)]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", c.vocab_size])]
    outputs += [cache(f"present.{i}.{kind}", "total_sequence_length") for kind in ("key", "value") for i in range(layers)]

    # make_attention_mask_standard_reformatting_for_gqa
    sub = "/model/attn_mask_reformat/attn_mask_subgraph"
    total = w.node("ReduceSum", ["attention_mask", w.int64([1])], f"{sub}/ReduceSum", keepdims=0)
    seqlens_k = w.node("Cast", [w.node("Sub", [total, w.int64([1])], f"{sub}/Sub")], f"{sub}/Sub/Cast", to=TensorProto.INT32)
    shape = w.node("Shape", ["attention_mask"], f"{sub}/Shape")
    total_len = w.node("Cast", [w.node("Gather", [shape, w.int64(1)], f"{sub}/Gather", axis=0)], f"{sub}/Gather/Cast",
                       to=TensorProto.INT32)
    cos, sin = rope_caches(model, c.max_position_embeddings)
    model_type = getattr(c, "model_type", "")
    gemma3 = model_type == "gemma3_text"
    if gemma3:  # make_rotary_embedding_multi_cache (Gemma3Model): global and local tables, by theta
        for kind, rotary in (("global", model.model.rotary_emb), ("local", model.model.rotary_emb_local)):
            tables = rope_caches(model, c.max_position_embeddings, inv_freq=rotary.inv_freq)
            w.weight(f"cos_cache_{kind}", tables[0])
            w.weight(f"sin_cache_{kind}", tables[1])
    elif longrope:  # make_rotary_embedding_multi_cache: If(total length > original) picks the tables
        original, long_rows, factors = longrope
        short_cos, short_sin = rope_caches(model, original)
        long_cos, long_sin = rope_caches(model, long_rows, factors)
        tables = {"cos_cache_large": long_cos, "sin_cache_large": long_sin, "cos_cache_small": short_cos,
                  "sin_cache_small": short_sin}
        def branch(size, name):
            consts = [helper.make_node("Constant", [], [f"{k}_cache_{size}"], name=f"/{size}/{k}_cache/Constant",
                                       value=numpy_helper.from_array(tables[f"{k}_cache_{size}"], ""))
                      for k in ("cos", "sin")]
            outs = [helper.make_tensor_value_info(f"{k}_cache_{size}", TensorProto.FLOAT, list(tables[f"{k}_cache_{size}"].shape))
                    for k in ("cos", "sin")]
            return helper.make_graph(consts, name, [], outs)
        greater = w.node("Greater", [f"{sub}/Gather/output_0", w.int64(original)],
                         "/model/rotemb_caches_subgraph/Greater")
        w.node("If", [greater], "/model/rotemb_caches_subgraph/If", ["cos_cache", "sin_cache"],
               then_branch=branch("large", "large_rotemb_caches_graph"),
               else_branch=branch("small", "small_rotemb_caches_graph"))
    else:
        w.weight("cos_cache", cos)
        w.weight("sin_cache", sin)

    if c.tie_word_embeddings:  # fp32 shares the table: the embedding reads the LM head's [H, V] transposed
        w.weight("lm_head.MatMul.weight", sd["lm_head.weight"].T)
        table = w.node("Transpose", ["lm_head.MatMul.weight"], "/model/embed_tokens/Transpose", perm=[1, 0])
    else:
        table = w.weight("model.embed_tokens.weight", sd["model.embed_tokens.weight"])
    hidden = w.node("Gather", [table, "input_ids"], "/model/embed_tokens/Gather")
    gemma = model_type in ("gemma2", "gemma3_text")
    if gemma:  # the embeddings x round(sqrt(hidden), 2); RMSNorm weights stored as 1 + w
        hidden = w.node("Mul", [hidden, w.float(float(np.round(np.sqrt(c.hidden_size), 2)))], "/model/embed_tokens/Mul")
    offset = 1.0 if gemma else 0.0
    # the builder's q_norm / k_norm attention (builders/qwen.py Qwen3Model, gemma.py Gemma3Model)
    qk_norm = model_type in ("qwen3", "gemma3_text")
    # builders/chatglm.py: rope_attrs interleaved = 1, handed to GroupQueryAttention's rotary
    interleaved = int(model_type == "glm")
    eps = float(c.rms_norm_eps)
    residual, sublayer = hidden, None

    def plain_norm(weight_name, x, prefix):
        weight = w.weight(weight_name, sd[weight_name] + offset)
        return w.node("SimplifiedLayerNormalization", [x, weight], f"{prefix}/LayerNorm", axis=-1, epsilon=eps,
                      stash_type=1)

    def norm(weight_name, prefix, last=False):
        nonlocal residual
        if sublayer is None:  # the first norm has no residual Add before it
            return plain_norm(weight_name, residual, prefix)
        weight = w.weight(weight_name, sd[weight_name] + offset)
        out = [f"{prefix}/SkipLayerNorm/output_0"] + ([] if last else ["", "", f"{prefix}/SkipLayerNorm/output_3"])
        w.node("SkipSimplifiedLayerNormalization", [residual, sublayer, weight], f"{prefix}/SkipLayerNorm", out,
               domain="com.microsoft", epsilon=eps)
        if not last:
            residual = out[3]
        return out[0]

    def matmul(x, torch_weight, name):
        # nn.Linear keeps [out, in]; the builder stores the MatMul's [in, out].
        return w.node("MatMul", [x, w.weight(f"{name.replace('/', '.')[1:]}.weight", torch_weight.T)], f"{name}/MatMul")

    for i in range(layers):
        p, at = f"model.layers.{i}", f"/model/layers.{i}"
        x = norm(f"{p}.input_layernorm.weight", f"{at}/input_layernorm")
        if dml:  # use_packed_matmul off; q and k rotated before attention (make_rotary_embedding)
            qkv = [matmul(x, sd[f"{p}.self_attn.{n}_proj.weight"], f"{at}/attn/{n}_proj") for n in "qkv"]
            for j, n in enumerate("qk"):
                qkv[j] = w.node("RotaryEmbedding", [qkv[j], "position_ids", "cos_cache", "sin_cache"],
                                f"{at}/attn/{n}_rotary/RotaryEmbedding", domain="com.microsoft", interleaved=interleaved,
                                num_heads=0, rotary_embedding_dim=0)  # whole heads: both 0
        elif qk_norm:  # Qwen3: q, k, v unpacked, q and k normalized per head on a [b, s x heads, hd] view
            qkv = []
            for n, heads in (("q", c.num_attention_heads), ("k", c.num_key_value_heads), ("v", 0)):
                out = matmul(x, sd[f"{p}.self_attn.{n}_proj.weight"], f"{at}/attn/{n}_proj")
                if heads:
                    pre = f"{at}/attn/{n}_norm"
                    view = w.node("Reshape", [out, w.int64([0, -1, hd])], f"{pre}/Reshape_1")
                    weight = w.weight(f"model.layers.{i}.attn.{n}_norm.layernorm.weight",
                                      sd[f"{p}.self_attn.{n}_norm.weight"] + offset)
                    normed = w.node("SimplifiedLayerNormalization", [view, weight], f"{pre}/SimplifiedLayerNormalization",
                                    axis=-1, epsilon=eps, stash_type=1)
                    out = w.node("Reshape", [normed, w.int64([0, -1, heads * hd])], f"{pre}/Reshape_2")
                qkv.append(out)
        else:
            packed = np.concatenate([sd[f"{p}.self_attn.{n}_proj.weight"] for n in "qkv"], axis=0)
            qkv = [matmul(x, packed, f"{at}/attn/qkv_proj"), "", ""]
            if f"{p}.self_attn.q_proj.bias" in sd:  # Qwen2: the three biases packed likewise, one Add
                bias = np.concatenate([sd[f"{p}.self_attn.{n}_proj.bias"] for n in "qkv"])
                qkv[0] = w.node("Add", [qkv[0], w.weight(f"model.layers.{i}.attn.qkv_proj.Add.bias", bias)],
                                f"{at}/attn/qkv_proj/Add")
        # Gemma-2 slides on the even layers (transformers' parity), Gemma-3 on all but every
        # sliding_window_pattern-th (is_local, with the local tables), the rest on every layer.
        sliding = (i % 2 == 0 if model_type == "gemma2" else
                   (i + 1) % c.sliding_window_pattern != 0 if gemma3 else True)
        tables = [f"cos_cache_{'local' if sliding else 'global'}", f"sin_cache_{'local' if sliding else 'global'}"] \
            if gemma3 else ["cos_cache", "sin_cache"]
        attn = w.node("GroupQueryAttention",
                      qkv + [f"past_key_values.{i}.key", f"past_key_values.{i}.value", seqlens_k, total_len]
                      + (["", ""] if dml else tables) + ["", "", ""],  # position_ids, attention_bias, sinks: none
                      f"{at}/attn/GroupQueryAttention",
                      [f"{at}/attn/GroupQueryAttention/output_0", f"present.{i}.key", f"present.{i}.value"],
                      domain="com.microsoft", num_heads=c.num_attention_heads, kv_num_heads=c.num_key_value_heads,
                      # Gemma: q scaled by query_pre_attn_scalar^-0.5, scores soft-capped (Gemma-2)
                      scale=float((c.query_pre_attn_scalar if gemma else hd) ** -0.5),
                      local_window_size=(getattr(c, "sliding_window", None) or -1) if sliding else -1,
                      softcap=float(getattr(c, "attn_logit_softcapping", None) or 0.0), do_rotary=int(not dml),
                      rotary_interleaved=interleaved)
        sublayer = matmul(attn[0], sd[f"{p}.self_attn.o_proj.weight"], f"{at}/attn/o_proj")
        if gemma:  # a norm after attention, then the one before the MLP takes the residual Add
            sublayer = plain_norm(f"{p}.post_attention_layernorm.weight", sublayer, f"{at}/post_attention_layernorm")
            x = norm(f"{p}.pre_feedforward_layernorm.weight", f"{at}/pre_feedforward_layernorm")
        else:
            x = norm(f"{p}.post_attention_layernorm.weight", f"{at}/post_attention_layernorm")
        gate = matmul(x, sd[f"{p}.mlp.gate_proj.weight"], f"{at}/mlp/gate_proj")
        up = matmul(x, sd[f"{p}.mlp.up_proj.weight"], f"{at}/mlp/up_proj")
        if gemma:  # gelu_pytorch_tanh: the standard Gelu (opset 20) under the builder's FastGelu name
            act = w.node("Gelu", [gate], f"{at}/mlp/act_fn/FastGelu", approximate="tanh")
        else:
            act = w.node("Mul", [gate, w.node("Sigmoid", [gate], f"{at}/mlp/act_fn/Sigmoid")], f"{at}/mlp/act_fn/Mul")
        sublayer = matmul(w.node("Mul", [act, up], f"{at}/mlp/Mul"), sd[f"{p}.mlp.down_proj.weight"], f"{at}/mlp/down_proj")
        if gemma:
            sublayer = plain_norm(f"{p}.post_feedforward_layernorm.weight", sublayer, f"{at}/post_feedforward_layernorm")
    x = norm("model.norm.weight", f"/model/layers.{layers}/final_norm_layernorm", last=True)
    head = "lm_head.MatMul.weight" if c.tie_word_embeddings else w.weight("lm_head.MatMul.weight", sd["lm_head.weight"].T)
    if getattr(c, "final_logit_softcapping", None):  # final logit soft-capping: Div, Tanh, Mul
        cap = w.float(float(c.final_logit_softcapping))
        scores = w.node("MatMul", [x, head], "/lm_head/MatMul")
        capped = w.node("Tanh", [w.node("Div", [scores, cap], "/lm_head/softcap/Div")], "/lm_head/softcap/Tanh")
        w.node("Mul", [capped, cap], "/lm_head/softcap/Mul", ["logits"])
    else:
        w.node("MatMul", [x, head], "/lm_head/MatMul", ["logits"])
    graph = helper.make_graph(w.nodes, "main_graph", inputs, outputs, w.inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                          producer_name="onnxruntime-genai")
    m.ir_version = 10
    return m


def to_fp16(m):
    """The builder's fp16 form (`-p fp16`, the cuda and directml downloads): every float
    initializer, constant, graph input and output and Cast target float16; the norms and
    GroupQueryAttention then run on float16."""
    g = m.graph
    for i, t in enumerate(list(g.initializer)):
        if t.data_type == TensorProto.FLOAT:
            g.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for v in list(g.input) + list(g.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    for n in g.node:
        for a in n.attribute:
            if n.op_type == "Constant" and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float16), ""))
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16
    return m


def pack_nibbles(codes):
    """4-bit codes along the last axis, two a byte, the first in the low nibble (an odd count
    padded with a zero code), as MatMulNBits stores codes and zero points."""
    if codes.shape[-1] % 2:
        codes = np.concatenate([codes, np.zeros(codes.shape[:-1] + (1,), codes.dtype)], axis=-1)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def quantize_int4(w, block=32, scale_dtype=np.float32):
    """w [K, N] -> (codes uint8 [N, K / block, block / 2], scales float32 [N * K / block], the
    dequantized [K, N]) as MatMulNBitsQuantizer's symmetric RTN makes them; scales rounded to
    `scale_dtype` first (a float16 model's)."""
    k, n = w.shape
    blocks = w.T.reshape(n, k // block, block).astype(np.float32)
    peak = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=2)[..., None], axis=2)  # signed
    scale = (peak / np.float32(-8.0)).astype(scale_dtype).astype(np.float32)
    inverse = np.where(scale != 0, np.float32(1.0) / np.where(scale != 0, scale, 1), 0).astype(np.float32)
    x = blocks * inverse
    codes = np.clip(np.sign(x) * np.floor(np.abs(x) + 0.5) + 8, 0, 15).astype(np.uint8)  # round half away from 0
    packed = pack_nibbles(codes)
    dequantized = ((codes.astype(np.float32) - 8) * scale).reshape(n, k).T
    return packed, scale.reshape(-1).astype(np.float32), np.ascontiguousarray(dequantized)


def quantize_int4_asymmetric(w, zero_points, block=32):
    """w [K, N] -> (codes uint8 [N, K / block, block / 2], scales float32 [N * K / block], zero
    points, the dequantized [K, N]) with a zero point per block: the block's range (0 inside it)
    over 15 levels. "uint8": the zero point a rounded code, packed two a byte as the codes
    (MatMulNBitsQuantizer's asymmetric default, is_symmetric=False), dequantized (code - zero
    point) x scale; "float": one float32 per block, not rounded (the layout ONNX Runtime's HQQ
    quantizer writes), dequantized code x scale + (-scale x zero point) as ONNX Runtime does."""
    k, n = w.shape
    blocks = w.T.reshape(n, k // block, block).astype(np.float32)
    lo = np.minimum(blocks.min(axis=2, keepdims=True), 0)
    hi = np.maximum(blocks.max(axis=2, keepdims=True), 0)
    scale = ((hi - lo) / np.float32(15)).astype(np.float32)
    scale = np.where(scale == 0, np.float32(1), scale).astype(np.float32)
    zero = (-lo / scale).astype(np.float32)
    if zero_points == "uint8":
        zero = np.clip(np.floor(zero + 0.5), 0, 15).astype(np.float32)
    codes = np.clip(np.floor(blocks / scale + zero + 0.5), 0, 15).astype(np.uint8)
    packed = pack_nibbles(codes)
    if zero_points == "uint8":
        stored = pack_nibbles(zero.reshape(n, k // block).astype(np.uint8)).reshape(-1)
        dequantized = (codes.astype(np.float32) - zero) * scale
    else:
        stored = zero.reshape(-1).astype(np.float32)
        dequantized = codes.astype(np.float32) * scale + (-scale * zero)
    dequantized = np.ascontiguousarray(dequantized.astype(np.float32).reshape(n, k).T)
    return packed, scale.reshape(-1), stored, dequantized


def to_int4(m, scale_dtype=np.float32, zero_points=None):
    """The -p int4 graph: each MatMul with a 2-D weight initializer becomes MatMulNBits
    (`zero_points` "uint8" or "float": quantize_int4_asymmetric's, a fourth input
    `<weight>_zero_points`). Returns the model and the dequantized weight of each original
    weight name."""
    inits = {t.name: t for t in m.graph.initializer}
    dequantized, nodes = {}, []
    for node in m.graph.node:
        w = inits.get(node.input[1]) if node.op_type == "MatMul" else None
        if w is None or len(w.dims) != 2:
            nodes.append(node)
            continue
        array = numpy_helper.to_array(w)
        inputs = [node.input[0], w.name + "_Q4", w.name + "_scales"]
        m.graph.initializer.remove(w)
        if zero_points:
            packed, scales, zeros, dequantized[w.name] = quantize_int4_asymmetric(array, zero_points)
            inputs.append(w.name + "_zero_points")
            m.graph.initializer.append(numpy_helper.from_array(zeros, inputs[-1]))
        else:
            packed, scales, dequantized[w.name] = quantize_int4(array, scale_dtype=scale_dtype)
        m.graph.initializer.extend([numpy_helper.from_array(packed, w.name + "_Q4"),
                                    numpy_helper.from_array(scales, w.name + "_scales")])
        nodes.append(helper.make_node("MatMulNBits", inputs,
                                      list(node.output), name=node.name + "_Q4", domain="com.microsoft",
                                      K=array.shape[0], N=array.shape[1], bits=4, block_size=32, accuracy_level=4))
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    if any(n.op_type == "Transpose" and n.input[0] == "lm_head.MatMul.weight" for n in nodes):
        share_embeddings(m)
    return m, dequantized


def share_embeddings(m):
    """A tied model's int4 table as the builder's shared_embeddings writes it: the embeddings
    gathered by GatherBlockQuantized (com.microsoft) from the LM head's own codes, viewed as
    [V, H / 2] by a Reshape (and its scales as [V, H / 32]), where the fp32 form gathered from
    the head weight's Transpose."""
    g = m.graph
    codes = next(t for t in g.initializer if t.name == "lm_head.MatMul.weight_Q4")
    vocab, blocks, blob = codes.dims
    transpose = next(n for n in g.node if n.op_type == "Transpose" and n.input[0] == "lm_head.MatMul.weight")
    gather = next(n for n in g.node if n.op_type == "Gather" and n.input[0] == transpose.output[0])
    shape = lambda name, dims: helper.make_node("Constant", [], [name], name=name + "/Constant",
                                                value=numpy_helper.from_array(np.array(dims, dtype=np.int64), ""))
    view = [shape("/model/embed_tokens/codes_shape", [vocab, blocks * blob]),
            shape("/model/embed_tokens/scales_shape", [vocab, blocks]),
            helper.make_node("Reshape", ["lm_head.MatMul.weight_Q4", "/model/embed_tokens/codes_shape"],
                             ["/model/embed_tokens/codes"], name="/model/embed_tokens/codes/Reshape"),
            helper.make_node("Reshape", ["lm_head.MatMul.weight_scales", "/model/embed_tokens/scales_shape"],
                             ["/model/embed_tokens/scales"], name="/model/embed_tokens/scales/Reshape"),
            helper.make_node("GatherBlockQuantized", ["/model/embed_tokens/codes", gather.input[1],
                                                      "/model/embed_tokens/scales"],
                             list(gather.output), name="/model/embed_tokens/GatherBlockQuantized",
                             domain="com.microsoft", bits=4, block_size=blob * 2, gather_axis=0, quantize_axis=1)]
    nodes = [n for n in g.node if n is not transpose and n is not gather]
    del g.node[:]
    g.node.extend(view + nodes)


def load_dequantized(model, dequantized):
    """The torch model holding the weights the int4 graph computes with."""
    c, sd = model.config, model.state_dict()
    with torch.no_grad():
        for i in range(c.num_hidden_layers):
            p = f"model.layers.{i}"
            qkv = torch.from_numpy(dequantized[f"{p}.attn.qkv_proj.weight"].T.copy())
            rows = [c.num_attention_heads * c.head_dim] + [c.num_key_value_heads * c.head_dim] * 2
            for part, name in zip(torch.split(qkv, rows), "qkv"):
                sd[f"{p}.self_attn.{name}_proj.weight"].copy_(part)
            for torch_name, ours in (("self_attn.o_proj", "attn.o_proj"), ("mlp.gate_proj", "mlp.gate_proj"),
                                     ("mlp.up_proj", "mlp.up_proj"), ("mlp.down_proj", "mlp.down_proj")):
                sd[f"{p}.{torch_name}.weight"].copy_(torch.from_numpy(dequantized[f"{p}.{ours}.weight"].T.copy()))
        sd["lm_head.weight"].copy_(torch.from_numpy(dequantized["lm_head.MatMul.weight"].T.copy()))


def mistral_swa():
    """tests/models/mistral_swa's model (make_test_models.py, hf_decoder's modules) with the
    names and config build_graph reads, and its golden without the padded batch."""
    import hf_decoder as hd
    import make_test_models as mtm
    cfg = mtm.MODELS["mistral_swa"]
    torch.manual_seed(mtm.SEEDS["mistral_swa"])
    m = hd.DecoderLM(hd.Config(cfg))
    mtm.random_init(m, mtm.SEEDS["mistral_swa"])
    m.eval()
    with open(os.path.join(REPO, "tests", "models", "mistral_swa", "golden.json")) as f:
        golden = json.load(f)
    toks, _, _ = hd.greedy_with_cache(m, golden["prompt_ids"], len(golden["generated_ids"]))
    assert toks == golden["generated_ids"], "the rebuilt model is not tests/models/mistral_swa's"
    del golden["padded_batch"]
    sd = {("" if k.startswith("lm_head") else "model.") + k: v for k, v in m.state_dict().items()}
    model = types.SimpleNamespace(config=types.SimpleNamespace(**cfg), state_dict=lambda: sd,
                                  modules=lambda: list(m.modules()))
    return model, cfg, golden


def zero_model(config_path, layers=None, longrope=None):
    """A decoder of config.json's shapes (Llama's module names, untied, 4096 positions unless
    LongRoPE's original length is given, `layers` layers if given) with zero weights and unit
    norms, as build_graph reads a model: for the size benches."""
    with open(config_path) as f:
        cfg = json.load(f)
    cfg.update(tie_word_embeddings=False, sliding_window=None)
    cfg.update(original_max_position_embeddings=longrope) if longrope else cfg.update(max_position_embeddings=4096)
    if layers:
        cfg["num_hidden_layers"] = layers
    c = types.SimpleNamespace(**cfg)
    hidden = c.hidden_size
    hd = cfg.setdefault("head_dim", hidden // c.num_attention_heads)
    c.head_dim = hd
    kv = c.num_key_value_heads * hd
    shapes = {"model.embed_tokens.weight": (c.vocab_size, hidden), "lm_head.weight": (c.vocab_size, hidden)}
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}"
        shapes.update({f"{p}.self_attn.q_proj.weight": (c.num_attention_heads * hd, hidden),
                       f"{p}.self_attn.k_proj.weight": (kv, hidden), f"{p}.self_attn.v_proj.weight": (kv, hidden),
                       f"{p}.self_attn.o_proj.weight": (hidden, c.num_attention_heads * hd),
                       f"{p}.mlp.gate_proj.weight": (c.intermediate_size, hidden),
                       f"{p}.mlp.up_proj.weight": (c.intermediate_size, hidden),
                       f"{p}.mlp.down_proj.weight": (hidden, c.intermediate_size)})
    sd = {k: torch.zeros(v) for k, v in shapes.items()}
    for name in ["model.norm.weight"] + [f"model.layers.{i}.{n}_layernorm.weight" for i in range(c.num_hidden_layers)
                                         for n in ("input", "post_attention")]:
        sd[name] = torch.ones(hidden)
    rotary = types.SimpleNamespace(inv_freq=1.0 / (c.rope_theta ** (torch.arange(0, hd, 2).double() / hd)))
    return types.SimpleNamespace(config=c, state_dict=lambda: sd, modules=lambda: [rotary]), cfg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--int4", action="store_true")
    ap.add_argument("--qwen2-tied", action="store_true")
    ap.add_argument("--gemma2", action="store_true")
    ap.add_argument("--qwen3", action="store_true")
    ap.add_argument("--gemma3", action="store_true")
    ap.add_argument("--phi3-longrope", action="store_true")
    ap.add_argument("--phi4-mini", action="store_true")
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--mistral-swa", action="store_true")
    ap.add_argument("--glm", action="store_true")
    ap.add_argument("--dml", action="store_true")
    ap.add_argument("--zero-points", choices=("uint8", "float"),
                    help="with --int4: asymmetric blocks, a zero point per block (packed codes or floats)")
    ap.add_argument("--zeros", metavar="CONFIG", help="zero weights at a config.json's shapes (no golden, no check)")
    ap.add_argument("--layers", type=int, help="with --zeros: this many layers")
    ap.add_argument("--longrope", type=int, metavar="ORIGINAL",
                    help="with --zeros: LongRoPE's If, the config's max_position_embeddings rows past ORIGINAL")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.zero_points and (not args.int4 or args.fp16 or args.zeros):
        ap.error("--zero-points goes with --int4 alone")
    if args.dml and (args.int4 or args.fp16 or args.zeros or args.glm):
        ap.error("--dml writes zoo/llama3 alone")
    if args.zeros:
        model, cfg = zero_model(args.zeros, args.layers, args.longrope)
        half = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"]) // 2
        graph = build_graph(model, cfg, longrope=(args.longrope, cfg["max_position_embeddings"], [4.0] * half)
                            if args.longrope else None)
        if args.int4:
            graph, _ = to_int4(graph)
        os.makedirs(args.out, exist_ok=True)
        onnx.save(graph, os.path.join(args.out, "model.onnx"), save_as_external_data=True,
                  all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=0)
        with open(os.path.join(args.out, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
        return
    name = "qwen2_untied" if args.qwen2_tied else "gemma2" if args.gemma2 else "gemma3" if args.gemma3 else "qwen3" if args.qwen3 else \
        "phi3" if args.phi3_longrope else "phi4_mini" if args.phi4_mini else "glm" if args.glm else "llama3"
    folder = ("qwen2_genai_int4_shared" if args.qwen2_tied and args.int4 else "qwen2_genai_tied" if args.qwen2_tied else "gemma2_genai" if args.gemma2 else
              "gemma3_genai" if args.gemma3 else "qwen3_genai" if args.qwen3 else "phi4_mini_genai" if args.phi4_mini else
              "phi3_genai_longrope" if args.phi3_longrope else "glm_genai" if args.glm else "llama3_genai_dml" if args.dml else
              "mistral_swa_genai" if args.mistral_swa else "llama3_genai_int4_fp16" if args.int4 and args.fp16 else
              "llama3_genai_int4_zero_points" if args.int4 and args.zero_points == "uint8" else
              "llama3_genai_int4_float_zero_points" if args.int4 and args.zero_points == "float" else
              "llama3_genai_int4" if args.int4 else "llama3_genai_fp16" if args.fp16 else "llama3_genai")
    out = args.out or legacy.folder(folder)
    torch.set_num_threads(1)
    changes = ({"tie_word_embeddings": True} if args.qwen2_tied else  # zoo/qwen2_untied's config tied
               # ONNX Runtime's GroupQueryAttention takes partial rotary tables of a multiple of 8
               # columns only (Phi-4-mini's: 48 of head_dim 128); the zoo's head_dim 16 gives 6.
               {"hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64}
               if args.phi4_mini else None)
    if changes:  # the zoo's config so changed, initialized as the zoo's models
        cfg = dict(zoo.MODELS[name], **changes)
        torch.manual_seed(zoo.SEEDS[name])
        model = hf.causal_lm(cfg, name, mask_style=zoo.MASK_STYLE.get(name, "masked_fill"), attn_implementation="eager")
        zoo.random_init(model, zoo.SEEDS[name])
        model.eval()
    elif args.mistral_swa:
        model, cfg, golden = mistral_swa()
    else:
        model, cfg = legacy.zoo_model(name, out)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "model.onnx")
    for stale in (path, path + ".data"):
        if os.path.exists(stale):
            os.remove(stale)
    longrope = (cfg["original_max_position_embeddings"], 2 * cfg["max_position_embeddings"], LONG_FACTORS) \
        if args.phi3_longrope else None
    graph = build_graph(model, cfg, longrope=longrope, dml=args.dml)
    if args.fp16:  # the golden: the float16 weights and rotary tables, computed in float32
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.half().float())
        for m in model.modules():
            if hasattr(m, "inv_freq"):
                m.forward = lambda x, positions, f=m.forward: tuple(t.half().float() for t in f(x, positions))
    if args.int4:  # (code - 8) x scale, the scales float16 in a float16 model
        graph, dequantized = to_int4(graph, np.float16 if args.fp16 else np.float32, args.zero_points)
        load_dequantized(model, dequantized)
    if args.fp16:
        graph = to_fp16(graph)
    onnx.save(graph, path, save_as_external_data=True, all_tensors_to_one_file=True, location="model.onnx.data",
              size_threshold=0)
    if args.mistral_swa:
        legacy.write_files(out, cfg, golden)
    else:
        golden = legacy.write_golden(out, name, model, cfg, padded_batch=False)  # no position_ids
    checked = path
    if args.int4:
        checked = os.path.join(tempfile.mkdtemp(), "float_activations.onnx")
        graph = onnx.load(path)  # saving moved the weights out of the one in memory
        for node in graph.graph.node:
            for a in [a for a in node.attribute if a.name == "accuracy_level"]:
                node.attribute.remove(a)
        onnx.save(graph, checked, save_as_external_data=True, location="float_activations.onnx.data", size_threshold=0)
    got = legacy.check_in_ort(checked, golden)
    print(f"{out}: ONNX Runtime greedy == the golden {got}")
    if args.phi3_longrope:
        long_prompt_golden(out, path, model, cfg, golden)


def long_prompt_golden(out, path, model, cfg, golden):
    """golden.json's "long_prompt": a prompt past original_max_position_embeddings, so the If
    takes the long tables, decoded by ONNX Runtime (the oracle for that branch). Checked to
    differ from the tokens of the same file with factor-1 long tables, so a reader that took
    the short tables' numbers past the threshold fails on it."""
    prompt = np.random.default_rng(7).integers(3, cfg["vocab_size"], LONG_PROMPT).tolist()
    tokens = legacy.ort_greedy(path, prompt, 16)
    graph = onnx.load(path)
    plain = dict(zip(("cos_cache_large", "sin_cache_large"), rope_caches(model, 2 * cfg["max_position_embeddings"])))
    for node in graph.graph.node:
        if node.op_type == "If":
            for a in node.attribute:
                for const in (a.g.node if a.name == "then_branch" else []):
                    const.attribute[0].t.CopyFrom(numpy_helper.from_array(plain[const.output[0]], ""))
    unscaled = os.path.join(tempfile.mkdtemp(), "unscaled.onnx")
    onnx.save(graph, unscaled, save_as_external_data=True, location="unscaled.onnx.data", size_threshold=0)
    short = legacy.ort_greedy(unscaled, prompt, 16)
    assert short != tokens, "the long factors do not change the tokens"
    golden["long_prompt"] = {"prompt_ids": prompt, "generated_ids": tokens,
                             "procedure": "ONNX Runtime greedy from an empty cache; the prompt is past "
                                          "original_max_position_embeddings, so the rotary tables are the long ones"}
    # A prompt short of the switch whose decode passes it: the tables change mid-sequence.
    prompt = np.random.default_rng(8).integers(3, cfg["vocab_size"], SWITCH_PROMPT).tolist()
    tokens = legacy.ort_greedy(path, prompt, 16)
    assert tokens != legacy.ort_greedy(unscaled, prompt, 16), "the long factors do not change the decode's tokens"
    golden["switch_in_decode"] = {"prompt_ids": prompt, "generated_ids": tokens,
                                  "procedure": "ONNX Runtime greedy from an empty cache; the prompt is short of "
                                               "original_max_position_embeddings and the decode passes it: the "
                                               "prompt's rows and the first decode steps on the short tables, the "
                                               "steps past it on the long ones"}
    legacy.write_files(out, cfg, golden)
    print(f"{out}: long prompt ({LONG_PROMPT} tokens) and one that decodes past the switch ({SWITCH_PROMPT}), "
          f"ONNX Runtime greedy {golden['long_prompt']['generated_ids']}, {tokens}")


if __name__ == "__main__":
    main()
