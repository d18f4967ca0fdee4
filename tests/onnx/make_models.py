#!/usr/bin/python3
"""Writes the small ONNX files tests/onnx uses (run with Debian's /usr/bin/python3: onnx 1.12, torch 1.13).

tiny_decoder.onnx      torch.onnx opset 17 export of a 2-layer GQA decoder with past_key_values
tiny_decoder_ext.onnx  the same with every tensor in tiny_decoder_ext.onnx.data (onnx.save external data)
typed_fields.onnx      initializers in every typed field (float/int32 packing/int64/double/uint64/string),
                       Constant nodes, If and Loop subgraphs, attributes of every kind, dim_param shapes
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "data")


def tiny_decoder():
    import torch
    from torch import nn

    torch.manual_seed(0)
    H, NH, KV, HD, L, V, F = 32, 4, 2, 8, 2, 64, 48

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.rand(H) + 0.5)

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    def rope(x, pos):
        inv = 1.0 / (10000 ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
        ang = pos[..., None].float() * inv  # [b, s, hd/2]
        cos, sin = ang.cos()[:, None], ang.sin()[:, None]
        x1, x2 = x[..., : HD // 2], x[..., HD // 2 :]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(H, NH * HD, bias=False)
            self.k_proj = nn.Linear(H, KV * HD, bias=False)
            self.v_proj = nn.Linear(H, KV * HD, bias=False)
            self.o_proj = nn.Linear(NH * HD, H, bias=False)

        def forward(self, x, pos, mask, pk, pv):
            b, s, _ = x.shape
            q = rope(self.q_proj(x).view(b, s, NH, HD).transpose(1, 2), pos)
            k = rope(self.k_proj(x).view(b, s, KV, HD).transpose(1, 2), pos)
            v = self.v_proj(x).view(b, s, KV, HD).transpose(1, 2)
            k = torch.cat([pk, k], 2)
            v = torch.cat([pv, v], 2)
            kr = k.repeat_interleave(NH // KV, 1)
            vr = v.repeat_interleave(NH // KV, 1)
            att = q @ kr.transpose(2, 3) / HD ** 0.5
            t = k.shape[2]
            causal = torch.ones(s, t, dtype=torch.bool).tril(t - s)
            keep = causal[None, None] & mask[:, None, None, :].bool()
            att = att.masked_fill(~keep, -1e9).softmax(-1)
            y = (att @ vr).transpose(1, 2).reshape(b, s, NH * HD)
            return self.o_proj(y), k, v

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm()
            self.self_attn = Attn()
            self.post_attention_layernorm = RMSNorm()
            self.gate_proj = nn.Linear(H, F, bias=False)
            self.up_proj = nn.Linear(H, F, bias=False)
            self.down_proj = nn.Linear(F, H, bias=False)

        def forward(self, x, pos, mask, pk, pv):
            a, k, v = self.self_attn(self.input_layernorm(x), pos, mask, pk, pv)
            x = x + a
            h = self.post_attention_layernorm(x)
            return x + self.down_proj(nn.functional.silu(self.gate_proj(h)) * self.up_proj(h)), k, v

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(V, H)
            self.layers = nn.ModuleList([Layer() for _ in range(L)])
            self.norm = RMSNorm()

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Model()
            self.lm_head = nn.Linear(H, V, bias=False)

        def forward(self, input_ids, attention_mask, position_ids, *past):
            x = self.model.embed_tokens(input_ids)
            presents = []
            for i, layer in enumerate(self.model.layers):
                x, k, v = layer(x, position_ids, attention_mask, past[2 * i], past[2 * i + 1])
                presents += [k, v]
            return (self.lm_head(self.model.norm(x)), *presents)

    m = Decoder().eval()
    b, s, p = 1, 3, 2
    past = []
    names_in = ["input_ids", "attention_mask", "position_ids"]
    names_out = ["logits"]
    dyn = {"input_ids": {0: "batch_size", 1: "sequence_length"},
           "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
           "position_ids": {0: "batch_size", 1: "sequence_length"},
           "logits": {0: "batch_size", 1: "sequence_length"}}
    for i in range(L):
        for kv in ("key", "value"):
            past.append(torch.randn(b, KV, p, HD))
            names_in.append(f"past_key_values.{i}.{kv}")
            names_out.append(f"present.{i}.{kv}")
            dyn[names_in[-1]] = {0: "batch_size", 2: "past_sequence_length"}
            dyn[names_out[-1]] = {0: "batch_size", 2: "total_sequence_length"}
    args = (torch.randint(0, V, (b, s)), torch.ones(b, p + s, dtype=torch.int64),
            torch.arange(p, p + s)[None], *past)
    path = os.path.join(out, "tiny_decoder.onnx")
    torch.onnx.export(m, args, path, input_names=names_in, output_names=names_out, dynamic_axes=dyn,
                      opset_version=17, do_constant_folding=True)
    model = onnx.load(path)
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out, "tiny_decoder_ext.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="tiny_decoder_ext.onnx.data", size_threshold=0)


def typed_fields():
    inits = []

    def typed(name, dtype, dims, **fields):
        t = TensorProto(name=name, data_type=dtype, dims=dims)
        for k, v in fields.items():
            getattr(t, k).extend(v)
        inits.append(t)

    typed("f32", TensorProto.FLOAT, [2, 3], float_data=[0.5, -1, 2, 3.25, 4, 5])
    half = np.array([1.5, -2, 65504], dtype=np.float16).view(np.uint16)
    typed("f16", TensorProto.FLOAT16, [3], int32_data=[int(x) for x in half])
    bf = (np.array([1.0, -3.0], dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    typed("bf16", TensorProto.BFLOAT16, [2], int32_data=[int(x) for x in bf])
    typed("i8", TensorProto.INT8, [4], int32_data=[-128, -1, 0, 127])
    typed("u8", TensorProto.UINT8, [3], int32_data=[0, 200, 255])
    typed("i16", TensorProto.INT16, [2], int32_data=[-30000, 30000])
    typed("u16", TensorProto.UINT16, [2], int32_data=[1, 65535])
    typed("i32", TensorProto.INT32, [2], int32_data=[-7, 1 << 30])
    typed("b", TensorProto.BOOL, [3], int32_data=[1, 0, 1])
    typed("i64", TensorProto.INT64, [2], int64_data=[-(1 << 40), 5])
    typed("f64", TensorProto.DOUBLE, [2], double_data=[3.5, -0.25])
    typed("u32", TensorProto.UINT32, [2], uint64_data=[4000000000, 1])
    typed("u64", TensorProto.UINT64, [1], uint64_data=[(1 << 64) - 1])
    typed("s", TensorProto.STRING, [2], string_data=[b"hello", b"world"])
    inits.append(numpy_helper.from_array(np.arange(300, dtype=np.float32).reshape(3, 100), "raw"))
    inits.append(numpy_helper.from_array(np.zeros((0, 4), dtype=np.float32), "empty"))

    then_g = helper.make_graph([helper.make_node("Identity", ["f32"], ["then_out"])], "then_branch", [],
                               [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [2, 3])])
    else_g = helper.make_graph(
        [helper.make_node("Constant", [], ["else_out"],
                          value=helper.make_tensor("c", TensorProto.FLOAT, [2, 3], [1, 2, 3, 4, 5, 6]))],
        "else_branch", [], [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [2, 3])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "one"], ["acc_out"])],
        "loop_body",
        [helper.make_tensor_value_info("iter", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, ["n"])],
        initializer=[numpy_helper.from_array(np.array([1.0], dtype=np.float32), "one")])
    nodes = [
        helper.make_node("Constant", [], ["flag"], name="const_flag", value=helper.make_tensor("", TensorProto.BOOL, [], [1])),
        helper.make_node("Constant", [], ["trip"], name="const_trip", value_int=3),
        helper.make_node("Constant", [], ["cf"], name="const_floats", value_floats=[1.0, 2.0]),
        helper.make_node("Constant", [], ["cs"], name="const_strings", value_strings=["a", "b"]),
        helper.make_node("If", ["flag"], ["if_out"], name="the_if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Loop", ["trip", "flag", "x"], ["loop_out"], name="the_loop", body=body),
        helper.make_node("LeakyRelu", ["x"], ["lr"], name="leaky", alpha=0.25),
        helper.make_node("Transpose", ["if_out"], ["t"], name="tr", perm=[1, 0]),
        helper.make_node("Cast", ["x"], ["xc"], name="cast", to=TensorProto.FLOAT16),
        helper.make_node("CustomThing", ["x"], ["custom"], name="custom", domain="com.example", mode="fast",
                         names=["p", "q"]),
    ]
    g = helper.make_graph(
        nodes, "typed_fields",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("if_out", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("loop_out", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("lr", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, [3, 2]),
         helper.make_tensor_value_info("xc", TensorProto.FLOAT16, ["batch", None])],
        initializer=inits,
        value_info=[helper.make_tensor_value_info("cf", TensorProto.FLOAT, [2]),
                    helper.make_tensor_value_info("custom", TensorProto.FLOAT, None)])
    m = helper.make_model(g, producer_name="make_models.py",
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, os.path.join(out, "typed_fields.onnx"))


os.makedirs(out, exist_ok=True)
typed_fields()
tiny_decoder()
