#!/usr/bin/python3
"""Llama-3 as optimum 1.8 to 1.13 shipped text-generation-with-past exports:
decoder_model_merged.onnx, one If on the bool input `use_cache_branch` whose then-branch is
the decoder with a KV cache and whose else-branch is the decoder without one (no
past_key_values inputs; its cache starts empty inside), both reading the weights from the
enclosing graph (tests/models/legacy/llama3_merged). The weights are the zoo's llama3's, so
its golden is that model's (written here from the same weights). ONNX Runtime checks the
file: its greedy tokens, taking either branch as optimum's runtime does, equal the golden
(bench/node_modules, `cd bench && npm install --ignore-scripts`).

    /usr/bin/python3 tools/models/make_merged_decoder.py [--out DIR]
"""
import argparse
import hashlib
import os
import tempfile

import onnx
import torch
from onnx import helper

import hf_families as hf
import legacy_export as legacy


class NoPast(torch.nn.Module):
    """The decoder without past_key_values inputs: an empty cache made inside (batch from
    input_ids), as transformers starts a DynamicCache."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.config = model.config

    def forward(self, input_ids, attention_mask, position_ids):
        c = self.config
        empty = [input_ids.new_zeros((input_ids.shape[0], c.num_key_value_heads, 0, c.head_dim), dtype=torch.float32)
                 for _ in range(2 * c.num_hidden_layers)]
        return self.model(input_ids, attention_mask, position_ids, *empty)


def export_no_past(model, path):
    c = model.config
    ins, outs = hf.io_names(c.num_hidden_layers)
    ins = ins[:3]
    axes = {k: v for k, v in hf.dynamic_axes(c.num_hidden_layers).items() if not k.startswith("past_key_values.")}
    for k in axes:
        if k.startswith("present.") or k == "attention_mask":
            axes[k] = {d: n.replace("past_sequence_length + ", "") for d, n in axes[k].items()}
    g = torch.Generator().manual_seed(1234)
    args = (torch.randint(0, c.vocab_size, (2, 4), generator=g), torch.ones(2, 4, dtype=torch.int64),
            torch.arange(4, dtype=torch.int64)[None].expand(2, 4).contiguous())
    with torch.no_grad():
        torch.onnx.export(NoPast(model), args, path, input_names=ins, output_names=outs, dynamic_axes=axes,
                          opset_version=17, do_constant_folding=True)


def branch(m, tag, outer, shared):
    """m's graph as an If branch: no inputs, its own values renamed `tag/...` (SSA across the
    branches), reads of `outer` (the enclosing graph's inputs) and of the weights in `shared`
    (initializer name -> the enclosing graph's name for the same bytes) left to the enclosing
    scope; outputs `name/tag`."""
    g = m.graph
    rename = {init.name: shared[init.name] for init in g.initializer}
    outputs = {v.name for v in g.output}
    for n in g.node:
        for o in n.output:
            rename[o] = f"{o}/{tag}" if o in outputs else f"{tag}/{o}"
    b = helper.make_graph([], f"{tag}_branch", [], [])
    for n in g.node:
        c = b.node.add()
        c.CopyFrom(n)
        c.name = f"{tag}/{n.name}"
        c.input[:] = [rename.get(v, v) if v not in outer else v for v in n.input]
        c.output[:] = [rename[v] for v in n.output]
    for v in g.output:
        o = b.output.add()
        o.CopyFrom(v)
        o.name = rename[v.name]
    return b


def merge(with_past, no_past, out):
    a, b = onnx.load(with_past), onnx.load(no_past)
    digest = {}
    shared, inits = {}, []
    for init in list(a.graph.initializer) + list(b.graph.initializer):
        t = onnx.TensorProto()
        t.CopyFrom(init)
        t.name = ""
        key = hashlib.sha256(t.SerializeToString()).hexdigest()  # the same weight in both exports
        if key not in digest:
            digest[key] = t.name = f"weights/{len(digest)}"
            inits.append(t)
        shared[init.name] = digest[key]
    outer = {v.name for v in a.graph.input}
    then_b = branch(a, "with_past", outer, {i.name: shared[i.name] for i in a.graph.initializer})
    else_b = branch(b, "no_past", outer, {i.name: shared[i.name] for i in b.graph.initializer})
    cond = helper.make_tensor_value_info("use_cache_branch", onnx.TensorProto.BOOL, [1])
    node = helper.make_node("If", ["use_cache_branch"], [v.name for v in a.graph.output], name="optimum::if",
                            then_branch=then_b, else_branch=else_b)
    graph = helper.make_graph([node], "main_graph", list(a.graph.input) + [cond], list(a.graph.output), inits)
    merged = helper.make_model(graph, opset_imports=list(a.opset_import), producer_name="optimum")
    merged.ir_version = a.ir_version
    onnx.checker.check_model(merged)
    onnx.save(merged, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=legacy.folder("llama3_merged"))
    out = ap.parse_args().out
    model, cfg = legacy.zoo_model("llama3", out)
    with tempfile.TemporaryDirectory() as tmp:
        hf.export_onnx(model, os.path.join(tmp, "with_past.onnx"))
        export_no_past(model, os.path.join(tmp, "no_past.onnx"))
        merge(os.path.join(tmp, "with_past.onnx"), os.path.join(tmp, "no_past.onnx"), os.path.join(out, "model.onnx"))
    golden = legacy.write_golden(out, "llama3", model, cfg)
    for first in (False, True):
        got = legacy.check_in_ort(os.path.join(out, "model.onnx"), golden, first)
    print(f"{out}: {hf.param_count(model)} params; ONNX Runtime greedy (either first branch) == the golden {got}")


if __name__ == "__main__":
    main()
