#!/usr/bin/python3
"""Learn SpinQuant rotations (Liu et al. 2024, arXiv 2405.16406) for tests/models/tiny_llama.

Run with Debian's python (torch 1.13, CPU):
    /usr/bin/python3 tools/quant/train_spinquant.py                 # writes tests/models/tiny_llama/spinquant/
    /usr/bin/python3 tools/quant/train_spinquant.py --steps 0       # only measure the start (random Hadamard)

What it does, in the spinquant plugin's own terms (plugins/quant/spinquant/README.md):
  1. loads model.pt and fuses every RMSNorm gain into the linear layers reading the norm;
  2. R1 (hidden x hidden) and one R2 (head_dim x head_dim) per layer start as the plugin's
     random Hadamards and are optimised with Cayley SGD on the orthogonal group (they stay
     exactly orthogonal) against the next-token loss of the *quantized* network:
     weights fake-quantized as the lpbq recipe stores them (4-bit blocks of 64 whose scales are
     integers 1..16 times a per-channel scale; LM head int8 per channel), activations at the
     inputs and outputs of every linear layer and the KV cache at 8 bits (per-tensor
     asymmetric min/max of the batch, as the recipes' min/max calibration), straight-through
     gradients through every rounding;
  3. with --online-down-proj (default on) the down_proj input is rotated by the fixed
     Hadamard R4 the plugin inserts with `online_down_proj = true`, so R1/R2 are learned for
     the graph that runs;
  4. writes rotations.bin (float64, row-major R1 then R2 of layer 0..L-1) and rotations.json
     (sizes, offsets, how it was trained, the losses measured).
Calibration text: tests/models/tiny_llama/calibration.txt (training documents; the held-out
text is never read). 20% of its windows are kept aside to report the loss on unseen windows.
"""
import argparse
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
import hf_decoder as hd  # noqa: E402

MODEL = os.path.join(REPO, "tests", "models", "tiny_llama")


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


# ---- Hadamard matrices: the same construction as plugins/quant/spinquant/hadamard.h ----

def is_prime(p):
    return p >= 2 and all(p % d for d in range(2, int(math.isqrt(p)) + 1))


def quadratic_character(q):
    chi = [-1] * q
    chi[0] = 0
    for x in range(1, q):
        chi[(x * x) % q] = 1
    return chi


def paley_hadamard(q):
    n = q + 1
    chi = quadratic_character(q)
    H = [[0] * n for _ in range(n)]
    for j in range(1, n):
        H[0][j] = 1
        H[j][0] = -1
    for i in range(1, n):
        for j in range(1, n):
            H[i][j] = chi[((j - i) % q + q) % q]
    for i in range(n):
        H[i][i] = 1
    return H


def paley2_hadamard(q):
    """Paley II, order 2 (q + 1), q prime = 1 mod 4: C (x) [[1, 1], [1, -1]] + I (x) [[1, -1], [-1, -1]]."""
    c = q + 1
    chi = quadratic_character(q)

    def conference(i, j):
        if i == j:
            return 0
        if i == 0 or j == 0:
            return 1
        return chi[((j - i) % q + q) % q]
    off, diag = [[1, 1], [1, -1]], [[1, -1], [-1, -1]]
    H = [[0] * (2 * c) for _ in range(2 * c)]
    for i in range(c):
        for j in range(c):
            for a in range(2):
                for b in range(2):
                    H[2 * i + a][2 * j + b] = diag[a][b] if i == j else conference(i, j) * off[a][b]
    return H


def paley1_order(b):
    return b % 4 == 0 and is_prime(b - 1) and (b - 1) % 4 == 3


def paley2_order(b):
    return b % 4 == 0 and is_prime(b // 2 - 1) and (b // 2 - 1) % 4 == 1


def hadamard_matrix(n):
    m = n
    while m % 2 == 0 and m > 1:
        m //= 2
    b, H = 1, [[1]]
    if m != 1:
        b = 0
        order = m
        while order <= n:
            if paley1_order(order) or paley2_order(order):
                b = order
                break
            order *= 2
        if b == 0:
            raise ValueError(f"no Hadamard matrix of order {n} is built here")
        H = paley_hadamard(b - 1) if paley1_order(b) else paley2_hadamard(b // 2 - 1)
    H = torch.tensor(H, dtype=torch.float64)
    while H.shape[0] < n:
        H = torch.cat([torch.cat([H, H], 1), torch.cat([H, -H], 1)], 0)
    return H


def online_hadamard(n):
    """R4 as the plugin builds it (plugins/quant/spinquant/online.h): P (x) Q, p a power of
    two, the buildable split with the smallest p^2 + q^2; each factor H / sqrt(order)."""
    best, cost, p = 1, n * n, 2
    while p < n and n % p == 0:
        try:
            hadamard_matrix(n // p)
            if p * p + (n // p) ** 2 < cost:
                best, cost = p, p * p + (n // p) ** 2
        except ValueError:
            pass
        p *= 2
    if best == 1:
        return hadamard_matrix(n) / math.sqrt(n)
    q = n // best
    return torch.kron(hadamard_matrix(best) / math.sqrt(best), hadamard_matrix(q) / math.sqrt(q))


def random_hadamard(n, gen):
    """H diag(s) / sqrt(n) with random signs s (the starting point; orthogonal)."""
    s = torch.randint(0, 2, (n,), generator=gen).double() * 2 - 1
    return hadamard_matrix(n) * s[None, :] / math.sqrt(n)


# ---- fake quantization (straight-through rounding) ----

def ste_round(x):
    return x + (torch.round(x) - x).detach()


def lpbq_fake(w, block=64, bw=4, dbw=8):
    """w is torch [out N, in K]; blocks of `block` input channels (plugins/quant/lpbq/lpbq_math.h)."""
    N, K = w.shape
    qmax, qmin, imax = 2 ** (bw - 1) - 1, -(2 ** (bw - 1)), 2 ** (dbw - bw)
    wb = w.view(N, K // block, block)
    s_blk = wb.detach().abs().amax(-1) / qmax                       # [N, B]
    s_ch = (s_blk.amax(-1, keepdim=True) / imax).clamp_min(1e-12)   # [N, 1]
    i_blk = torch.clamp(torch.round(s_blk / s_ch), 1, imax)
    s_eff = (s_ch * i_blk)[..., None]
    return (torch.clamp(ste_round(wb / s_eff), qmin, qmax) * s_eff).view(N, K)


def per_channel_fake(w, bw=8):
    s = (w.detach().abs().amax(1, keepdim=True) / (2 ** (bw - 1) - 1)).clamp_min(1e-12)
    return torch.clamp(ste_round(w / s), -(2 ** (bw - 1)), 2 ** (bw - 1) - 1) * s


def act_fake(x, bw=8):
    """Asymmetric per-tensor min/max (range widened to hold 0), as the recipes' encodings."""
    lo = torch.clamp(x.detach().min(), max=0.0)
    hi = torch.clamp(x.detach().max(), min=0.0)
    s = ((hi - lo) / (2 ** bw - 1)).clamp_min(1e-12)
    off = torch.round(lo / s)
    q = torch.clamp(ste_round(x / s) - off, 0, 2 ** bw - 1)
    return (q + off) * s


# ---- the rotated, norm-fused, fake-quantized tiny_llama ----

class RotatedLlama:
    def __init__(self, state, cfg):
        self.cfg = cfg
        c = cfg
        self.L, self.D, self.nh, self.nkv, self.hd = (c["num_hidden_layers"], c["hidden_size"],
                                                        c["num_attention_heads"], c["num_key_value_heads"],
                                                        c["head_dim"])
        self.eps = c["rms_norm_eps"]
        sd = {k: v.double() for k, v in state.items()}
        self.embed = sd["embed_tokens.weight"]
        self.layers = []
        for i in range(self.L):
            p = f"layers.{i}."
            g1, g2 = sd[p + "input_layernorm.weight"], sd[p + "post_attention_layernorm.weight"]
            self.layers.append({
                "q": sd[p + "self_attn.q_proj.weight"] * g1[None], "k": sd[p + "self_attn.k_proj.weight"] * g1[None],
                "v": sd[p + "self_attn.v_proj.weight"] * g1[None], "o": sd[p + "self_attn.o_proj.weight"],
                "gate": sd[p + "mlp.gate_proj.weight"] * g2[None], "up": sd[p + "mlp.up_proj.weight"] * g2[None],
                "down": sd[p + "mlp.down_proj.weight"]})
        self.lm_head = sd["lm_head.weight"] * sd["norm.weight"][None]
        rot = hd.RotaryEmbedding(self.hd, c["rope_theta"])
        self.inv_freq = rot.inv_freq

    def rotated_weights(self, R1, R2, R4):
        """torch [out, in] weights: readers W R1, writers R1^T W, v rows / o columns by R2 per head,
        down_proj columns by R4 (its input x H4)."""
        out = {"embed": self.embed @ R1, "lm_head": self.lm_head @ R1, "layers": []}
        for i, l in enumerate(self.layers):
            r2 = R2[i]
            v = (l["v"] @ R1).view(self.nkv, self.hd, self.D)
            v = torch.einsum("ji,hjd->hid", r2, v).reshape(self.nkv * self.hd, self.D)  # R2^T per head
            o = (R1.t() @ l["o"]).view(self.D, self.nh, self.hd)
            o = torch.einsum("dhj,ji->dhi", o, r2).reshape(self.D, self.nh * self.hd)
            down = R1.t() @ l["down"]
            if R4 is not None:
                down = down @ R4
            out["layers"].append({"q": l["q"] @ R1, "k": l["k"] @ R1, "v": v, "o": o,
                                  "gate": l["gate"] @ R1, "up": l["up"] @ R1, "down": down})
        return out

    def forward(self, ids, R1, R2, R4, quant):
        W = self.rotated_weights(R1, R2, R4)
        fw = (lambda w: lpbq_fake(w.float())) if quant else (lambda w: w.float())
        fa = act_fake if quant else (lambda x: x)
        B, T = ids.shape
        x = F.embedding(ids, W["embed"].float())
        pos = torch.arange(T)[None].expand(B, T)
        freqs = pos[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        mask = torch.full((T, T), float("-inf")).triu(1)

        def norm(h):
            return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)

        def linear(h, w):  # activation encodings on the input and the output of every linear
            return fa(F.linear(fa(h), fw(w)))

        for l in W["layers"]:
            h = norm(x)
            q = linear(h, l["q"]).view(B, T, self.nh, self.hd).transpose(1, 2)
            k = linear(h, l["k"]).view(B, T, self.nkv, self.hd).transpose(1, 2)
            v = linear(h, l["v"]).view(B, T, self.nkv, self.hd).transpose(1, 2)
            q, k = hd.apply_rotary(q, k, cos[:, 0], sin[:, 0])
            k = fa(k)  # the KV cache (present.N.key) at 8 bits; the value is v_proj's output
            rep = self.nh // self.nkv
            kr, vr = hd.repeat_kv(k, rep), hd.repeat_kv(v, rep)
            att = torch.softmax(q @ kr.transpose(2, 3) / math.sqrt(self.hd) + mask, -1)
            a = (att @ vr).transpose(1, 2).reshape(B, T, self.nh * self.hd)
            x = x + linear(a, l["o"])
            h = norm(x)
            m = F.silu(linear(h, l["gate"])) * linear(h, l["up"])
            if R4 is not None:  # the online Hadamard: input kept at 16 bits, output at 8 (A8 of down_proj)
                m = fa(m @ R4.float(), 8) if quant else m @ R4.float()
                x = x + fa(F.linear(m, fw(l["down"])))
            else:
                x = x + linear(m, l["down"])
        h = norm(x)
        w_head = per_channel_fake(W["lm_head"].float(), 8) if quant else W["lm_head"].float()
        return F.linear(fa(h), w_head)  # logits stay at 16 bits (logits_bw): not fake-quantized


def kl_to_float(logits, teacher):
    """Mean KL(float || quantized) per token: the quantization damage alone (no text noise)."""
    t = F.log_softmax(teacher, -1)
    return (t.exp() * (t - F.log_softmax(logits, -1))).sum(-1).mean()


def window_loss(model, windows, teacher, R1, R2, R4, quant, batch=8):
    """(next-token cross-entropy, KL to the float model), nats per token."""
    with torch.no_grad():
        ce, kl, n = 0.0, 0.0, 0
        for i in range(0, len(windows), batch):
            x = windows[i:i + batch]
            logits = model.forward(x[:, :-1], R1, R2, R4, quant)
            ce += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum"))
            kl += float(kl_to_float(logits, teacher[i:i + batch])) * x[:, 1:].numel()
            n += x[:, 1:].numel()
    return round(ce / n, 5), round(kl / n, 6)


def cayley_step(R, G, M, lr, momentum):
    """One Cayley SGD step on the orthogonal group (Li et al. 2020, as SpinQuant):
    A = G R^T - R G^T (skew; momentum accumulates A), W = lr A / |A|_F (the KL gradients are
    ~1e-3, so the step is normalised: lr is the rotation's Frobenius step),
    R <- (I + W/2)^-1 (I - W/2) R: exactly orthogonal, first order R - W R (descent)."""
    A = G @ R.t() - R @ G.t()
    M.mul_(momentum).add_(A)
    W = lr * M / M.norm().clamp_min(1e-30)
    I = torch.eye(R.shape[0], dtype=R.dtype)
    return torch.linalg.solve(I + 0.5 * W, (I - 0.5 * W) @ R)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--out", default=None, help="output folder (default MODEL/spinquant)")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--lr", type=float, default=0.05, help="Frobenius norm of each Cayley step (cosine to 0)")
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--loss", choices=["kl", "ce"], default="kl",
                    help="kl: KL(float || quantized) per token (default); ce: next-token cross-entropy")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--online-down-proj", type=int, default=1, help="1: train with the plugin's R4 (default)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out_dir = args.out or os.path.join(args.model, "spinquant")

    cfg = json.load(open(os.path.join(args.model, "config.json")))
    state = torch.load(os.path.join(args.model, "model.pt"), map_location="cpu")["model"]
    model = RotatedLlama(state, cfg)
    tok = bytebpe.Tokenizer.load(os.path.join(args.model, "tokenizer.json"))
    text = open(os.path.join(args.model, "calibration.txt"), encoding="utf-8").read()
    ids = tok.encode(text)
    n_win = len(ids) // (args.seq + 1)
    windows = torch.tensor(ids[:n_win * (args.seq + 1)], dtype=torch.int64).view(n_win, args.seq + 1)
    n_val = max(1, n_win // 5)
    train, val = windows[:-n_val], windows[-n_val:]
    log(f"calibration.txt: {len(ids)} tokens, {len(train)} training windows + {len(val)} kept aside, "
        f"{args.seq + 1} tokens each")

    gen = torch.Generator().manual_seed(args.seed)
    R1 = random_hadamard(model.D, gen)
    R2 = [random_hadamard(model.hd, gen) for _ in range(model.L)]
    I_size = cfg["intermediate_size"]
    R4 = online_hadamard(I_size) if args.online_down_proj else None

    # Sanity: in float the rotated network equals the original.
    ref = hd.DecoderLM(hd.Config(cfg))
    ref.load_state_dict(state)
    ref.eval()
    with torch.no_grad():
        x = windows[:2, :32]
        a = ref(x, torch.ones_like(x), torch.arange(32)[None].expand(2, 32), ref.empty_past(2))[0]
        b = model.forward(x, R1, R2, R4, quant=False)
    log(f"float check: max |logit diff| rotated vs model.pt {float((a - b).abs().max()):.2e}")

    I1 = torch.eye(model.D, dtype=torch.float64)
    I2 = [torch.eye(model.hd, dtype=torch.float64) for _ in range(model.L)]
    with torch.no_grad():  # the float model's logits: the teacher of the KL loss
        teach = torch.cat([model.forward(windows[i:i + 8, :-1], I1, I2, None, False) for i in range(0, n_win, 8)])
    t_train, t_val = teach[:-n_val], teach[-n_val:]
    losses = {"float_val": window_loss(model, val, t_val, I1, I2, None, False),
              "w4a8_no_rotation_train": window_loss(model, train, t_train, I1, I2, None, True),
              "w4a8_no_rotation_val": window_loss(model, val, t_val, I1, I2, None, True),
              "w4a8_start_train": window_loss(model, train, t_train, R1, R2, R4, True),
              "w4a8_start_val": window_loss(model, val, t_val, R1, R2, R4, True)}
    log("losses at the start (cross-entropy, KL to float): " + json.dumps(losses))

    M1 = torch.zeros_like(R1)
    M2 = [torch.zeros_like(r) for r in R2]
    g = torch.Generator().manual_seed(args.seed + 100)
    t0 = time.time()
    ema = None
    for step in range(args.steps):
        lr = args.lr * 0.5 * (1 + math.cos(math.pi * step / args.steps))  # cosine to 0
        r1 = R1.clone().requires_grad_(True)
        r2 = [r.clone().requires_grad_(True) for r in R2]
        idx = torch.randint(0, len(train), (args.batch,), generator=g)
        x = train[idx]
        logits = model.forward(x[:, :-1], r1, r2, R4, True)
        if args.loss == "kl":
            loss = kl_to_float(logits, t_train[idx])
        else:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        loss.backward()
        with torch.no_grad():
            R1 = cayley_step(R1, r1.grad, M1, lr, args.momentum)
            R2 = [cayley_step(R2[i], r2[i].grad, M2[i], lr, args.momentum) for i in range(model.L)]
        ema = float(loss) if ema is None else 0.9 * ema + 0.1 * float(loss)
        if (step + 1) % 10 == 0 or step == 0:
            log(f"step {step + 1}/{args.steps} {args.loss} {float(loss):.5f} ema {ema:.5f} lr {lr:.3f} "
                f"{time.time() - t0:.0f}s")
    orth = max(float((R1 @ R1.t() - I1).abs().max()), *[float((r @ r.t() - I2[0]).abs().max()) for r in R2])
    losses["w4a8_learned_train"] = window_loss(model, train, t_train, R1, R2, R4, True)
    losses["w4a8_learned_val"] = window_loss(model, val, t_val, R1, R2, R4, True)
    log("losses after training (cross-entropy, KL to float): " + json.dumps(losses) +
        f"; max |R R^T - I| {orth:.2e}")

    os.makedirs(out_dir, exist_ok=True)
    blob = torch.cat([R1.reshape(-1)] + [r.reshape(-1) for r in R2]).numpy().astype("<f8").tobytes()
    with open(os.path.join(out_dir, "rotations.bin"), "wb") as f:
        f.write(blob)
    meta = {
        "format": "npuforge-spinquant-rotations",
        "version": 1,
        "data": "rotations.bin",
        "dtype": "float64",
        "layout": "row-major; R1 [hidden, hidden] at element 0, then R2 [head_dim, head_dim] of layer 0..L-1",
        "hidden_size": model.D,
        "head_dim": model.hd,
        "num_layers": model.L,
        "r1": {"offset": 0, "size": model.D},
        "r2": {"offset": model.D * model.D, "size": model.hd, "count": model.L},
        "trained_with": {"online_down_proj": bool(args.online_down_proj), "steps": args.steps, "lr": args.lr,
                         "momentum": args.momentum, "loss": args.loss, "batch": args.batch, "seq": args.seq, "seed": args.seed,
                         "quantization": "W4 LPBQ block 64 (LM head W8 per channel), A8 per-tensor min/max at every "
                                         "linear input/output and the key cache, logits float",
                         "text": "calibration.txt (training windows; held-out text never read)",
                         "command": "/usr/bin/python3 tools/quant/train_spinquant.py " + " ".join(sys.argv[1:])},
        "losses_nats_per_token": {k: {"cross_entropy": v[0], "kl_to_float": v[1]} for k, v in losses.items()},
        "max_orthogonality_error": orth,
        "train_seconds": round(time.time() - t0, 1),
    }
    with open(os.path.join(out_dir, "rotations.json"), "w") as f:
        json.dump(meta, f, indent=1)
    log(f"wrote {out_dir}/rotations.bin ({len(blob)} bytes) and rotations.json")


if __name__ == "__main__":
    main()
