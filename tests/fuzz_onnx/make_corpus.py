#!/usr/bin/python3
"""Writes the seed corpus for the ONNX import fuzzer (Debian's /usr/bin/python3: onnx 1.12, torch 1.13).

Valid models exercise every part of import; invalid ones start the fuzzer next to each refusal.
External data resolves in tests/fuzz_onnx/data (w.bin: 256 bytes; escape.bin: a symlink out).
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

here = os.path.dirname(os.path.abspath(__file__))
corpus = os.path.join(here, "corpus")
data = os.path.join(here, "data")
os.makedirs(corpus, exist_ok=True)
os.makedirs(data, exist_ok=True)
with open(os.path.join(data, "w.bin"), "wb") as f:
    f.write(np.arange(64, dtype=np.float32).tobytes())
if not os.path.lexists(os.path.join(data, "escape.bin")):
    os.symlink("../run.sh", os.path.join(data, "escape.bin"))


def model(inits, nodes=None, inputs=(), outputs=None, value_info=()):
    nodes = nodes or [helper.make_node("Identity", [inits[0].name], ["y"])]
    outputs = outputs or [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    g = helper.make_graph(nodes, "g", list(inputs), outputs, initializer=inits, value_info=list(value_info))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def save(name, m):
    data = m if isinstance(m, bytes) else m.SerializeToString()
    with open(os.path.join(corpus, name), "wb") as f:
        f.write(data)


def external(location, n, offset=0, length=None):
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[n])
    t.data_location = TensorProto.EXTERNAL
    for k, v in [("location", location), ("offset", str(offset))] + ([("length", str(length))] if length else []):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


save("ext_ok.onnx", model([external("w.bin", 16, 64, 64)]))
save("ext_abs.onnx", model([external(os.path.join(data, "w.bin"), 4)]))
save("ext_dotdot.onnx", model([external("../data/w.bin", 4)]))
save("ext_symlink_out.onnx", model([external("escape.bin", 1)]))
save("ext_past_end.onnx", model([external("w.bin", 16, 250)]))
save("ext_missing.onnx", model([external("nope.bin", 4)]))
save("ext_length_lie.onnx", model([external("w.bin", 4, 0, 12)]))

t = numpy_helper.from_array(np.ones(4, dtype=np.float32), "w")
t.raw_data = t.raw_data[:8]
save("shape_lie_raw.onnx", model([t]))
save("shape_lie_typed.onnx", model([TensorProto(name="w", data_type=TensorProto.FLOAT16, dims=[3], int32_data=[1])]))
save("neg_dims.onnx", model([TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[-1])]))
save("unknown_dtype.onnx", model([TensorProto(name="w", data_type=99, dims=[1], int32_data=[1])]))
save("int4_packed.onnx", model([TensorProto(name="w", data_type=22, dims=[3], int32_data=[0x21, 0x03])]))
save("strings.onnx", model([helper.make_tensor("w", TensorProto.STRING, [2], [b"a", b"bc"])]))
save("value_info_neg_dim.onnx", model([numpy_helper.from_array(np.ones(1, np.float32), "w")],
                                      value_info=[helper.make_tensor_value_info("v", TensorProto.FLOAT, [-3])]))
graphs_attr = helper.make_attribute("bodies", [helper.make_graph([], "b", [], [])])
n = helper.make_node("Custom", ["w"], ["y"], domain="x")
n.attribute.append(graphs_attr)
save("attr_graphs.onnx", model([numpy_helper.from_array(np.ones(1, np.float32), "w")], nodes=[n]))

# Nested subgraphs: an If inside a Loop body, with a Constant and an initializer inside.
inner_then = helper.make_graph([helper.make_node("Constant", [], ["c"], value_float=2.0)], "then", [],
                               [helper.make_tensor_value_info("c", TensorProto.FLOAT, [])])
inner_else = helper.make_graph([helper.make_node("Identity", ["one"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1])],
                               initializer=[numpy_helper.from_array(np.ones(1, np.float32), "one")])
body = helper.make_graph(
    [helper.make_node("If", ["cond"], ["r"], then_branch=inner_then, else_branch=inner_else),
     helper.make_node("Identity", ["cond"], ["cond_out"])],
    "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
    [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
     helper.make_tensor_value_info("r", TensorProto.FLOAT, None)])
save("nested_subgraphs.onnx", model(
    [numpy_helper.from_array(np.array(2, np.int64), "trip"), numpy_helper.from_array(np.array(True), "flag")],
    nodes=[helper.make_node("Loop", ["trip", "flag"], ["y"], body=body)]))

# A small decoder-shaped graph with KV names, dim params and every attribute kind.
kv = [helper.make_tensor_value_info(f"past_key_values.0.{k}", TensorProto.FLOAT, ["b", 2, "p", 4]) for k in ("key", "value")]
nodes = [
    helper.make_node("Gather", ["embed", "input_ids"], ["h"], name="/model/embed_tokens/Gather"),
    helper.make_node("MatMul", ["h", "q_w"], ["q"], name="/model/layers.0/self_attn/q_proj/MatMul"),
    helper.make_node("Concat", ["past_key_values.0.key", "past_key_values.0.key"], ["present.0.key"], axis=2),
    helper.make_node("Concat", ["past_key_values.0.value", "past_key_values.0.value"], ["present.0.value"], axis=2),
    helper.make_node("LeakyRelu", ["q"], ["logits"], alpha=0.1),
    helper.make_node("Transpose", ["q"], ["qt"], perm=[1, 0, 2]),
    helper.make_node("Constant", [], ["s"], value_strings=["x", "y"]),
    helper.make_node("Constant", [], ["fl"], value_floats=[1.5]),
    helper.make_node("Constant", [], ["st"], value_string="z"),
]
save("kv_decoder.onnx", model(
    [numpy_helper.from_array(np.random.rand(16, 8).astype(np.float16), "embed"),
     numpy_helper.from_array(np.random.rand(8, 16).astype(np.float16), "q_w")],
    nodes=nodes,
    inputs=[helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])] + kv,
    outputs=[helper.make_tensor_value_info("logits", TensorProto.FLOAT16, ["b", "s", 16]),
             helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT, ["b", 2, "t", 4]),
             helper.make_tensor_value_info("present.0.value", TensorProto.FLOAT, ["b", 2, "t", 4])]))

# Every typed field, from the onnx tests' generator.
typed = open(os.path.join(here, "..", "onnx", "data", "typed_fields.onnx"), "rb").read()
save("typed_fields.onnx", typed)
save("truncated.onnx", typed[: len(typed) // 2])
save("not_protobuf.txt", b"this is a text file, not an ONNX model\n")
save("empty.onnx", b"")
save("no_graph.onnx", helper.make_model(helper.make_graph([], "g", [], [])).SerializeToString()[:4])

# Found by review, kept as regressions: a zero dim beside huge ones (numel() must not overflow),
# KV shapes with absurd head counts next to a fused qkv projection (inspect arithmetic).
save("zero_dim_huge_dims.onnx", model([TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 40, 1 << 40, 0])]))
save("inspect_huge_kv.onnx", model(
    [numpy_helper.from_array(np.ones((2, 6), np.float32), "qkv_w")],
    nodes=[helper.make_node("MatMul", ["x", "qkv_w"], ["y"], name="/model/layers.0/attn/qkv_proj/MatMul")],
    inputs=[helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT, [1, (1 << 62), 1, 3])]))
