#!/usr/bin/python3
"""Export an eaglet draft (draft.json + draft.bin) to ONNX with torch.onnx.export.

Run with Debian's python (torch 1.13):
    /usr/bin/python3 tools/speculative/export_eaglet_onnx.py [--draft DIR]

The graph is the draft as a decoder in the optimum layout of HF exports, plus the
target's features:
    inputs   input_ids [b, s]             the next tokens x_{i+1}
             target_hidden_states [b, s, H]  f_i, the target's LM head input
             attention_mask [b, past + s], position_ids [b, s]
             past_key_values.0.key / .value [b, kv_heads, past, head_dim]
    outputs  logits [b, s, vocab]          the LM head over the draft's features
             hidden_states [b, s, H]       the draft's features g_{i+1} (after its norm)
             present.0.key / .value
The eaglet build hook adds it to the model set as the "draft" graph, so the manifest's
recipes quantize it and the backend compiles it with the target.
Writes DIR/draft.onnx (weights inline) and checks it against the module's forward with
onnx's reference evaluator when it is installed.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tools", "models"))
import hf_decoder as hd  # noqa: E402
from optimum_layout import dynamic_axes  # noqa: E402


class DraftLM(nn.Module):
    """embed -> fc([embed(x), f]) -> one Llama decoder layer -> norm -> lm_head."""

    def __init__(self, cfg):
        super().__init__()
        c = hd.Config({**cfg, "num_hidden_layers": 1})
        h = c.hidden_size
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, h)
        self.fc = nn.Linear(2 * h, h, bias=True)
        self.layers = nn.ModuleList([hd.DecoderLayer(c)])
        self.norm = hd.RMSNorm(h, c.rms_norm_eps)
        self.rotary = hd.RotaryEmbedding(c.head_dim, c.rope_theta)
        self.lm_head = nn.Linear(h, c.vocab_size, bias=False)

    def forward(self, input_ids, target_hidden_states, attention_mask, position_ids, past_k, past_v):
        x = self.fc(torch.cat([self.embed_tokens(input_ids), target_hidden_states], dim=-1))
        mask = hd.build_attention_mask(attention_mask, input_ids.shape[1], past_k.shape[2], None, x.dtype)
        cos, sin = self.rotary(position_ids)
        x, (k, v) = self.layers[0](x, cos, sin, mask, past_k, past_v)
        g = self.norm(x)
        return self.lm_head(g), g, k, v


def load(draft_dir):
    meta = json.load(open(os.path.join(draft_dir, "draft.json")))
    if meta.get("format") != "npuforge-eaglet-draft" or meta.get("version") != 1:
        sys.exit(f"{draft_dir}/draft.json is not an npuforge-eaglet-draft version 1 file")
    blob = open(os.path.join(draft_dir, "draft.bin"), "rb").read()
    cfg = {k: meta["config"][k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads",
                                          "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta")}
    cfg["attention_bias"] = False
    model = DraftLM(cfg)

    def tensor(name):
        t = meta["tensors"][name]
        n = int(np.prod(t["shape"]))
        a = np.frombuffer(blob, dtype="<f2", count=n, offset=t["offset"]).astype(np.float32)
        return torch.from_numpy(a.reshape(t["shape"]).copy())

    layer = model.layers[0]
    with torch.no_grad():
        for param, name in [(model.embed_tokens.weight, "embed"), (model.lm_head.weight, "lm_head"),
                            (model.fc.weight, "fc.weight"), (model.fc.bias, "fc.bias"),
                            (layer.input_layernorm.weight, "input_norm"), (layer.self_attn.q_proj.weight, "q_proj"),
                            (layer.self_attn.k_proj.weight, "k_proj"), (layer.self_attn.v_proj.weight, "v_proj"),
                            (layer.self_attn.o_proj.weight, "o_proj"),
                            (layer.post_attention_layernorm.weight, "post_norm"),
                            (layer.mlp.gate_proj.weight, "gate_proj"), (layer.mlp.up_proj.weight, "up_proj"),
                            (layer.mlp.down_proj.weight, "down_proj"), (model.norm.weight, "final_norm")]:
            param.copy_(tensor(name))
    return model.eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--draft", default=os.path.join(REPO, "tests", "models", "tiny_llama", "eaglet"))
    ap.add_argument("--opset", type=int, default=17)
    args = ap.parse_args()
    model = load(args.draft)
    c = model.config
    b, past, seq = 2, 3, 4  # a non-empty past so no axis is specialised
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, c.vocab_size, (b, seq), generator=g)
    feats = torch.randn(b, seq, c.hidden_size, generator=g)
    am = torch.ones(b, past + seq, dtype=torch.int64)
    pos = torch.arange(past, past + seq, dtype=torch.int64)[None].expand(b, seq).contiguous()
    pk, pv = (torch.randn(b, c.num_key_value_heads, past, c.head_dim, generator=g) for _ in range(2))
    names_in = ["input_ids", "target_hidden_states", "attention_mask", "position_ids",
                "past_key_values.0.key", "past_key_values.0.value"]
    names_out = ["logits", "hidden_states", "present.0.key", "present.0.value"]
    axes = dynamic_axes(1)
    axes["target_hidden_states"] = {0: "batch_size", 1: "sequence_length"}
    axes["hidden_states"] = {0: "batch_size", 1: "sequence_length"}
    path = os.path.join(args.draft, "draft.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (ids, feats, am, pos, pk, pv), path, input_names=names_in, output_names=names_out,
                          dynamic_axes=axes, opset_version=args.opset, do_constant_folding=True)
        want = model(ids, feats, am, pos, pk, pv)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    try:
        from onnx.reference import ReferenceEvaluator
    except ImportError:
        return
    got = ReferenceEvaluator(path).run(None, {"input_ids": ids.numpy(), "target_hidden_states": feats.numpy(),
                                             "attention_mask": am.numpy(), "position_ids": pos.numpy(),
                                             "past_key_values.0.key": pk.numpy(),
                                             "past_key_values.0.value": pv.numpy()})
    worst = max(float(np.abs(a - w.numpy()).max()) for a, w in zip(got, want))
    print(f"onnx reference evaluator vs torch: max |diff| {worst:.2e}")
    if worst > 1e-3:
        sys.exit("the exported graph does not match the module")


if __name__ == "__main__":
    main()
