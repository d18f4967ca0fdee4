#!/usr/bin/python3
"""An optimum export quantized as transformers.js's `q4` models are (onnx-community's
`model_q4.onnx`): ONNX Runtime's MatMulNBitsQuantizer with op_types_to_quantize ("MatMul",
"Gather") over the torch export. Every MatMul with a 2-D weight initializer becomes MatMulNBits
(4 bits, blocks of 32 along K, symmetric RTN, no zero points: make_genai_export.quantize_int4)
and the embedding's Gather becomes GatherBlockQuantized (com.microsoft) of its table quantized
the same way along each row ([V, H / 2] codes, [V, H / 32] scales, gather_axis 0,
quantize_axis 1). The golden is the torch model holding the dequantized weights (each found by
its values: a linear's weight is the transpose of its MatMul's initializer), and ONNX Runtime
checks the file with float activations (no accuracy_level): tests/models/legacy/llama3_q4.

    /usr/bin/python3 tools/models/make_q4_export.py [--zoo NAME] [--out DIR]
"""
import argparse
import os

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

import legacy_export as legacy
import make_genai_export as genai


def quantize(graph):
    """The q4 graph; returns {initializer name: its dequantized float values}."""
    inits = {t.name: t for t in graph.initializer}
    dequantized, nodes = {}, []
    for node in graph.node:
        w = inits.get(node.input[0] if node.op_type == "Gather" else node.input[1] if node.op_type == "MatMul" else "")
        if w is None or len(w.dims) != 2 or w.data_type != onnx.TensorProto.FLOAT or w.name in dequantized:
            nodes.append(node)
            continue
        array = numpy_helper.to_array(w)
        if node.op_type == "MatMul":  # [K, N]: blocks along K, a column each
            packed, scales, dequantized[w.name] = genai.quantize_int4(array)
            nodes.append(helper.make_node("MatMulNBits", [node.input[0], w.name + "_Q4", w.name + "_scales"],
                                          list(node.output), name=node.name + "_Q4", domain="com.microsoft",
                                          K=array.shape[0], N=array.shape[1], bits=4, block_size=32))
        else:  # the table [V, H]: blocks along each row, the same codes as its transpose's columns
            packed, scales, table_t = genai.quantize_int4(np.ascontiguousarray(array.T))
            dequantized[w.name] = np.ascontiguousarray(table_t.T)
            vocab, hidden = array.shape
            packed, scales = packed.reshape(vocab, hidden // 2), scales.reshape(vocab, hidden // 32)
            nodes.append(helper.make_node("GatherBlockQuantized", [w.name + "_Q4", node.input[1], w.name + "_scales"],
                                          list(node.output), name=node.name + "_Q4", domain="com.microsoft",
                                          bits=4, block_size=32, gather_axis=0, quantize_axis=1))
        graph.initializer.remove(w)
        graph.initializer.extend([numpy_helper.from_array(packed, w.name + "_Q4"),
                                  numpy_helper.from_array(scales, w.name + "_scales")])
    del graph.node[:]
    graph.node.extend(nodes)
    return dequantized


def load_by_value(model, originals, dequantized):
    """Each torch parameter equal to a quantized initializer (or to its transpose: a linear)
    takes its dequantized values."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() != 2:
                continue
            a = p.detach().numpy()
            for name, w in originals.items():
                if w.shape == a.shape and np.array_equal(w, a):
                    p.copy_(torch.from_numpy(dequantized[name]))
                    break
                if w.shape == a.T.shape and np.array_equal(w, a.T):
                    p.copy_(torch.from_numpy(np.ascontiguousarray(dequantized[name].T)))
                    break
            else:
                raise SystemExit(f"a {tuple(a.shape)} parameter matches no quantized weight")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zoo", default="llama3")
    ap.add_argument("--out")
    args = ap.parse_args()
    out = args.out or legacy.folder(f"{args.zoo}_q4")
    model, cfg = legacy.zoo_model(args.zoo, out)
    source = onnx.load(os.path.join(legacy.REPO, "tests", "models", "zoo", args.zoo, "model.onnx"))
    originals = {t.name: numpy_helper.to_array(t) for t in source.graph.initializer if len(t.dims) == 2}
    dequantized = quantize(source.graph)
    load_by_value(model, {k: v for k, v in originals.items() if k in dequantized}, dequantized)
    if not any(o.domain == "com.microsoft" for o in source.opset_import):
        source.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    path = os.path.join(out, "model.onnx")
    for stale in (path, path + ".data"):
        if os.path.exists(stale):
            os.remove(stale)
    onnx.save(source, path)
    golden = legacy.write_golden(out, args.zoo, model, cfg)
    got = legacy.check_in_ort(path, golden)
    print(f"{out}: ONNX Runtime greedy == the golden {got}")


if __name__ == "__main__":
    main()
