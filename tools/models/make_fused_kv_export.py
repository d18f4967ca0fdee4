#!/usr/bin/python3
"""GPT-BigCode as optimum exported it with transformers < 4.54: one fused
`past_key_values.N.key_value` [batch, past, 2 x head_dim] cache input and one
`present.N.key_value` output per layer (tests/models/legacy/gpt_bigcode_fused_kv; no
golden: npuforge refuses this layout in one line, tests/arcl).

    /usr/bin/python3 tools/models/make_fused_kv_export.py [--out DIR]
"""
import argparse
import json
import os

import torch

import hf_families as hf
import make_family_zoo as zoo

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
    print(f"{out}: {hf.param_count(model)} params")


if __name__ == "__main__":
    main()
