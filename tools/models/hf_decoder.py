"""Plain-torch HF-architecture decoders (Llama / Qwen2 / Mistral / Mixtral).

The modules follow the semantics of HF transformers' modeling_llama.py,
modeling_qwen2.py, modeling_mistral.py and modeling_mixtral.py:
  * RMSNorm: x * rsqrt(mean(x^2) + eps) * weight (computed in float32)
  * rotary embeddings: inv_freq = 1 / theta^(2i/d), cos/sin of
    position_ids * inv_freq duplicated over both halves, rotate_half
  * attention: q/k/v projections (bias for Qwen2), GQA by repeating the KV
    heads (repeat_kv), scores / sqrt(head_dim) + additive mask, softmax in
    float32
  * mask: causal (key position <= query position, query position =
    past_len + i), padding from attention_mask, and for Mistral-style
    sliding windows key position > query position - sliding_window
  * MLP: down(silu(gate(x)) * up(x)); Mixtral MoE: router linear, softmax,
    top-k, renormalise, weighted sum of SiLU-gated experts.

The forward signature is the optimum ONNX layout:
    forward(input_ids, attention_mask, position_ids, past (list of (k, v)))
      -> logits, [(present_k, present_v), ...]
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import optimum_layout as layout
from optimum_layout import dynamic_axes, io_names, param_count  # noqa: F401 (used by other tools as hd.*)


class Config:
    """A view over an HF config.json dict with the defaults of LlamaConfig."""

    def __init__(self, d):
        self.raw = dict(d)
        self.vocab_size = d["vocab_size"]
        self.hidden_size = d["hidden_size"]
        self.intermediate_size = d["intermediate_size"]
        self.num_hidden_layers = d["num_hidden_layers"]
        self.num_attention_heads = d["num_attention_heads"]
        self.num_key_value_heads = d.get("num_key_value_heads") or d["num_attention_heads"]
        self.head_dim = d.get("head_dim") or self.hidden_size // self.num_attention_heads
        self.rms_norm_eps = d.get("rms_norm_eps", 1e-6)
        self.rope_theta = d.get("rope_theta", 10000.0)
        self.tie_word_embeddings = d.get("tie_word_embeddings", False)
        self.sliding_window = d.get("sliding_window")
        if not d.get("use_sliding_window", True):
            self.sliding_window = None
        self.attention_bias = d.get("attention_bias", d.get("model_type") == "qwen2")
        self.num_local_experts = d.get("num_local_experts", 0) or 0
        self.num_experts_per_tok = d.get("num_experts_per_tok", 0) or 0
        self.model_type = d.get("model_type", "llama")
        rs = d.get("rope_scaling")
        self.rope_scaling = rs
        if rs and rs.get("rope_type", rs.get("type")) not in (None, "default", "llama3"):
            raise ValueError(f"rope_scaling {rs} is not supported by these test models")


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return self.weight * x.to(dtype)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, theta, rope_scaling=None):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        if rope_scaling and rope_scaling.get("rope_type", rope_scaling.get("type")) == "llama3":
            # HF _compute_llama3_parameters
            factor = rope_scaling["factor"]
            lf, hf = rope_scaling["low_freq_factor"], rope_scaling["high_freq_factor"]
            old = rope_scaling["original_max_position_embeddings"]
            wavelen = 2 * math.pi / inv_freq
            inv_l = torch.where(wavelen > old / lf, inv_freq / factor, inv_freq)
            smooth = (old / wavelen - lf) / (hf - lf)
            smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
            medium = ~(wavelen < old / hf) & ~(wavelen > old / lf)
            inv_freq = torch.where(medium, smoothed, inv_l)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, position_ids):
        # [b, s, 1] * [d/2] -> [b, s, d/2]
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    x1 = x[..., :half]
    x2 = x[..., half:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q, k, cos, sin):
    cos = cos.unsqueeze(1)  # [b, 1, s, d]
    sin = sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def repeat_kv(x, n_rep):
    if n_rep == 1:
        return x
    b, nkv, slen, hd = x.shape
    x = x[:, :, None, :, :].expand(b, nkv, n_rep, slen, hd)
    return x.reshape(b, nkv * n_rep, slen, hd)


def build_attention_mask(attention_mask, seq_len, past_len, sliding_window, dtype=torch.float32):
    """Additive 4D mask [b, 1, seq, past+seq]: 0 where allowed, finfo.min elsewhere."""
    total = attention_mask.shape[1]
    q_pos = torch.arange(seq_len, dtype=torch.int64) + past_len  # absolute query slots
    k_pos = torch.arange(total, dtype=torch.int64)
    allowed = k_pos[None, :] <= q_pos[:, None]
    if sliding_window is not None:
        allowed = allowed & (k_pos[None, :] > (q_pos[:, None] - sliding_window))
    allowed = allowed[None, None, :, :] & attention_mask[:, None, None, :].bool()
    zero = torch.zeros((), dtype=dtype)
    neg = torch.full((), torch.finfo(dtype).min, dtype=dtype)
    return torch.where(allowed, zero, neg)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.nh, self.nkv, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        b = c.attention_bias
        self.q_proj = nn.Linear(c.hidden_size, self.nh * self.hd, bias=b)
        self.k_proj = nn.Linear(c.hidden_size, self.nkv * self.hd, bias=b)
        self.v_proj = nn.Linear(c.hidden_size, self.nkv * self.hd, bias=b)
        self.o_proj = nn.Linear(self.nh * self.hd, c.hidden_size, bias=False)

    def forward(self, x, cos, sin, mask, past_k, past_v):
        bsz, slen = x.shape[0], x.shape[1]
        q = self.q_proj(x).view(bsz, slen, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(bsz, slen, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(bsz, slen, self.nkv, self.hd).transpose(1, 2)
        q, k = apply_rotary(q, k, cos, sin)
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        present = (k, v)
        n_rep = self.nh // self.nkv
        kr = repeat_kv(k, n_rep)
        vr = repeat_kv(v, n_rep)
        scores = torch.matmul(q, kr.transpose(2, 3)) / math.sqrt(self.hd)
        scores = scores + mask
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, vr)
        out = out.transpose(1, 2).reshape(bsz, slen, self.nh * self.hd)
        return self.o_proj(out), present


class MLP(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoE(nn.Module):
    """Mixtral's MixtralSparseMoeBlock, written densely so it exports statically.

    HF computes: router_logits = gate(x); w = softmax(router_logits, fp32);
    w, idx = topk(w, k); w /= w.sum(-1); out = sum_k w_k * expert[idx_k](x).
    Here every expert runs on every token and is weighted by a dense
    [tokens, E] gate matrix that is zero for the non-selected experts:
      dense[t, e] = sum_k w[t, k] * (idx[t, k] == e)
    which gives the same numbers (the skipped experts contribute exactly 0)
    with only static-shape ops: Softmax, TopK, ReduceSum, Div, Equal, Cast,
    Mul, ReduceSum, then per expert a Gather/Slice of the column and Mul/Add.
    """

    def __init__(self, c):
        super().__init__()
        self.num_experts = c.num_local_experts
        self.top_k = c.num_experts_per_tok
        self.gate = nn.Linear(c.hidden_size, self.num_experts, bias=False)
        # HF names experts.{e}.w1 (gate), w2 (down), w3 (up)
        self.experts = nn.ModuleList([MixtralExpert(c.hidden_size, c.intermediate_size)
                                      for _ in range(self.num_experts)])

    def routing(self, x):
        router_logits = self.gate(x)
        w = F.softmax(router_logits, dim=-1, dtype=torch.float32)
        topw, topi = torch.topk(w, self.top_k, dim=-1)
        topw = topw / topw.sum(dim=-1, keepdim=True)
        topw = topw.to(x.dtype)
        experts = torch.arange(self.num_experts, dtype=torch.int64)
        onehot = (topi[..., None] == experts).to(x.dtype)  # [..., k, E]
        dense = (onehot * topw[..., None]).sum(dim=-2)  # [..., E]
        return dense, topi, topw

    def forward(self, x):
        dense, _, _ = self.routing(x)
        out = None
        for e, expert in enumerate(self.experts):
            y = expert(x) * dense[..., e:e + 1]
            out = y if out is None else out + y
        return out


class MixtralExpert(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.w1 = nn.Linear(hidden, inter, bias=False)
        self.w2 = nn.Linear(inter, hidden, bias=False)
        self.w3 = nn.Linear(hidden, inter, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        if c.num_local_experts:
            self.block_sparse_moe = SparseMoE(c)
        else:
            self.mlp = MLP(c.hidden_size, c.intermediate_size)

    def forward(self, x, cos, sin, mask, pk, pv):
        h, present = self.self_attn(self.input_layernorm(x), cos, sin, mask, pk, pv)
        x = x + h
        y = self.post_attention_layernorm(x)
        y = self.block_sparse_moe(y) if hasattr(self, "block_sparse_moe") else self.mlp(y)
        return x + y, present


class DecoderLM(nn.Module):
    """LlamaForCausalLM-like: model.{embed_tokens,layers,norm} + lm_head."""

    def __init__(self, c):
        super().__init__()
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(c) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.rotary = RotaryEmbedding(c.head_dim, c.rope_theta, c.rope_scaling)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        if c.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(self, input_ids, attention_mask, position_ids, past):
        x = self.embed_tokens(input_ids)
        past_len = past[0][0].shape[2]
        mask = build_attention_mask(attention_mask, input_ids.shape[1], past_len,
                                    self.config.sliding_window, x.dtype)
        cos, sin = self.rotary(position_ids)
        presents = []
        for layer, (pk, pv) in zip(self.layers, past):
            x, present = layer(x, cos, sin, mask, pk, pv)
            presents.append(present)
        x = self.norm(x)
        return self.lm_head(x), presents

    def empty_past(self, batch=1, dtype=torch.float32):
        c = self.config
        return [(torch.zeros(batch, c.num_key_value_heads, 0, c.head_dim, dtype=dtype),
                 torch.zeros(batch, c.num_key_value_heads, 0, c.head_dim, dtype=dtype))
                for _ in range(c.num_hidden_layers)]


class OnnxWrapper(nn.Module):
    """Flat-argument wrapper for torch.onnx.export in the optimum layout."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids, *past_flat):
        past = [(past_flat[2 * i], past_flat[2 * i + 1]) for i in range(len(past_flat) // 2)]
        logits, presents = self.model(input_ids, attention_mask, position_ids, past)
        out = [logits]
        for k, v in presents:
            out += [k, v]
        return tuple(out)


def export_onnx(model, path, opset=17):
    """Export with torch.onnx.export exactly as the exporter writes it (no optimizer)."""
    c = model.config
    model.eval()
    b, past, seq = 2, 3, 4  # trace with a non-empty past so no axis is specialised
    g = torch.Generator().manual_seed(1234)
    input_ids = torch.randint(0, c.vocab_size, (b, seq), generator=g)
    attention_mask = torch.ones(b, past + seq, dtype=torch.int64)
    position_ids = torch.arange(past, past + seq, dtype=torch.int64)[None].expand(b, seq).contiguous()
    flat = []
    for _ in range(c.num_hidden_layers):
        flat += [torch.randn(b, c.num_key_value_heads, past, c.head_dim, generator=g) for _ in range(2)]
    ins, outs = io_names(c.num_hidden_layers)
    with torch.no_grad():
        torch.onnx.export(OnnxWrapper(model), tuple([input_ids, attention_mask, position_ids] + flat),
                          path, input_names=ins, output_names=outs,
                          dynamic_axes=dynamic_axes(c.num_hidden_layers),
                          opset_version=opset, do_constant_folding=True)


def greedy_with_cache(model, prompt_ids, n_new):
    """optimum_layout.greedy_with_cache on `model` from an empty cache."""
    return layout.greedy_with_cache(model, model.empty_past(1), prompt_ids, n_new)


def full_logits(model, ids):
    """No-cache forward over a whole sequence (batch 1)."""
    return layout.full_logits(model, model.empty_past(1), ids)
