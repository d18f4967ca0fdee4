#!/usr/bin/python3
"""Make the tiny random-weight test models under tests/models/.

    /usr/bin/python3 tools/models/make_test_models.py [--only NAME ...] [--out DIR]

Each model folder gets model.onnx (torch.onnx.export, opset 17, optimum
layout, graph as the exporter writes it), config.json (HF), golden.json
(greedy continuation through prefill + KV-cache decode, logits). Everything
is computed by torch from fixed seeds; the ONNX file is checked with
onnx.checker and re-run with the numpy reference evaluator in onnx_ref.py
(onnxruntime is not available to Debian's python here).
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_decoder as hd  # noqa: E402
import optimum_layout as layout  # noqa: E402
from onnx_check import check_onnx  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

COMMON = {
    "hidden_act": "silu",
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "torch_dtype": "float32",
    "use_cache": True,
    "transformers_version": "4.44.0",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "rope_scaling": None,
}

MODELS = {
    "llama_gqa": dict(COMMON, **{
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": 256, "hidden_size": 64, "intermediate_size": 176,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "max_position_embeddings": 256, "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "sliding_window": None,
        "num_local_experts": 0, "num_experts_per_tok": 0,
    }),
    "qwen2": dict(COMMON, **{
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "vocab_size": 512, "hidden_size": 128, "intermediate_size": 192,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "max_position_embeddings": 256, "tie_word_embeddings": True,
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": 2,
        "num_local_experts": 0, "num_experts_per_tok": 0,
        "bos_token_id": 0, "eos_token_id": 3,
    }),
    "mixtral_moe": dict(COMMON, **{
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
        "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
        "max_position_embeddings": 256, "tie_word_embeddings": False,
        "sliding_window": None, "num_local_experts": 4, "num_experts_per_tok": 2,
        "router_aux_loss_coef": 0.02, "output_router_logits": False,
    }),
    "mistral_swa": dict(COMMON, **{
        "architectures": ["MistralForCausalLM"], "model_type": "mistral",
        "vocab_size": 384, "hidden_size": 96, "intermediate_size": 256,
        "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2,
        "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "max_position_embeddings": 256, "tie_word_embeddings": False,
        "sliding_window": 8, "num_local_experts": 0, "num_experts_per_tok": 0,
    }),
}

SEEDS = {"llama_gqa": 11, "qwen2": 22, "mixtral_moe": 33, "mistral_swa": 44}
N_NEW = 16


def random_init(model, seed, logit_gain=4.0):
    """Random weights scaled so the logits are far from flat: N(0,1)
    embeddings, uniform(+-1/sqrt(fan_in)) linears (torch's default range),
    norm weights 1 + N(0, 0.1^2), biases N(0, 0.1^2), lm_head x logit_gain."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                bound = 1.0 / (p.shape[1] ** 0.5)
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)
        if not model.config.tie_word_embeddings:
            model.lm_head.weight.mul_(logit_gain)
        else:
            # tied: logits = normed_h . E, and the residual stream starts at E[token],
            # so a weak layer stack just repeats the input token; make the attention
            # and MLP outputs dominate the residual stream.
            # Also give the final norm N(0,1) weights: with ~1 weights every position's
            # logits peak at its own input token (E_t . E_t dominates).
            model.embed_tokens.weight.mul_(0.5)
            for name, p in model.named_parameters():
                if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                    p.mul_(logit_gain)
            model.norm.weight.copy_(torch.randn(model.norm.weight.shape, generator=g))


def prompt_for(name, cfg):
    """7 random token ids; for sliding-window models window + 4 ids, so the
    window already cuts into the prefill and into every decode step."""
    g = torch.Generator().manual_seed(SEEDS[name] + 1000)
    lo = 4  # keep clear of bos/eos ids
    n = 7 if not cfg.get("sliding_window") else cfg["sliding_window"] + 4
    return torch.randint(lo, cfg["vocab_size"], (n,), generator=g).tolist()


@torch.no_grad()
def padded_batch_case(model, prompt):
    """Batch of 2 prefill rows: row 0 the full prompt, row 1 the prompt minus
    its first 3 tokens, left-padded with 3 pad tokens (attention_mask 0). position_ids
    follow HF: cumsum(attention_mask) - 1, pads set to 1."""
    pad_id = 0
    n = len(prompt)
    short = prompt[3:]
    ids = torch.tensor([prompt, [pad_id] * 3 + short], dtype=torch.int64)
    am = torch.tensor([[1] * n, [0] * 3 + [1] * (n - 3)], dtype=torch.int64)
    pos = am.cumsum(-1) - 1
    pos = pos.masked_fill(am == 0, 1)
    logits, _ = model(ids, am, pos, model.empty_past(2))
    ref = hd.full_logits(model, short)[-1]
    diff = float((logits[1, -1] - ref).abs().max())
    assert diff < 1e-4 * max(1.0, float(ref.abs().max())), diff
    return {
        "input_ids": ids.tolist(), "attention_mask": am.tolist(), "position_ids": pos.tolist(),
        "last_logits": [logits[0, -1].tolist(), logits[1, -1].tolist()],
        "row1_vs_unpadded_max_abs_diff": diff,
        "note": "prefill only from an empty cache; row 1's last logits equal the unpadded run of "
                "prompt_ids[3:] (within row1_vs_unpadded_max_abs_diff)",
    }


def make_model(name, out_root):
    cfg_d = MODELS[name]
    cfg = hd.Config(cfg_d)
    torch.manual_seed(SEEDS[name])
    model = hd.DecoderLM(cfg)
    random_init(model, SEEDS[name])
    model.eval()
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    prompt = prompt_for(name, cfg_d)
    toks, prefill_last, last = hd.greedy_with_cache(model, prompt, N_NEW)
    full = hd.full_logits(model, prompt + toks[:-1])
    cache_diff = float((full[-1] - last).abs().max())
    assert int(torch.argmax(full[-1])) == toks[-1]
    golden = layout.greedy_golden(prompt, toks, prefill_last, last, cache_diff)
    golden["padded_batch"] = padded_batch_case(model, prompt)
    if cfg.sliding_window is not None:
        # show that the window changes the result for this prompt length
        sw = cfg.sliding_window
        cfg.sliding_window = None
        toks_nw, _, last_nw = hd.greedy_with_cache(model, prompt, N_NEW)
        cfg.sliding_window = sw
        golden["without_window"] = {
            "generated_ids": toks_nw,
            "last_logits_max_abs_diff_vs_windowed": float((last_nw - last).abs().max()),
            "note": "same weights with sliding_window disabled (plain causal); differs from "
                    "generated_ids, so a runtime that ignores the window fails the golden test",
        }
    if cfg.num_local_experts:
        # record the routing of the prompt in layer 0 for the moe transform's tests
        x = model.embed_tokens(torch.tensor([prompt]))
        lay = model.layers[0]
        n = len(prompt)
        with torch.no_grad():
            h, _ = lay.self_attn(lay.input_layernorm(x), *model.rotary(torch.arange(n)[None]),
                                 hd.build_attention_mask(torch.ones(1, n, dtype=torch.int64), n, 0, None),
                                 *model.empty_past(1)[0])
            dense, topi, topw = lay.block_sparse_moe.routing(lay.post_attention_layernorm(x + h))
        golden["layer0_routing_prefill"] = {"top_k_expert_ids": topi[0].tolist(),
                                            "top_k_weights": topw[0].tolist()}
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg_d, f, indent=1)
    path = os.path.join(out, "model.onnx")
    hd.export_onnx(model, path)
    rep = check_onnx(path, model, prompt, golden=golden)
    n = hd.param_count(model)
    size = os.path.getsize(path)
    print(f"{name}: params {n}, model.onnx {size / 1e6:.2f} MB, prompt {prompt} -> {toks}; "
          f"onnx check: {rep}", flush=True)
    return n, size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "models"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in (args.only or list(MODELS)):
        make_model(name, args.out)


if __name__ == "__main__":
    main()
