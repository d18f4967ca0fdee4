#!/usr/bin/python3
"""Train ssd assets (forecast embeddings + a KV prefix) for a target model.

Self-speculative decoding (ssd) appends F learned "forecast" token embeddings to the
vocabulary. After a real token at position i, a chain of forecast rows f_1..f_F at
positions i+1..i+F predicts the tokens at i+2..i+F+1 in the same pass the target scores
its tree. Forecast rows also attend to a learned KV prefix (P rows per layer, keys after
RoPE) that real rows never see, so the target's own numbers stay untouched.

The target is frozen: only the F x hidden embeddings and the layers x 2 x kv_heads x P x
head_dim prefix are trained (prefix tuning). The teacher is the target itself: forecast
row (i, k) at position i+k learns the target's next-token distribution at position i+k
(soft cross-entropy), on training-text windows and on the target's own greedy
continuations of training-text prompts (what a greedy draft must guess).

A model tools/models/synth_model.py synthesized (random weights, no text; `--model-dir`)
trains on its own greedy continuations of random prompts only, with the chains anchored in
the continuation (a random prompt token cannot be forecast).

Run with Debian's python (torch 1.13), a few minutes on one or two cores:
    /usr/bin/python3 tools/speculative/train_ssd.py [--model-dir DIR]
Writes DIR/ssd/{assets.json, forecast_embeddings.f32, kv_prefix.f32} (default DIR:
tests/models/tiny_llama).
"""
import argparse
import hashlib
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tools", "models"))
import bytebpe  # noqa: E402
import corpus  # noqa: E402
import hf_decoder as hd  # noqa: E402

MODEL_DIR = os.path.join(REPO, "tests", "models", "tiny_llama")


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Frozen:
    """The target's layers, run row by row with an explicit mask and extra KV columns."""

    def __init__(self, model):
        self.m = model
        c = model.config
        self.nh, self.nkv, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim

    def rope(self, positions):
        return self.m.rotary(positions)  # [B, R, hd] each

    @torch.no_grad()
    def real_pass(self, ids):
        """Plain causal pass over ids [B, T]: teacher logits and per-layer (k, v) after RoPE."""
        B, T = ids.shape
        am = torch.ones_like(ids)
        pos = torch.arange(T)[None].expand(B, T)
        logits, presents = self.m(ids, am, pos, self.m.empty_past(B))
        return logits, presents

    def forecast_pass(self, x, positions, ctx_kv, prefix, mask):
        """x [B, R, H] forecast-row inputs at `positions` [B, R]; each layer attends over
        [prefix (P) | ctx keys (T) | these rows (R)] under the additive mask [B, 1, R, P+T+R]."""
        cos, sin = self.rope(positions)
        for li, layer in enumerate(self.m.layers):
            att = layer.self_attn
            h = layer.input_layernorm(x)
            B, R, _ = h.shape
            q = att.q_proj(h).view(B, R, self.nh, self.hd).transpose(1, 2)
            k = att.k_proj(h).view(B, R, self.nkv, self.hd).transpose(1, 2)
            v = att.v_proj(h).view(B, R, self.nkv, self.hd).transpose(1, 2)
            q, k = hd.apply_rotary(q, k, cos, sin)
            pk, pv = prefix[li]  # [nkv, P, hd]
            ck, cv = ctx_kv[li]  # [B, nkv, T, hd]
            keys = torch.cat([pk[None].expand(B, -1, -1, -1), ck, k], dim=2)
            vals = torch.cat([pv[None].expand(B, -1, -1, -1), cv, v], dim=2)
            rep = self.nh // self.nkv
            keys, vals = hd.repeat_kv(keys, rep), hd.repeat_kv(vals, rep)
            scores = torch.matmul(q, keys.transpose(2, 3)) / math.sqrt(self.hd) + mask
            probs = F.softmax(scores, dim=-1, dtype=torch.float32)
            out = torch.matmul(probs, vals).transpose(1, 2).reshape(B, R, self.nh * self.hd)
            x = x + att.o_proj(out)
            y = layer.post_attention_layernorm(x)
            x = x + layer.mlp(y)
        return self.m.lm_head(self.m.norm(x))


def forecast_batch(frozen, ids, n_anchors, n_forecast, embeds, prefix, gen, first_anchor=0, greedy=False):
    """Loss and hit counters for forecast chains after `n_anchors` random anchors per sequence
    (anchors at positions >= first_anchor). The loss is the cross entropy to the target's
    next-token distribution, or with `greedy` to its most likely token."""
    B, T = ids.shape
    teacher, presents = frozen.real_pass(ids)
    P = prefix[0][0].shape[1]
    # Anchor i: chain rows at positions i+1..i+F predict the target at positions i+1..i+F.
    anchors = torch.stack([torch.randperm(T - n_forecast - 1 - first_anchor, generator=gen)[:n_anchors] + first_anchor
                           for _ in range(B)])
    R = n_anchors * n_forecast
    anchor_of_row = anchors.repeat_interleave(n_forecast, dim=1)  # [B, R]
    k_of_row = torch.arange(1, n_forecast + 1).repeat(n_anchors)[None].expand(B, R)
    positions = anchor_of_row + k_of_row
    x = embeds[k_of_row - 1]  # [B, R, H]
    neg = torch.finfo(torch.float32).min
    ctx_visible = torch.arange(T)[None, None, :] <= anchor_of_row[:, :, None]  # [B, R, T]
    same_chain = (anchor_of_row[:, :, None] == anchor_of_row[:, None, :]) & \
                 (k_of_row[:, None, :] <= k_of_row[:, :, None])  # [B, R, R]
    visible = torch.cat([torch.ones(B, R, P, dtype=torch.bool), ctx_visible, same_chain], dim=2)
    mask = torch.where(visible, torch.zeros(()), torch.full((), neg))[:, None]
    logits = frozen.forecast_pass(x, positions, [(k, v) for k, v in presents], prefix, mask)
    tgt = torch.gather(teacher, 1, positions[:, :, None].expand(B, R, teacher.shape[-1]))
    if greedy:
        loss = F.cross_entropy(logits.flatten(0, 1), tgt.argmax(-1).flatten())
    else:
        loss = -(F.softmax(tgt, -1) * F.log_softmax(logits, -1)).sum(-1).mean()
    with torch.no_grad():
        want = tgt.argmax(-1)
        top = logits.topk(3, -1).indices
        hit1 = (top[..., 0] == want).float().view(B, n_anchors, n_forecast).mean((0, 1))
        hit3 = (top == want[..., None]).any(-1).float().view(B, n_anchors, n_forecast).mean((0, 1))
    return loss, hit1, hit3


@torch.no_grad()
def greedy_continuations(model, prompts, n_new):
    """The target's greedy continuations of prompts [B, T0] (one batch, KV cache)."""
    B, T0 = prompts.shape
    am = torch.ones(B, T0, dtype=torch.int64)
    pos = torch.arange(T0)[None].expand(B, T0)
    logits, past = model(prompts, am, pos, model.empty_past(B))
    out = [prompts]
    tok = logits[:, -1].argmax(-1, keepdim=True)
    for s in range(n_new):
        out.append(tok)
        if s == n_new - 1:
            break
        am = torch.ones(B, T0 + s + 1, dtype=torch.int64)
        logits, past = model(tok, am, torch.full((B, 1), T0 + s), past)
        tok = logits[:, -1].argmax(-1, keepdim=True)
    return torch.cat(out, dim=1)


def heldout_hits(args, frozen, held, embeds, prefix, first_anchor):
    """Hit rates on the target's greedy continuations of held-out prompts."""
    with torch.no_grad():
        _, hit1, hit3 = forecast_batch(frozen, held, args.anchors, args.forecast, embeds, prefix,
                                       torch.Generator().manual_seed(1), first_anchor)
    hits = {"top1": [round(float(h), 4) for h in hit1], "top3": [round(float(h), 4) for h in hit3]}
    log(f"held-out greedy continuations: {hits}")
    return hits


def continuations(model, prompts, n_new):
    return torch.cat([greedy_continuations(model, prompts[i:i + 64], n_new) for i in range(0, len(prompts), 64)])


class Target:
    """The frozen target and its training data: `data` (text tokens, or None), `generated`
    and `held` (greedy continuations of 32-token prompts), `first_anchor` (chains start in
    the continuation when the prompt is random), `hashes` (the files its weights came from)."""


def text_target(args, model_dir, gen):
    """A trained test model (model.pt, tokenizer.json, heldout.txt) and its training text."""
    t = Target()
    state = torch.load(os.path.join(model_dir, "model.pt"))
    t.cfg = hd.Config(state["config"])
    t.model = hd.DecoderLM(t.cfg)
    t.model.load_state_dict(state["model"])
    t.model.eval()
    t.hashes = {"model_pt_sha256": sha256(os.path.join(model_dir, "model.pt"))}
    docs = corpus.load_documents()
    train_docs, _, _ = corpus.split_documents(docs)
    tok = bytebpe.Tokenizer.load(os.path.join(model_dir, "tokenizer.json"))
    eos = tok.specials["<|eos|>"]
    ids, t.chars = [], 0
    for d in train_docs:  # a deterministic slice of the training documents
        if t.chars >= args.train_chars:
            break
        ids += tok.encode(d) + [eos]
        t.chars += len(d)
    t.data = torch.tensor(ids, dtype=torch.int64)
    log(f"training text: {t.chars} chars, {len(ids)} tokens")
    # The target's own greedy continuations: 32-token prompts, seq-32 new tokens.
    starts = torch.randint(0, len(t.data) - 33, (args.generated,), generator=gen)
    t.generated = continuations(t.model, torch.stack([t.data[s:s + 32] for s in starts.tolist()]), args.seq - 32)
    held = torch.tensor(tok.encode(open(os.path.join(model_dir, "heldout.txt"), encoding="utf-8").read()))
    hs = torch.arange(0, len(held) - 33, (len(held) - 33) // 64)[:64]
    t.held = continuations(t.model, torch.stack([held[s:s + 32] for s in hs.tolist()]), args.seq - 32)
    t.first_anchor = 0
    return t


def synth_target(args, model_dir, gen):
    """A model synth_model.py wrote (random weights, no text): greedy continuations of
    uniform random prompts, the held-out ones from a later stream of the same generator."""
    import synth_model
    t = Target()
    raw = json.load(open(os.path.join(model_dir, "config.json")))
    t.model, _ = synth_model.reference_model(raw, model_dir)
    torch.set_num_threads(args.threads)  # reference_model sets 1
    t.cfg = t.model.config
    t.hashes = {f"{f.replace('.', '_')}_sha256": sha256(os.path.join(model_dir, f))
                for f in sorted(os.listdir(model_dir)) if f.startswith("model.onnx")}
    t.data, t.chars = None, 0
    prompts = torch.randint(0, t.cfg.vocab_size, (args.generated + 64, 32), generator=gen)
    t.generated = continuations(t.model, prompts[:args.generated], args.seq - 32)
    t.held = continuations(t.model, prompts[args.generated:], args.seq - 32)
    t.first_anchor = 31  # the last prompt token: its chain forecasts the continuation
    return t


def write_assets(args, t, embeds, prefix, train_seconds, held_hits, steps_done=None):
    cfg = t.cfg
    H, L = cfg.hidden_size, cfg.num_hidden_layers
    os.makedirs(args.out, exist_ok=True)
    emb_path = os.path.join(args.out, "forecast_embeddings.f32")
    kv_path = os.path.join(args.out, "kv_prefix.f32")
    embeds.detach().contiguous().numpy().astype("<f4").tofile(emb_path)
    # [layers][key, value][kv_heads][P][head_dim]
    kv = torch.stack([torch.stack([k.detach(), v.detach()]) for k, v in prefix])
    kv.contiguous().numpy().astype("<f4").tofile(kv_path)
    meta = {
        "format": "npuforge-speculative-assets",
        "version": 1,
        "decoder": "ssd",
        "extra_embeddings": {"file": "forecast_embeddings.f32", "rows": args.forecast, "hidden": H,
                             "dtype": "float32", "first_id": cfg.vocab_size},
        "ssd": {
            "forecast_token_count": args.forecast,
            "forecast_prefix": args.prefix,
            "kv_prefix": {"file": "kv_prefix.f32", "dtype": "float32",
                          "layout": "[layers][key, value][kv_heads][forecast_prefix][head_dim], keys after RoPE",
                          "layers": L, "kv_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim},
        },
        "model": {"vocab": cfg.vocab_size, "hidden": H, **t.hashes},
        "training": {"tool": "tools/speculative/train_ssd.py",
                     "steps": steps_done if steps_done is not None else args.steps,
                     "batch": args.batch, "seq": args.seq, "anchors_per_sequence": args.anchors, "lr": args.lr,
                     "train_chars": t.chars, "greedy_continuations": args.generated,
                     "first_anchor": t.first_anchor,
                     "objective": {"soft": "soft cross-entropy to the frozen target's next-token distribution",
                                   "greedy": "cross-entropy to the frozen target's greedy token"}[args.objective],
                     "train_seconds": round(train_seconds, 1), "threads": args.threads,
                     "heldout_greedy_hit_rates": held_hits},
    }
    with open(os.path.join(args.out, "assets.json"), "w") as f:
        json.dump(meta, f, indent=1)
    log(f"wrote {args.out} ({meta['training']['steps']} steps)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", default=MODEL_DIR,
                    help="the target: a trained test model (model.pt, tokenizer.json) or a synthesized one (model.onnx)")
    ap.add_argument("--forecast", type=int, default=4, help="F: forecast embeddings")
    ap.add_argument("--prefix", type=int, default=16, help="P: KV prefix rows per layer")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=96)
    ap.add_argument("--anchors", type=int, default=24)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--train-chars", type=int, default=1_500_000, help="training text to tokenize")
    ap.add_argument("--generated", type=int, default=256, help="greedy continuations to train on")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="", help="asset folder (default MODEL_DIR/ssd)")
    ap.add_argument("--save-every", type=int, default=50, help="also write the assets every N steps")
    ap.add_argument("--objective", choices=["soft", "greedy"], default="soft",
                    help="cross entropy to the target's distribution, or to its greedy token (a random-weight "
                         "target's distribution is near flat: its top-1 probability is ~3e-4 of 32000 tokens)")
    args = ap.parse_args()
    model_dir = os.path.abspath(args.model_dir)
    args.out = args.out or os.path.join(model_dir, "ssd")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(7)
    t_start = time.time()

    t = (text_target if os.path.exists(os.path.join(model_dir, "model.pt")) else synth_target)(args, model_dir, gen)
    model, cfg = t.model, t.cfg
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    frozen = Frozen(model)
    log(f"greedy continuations: {tuple(t.generated.shape)} in {time.time() - t_start:.0f}s")

    H = cfg.hidden_size
    # Start: forecast embeddings at the mean token embedding; prefix = the target's own KV
    # of P real tokens (prefix tuning converges far better from real activations).
    embeds = (model.embed_tokens.weight.mean(0, keepdim=True).repeat(args.forecast, 1)
              + 0.02 * torch.randn(args.forecast, H, generator=gen)).requires_grad_(True)
    first = t.data[:args.prefix] if t.data is not None else t.generated[0, -args.prefix:]
    _, presents = frozen.real_pass(first[None])
    prefix = [(k[0].clone().requires_grad_(True), v[0].clone().requires_grad_(True)) for k, v in presents]
    params = [embeds] + [p for kv in prefix for p in kv]
    opt = torch.optim.Adam(params, lr=args.lr)

    def batch():
        if t.data is None:
            return t.generated[torch.randint(0, t.generated.shape[0], (args.batch,), generator=gen)]
        half = args.batch // 2
        s = torch.randint(0, len(t.data) - args.seq, (args.batch - half,), generator=gen)
        real = torch.stack([t.data[i:i + args.seq] for i in s.tolist()])
        g = t.generated[torch.randint(0, t.generated.shape[0], (half,), generator=gen)]
        return torch.cat([real, g])

    t0 = time.time()
    ema = None
    for step in range(args.steps):
        lr = args.lr * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        for pg in opt.param_groups:
            pg["lr"] = lr
        loss, hit1, hit3 = forecast_batch(frozen, batch(), args.anchors, args.forecast, embeds, prefix, gen,
                                          t.first_anchor, args.objective == "greedy")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        ema = float(loss) if ema is None else 0.95 * ema + 0.05 * float(loss)
        if step % 50 == 0 or step == args.steps - 1:
            log(f"step {step + 1}/{args.steps} loss {float(loss):.3f} ema {ema:.3f} "
                f"top1 {[round(float(h), 2) for h in hit1]} top3 {[round(float(h), 2) for h in hit3]} "
                f"{time.time() - t0:.0f}s")
        if args.save_every and (step + 1) % args.save_every == 0 and step + 1 < args.steps:
            write_assets(args, t, embeds, prefix, time.time() - t0, None, steps_done=step + 1)
    train_seconds = time.time() - t0

    write_assets(args, t, embeds, prefix, train_seconds, heldout_hits(args, frozen, t.held, embeds, prefix, t.first_anchor))
    log(f"wrote {args.out} in {time.time() - t_start:.0f}s total")


if __name__ == "__main__":
    main()
