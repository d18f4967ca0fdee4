#!/usr/bin/python3
"""Train tests/models/tiny_llama: a few-million-parameter Llama on sqlite3-doc.

Run with Debian's python (torch 1.13):
    /usr/bin/python3 tools/models/train_tiny_llama.py            # everything
    /usr/bin/python3 tools/models/train_tiny_llama.py --skip-train  # re-export from model.pt

Stages: corpus (HTML -> text, held-out split) -> byte-level BPE tokenizer
(tokenizer.json) -> training for a fixed number of steps (deterministic seeds)
-> model.pt, model.onnx (optimum layout), config.json, golden.json, eval.json.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bytebpe  # noqa: E402
import corpus  # noqa: E402
import hf_decoder as hd  # noqa: E402
import optimum_layout as layout  # noqa: E402
from onnx_check import check_onnx  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(REPO, "tests", "models", "tiny_llama")

VOCAB = 2048
SPECIALS = ["<|bos|>", "<|eos|>"]
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": VOCAB,
    "hidden_size": 256,
    "intermediate_size": 704,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 32,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "sliding_window": None,
    "num_local_experts": 0,
    "num_experts_per_tok": 0,
    "bos_token_id": VOCAB - 2,
    "eos_token_id": VOCAB - 1,
    "pad_token_id": None,
    "torch_dtype": "float32",
    "use_cache": True,
    "transformers_version": "4.44.0",
}
SEQ = 128
BATCH = 16
PROMPT_TEXT = "SQLite is a"
EVAL_WINDOW = 128


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def build_tokenizer(train_docs, all_texts):
    t0 = time.time()
    tok = bytebpe.train_bpe(train_docs, VOCAB, SPECIALS, log=log)
    log(f"tokenizer: {len(tok)} tokens, {len(tok.merges)} merges in {time.time() - t0:.1f}s")
    assert len(tok) == VOCAB, len(tok)
    assert tok.specials["<|bos|>"] == CONFIG["bos_token_id"]
    assert tok.specials["<|eos|>"] == CONFIG["eos_token_id"]
    n_chars = 0
    for t in all_texts:
        ids = tok.encode(t)
        assert tok.decode(ids) == t, "tokenizer round-trip failed"
        n_chars += len(t)
    log(f"round-trip ok on the whole corpus ({n_chars} chars, train + held-out)")
    tok.save(os.path.join(OUT, "tokenizer.json"))
    added = {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True} for s, i in tok.specials.items()}
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|bos|>",
                   "eos_token": "<|eos|>", "pad_token": None, "unk_token": None,
                   "add_bos_token": False, "add_eos_token": False, "add_prefix_space": False,
                   "clean_up_tokenization_spaces": False, "model_max_length": 512,
                   "added_tokens_decoder": added}, f, indent=1)
    return tok


def init_weights(model, std=0.02):
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                torch.nn.init.zeros_(m.bias)
        elif isinstance(m, torch.nn.Embedding):
            torch.nn.init.normal_(m.weight, 0.0, std)


def lm_loss(model, x):
    """Mean NLL of x[:, 1:] given x[:, :-1]; x is [B, T+1]."""
    inp, tgt = x[:, :-1], x[:, 1:]
    am = torch.ones_like(inp)
    pos = torch.arange(inp.shape[1])[None].expand_as(inp)
    logits, _ = model(inp, am, pos, model.empty_past(inp.shape[0]))
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


@torch.no_grad()
def window_ppl(model, ids, window=EVAL_WINDOW, max_windows=None, batch=8):
    """The eval.json protocol: consecutive non-overlapping windows of `window`
    tokens (last partial dropped), each scored from an empty cache;
    ppl = exp(mean NLL over the window-1 predicted tokens of every window)."""
    n = len(ids) // window
    if max_windows:
        n = min(n, max_windows)
    t = torch.tensor(ids[:n * window], dtype=torch.int64).view(n, window)
    tot, cnt = 0.0, 0
    for i in range(0, n, batch):
        x = t[i:i + batch]
        am = torch.ones_like(x)
        pos = torch.arange(window)[None].expand_as(x)
        logits, _ = model(x, am, pos, model.empty_past(x.shape[0]))
        nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).double(),
                              x[:, 1:].reshape(-1), reduction="sum")
        tot += float(nll)
        cnt += x.shape[0] * (window - 1)
    return math.exp(tot / cnt), cnt, n


def train(model, data, steps, lr=2e-3, warmup=60, min_lr=1e-4):
    g = torch.Generator().manual_seed(42)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))
    model.train()
    t0 = time.time()
    ema = None
    for step in range(steps):
        if step < warmup:
            cur = lr * (step + 1) / warmup
        else:
            frac = (step - warmup) / max(1, steps - warmup)
            cur = min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * frac))
        for pg in opt.param_groups:
            pg["lr"] = cur
        starts = torch.randint(0, len(data) - SEQ - 1, (BATCH,), generator=g)
        x = torch.stack([data[s:s + SEQ + 1] for s in starts.tolist()])
        loss = lm_loss(model, x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = float(loss) if ema is None else 0.98 * ema + 0.02 * float(loss)
        if (step + 1) % 100 == 0 or step == 0:
            el = time.time() - t0
            log(f"step {step + 1}/{steps} loss {float(loss):.3f} ema {ema:.3f} lr {cur:.2e} "
                f"{el:.0f}s ({(step + 1) * BATCH * SEQ / el:.0f} tok/s)")
    model.eval()
    return time.time() - t0


def write_tokenizer_golden(tok, heldout):
    """tokenizer_golden.json: texts and their ids, for the C++ tokenizer's tests."""
    cases = [PROMPT_TEXT,
             "Hello, world!  Two  spaces\tand a tab\nnew line\n\n\nthree",
             "x\u00b2 + y\u00b3 = z\u00b9 \u2014 caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001f642 \u2192 \u00a0nbsp",
             "<|bos|>CREATE TABLE t1(a INTEGER PRIMARY KEY, b TEXT);<|eos|>",
             "don't we'll they're I'M it's",
             "   leading spaces and trailing   ",
             "12345678 3.14159 0x1F sqlite3_open_v2()",
             heldout[:600]]
    with open(os.path.join(OUT, "tokenizer_golden.json"), "w", encoding="utf-8") as f:
        json.dump({"note": "encode(text) with special tokens recognised, no BOS added; "
                           "decode(ids) == text for every case",
                   "cases": [{"text": t, "ids": tok.encode(t)} for t in cases]},
                  f, ensure_ascii=False, indent=1)
    for t in cases:
        assert tok.decode(tok.encode(t)) == t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-train", action="store_true", help="reuse model.pt, redo outputs")
    ap.add_argument("--bench", type=int, default=0, help="time N training steps and exit")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    os.makedirs(OUT, exist_ok=True)

    docs = corpus.load_documents()
    train_docs, held_docs, held_names = corpus.split_documents(docs)
    heldout = "\n".join(held_docs)
    with open(os.path.join(OUT, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(heldout)
    log(f"corpus: {len(docs)} documents; train {sum(len(t) for t in train_docs)} chars, "
        f"held-out {len(heldout)} chars from {len(held_names)} documents")

    tok_path = os.path.join(OUT, "tokenizer.json")
    if args.skip_train and os.path.exists(tok_path):
        tok = bytebpe.Tokenizer.load(tok_path)
    else:
        tok = build_tokenizer(train_docs, train_docs + held_docs + [heldout])
    eos = tok.specials["<|eos|>"]
    train_ids = []
    for t in train_docs:
        train_ids += tok.encode(t) + [eos]
    data = torch.tensor(train_ids, dtype=torch.int64)
    held_ids = tok.encode(heldout)
    log(f"train tokens {len(train_ids)}, held-out tokens {len(held_ids)}")

    cfg = hd.Config(CONFIG)
    model = hd.DecoderLM(cfg)
    init_weights(model)
    n_params = hd.param_count(model)
    log(f"params {n_params}")
    ckpt = os.path.join(OUT, "model.pt")
    train_secs = None
    if args.bench:
        secs = train(model, data, args.bench)
        log(f"bench: {args.bench} steps in {secs:.1f}s = {secs / args.bench:.3f} s/step")
        return
    if args.skip_train:
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        train_secs = state.get("train_seconds")
        steps = state.get("steps")
    else:
        steps = args.steps
        train_secs = train(model, data, steps)
        torch.save({"model": model.state_dict(), "config": CONFIG, "steps": steps,
                    "train_seconds": train_secs, "batch": BATCH, "seq": SEQ}, ckpt)
        log(f"trained {steps} steps in {train_secs:.0f}s")
    model.eval()

    # ---- evaluation -----------------------------------------------------
    ppl, scored, nwin = window_ppl(model, held_ids)
    train_ppl, train_scored, _ = window_ppl(model, train_ids, max_windows=200)
    counts = torch.bincount(data, minlength=VOCAB).double() + 1.0
    probs = counts / counts.sum()
    n = len(held_ids) // EVAL_WINDOW
    tgt = torch.tensor(held_ids[:n * EVAL_WINDOW]).view(n, EVAL_WINDOW)[:, 1:].reshape(-1)
    unigram_ppl = math.exp(float(-torch.log(probs[tgt]).mean()))
    log(f"held-out ppl {ppl:.3f} ({scored} tokens), train ppl {train_ppl:.3f}, unigram {unigram_ppl:.3f}")
    with open(os.path.join(OUT, "eval.json"), "w") as f:
        json.dump({
            "protocol": "tokenize heldout.txt whole (no BOS); consecutive non-overlapping windows of "
                        "window_length tokens, last partial window dropped; each window scored "
                        "independently from an empty KV cache (positions 0..window_length-1, "
                        "attention_mask all ones); ppl = exp(mean NLL over the window_length-1 "
                        "predicted tokens of every window)",
            "heldout_file": "heldout.txt",
            "heldout_chars": len(heldout),
            "heldout_tokens": len(held_ids),
            "window_length": EVAL_WINDOW,
            "windows": nwin,
            "tokens_scored": scored,
            "ppl": ppl,
            "mean_nll": math.log(ppl),
            "train_ppl_same_protocol_first_200_windows": train_ppl,
            "unigram_ppl_heldout_add_one_from_train_counts": unigram_ppl,
            "computed_by": "torch 1.13 float32 (NLL accumulated in float64)",
        }, f, indent=1)

    write_tokenizer_golden(tok, heldout)

    # ---- golden ---------------------------------------------------------
    prompt_ids = tok.encode(PROMPT_TEXT)
    toks, prefill_last, last = hd.greedy_with_cache(model, prompt_ids, 16)
    full = hd.full_logits(model, prompt_ids + toks[:-1])
    assert int(torch.argmax(full[-1])) == toks[-1]
    max_diff = float((full[-1] - last).abs().max())
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump({
            "prompt_text": PROMPT_TEXT,
            "prompt_ids": prompt_ids,
            "generated_ids": toks,
            "generated_text": tok.decode(toks),
            "n_new_tokens": len(toks),
            "procedure": layout.GREEDY_PROCEDURE,
            "prefill_last_logits": prefill_last.tolist(),
            "last_logits": last.tolist(),
            "last_logits_step": "logits from which generated_ids[-1] was chosen (decode step 15)",
            "no_cache_vs_cache_max_abs_diff": max_diff,
        }, f)
    log(f"golden: {prompt_ids} -> {toks} {tok.decode(toks)!r}")

    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=1)
    onnx_path = os.path.join(OUT, "model.onnx")
    hd.export_onnx(model, onnx_path)
    check_onnx(onnx_path, model, prompt_ids)
    meta = {"params": n_params, "train_steps": steps, "train_seconds": train_secs,
            "batch": BATCH, "seq": SEQ, "train_tokens_in_corpus": len(train_ids),
            "tokens_seen": steps * BATCH * SEQ if steps else None,
            "heldout_documents": held_names}
    with open(os.path.join(OUT, "train_meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    log("done", meta)


if __name__ == "__main__":
    main()
