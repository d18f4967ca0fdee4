#!/usr/bin/python3
"""Train the eaglet draft (EAGLE-2 style) for tests/models/tiny_llama, or for a model
tools/models/synth_model.py synthesized (random weights, no tokenizer).

Run with Debian's python (torch 1.13):
    /usr/bin/python3 tools/speculative/train_eaglet.py [--steps 400] [--threads 2]
    /usr/bin/python3 tools/speculative/train_eaglet.py --model-dir DIR --windows 192 --steps 300 \
        --lr 2e-4 --ce-weight 0 --init-repeat --fit-confidence      (the 100M bench model)

The draft sees, at position i, the target's last hidden state f_i (the input of the
LM head, i.e. after the final norm) and the embedding of the next token x_{i+1}:
    g_{i+1} = norm(layer(fc([emb(x_{i+1}), f_i])))      (one Llama decoder layer)
    logits  = lm_head(g_{i+1})                          (the target's frozen LM head)
and learns to predict f_{i+1} (smooth L1) and the target's next-token distribution
(cross entropy against the target's softmax). Features come from the frozen target
over windows of its own training text; a synthesized model has no text, so its windows
are random prompts followed by the target's own greedy continuation (EAGLE's
self-distillation data: what the target writes is what the draft must foresee).

Output (the eaglet plugin's asset, copied into packages by `npuforge build`):
    MODEL_DIR/eaglet/draft.json   config + tensor table + training metrics
    MODEL_DIR/eaglet/draft.bin    the tensors, float16, little endian
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tools", "models"))
import bytebpe  # noqa: E402
import corpus  # noqa: E402
import hf_decoder as hd  # noqa: E402

MODEL_DIR = os.path.join(REPO, "tests", "models", "tiny_llama")
SEQ = 64
BATCH = 8


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


class Draft(nn.Module):
    def __init__(self, c, inter):
        super().__init__()
        h = c.hidden_size
        dc = hd.Config({**c.raw, "intermediate_size": inter, "num_hidden_layers": 1})
        self.fc = nn.Linear(2 * h, h, bias=True)
        self.layer = hd.DecoderLayer(dc)
        self.norm = hd.RMSNorm(h, c.rms_norm_eps)
        self.rotary = hd.RotaryEmbedding(c.head_dim, c.rope_theta)
        self.cfg = dc

    def forward(self, emb_next, feat, positions):
        """emb_next, feat: [B, T, H]; positions [B, T]. Causal over T."""
        x = self.fc(torch.cat([emb_next, feat], dim=-1))
        b, t = x.shape[0], x.shape[1]
        mask = hd.build_attention_mask(torch.ones(b, t, dtype=torch.int64), t, 0, None, x.dtype)
        cos, sin = self.rotary(positions)
        c = self.cfg
        empty = torch.zeros(b, c.num_key_value_heads, 0, c.head_dim)
        x, _ = self.layer(x, cos, sin, mask, empty, empty)
        return self.norm(x)


@torch.no_grad()
def target_features(model, x):
    """x [B, T] -> (features after the final norm [B, T, H], logits [B, T, V])."""
    am = torch.ones_like(x)
    pos = torch.arange(x.shape[1])[None].expand_as(x)
    emb = model.embed_tokens(x)
    mask = hd.build_attention_mask(am, x.shape[1], 0, None, emb.dtype)
    cos, sin = model.rotary(pos)
    h = emb
    for layer, (pk, pv) in zip(model.layers, model.empty_past(x.shape[0])):
        h, _ = layer(h, cos, sin, mask, pk, pv)
    f = model.norm(h)
    return f, model.lm_head(f)


def draft_forward(draft, model, x, f, noise=0.0):
    """The draft over windows x [B, T] with the target's features f [B, T, H] over them
    (entry i reads embed(x[i+1]) and f[i], `noise` x its spread added): its features and
    logits for positions 1..T-1."""
    feat_in = f[:, :-1]
    if noise > 0:
        feat_in = feat_in + noise * torch.randn_like(feat_in) * feat_in.std()
    pos = torch.arange(x.shape[1] - 1)[None].expand(x.shape[0], -1)
    g = draft(model.embed_tokens(x[:, 1:]).detach(), feat_in, pos)
    return g, model.lm_head(g)


def draft_loss(draft, model, x, f, noise):
    """x [B, T] tokens, f [B, T, H] the target's features over x."""
    g, pred = draft_forward(draft, model, x, f, noise)
    want_f, want_logits = f[:, 1:], model.lm_head(f[:, 1:])
    reg = F.smooth_l1_loss(g, want_f)
    ce = -(F.softmax(want_logits, -1) * F.log_softmax(pred, -1)).sum(-1).mean()
    top1 = (pred.argmax(-1) == want_logits.argmax(-1)).float().mean()
    return reg, ce, top1


def token_map(ids, vocab):
    """Token ids by falling frequency in the training text (ties by id): the draft's
    reduced vocabulary is a prefix of this list (EAGLE-3's draft token map)."""
    counts = torch.bincount(torch.tensor(ids, dtype=torch.int64), minlength=vocab)
    order = sorted(range(vocab), key=lambda t: (-int(counts[t]), t))
    covered = torch.cumsum(counts[order].double(), 0) / counts.sum()
    return order, {str(k): round(float(covered[k - 1]), 4) for k in (256, 512, 1024) if k <= vocab}


def draft_tensors(draft, model):
    """draft.bin's tensors by name (the target's embedding and head included)."""
    return {
        "embed": model.embed_tokens.weight,
        "lm_head": model.lm_head.weight,
        "fc.weight": draft.fc.weight,
        "fc.bias": draft.fc.bias,
        "input_norm": draft.layer.input_layernorm.weight,
        "q_proj": draft.layer.self_attn.q_proj.weight,
        "k_proj": draft.layer.self_attn.k_proj.weight,
        "v_proj": draft.layer.self_attn.v_proj.weight,
        "o_proj": draft.layer.self_attn.o_proj.weight,
        "post_norm": draft.layer.post_attention_layernorm.weight,
        "gate_proj": draft.layer.mlp.gate_proj.weight,
        "up_proj": draft.layer.mlp.up_proj.weight,
        "down_proj": draft.layer.mlp.down_proj.weight,
        "final_norm": draft.norm.weight,
    }


def load_exported(draft, model, path):
    """The draft's own tensors from path/draft.json + draft.bin (as export wrote them)."""
    meta = json.load(open(os.path.join(path, "draft.json")))
    blob = open(os.path.join(path, "draft.bin"), "rb").read()
    with torch.no_grad():
        for name, t in draft_tensors(draft, model).items():
            if name in ("embed", "lm_head"):
                continue
            e = meta["tensors"][name]
            a = np.frombuffer(blob, dtype="<f2", count=e["nbytes"] // 2, offset=e["offset"]).reshape(e["shape"])
            t.copy_(torch.from_numpy(a.astype(np.float32)))
    return meta


@torch.no_grad()
def fit_confidence(draft, model, x, f, scales=(1, 1.5, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100)):
    """Temperature scaling (one scalar on the draft's logits, Guo et al. 2017) against the
    target's greedy token. The decoder ranks tree nodes by the draft's cumulative
    probability, so it must say how likely the target's argmax is; a draft distilled from a
    near-flat target (top-1 probability 3e-4) would rank every second-depth node above the
    likeliest third-depth one. Returns (scale, cross entropy at 1, at the scale)."""
    ce = torch.zeros(len(scales))
    n = 0
    for i in range(0, len(x), 8):
        xb, fb = x[i:i + 8], f[i:i + 8]
        logits = draft_forward(draft, model, xb, fb)[1].flatten(0, 1)
        want = model.lm_head(fb[:, 1:]).argmax(-1).flatten()
        for k, sc in enumerate(scales):
            ce[k] += F.cross_entropy(logits * sc, want, reduction="sum")
        n += len(want)
    best = int(ce.argmin())
    return scales[best], float(ce[0] / n), float(ce[best] / n)


def export(draft, model, cfg, inter, path, metrics, tmap=None, confidence_scale=1.0):
    os.makedirs(path, exist_ok=True)
    sd = draft_tensors(draft, model)
    tensors, blob, offset = {}, [], 0
    for name, t in sd.items():
        a = t.detach().cpu().numpy().astype("<f2")
        tensors[name] = {"dtype": "float16", "shape": list(a.shape), "offset": offset, "nbytes": a.nbytes}
        blob.append(a.tobytes())
        offset += a.nbytes
    meta = {
        "format": "npuforge-eaglet-draft",
        "version": 1,
        "feature": "hidden_states",
        "feature_is": "the target's LM head input (after the final norm)",
        "config": {"vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size, "intermediate_size": inter,
                   "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
                   "head_dim": cfg.head_dim, "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta},
        "tensors": tensors,
        "confidence_scale": confidence_scale,
        "token_map": tmap[0] if tmap else None,
        "token_map_coverage": tmap[1] if tmap else None,
        "training": metrics,
    }
    with open(os.path.join(path, "draft.bin"), "wb") as f:
        for b in blob:
            f.write(b)
    with open(os.path.join(path, "draft.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    log(f"wrote {path}/draft.json + draft.bin ({offset} bytes)")


def frozen(model):
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def text_target(model_dir, args, g):
    """The trained test model (model.pt + tokenizer.json): windows of SEQ tokens of its
    training text, held-out windows of the corpus's held-out documents."""
    state = torch.load(os.path.join(model_dir, "model.pt"))
    cfg = hd.Config(state["config"])
    model = hd.DecoderLM(cfg)
    model.load_state_dict(state["model"])
    tok = bytebpe.Tokenizer.load(os.path.join(model_dir, "tokenizer.json"))
    eos = tok.specials["<|eos|>"]
    docs = corpus.load_documents()
    train_docs, held_docs, _ = corpus.split_documents(docs)
    ids, chars = [], 0
    for t in train_docs:
        if chars >= args.train_chars:
            break
        ids += tok.encode(t) + [eos]
        chars += len(t)
    data = torch.tensor(ids, dtype=torch.int64)
    held = torch.tensor(tok.encode("\n".join(held_docs))[:64 * SEQ], dtype=torch.int64)
    starts = torch.randint(0, len(data) - SEQ - 1, (args.windows,), generator=g)
    wx = torch.stack([data[s:s + SEQ] for s in starts.tolist()])
    log(f"train tokens {len(ids)} ({chars} chars), held-out tokens {len(held)}")
    return frozen(model), cfg, wx, held.view(-1, SEQ), ids


@torch.no_grad()
def greedy_windows(model, n, prompt_len, new, g, batch=16):
    """n windows of `prompt_len` uniform random tokens followed by the target's greedy
    continuation of `new` tokens (batched, with the KV cache)."""
    out = []
    for b0 in range(0, n, batch):
        b = min(batch, n - b0)
        x = torch.randint(0, model.config.vocab_size, (b, prompt_len), generator=g)
        past, seq, ids = model.empty_past(b), x, x
        for _ in range(new):
            total = ids.shape[1]
            pos = torch.arange(total - seq.shape[1], total)[None].expand(b, -1)
            logits, past = model(seq, torch.ones(b, total, dtype=torch.int64), pos, past)
            seq = logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, seq], 1)
        out.append(ids)
        log(f"greedy windows {b0 + b}/{n}")
    return torch.cat(out)


def synth_target(model_dir, args, g):
    """A model synth_model.py wrote (random weights, no text): the target writes its own
    training data, greedy continuations of random prompts (the held-out windows come from
    another stream of the same generator)."""
    import synth_model
    raw = json.load(open(os.path.join(model_dir, "config.json")))
    model, _ = synth_model.reference_model(raw, model_dir)
    torch.set_num_threads(args.threads)  # reference_model sets 1
    cfg = model.config
    cache = os.path.join(args.feature_cache, f"eaglet_windows_{args.windows}_{args.prompt_len}_{args.new_tokens}.pt")
    if args.feature_cache and os.path.exists(cache):
        wx, hx = torch.load(cache)
    else:
        wx = greedy_windows(model, args.windows, args.prompt_len, args.new_tokens, g)
        hx = greedy_windows(model, max(8, args.windows // 16), args.prompt_len, args.new_tokens, g)
        if args.feature_cache:
            torch.save((wx, hx), cache)
    return frozen(model), cfg, wx, hx, wx[:, args.prompt_len:].flatten().tolist()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", default=MODEL_DIR,
                    help="the target: a trained test model (model.pt, tokenizer.json) or a synthesized one (model.onnx)")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--inter", type=int, default=0, help="draft MLP width (0: 352 for the test model, else half the target's)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--train-chars", type=int, default=400_000)
    ap.add_argument("--windows", type=int, default=320, help="training windows (features cached)")
    ap.add_argument("--prompt-len", type=int, default=32, help="synthesized model: random prompt tokens per window")
    ap.add_argument("--new-tokens", type=int, default=64, help="synthesized model: greedy tokens per window")
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--ce-weight", type=float, default=0.1, help="weight of the cross entropy beside the feature loss")
    ap.add_argument("--fit-confidence", action="store_true",
                    help="scale the draft's logits (one scalar) to the target's greedy token after training")
    ap.add_argument("--fit-confidence-only", action="store_true", help="fit the scale of the draft in --out and exit")
    ap.add_argument("--init-repeat", action="store_true", help="start fc as the identity on the token embedding")
    ap.add_argument("--out", default="", help="asset folder (default MODEL_DIR/eaglet)")
    ap.add_argument("--export-every", type=int, default=50, help="export the draft every N steps too")
    ap.add_argument("--token-map-only", action="store_true",
                    help="add the token map to the existing draft.json and exit (no training)")
    ap.add_argument("--feature-cache", default="", help="folder to keep the target's features (and generated windows) between runs")
    args = ap.parse_args()
    model_dir = os.path.abspath(args.model_dir)
    args.out = args.out or os.path.join(model_dir, "eaglet")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    t_start = time.time()
    g = torch.Generator().manual_seed(1)

    text = os.path.exists(os.path.join(model_dir, "model.pt"))
    model, cfg, wx, hx, ids = (text_target if text else synth_target)(model_dir, args, g)
    if not args.inter:
        args.inter = 352 if text else cfg.intermediate_size // 2
    tmap = token_map(ids, cfg.vocab_size)
    if args.token_map_only:
        path = os.path.join(args.out, "draft.json")
        meta = json.load(open(path))
        meta["token_map"], meta["token_map_coverage"] = tmap
        with open(path, "w") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
        log(f"token map added to {path}: coverage {tmap[1]}")
        return

    # The target's features over the windows, computed once (the target is frozen).
    cache = os.path.join(args.feature_cache, f"eaglet_features_{args.windows}_{wx.shape[1]}_{len(ids)}.pt")
    if args.feature_cache and os.path.exists(cache):
        wf, hf = torch.load(cache)
    else:
        wf = torch.cat([target_features(model, wx[i:i + 16])[0] for i in range(0, len(wx), 16)])
        hf = torch.cat([target_features(model, hx[i:i + 16])[0] for i in range(0, len(hx), 16)])
        if args.feature_cache:
            torch.save((wf, hf), cache)
    log(f"target features for {len(wx)} windows in {time.time() - t_start:.0f}s")

    if args.fit_confidence_only:  # an exported draft: fit its confidence scale, rewrite draft.json
        meta = json.load(open(os.path.join(args.out, "draft.json")))
        draft = Draft(cfg, meta["config"]["intermediate_size"])
        load_exported(draft, model, args.out)
        draft.eval()
        scale, ce1, ce_s = fit_confidence(draft, model, wx[:64], wf[:64])
        meta["confidence_scale"] = scale
        meta["training"].update({"greedy_ce_before": round(ce1, 4), "greedy_ce_after": round(ce_s, 4)})
        with open(os.path.join(args.out, "draft.json"), "w") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
        log(f"confidence: logits x {scale} (cross entropy to the target's greedy token {ce1:.3f} -> {ce_s:.3f})")
        return

    draft = Draft(cfg, args.inter)
    for m in draft.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    if args.init_repeat:
        # fc passes the next token's embedding through (and not yet the features) and the
        # layer's residual branches start at zero: the untrained draft's head favours that
        # token again, a repeating target's most common next token.
        with torch.no_grad():
            h = cfg.hidden_size
            draft.fc.weight[:, :h] = torch.eye(h)
            draft.fc.weight[:, h:] = 0
            draft.layer.self_attn.o_proj.weight.zero_()  # residual branches start closed
            draft.layer.mlp.down_proj.weight.zero_()
    with torch.no_grad():
        same = (hx[:, 2:] == hx[:, 1:-1]).float().mean()
    log(f"held-out: the target repeats the previous token at {float(same):.3f} of positions")
    opt = torch.optim.AdamW(draft.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    t0 = time.time()
    warmup = 30
    for step in range(args.steps):
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
        for pg in opt.param_groups:
            pg["lr"] = lr
        pick = torch.randint(0, len(wx), (BATCH,), generator=g)
        reg, ce, top1 = draft_loss(draft, model, wx[pick], wf[pick], args.noise)
        loss = reg + args.ce_weight * ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        if args.export_every and (step + 1) % args.export_every == 0 and step + 1 < args.steps:
            draft.eval()
            with torch.no_grad():
                reg_h, ce_h, top1_h = draft_loss(draft, model, hx, hf, 0.0)
            draft.train()
            log(f"step {step + 1}: held-out top1 {float(top1_h):.3f}; exporting")
            export(draft, model, cfg, args.inter, args.out,
                   {"steps": step + 1, "partial": True, "heldout_top1_vs_target": round(float(top1_h), 4)}, tmap)
        if (step + 1) % 25 == 0 or step == 0:
            log(f"step {step + 1}/{args.steps} reg {float(reg):.4f} ce {float(ce):.3f} top1 {float(top1):.3f} "
                f"{time.time() - t0:.0f}s")
    draft.eval()
    confidence, scale = {}, 1.0
    if args.fit_confidence:
        scale, ce1, ce_s = fit_confidence(draft, model, wx[:64], wf[:64])
        confidence = {"greedy_ce_before": round(ce1, 4), "greedy_ce_after": round(ce_s, 4)}
        log(f"confidence: logits x {scale} (cross entropy to the target's greedy token {ce1:.3f} -> {ce_s:.3f})")
    with torch.no_grad():
        reg, ce, top1 = draft_loss(draft, model, hx, hf, 0.0)
    metrics = {**confidence, "steps": args.steps, "batch": BATCH, "seq": int(wx.shape[1]), "windows": args.windows,
               "train_tokens": len(ids), "inter": args.inter, "noise": args.noise,
               "lr": args.lr, "init_repeat": args.init_repeat, "ce_weight": args.ce_weight,
               "train_seconds": round(time.time() - t0, 1), "threads": args.threads,
               "heldout_top1_vs_target": round(float(top1), 4), "heldout_ce": round(float(ce), 4),
               "heldout_smooth_l1": round(float(reg), 5)}
    log(f"held-out: top1 agreement with the target {float(top1):.3f}, ce {float(ce):.3f}")
    export(draft, model, cfg, args.inter, args.out, metrics, tmap, scale)


if __name__ == "__main__":
    main()
