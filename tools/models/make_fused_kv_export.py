#!/usr/bin/python3
"""GPT-BigCode as optimum exported it with transformers < 4.54: one fused
`past_key_values.N.key_value` [batch, past, 2 x head_dim] cache input and one
`present.N.key_value` output per layer, the heads folded into the rows
(tests/models/legacy/gpt_bigcode_fused_kv). The weights are the zoo's gpt_bigcode's, so its
golden is that model's (written here from the same weights), and the export is checked by
the numpy interpreter: its greedy tokens equal the golden.

    /usr/bin/python3 tools/models/make_fused_kv_export.py [--out DIR]
"""
import argparse
import json
import os

import numpy as np
import torch

import hf_families as hf
import make_family_zoo as zoo
import onnx_ref

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "models", "legacy", "gpt_bigcode_fused_kv"))
    out = ap.parse_args().out
    cfg = dict(zoo.MODELS["gpt_bigcode"], transformers_version="4.44.0")
    torch.manual_seed(zoo.SEEDS["gpt_bigcode"])
    model = hf.GPTBigCodeFusedForCausalLM(cfg)
    zoo.gpt2_init(model, torch.Generator().manual_seed(zoo.SEEDS["gpt_bigcode"]))
    model.eval()
    layers, hd = cfg["n_layer"], cfg["n_embd"] // cfg["n_head"]
    b, past, seq = 2, 3, 4
    g = torch.Generator().manual_seed(1234)
    args = [torch.randint(0, cfg["vocab_size"], (b, seq), generator=g), torch.ones(b, past + seq, dtype=torch.int64),
            torch.arange(past, past + seq, dtype=torch.int64)[None].expand(b, seq).contiguous()]
    args += [torch.randn(b, past, 2 * hd, generator=g) for _ in range(layers)]
    ins = ["input_ids", "attention_mask", "position_ids"] + [f"past_key_values.{i}.key_value" for i in range(layers)]
    outs = ["logits"] + [f"present.{i}.key_value" for i in range(layers)]
    axes = {"input_ids": {0: "batch_size", 1: "sequence_length"},
            "attention_mask": {0: "batch_size", 1: "past_sequence_length + sequence_length"},
            "position_ids": {0: "batch_size", 1: "sequence_length"}, "logits": {0: "batch_size", 1: "sequence_length"}}
    for i in range(layers):
        axes[f"past_key_values.{i}.key_value"] = {0: "batch_size", 1: "past_sequence_length"}
        axes[f"present.{i}.key_value"] = {0: "batch_size", 1: "past_sequence_length + sequence_length"}
    os.makedirs(out, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(model, tuple(args), os.path.join(out, "model.onnx"), input_names=ins, output_names=outs,
                          dynamic_axes=axes, opset_version=17, do_constant_folding=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    prompt = zoo.prompt_for("gpt_bigcode", cfg)
    golden = zoo.make_golden("gpt_bigcode", zoo.build("gpt_bigcode"), prompt)
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f)
    got = onnx_greedy(os.path.join(out, "model.onnx"), prompt, layers, hd, len(golden["generated_ids"]))
    assert got == golden["generated_ids"], (got, golden["generated_ids"])
    print(f"{out}: {hf.param_count(model)} params; onnx(numpy) greedy == the golden {got}")


def onnx_greedy(path, prompt, layers, hd, n_new):
    """Prefill and decode through the fused-cache export with the numpy interpreter."""
    session = onnx_ref.Session(path)
    past = [np.zeros((1, 0, 2 * hd), np.float32) for _ in range(layers)]
    rows, out = list(prompt), []
    while len(out) < n_new:
        start = past[0].shape[1]
        feeds = {"input_ids": np.array([rows], np.int64), "attention_mask": np.ones((1, start + len(rows)), np.int64),
                 "position_ids": np.arange(start, start + len(rows), dtype=np.int64)[None]}
        feeds.update({f"past_key_values.{i}.key_value": past[i] for i in range(layers)})
        r = session.run(feeds)
        out.append(int(np.argmax(r["logits"][0, -1])))
        past = [r[f"present.{i}.key_value"] for i in range(layers)]
        rows = [out[-1]]
    return out


if __name__ == "__main__":
    main()
