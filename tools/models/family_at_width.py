#!/usr/bin/python3
"""A decoder family of the zoo at its published width, few layers, through the real exporter.

    /usr/bin/python3 tools/models/family_at_width.py FAMILY CONFIG.json OUT_DIR [--layers N] [--seed S]

FAMILY is a family of tools/models/hf_families.py (phi3, qwen2_untied, gemma2, internlm2, ...),
CONFIG an HF config.json of the published shapes (tools/models/configs/; keys it lacks that are
not shapes, such as dropouts, come from the family's zoo config). The model is built
with the family's HF-faithful code at those widths with N layers (default 2), random weights
(N(0, 0.02) matrices, the modules' own norm and bias defaults), and exported by torch.onnx as
the zoo is (make_family_zoo's mask style and attention for the family), then saved with its
weights in one external file: OUT_DIR/model.onnx + model.onnx.data + config.json.

synth_model.py writes Llama's graph at any size; this gives every other family's graph form
(fused projections, grouped views, soft-capping, biases) at real width, so the real-size
build (bench/scale_bench.sh, MODELS entries "family:config:layers") runs on each form.
"""
import argparse
import json
import os
import sys
import tempfile

import onnx
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hf_families as hf  # noqa: E402
import make_family_zoo as zoo  # noqa: E402

LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers")
SHAPE_KEYS = {"vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
              "head_dim", "max_position_embeddings", "original_max_position_embeddings", "rope_scaling", "sliding_window",
              *LAYER_KEYS}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("family")
    ap.add_argument("config")
    ap.add_argument("out_dir")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cfg = json.load(open(args.config))
    cfg = {k: v for k, v in cfg.items() if not k.startswith("_")}
    # What the config leaves out (dropouts, flags the family's code reads) comes from the
    # family's zoo config; its shapes and position settings never do.
    for k, v in zoo.MODELS.get(args.family, {}).items():
        if k not in cfg and k not in SHAPE_KEYS:
            cfg[k] = v
    for k in ("architectures", "model_type"):
        if k in zoo.MODELS.get(args.family, {}):
            cfg[k] = zoo.MODELS[args.family][k]
    key = next((k for k in LAYER_KEYS if k in cfg), None)
    if key is None:
        raise SystemExit(f"{args.config}: no layer count ({', '.join(LAYER_KEYS)})")
    cfg[key] = args.layers
    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    model = hf.causal_lm(cfg, args.family, mask_style=zoo.MASK_STYLE.get(args.family, "masked_fill"),
                         attn_implementation=zoo.DEFAULT_ATTENTION.get(args.family, "eager"))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
    model.eval()
    os.makedirs(args.out_dir, exist_ok=True)
    # torch writes a model over 2 GB as one file per tensor; gather them into model.onnx.data.
    with tempfile.TemporaryDirectory(dir=args.out_dir) as tmp:
        hf.export_onnx(model, os.path.join(tmp, "model.onnx"))
        m = onnx.load(os.path.join(tmp, "model.onnx"))
    onnx.save_model(m, os.path.join(args.out_dir, "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=1024)
    json.dump(cfg, open(os.path.join(args.out_dir, "config.json"), "w"), indent=1)
    print(f"{args.family} at {os.path.basename(args.config)} width, {args.layers} layers: "
          f"{hf.param_count(model) / 1e6:.1f} M parameters -> {args.out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
