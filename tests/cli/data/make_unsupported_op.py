"""Writes unsupported_op.onnx: a decoder-shaped model (optimum IO names) whose body uses
an operator the cpu backend does not claim, so `npuforge run` must name it in its error."""
import numpy as np
import onnx
from onnx import TensorProto, helper

V, H, D = 8, 1, 4
inputs = [
    helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
    helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
    helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT, ["batch_size", H, "past_sequence_length", D]),
    helper.make_tensor_value_info("past_key_values.0.value", TensorProto.FLOAT, ["batch_size", H, "past_sequence_length", D]),
]
outputs = [
    helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", V]),
    helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT, ["batch_size", H, "past_sequence_length", D]),
    helper.make_tensor_value_info("present.0.value", TensorProto.FLOAT, ["batch_size", H, "past_sequence_length", D]),
]
emb = helper.make_tensor("embed", TensorProto.FLOAT, [V, V], np.eye(V, dtype=np.float32).flatten())
nodes = [
    helper.make_node("Gather", ["embed", "input_ids"], ["h"], name="/embed/Gather"),
    # Hardmax is a real ONNX operator that decoders do not use.
    helper.make_node("Hardmax", ["h"], ["logits"], name="/head/Hardmax", axis=-1),
    helper.make_node("Identity", ["past_key_values.0.key"], ["present.0.key"]),
    helper.make_node("Identity", ["past_key_values.0.value"], ["present.0.value"]),
]
graph = helper.make_graph(nodes, "unsupported", inputs, outputs, [emb])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="npuforge-tests")
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, "unsupported_op.onnx")
