"""Writes identity_model.onnx: a decoder-shaped model (optimum IO names) with Identity
nodes inside it, for the out-of-tree fold_identity example plugin's test."""
import numpy as np
import onnx
from onnx import TensorProto, helper

V, H, D = 16, 1, 4
rng = np.random.default_rng(0)
inputs = [
    helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
    helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
    helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT, ["batch_size", H, "past_sequence_length", D]),
    helper.make_tensor_value_info("past_key_values.0.value", TensorProto.FLOAT, ["batch_size", H, "past_sequence_length", D]),
]
outputs = [
    helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", V]),
    helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT, ["batch_size", H, "total_sequence_length", D]),
    helper.make_tensor_value_info("present.0.value", TensorProto.FLOAT, ["batch_size", H, "total_sequence_length", D]),
]
embed = helper.make_tensor("embed", TensorProto.FLOAT, [V, 8], rng.standard_normal((V, 8)).astype(np.float32).flatten())
head = helper.make_tensor("head", TensorProto.FLOAT, [8, V], rng.standard_normal((8, V)).astype(np.float32).flatten())
nodes = [
    helper.make_node("Gather", ["embed", "input_ids"], ["h0"], name="/embed/Gather"),
    helper.make_node("Identity", ["h0"], ["h1"], name="/id1"),
    helper.make_node("Identity", ["h1"], ["h2"], name="/id2"),
    helper.make_node("MatMul", ["h2", "head"], ["logits"], name="/head/MatMul"),
    # New KV rows: the first D features of each token, appended to the past.
    helper.make_node("Slice", ["h0", "kv_start", "kv_end", "kv_axis"], ["kv_rows"]),
    helper.make_node("Unsqueeze", ["kv_rows", "head_axis"], ["kv_new"]),
    helper.make_node("Concat", ["past_key_values.0.key", "kv_new"], ["present.0.key"], axis=2),
    helper.make_node("Concat", ["past_key_values.0.value", "kv_new"], ["present.0.value"], axis=2),
]
consts = [helper.make_tensor(n, TensorProto.INT64, [1], [v])
          for n, v in [("kv_start", 0), ("kv_end", D), ("kv_axis", 2), ("head_axis", 1)]]
graph = helper.make_graph(nodes, "identity_model", inputs, outputs, [embed, head] + consts)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="npuforge-tests")
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, "identity_model.onnx")
