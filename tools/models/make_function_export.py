#!/usr/bin/python3
"""Llama-3 exported with its repeated modules as ONNX model-local functions, as
torch.onnx.export(export_modules_as_functions=...) writes them and as Qualcomm's
efficient-transformers exports decoders (use_onnx_subfunctions: one function per decoder
layer): every decoder layer is a call of one function, whose RMSNorms call another
(tests/models/legacy/llama3_functions). The weights are the zoo's llama3's, so the golden is
that model's. ONNX Runtime checks the file: its greedy tokens equal the golden
(bench/node_modules, `cd bench && npm install --ignore-scripts`). torch 1.13 numbers a
module's function variants ('DecoderLayer', 'DecoderLayer.1': the first layer's body has
four more nodes) and their value names in an order of its own from run to run, so a rerun
may swap them: the file is the same up to those names, and the check above holds either way.

    /usr/bin/python3 tools/models/make_function_export.py [--out DIR]
"""
import argparse
import os

import onnx
import torch

import hf_families as hf
import legacy_export as legacy


def export_with_functions(model, path, modules):
    """hf.export_onnx with export_modules_as_functions=modules (the exporter call is the
    same in every other respect)."""
    export = torch.onnx.export

    def as_functions(*args, **kwargs):
        return export(*args, export_modules_as_functions=modules, **kwargs)

    torch.onnx.export = as_functions
    try:
        hf.export_onnx(model, path)
    finally:
        torch.onnx.export = export


def name_outputs(path, names):
    """torch 1.13 leaves graph outputs that a function call makes with their numbered names
    (output_names reaches only values the main graph's own nodes make); later exporters
    name them. Applies `names` (the output_names asked for) to the call outputs."""
    m = onnx.load(path)
    rename = {v.name: n for v, n in zip(m.graph.output, names) if v.name != n}
    for node in m.graph.node:
        node.output[:] = [rename.get(o, o) for o in node.output]
        node.input[:] = [rename.get(i, i) for i in node.input]
    for v in m.graph.output:
        v.name = rename.get(v.name, v.name)
    onnx.save(m, path)
    return len(rename)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=legacy.folder("llama3_functions"))
    out = ap.parse_args().out
    model, cfg = legacy.zoo_model("llama3", out)
    path = os.path.join(out, "model.onnx")
    export_with_functions(model, path, {hf.DecoderLayer, hf.LlamaRMSNorm})
    renamed = name_outputs(path, hf.io_names(model.config.num_hidden_layers)[1])
    m = onnx.load(path)
    onnx.checker.check_model(m)
    calls = {f.name: sum(n.op_type == f.name for n in m.graph.node) for f in m.functions}
    assert any(calls.values()), calls
    got = legacy.check_in_ort(path, legacy.write_golden(out, "llama3", model, cfg))
    print(f"{out}: {len(m.functions)} functions {sorted(calls.items())} in the main graph, {renamed} outputs named; "
          f"ONNX Runtime greedy == the golden {got}")


if __name__ == "__main__":
    main()
