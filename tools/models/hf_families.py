"""A second, independent set of plain-torch decoders: one class set per HF
family, written the way the corresponding transformers ~4.44 modeling_*.py
writes the model (so torch.onnx.export produces the graphs those files
produce, with their own node order, reshapes and ops).

This file does not import hf_decoder.py; the two generators are meant to
disagree on graph structure while agreeing with HF on the math. They share only
the IO layout and the golden procedure (optimum_layout.py).

Families (FAMILIES below):
  llama3          modeling_llama.py: model-level LlamaRotaryEmbedding (inv_freq
                  from rope_scaling rope_type "llama3", `inv_freq @ position_ids`
                  MatMul, `* attention_scaling`), q/k/v `.view(bsz, q_len, -1,
                  head_dim)`, repeat_kv with n_rep > 1
  mqa             the same Llama classes with num_key_value_heads = 1: repeat_kv
                  expands the single KV head to all query heads
  qwen2_untied    modeling_qwen2.py (4.44): q/k/v bias, rotary tables
                  cos_cached/sin_cached [max_position_embeddings, head_dim]
                  sliced to kv_seq_len and gathered by position_ids, untied lm_head
  nemotron        modeling_nemotron.py (4.48+, Nemotron-Mini-4B): LayerNorm1p (gain w + 1, bias),
                  squared-ReLU MLP without a gate, rotary over half of head_dim, GQA, untied
  stablelm        modeling_stablelm.py (4.48+, StableLM-2-1.6B): LayerNorms with bias, q/k/v
                  biases, rotary over a quarter of head_dim (cut and joined by hand), untied
  qwen3_moe       modeling_qwen3_moe.py (4.51+, Qwen3-30B-A3B): Qwen3's attention (q/k norms per
                  head) and HF's per-expert MoE loop, renormalised (norm_topk_prob)
  olmoe           modeling_olmoe.py (4.48+, OLMoE-1B-7B): OLMo-2's q/k norms over the whole
                  projections with pre-norms, and HF's per-expert MoE loop without renormalising
  olmo            modeling_olmo.py (4.48+, OLMo-1): LayerNorms without gain or bias, q/k/v
                  each clamped to +-clip_qkv after its projection (Clip), Llama otherwise
  olmo2           modeling_olmo2.py (transformers 4.47+): q_norm / k_norm over the whole
                  projection (all heads) before the head view; no norm before attention or
                  MLP, a norm after each (post_attention / post_feedforward) before its Add
  exaone4         modeling_exaone4.py (transformers 4.54+, EXAONE-4.0): OLMo-2's norms after
                  attention and MLP only, q_norm / k_norm over head_dim after the head
                  transpose, hybrid attention from layer_types (an active sliding window on
                  the sliding layers, no rotary on the global ones: NoPE), tied
  gpt_neo         modeling_gpt_neo.py (4.44): GPT-2's learned positions, LayerNorms and tied
                  head with separate q/k/v (no bias), unscaled float32 scores, and global and
                  local layers alternating (attention_layers): a local layer's `bias` buffer
                  keeps each query's last window_size keys, applied with Where
  gptj            modeling_gptj.py (4.48+, GPT-J-6B): q and k rotated while still [b, s, heads,
                  head_dim] (interleaved rotate_every_two over the first rotary_dim dims, sin
                  and cos GatherElements'd from a sinusoid table by position_ids), then
                  permuted; one LayerNorm feeds attention and MLP in parallel; lm_head with bias
  opt             modeling_opt.py (4.50+, OPT-1.3B..6.7B, sdpa as optimum exports it): learned
                  positions Gather(embed_positions, position_ids + 2), q scaled after its
                  projection (q_proj(x) * head_dim**-0.5) and the attention by 1.0, biases on
                  every linear, the ReLU MLP on rows flattened to 2-D (Gemm), tied head
  smollm3         modeling_smollm3.py (4.53+): Llama with no rotary on the layers no_rope_layers
                  flags 0 (every fourth: NoPE), GQA, tied; masking_utils' causal mask
  phi3            modeling_phi3.py: fused qkv_proj sliced into q/k/v, fused
                  gate_up_proj + chunk(2), per-layer rotary, GQA
  phi4_mini       modeling_phi3.py (transformers 4.49+, Phi-4-mini): the same fused
                  projections, model-level rotary over the first partial_rotary_factor of
                  head_dim (the rest passes through: Slice, rotate, Concat), tied
  gemma           modeling_gemma.py: embeddings * sqrt(hidden) normalizer,
                  GemmaRMSNorm x * (1 + w), GeGLU (gelu tanh), head_dim 256
                  independent of hidden / heads, one KV head, tied embeddings
  gemma2          modeling_gemma2.py: gemma + GQA, four norms per layer,
                  query_pre_attn_scalar**-0.5 scaling, tanh soft-capping of the
                  attention scores and of the final logits, HF's sliding-window
                  tril mask on even layers (inert: sliding_window > any context)
  mixtral_onehot  modeling_mixtral.py with the expert loop written densely:
                  w_e = (topk_weights * (topk_index == e)).sum(-1, keepdim=True)
  mixtral_scatter the same routing math via a dense [tokens, E] matrix made by
                  zeros.scatter(-1, topk_index, topk_weights); expert columns by
                  dense[:, e] (Gather, even e) or torch.gather (GatherElements, odd e)
  qwen2_moe       modeling_qwen2_moe.py: softmax router, top-k without
                  renormalisation, HF's one_hot(...).permute(2, 1, 0) expert mask,
                  shared expert * sigmoid(shared_expert_gate(x))
  gemma3          modeling_gemma3.py (transformers 4.50+, text model): Gemma-2's four
                  norms and sqrt(hidden) embedding scale, q_norm / k_norm (x * (1 + w)
                  over head_dim) after the head transpose, no soft-capping, two rotary
                  tables (local base for the sliding layers), an active sliding window
                  (masking_utils semantics: a key is seen while kv_idx > q_pos - window)
                  on the layers sliding_window_pattern names
  cohere2         modeling_cohere2.py (transformers 4.48+, Command R7B): one LayerNorm
                  (mean-centred, no bias) feeding attention and MLP in parallel, both
                  added to the residual; interleaved rotary (x[..., ::2] / x[..., 1::2],
                  stack, flatten; tables by repeat_interleave) on the sliding layers only,
                  no position encoding on the global ones (every sliding_window_pattern-th);
                  logits * logit_scale; tied
  granite         modeling_granite.py (transformers 4.45+): Llama with scalar multipliers:
                  embeddings * embedding_multiplier, each residual branch *
                  residual_multiplier before its Add, scores * attention_multiplier,
                  logits / logits_scaling; tied
  phi             modeling_phi.py (Phi-2): nn.LayerNorm with bias feeding attention and MLP in
                  parallel, biases on q/k/v/dense/fc1/fc2 and on the LM head, partial rotary
                  (partial_rotary_factor of head_dim) from indexed cos/sin tables, gelu_new,
                  final_layernorm
  glm             modeling_glm.py (transformers 4.46+, GLM-Edge): q/k/v biases, interleaved
                  rotary (neighbouring pairs) on the first half of head_dim, Phi-3's fused
                  gate_up_proj MLP
  gpt2            modeling_gpt2.py: Conv1D linears (addmm on 2-D rows: Reshape, Gemm, Reshape;
                  weights [in, out]), fused c_attn split in three, learned position
                  embeddings, the causal mask from a tril buffer sliced to the lengths and
                  applied with Where, LayerNorm with bias, gelu_new, tied head
  gpt_bigcode     modeling_gpt_bigcode.py 4.54+ (StarCoder, SantaCoder, Granite-Code): GPT-2's
                  layout with nn.Linear, multi-query attention from one c_attn
                  (unsqueeze(1).split on dim 3: the one KV head is [b, 1, s, head_dim] as
                  cut, broadcast over the queries by the score MatMul), gelu_pytorch_tanh,
                  masking_utils' mask, tied
  apertus         modeling_apertus.py (transformers 4.56+, Apertus-8B): Qwen3's attention (per-head
                  q/k RMSNorm before the transpose), Llama-3 rotary, an MLP without gate whose
                  activation is xIELU (learnable alpha_p / alpha_n through softplus, Where on
                  x > 0, expm1 of min(x, eps) exported as torchlib's Exp - 1), the pre-norms
                  named attention_layernorm / feedforward_layernorm, untied
  ernie4_5        modeling_ernie4_5.py (transformers 4.54+, ERNIE-4.5-0.3B): Llama's layer with GLM's
                  pairwise rotary over the whole head_dim (tables by repeat_interleave, rotated in
                  float32), tied
  olmo3           modeling_olmo3.py (transformers 4.57+, OLMo-3-7B): OLMo-2's layer (q/k RMSNorm over
                  all heads, post-norms), a sliding window on three of every four layers
                  (layer_types), those with the default rotary table and the full ones with the
                  configured one (two tables), masking_utils' masks
  hunyuan_v1_dense modeling_hunyuan_v1_dense.py (transformers 4.57+, Hunyuan-7B): Llama's layer;
                  per-head RMSNorms on q and k applied after the rotary (on [b, heads, s,
                  head_dim]), dynamic NTK-alpha rotary base, tied
  starcoder2      modeling_starcoder2.py (4.44): Qwen2-style attention with biases on q/k/v/o,
                  LayerNorm with bias, c_fc/c_proj GELU MLP, Mistral's sliding window on
                  every layer, tied
  qwen3           modeling_qwen3.py (transformers 4.51+): RMSNorm over head_dim on
                  the queries and keys (q_norm / k_norm) between the head view and
                  the transpose, head_dim independent of hidden / heads, the scores
                  scaled by a Mul (eager_attention_forward's `* scaling`), model-level
                  rotary, tied embeddings

Attention is eager by default; CausalLM(..., attn_implementation="sdpa") writes the Llama
and the 4.48+ classes' SDPA path instead (ScaledDotProductAttention: the nodes torch >= 2.1
exports for F.scaled_dot_product_attention, which optimum's exports of these families hold).

The causal mask is HF 4.44's `_prepare_4d_causal_attention_mask_with_cache_position`
(full(min) -> triu(1) -> *= arange > cache_position -> expand -> padding).
With mask_style "hf" the padding is applied with HF's slice assignment
`causal_mask[:, :, :, :mask_length] = ...masked_fill(...)`, which torch exports
as a ScatterND over a Range/Expand/Concat index grid; with "masked_fill" the
same padding is applied to the whole mask (mask_length == target_length for a
dynamic cache, so the numbers are identical) and there is no ScatterND. With
"masking_utils" it is transformers >= 4.53's: a boolean mask from index comparisons and the
gathered padding mask, made additive by Where (masking_utils_causal_mask); "masking_utils_sdpa"
hands the boolean mask to SDPA (ScaledDotProductAttention: Where(mask, 0, -inf)).

Every model class takes the optimum ONNX layout directly:
    forward(input_ids, attention_mask, position_ids, *past_flat)
        -> (logits, present.0.key, present.0.value, ...)
so the exported initializers keep HF's names (model.embed_tokens.weight,
model.layers.0.input_layernorm.weight, lm_head ...). `run(ids, am, pos, past)`
is the list-of-(k, v) convenience form used for the goldens.
"""
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import optimum_layout as layout
from optimum_layout import dynamic_axes, io_names, param_count  # noqa: F401


# --------------------------------------------------------------------------- config

class FamilyConfig:
    """Attribute view over an HF config.json dict (like PretrainedConfig),
    with the derived fields every family needs."""

    def __init__(self, d):
        self.raw = dict(d)
        gpt = {"n_embd": "hidden_size", "n_head": "num_attention_heads", "n_layer": "num_hidden_layers",
               "n_positions": "max_position_embeddings", "layer_norm_epsilon": "layer_norm_eps",
               "num_heads": "num_attention_heads", "num_layers": "num_hidden_layers",
               "n_heads": "num_attention_heads", "n_layers": "num_hidden_layers", "d_model": "hidden_size"}
        d = dict(d, **{llama: d[k] for k, llama in gpt.items() if k in d})  # GPT-2's, GPT-Neo's and MPT's key names
        for k, v in d.items():
            setattr(self, k, v)
        self.num_key_value_heads = d.get("num_key_value_heads") or d["num_attention_heads"]
        self.head_dim = d.get("head_dim") or d["hidden_size"] // d["num_attention_heads"]
        self.rms_norm_eps = d.get("rms_norm_eps", 1e-6)
        self.rope_theta = d.get("rope_theta", 10000.0)
        self.rope_scaling = d.get("rope_scaling")
        self.tie_word_embeddings = d.get("tie_word_embeddings", False)
        self.attention_bias = d.get("attention_bias", False)
        self.attention_dropout = d.get("attention_dropout", 0.0)
        self.max_position_embeddings = d.get("max_position_embeddings", 2048)
        self.attn_implementation = "eager"  # as HF's config._attn_implementation (not in config.json)


# --------------------------------------------------------------------------- shared HF helpers
# (each HF modeling file carries its own "Copied from" copy of these)

def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    """modeling_llama / gemma / phi3: cos, sin already per position [b, s, d]."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def apply_rotary_pos_emb_indexed(q, k, cos, sin, position_ids, unsqueeze_dim=1):
    """modeling_qwen2 / mixtral / qwen2_moe (4.44): cos, sin are tables
    [kv_seq_len, d], indexed by position_ids."""
    cos = cos[position_ids].unsqueeze(unsqueeze_dim)
    sin = sin[position_ids].unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def apply_partial_rotary(q, k, cos, sin, rotate=rotate_half):
    """Rotary over the first cos.shape[-1] dims of q and k (cos, sin [b, 1, s, rotary_dim]); the
    rest passes through (Phi-4-mini, GPT-NeoX, GLM with its pairwise `rotate`)."""
    rotary_dim = cos.shape[-1]
    q_rot, q_pass = q[..., :rotary_dim], q[..., rotary_dim:]
    k_rot, k_pass = k[..., :rotary_dim], k[..., rotary_dim:]
    q_embed = torch.cat([(q_rot * cos) + (rotate(q_rot) * sin), q_pass], dim=-1)
    k_embed = torch.cat([(k_rot * cos) + (rotate(k_rot) * sin), k_pass], dim=-1)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    """(batch, num_key_value_heads, seqlen, head_dim) -> (batch, num_attention_heads, seqlen, head_dim)"""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def prepare_4d_causal_attention_mask_with_cache_position(attention_mask, sequence_length, target_length,
                                                         dtype, cache_position, batch_size, mask_style="hf"):
    """HF 4.44 `_prepare_4d_causal_attention_mask_with_cache_position` (eager path,
    dynamic cache: target_length = attention_mask.shape[-1])."""
    min_dtype = torch.finfo(dtype).min
    causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype)
    if sequence_length != 1:
        causal_mask = torch.triu(causal_mask, diagonal=1)
    causal_mask *= torch.arange(target_length) > cache_position.reshape(-1, 1)
    causal_mask = causal_mask[None, None, :, :].expand(batch_size, 1, -1, -1)
    if attention_mask is not None:
        if mask_style == "hf":
            causal_mask = causal_mask.clone()  # copy to contiguous memory for in-place edit
            mask_length = attention_mask.shape[-1]
            padding_mask = causal_mask[:, :, :, :mask_length] + attention_mask[:, None, None, :]
            padding_mask = padding_mask == 0
            causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(
                padding_mask, min_dtype)
        else:
            # the same padding on the whole mask (mask_length == target_length here)
            padding_mask = causal_mask + attention_mask[:, None, None, :]
            padding_mask = padding_mask == 0
            causal_mask = causal_mask.masked_fill(padding_mask, min_dtype)
    return causal_mask


def masking_utils_causal_mask(attention_mask, input_tensor, cache_position, additive=True, window=None):
    """transformers >= 4.53 masking_utils: create_causal_mask as an export traces it (no skip while
    tracing; sdpa_mask without vmap): the 2-D mask made bool, the padding mask gathered at the key
    indices (prepare_padding_mask), `kv_idx <= q_idx` (causal_mask_function) by broadcast
    comparison, expanded, AND the padding; eager_mask then makes it additive with
    where(mask, 0, min)."""
    batch_size = input_tensor.shape[0]
    kv_length = attention_mask.shape[-1]
    attention_mask = attention_mask.to(dtype=torch.bool)
    mask_indices = torch.arange(kv_length)
    mask_indices += 0  # kv_offset
    padding_mask = attention_mask[:, mask_indices]
    kv_arange = torch.arange(kv_length)
    kv_arange += 0  # kv_offset
    if window is None:  # causal_mask_function
        causal_mask = kv_arange.reshape(1, kv_arange.shape[0]) <= cache_position.reshape(cache_position.shape[0], 1)
    else:  # create_sliding_window_causal_mask: and_masks(sliding_window_overlay(window), causal)
        kv, q = kv_arange.reshape(1, kv_arange.shape[0]), cache_position.reshape(cache_position.shape[0], 1)
        causal_mask = (kv > q - window) & (kv <= q)
    causal_mask = causal_mask[None, None, :, :].expand(batch_size, -1, -1, -1)
    causal_mask = causal_mask * padding_mask[:, None, None, :]
    if not additive:  # the sdpa path: SDPA takes the boolean mask itself
        return causal_mask
    # HF passes min as a Python float, which torch >= 2.0's scalar type analysis (Where among
    # its selector ops) exports in the tensors' dtype; torch 1.13 writes a float64 Constant, an
    # invalid Where. A float32 tensor gives the newer exporter's graph.
    min_dtype = torch.tensor(torch.finfo(input_tensor.dtype).min, dtype=input_tensor.dtype)
    return torch.where(causal_mask, torch.tensor(0.0, dtype=input_tensor.dtype), min_dtype)


def update_causal_mask(attention_mask, input_tensor, cache_position, past_seen_tokens, mask_style):
    if mask_style in ("masking_utils", "masking_utils_sdpa"):
        return masking_utils_causal_mask(attention_mask, input_tensor, cache_position, additive=mask_style == "masking_utils")
    dtype = input_tensor.dtype
    sequence_length = input_tensor.shape[1]
    target_length = attention_mask.shape[-1]
    return prepare_4d_causal_attention_mask_with_cache_position(
        attention_mask, sequence_length=sequence_length, target_length=target_length, dtype=dtype,
        cache_position=cache_position, batch_size=input_tensor.shape[0], mask_style=mask_style)


# --------------------------------------------------------------------------- norms

class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class GemmaRMSNorm(nn.Module):
    """Gemma / Gemma2: weight stored as an offset, output * (1 + weight)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


# --------------------------------------------------------------------------- rotary embeddings

def compute_default_rope_parameters(config):
    base = config.rope_theta
    dim = int(config.head_dim * getattr(config, "partial_rotary_factor", 1.0))
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    return inv_freq, 1.0


def compute_llama3_parameters(config):
    """HF modeling_rope_utils._compute_llama3_parameters."""
    inv_freq, attention_factor = compute_default_rope_parameters(config)
    factor = config.rope_scaling["factor"]
    low_freq_factor = config.rope_scaling["low_freq_factor"]
    high_freq_factor = config.rope_scaling["high_freq_factor"]
    old_context_len = config.rope_scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    inv_freq_llama = torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
    return inv_freq_llama, attention_factor


class LlamaRotaryEmbedding(nn.Module):
    """modeling_llama 4.44: computed once per forward at model level."""

    def __init__(self, config):
        super().__init__()
        rs = config.rope_scaling
        self.rope_type = (rs.get("rope_type", rs.get("type")) if rs else None) or "default"
        if self.rope_type == "llama3":
            inv_freq, self.attention_scaling = compute_llama3_parameters(config)
        elif self.rope_type == "dynamic" and rs.get("alpha"):  # HunYuanDenseV1RotaryEmbedding: NTK-alpha base
            base = config.rope_theta * rs["alpha"] ** (config.head_dim / (config.head_dim - 2))
            inv_freq = 1.0 / (base ** (torch.arange(0, config.head_dim, 2).float() / config.head_dim))
            self.attention_scaling = 1.0
        elif self.rope_type == "default":
            inv_freq, self.attention_scaling = compute_default_rope_parameters(config)
        else:
            raise ValueError(f"rope_type {self.rope_type} not supported here")
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos()
        sin = emb.sin()
        cos = cos * self.attention_scaling
        sin = sin * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


class GemmaRotaryEmbedding(nn.Module):
    """modeling_gemma / gemma2 / phi3 4.44: one instance per attention layer,
    called with (value_states, position_ids)."""

    def __init__(self, dim, max_position_embeddings=2048, base=10000):
        super().__init__()
        self.dim = dim
        self.max_position_embeddings = max_position_embeddings
        self.base = base
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=torch.int64).float() / self.dim))
        self.register_buffer("inv_freq", tensor=inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids, seq_len=None):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos()
        sin = emb.sin()
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


class Qwen2RotaryEmbedding(nn.Module):
    """modeling_qwen2 / mixtral / qwen2_moe 4.44: cos/sin tables for
    max_position_embeddings positions, sliced to seq_len."""

    def __init__(self, dim, max_position_embeddings=2048, base=10000):
        super().__init__()
        self.dim = dim
        self.max_position_embeddings = max_position_embeddings
        self.base = base
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=torch.int64).float() / self.dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._set_cos_sin_cache(seq_len=max_position_embeddings, dtype=torch.get_default_dtype())

    def _set_cos_sin_cache(self, seq_len, dtype):
        self.max_seq_len_cached = seq_len
        t = torch.arange(self.max_seq_len_cached, dtype=torch.int64).type_as(self.inv_freq)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos().to(dtype), persistent=False)
        self.register_buffer("sin_cached", emb.sin().to(dtype), persistent=False)

    def forward(self, x, seq_len=None):
        if seq_len > self.max_seq_len_cached:
            self._set_cos_sin_cache(seq_len=seq_len, dtype=x.dtype)
        return (self.cos_cached[:seq_len].to(dtype=x.dtype), self.sin_cached[:seq_len].to(dtype=x.dtype))


# --------------------------------------------------------------------------- attention

class LlamaAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.attention_dropout = config.attention_dropout
        b = config.attention_bias
        self.q_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=b)
        self.k_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=b)
        self.v_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=b)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=b)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings):
        bsz, q_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states)
        key_states = self.k_proj(hidden_states)
        value_states = self.v_proj(hidden_states)

        # use -1 to infer num_heads and num_key_value_heads as they may vary if tensor parallel is used
        query_states = query_states.view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        key_states = key_states.view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
        value_states = value_states.view(bsz, q_len, -1, self.head_dim).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        # DynamicCache.update
        key_states = torch.cat([past_key_value[0], key_states], dim=-2)
        value_states = torch.cat([past_key_value[1], value_states], dim=-2)
        present = (key_states, value_states)

        if self.config.attn_implementation == "sdpa":  # LlamaSdpaAttention (4.44): SDPA's default scale
            scaling = self.config.attention_multiplier if self.config.model_type == "granite" else None
            attn_output = sdpa_attention_forward(self, query_states, key_states, value_states, attention_mask,
                                                 scaling)
            return self.o_proj(attn_output.view(bsz, q_len, -1)), present

        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)
        if self.config.model_type == "granite":  # GraniteAttention: scores * attention_multiplier
            attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.config.attention_multiplier
        else:
            attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)

        if attention_mask is not None:  # no matter the length, we just slice it
            causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
            attn_weights = attn_weights + causal_mask

        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_weights = nn.functional.dropout(attn_weights, p=self.attention_dropout, training=self.training)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, q_len, -1)
        attn_output = self.o_proj(attn_output)
        return attn_output, present


def project_heads(attn, hidden_states):
    """modeling_qwen2 / mistral / gemma / phi (4.44): the q, k and v projections, then each viewed as
    [b, heads, s, head_dim]. Returns (bsz, q_len, q, k, v)."""
    bsz, q_len, _ = hidden_states.size()
    query_states = attn.q_proj(hidden_states)
    key_states = attn.k_proj(hidden_states)
    value_states = attn.v_proj(hidden_states)
    query_states = query_states.view(bsz, q_len, attn.num_heads, attn.head_dim).transpose(1, 2)
    key_states = key_states.view(bsz, q_len, attn.num_key_value_heads, attn.head_dim).transpose(1, 2)
    value_states = value_states.view(bsz, q_len, attn.num_key_value_heads, attn.head_dim).transpose(1, 2)
    return bsz, q_len, query_states, key_states, value_states


class Qwen2Attention(nn.Module):
    """modeling_qwen2.py 4.44 (also Qwen2MoeAttention; MixtralAttention = no bias)."""

    def __init__(self, config, layer_idx, bias=True, o_bias=False):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.hidden_size // self.num_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.max_position_embeddings = config.max_position_embeddings
        self.rope_theta = config.rope_theta
        self.attention_dropout = config.attention_dropout
        if (self.head_dim * self.num_heads) != self.hidden_size:
            raise ValueError("hidden_size must be divisible by num_heads")
        self.q_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=o_bias)
        self.rotary_emb = Qwen2RotaryEmbedding(self.head_dim, max_position_embeddings=self.max_position_embeddings,
                                               base=self.rope_theta)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings=None):
        bsz, q_len, query_states, key_states, value_states = project_heads(self, hidden_states)

        kv_seq_len = key_states.shape[-2]
        kv_seq_len += past_key_value[0].shape[-2]  # get_usable_length
        cos, sin = self.rotary_emb(value_states, seq_len=kv_seq_len)
        query_states, key_states = apply_rotary_pos_emb_indexed(query_states, key_states, cos, sin, position_ids)

        key_states = torch.cat([past_key_value[0], key_states], dim=-2)
        value_states = torch.cat([past_key_value[1], value_states], dim=-2)
        present = (key_states, value_states)

        # repeat k/v heads if n_kv_heads < n_heads
        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)

        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)

        if attention_mask is not None:  # no matter the length, we just slice it
            causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
            attn_weights = attn_weights + causal_mask

        # upcast attention to fp32
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_weights = nn.functional.dropout(attn_weights, p=self.attention_dropout, training=self.training)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, q_len, self.hidden_size)
        attn_output = self.o_proj(attn_output)
        return attn_output, present


class ScaledDotProductAttention(torch.autograd.Function):
    """F.scaled_dot_product_attention as torch >= 2.1 exports it (symbolic_opset14): q and k^T
    are each multiplied by Sqrt(scale) before the MatMul, the float mask is added, Softmax,
    MatMul with v. Without an explicit scale the graph computes 1/sqrt(E) from Shape(query)
    (Shape, Slice, Cast, Sqrt, Div, Cast). torch 1.13 has no SDPA: this writes the same nodes,
    and forward does the same float32 arithmetic, so the golden is what the graph computes."""

    @staticmethod
    def forward(ctx, query, key, value, attn_mask, scale):
        if scale is None:
            s = 1.0 / torch.sqrt(torch.tensor([float(query.shape[-1])]))
        else:
            s = torch.tensor(scale, dtype=torch.float32)
        w = torch.matmul(query * s.sqrt(), key.transpose(-2, -1) * s.sqrt())
        if attn_mask is not None and attn_mask.dtype == torch.bool:  # masking_utils' boolean mask
            w = w + torch.where(attn_mask, torch.tensor(0.0), torch.tensor(-float("inf")))
        elif attn_mask is not None:
            w = w + attn_mask
        return torch.matmul(torch.softmax(w, dim=-1), value)

    @staticmethod
    def symbolic(g, query, key, value, attn_mask, scale):
        if scale is None:
            shape = g.op("Shape", query)
            last = g.op("Slice", shape, g.op("Constant", value_t=torch.tensor([-1])),
                        g.op("Constant", value_t=torch.tensor([2 ** 63 - 1])))
            size = g.op("Cast", last, to_i=1)  # FLOAT
            s = g.op("Div", g.op("Constant", value_t=torch.tensor([1.0])), g.op("Sqrt", size))
            s = g.op("Cast", s, to_i=1)
        else:
            s = g.op("Constant", value_t=torch.tensor(scale, dtype=torch.float32))
        key_t = g.op("Transpose", key, perm_i=[0, 1, 3, 2])
        query_scaled = g.op("Mul", query, g.op("Sqrt", s))
        key_scaled = g.op("Mul", key_t, g.op("Sqrt", s))
        w = g.op("MatMul", query_scaled, key_scaled)
        if attn_mask is not None and attn_mask.type().scalarType() == "Bool":
            # torch >= 2.1's symbolic: Where(mask, 0, -inf), then added
            attn_mask = g.op("Where", attn_mask, g.op("Constant", value_t=torch.tensor([0.0])),
                             g.op("Constant", value_t=torch.tensor([-float("inf")])))
        if attn_mask is not None:
            w = g.op("Add", w, attn_mask)
        return g.op("MatMul", g.op("Softmax", w, axis_i=-1), value)


def sdpa_attention_forward(module, query, key, value, attention_mask, scaling=None):
    """The sdpa path: transformers 4.48+'s sdpa_attention_forward (scale=module.scaling), and with
    scaling None, 4.44's LlamaSdpaAttention (SDPA's default scale). A mask is always given in an
    export, so is_causal is False; repeat_kv first (no enable_gqa with a mask)."""
    key = repeat_kv(key, module.num_key_value_groups)
    value = repeat_kv(value, module.num_key_value_groups)
    causal_mask = attention_mask[:, :, :, : key.shape[-2]]
    attn_output = ScaledDotProductAttention.apply(query, key, value, causal_mask, scaling)
    return attn_output.transpose(1, 2).contiguous()


def eager_attention_forward(module, query, key, value, attention_mask):
    """transformers 4.48+'s eager attention, shared by the attention classes written after it."""
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * module.scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=module.attention_dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    return attn_output.transpose(1, 2).contiguous()


def attend(module, query_states, key_states, value_states, attention_mask, past_key_value, input_shape, out_proj):
    """transformers 4.48+: the cache append, the attention (eager_attention_forward, or
    sdpa_attention_forward with module.scaling) and the output projection `out_proj`."""
    key_states = torch.cat([past_key_value[0], key_states], dim=-2)
    value_states = torch.cat([past_key_value[1], value_states], dim=-2)
    present = (key_states, value_states)
    if module.config.attn_implementation == "sdpa":
        attn_output = sdpa_attention_forward(module, query_states, key_states, value_states, attention_mask,
                                             module.scaling)
    else:
        attn_output = eager_attention_forward(module, query_states, key_states, value_states, attention_mask)
    attn_output = attn_output.reshape(*input_shape, -1).contiguous()
    return out_proj(attn_output), present


class ModernAttention(nn.Module):
    """What the transformers 4.48+ attention classes (Qwen3, Gemma3, Cohere2) share: the q/k/v/o
    projections, and after each family's own head view, norms and rotary: the cache append,
    eager_attention_forward and o_proj."""

    def __init__(self, config, layer_idx, scaling):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = scaling
        self.attention_dropout = config.attention_dropout
        b = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=b)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=b)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=b)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=b)

    def heads(self, hidden_states):
        """The q, k and v projections viewed as [b, heads, s, head_dim] (with the input's shape)."""
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        return input_shape, query_states, key_states, value_states

    def attend(self, query_states, key_states, value_states, attention_mask, past_key_value, input_shape):
        return attend(self, query_states, key_states, value_states, attention_mask, past_key_value, input_shape,
                      self.o_proj)


class Qwen3Attention(ModernAttention):
    """modeling_qwen3.py (transformers 4.51+)."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx, config.head_dim ** -0.5)
        # RMSNorm over each head's head_dim values (one weight vector shared by the heads)
        self.q_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
        key_states = self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        return self.attend(query_states, key_states, value_states, attention_mask, past_key_value, input_shape)


class HunYuanDenseV1Attention(ModernAttention):
    """modeling_hunyuan_v1_dense.py (transformers 4.57+, Hunyuan-0.5B..7B): Llama's attention with
    per-head RMSNorms (query_layernorm / key_layernorm over head_dim) applied AFTER the rotary,
    on [b, heads, s, head_dim]."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx, config.head_dim ** -0.5)
        self.query_layernorm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.key_layernorm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings):
        input_shape, query_states, key_states, value_states = self.heads(hidden_states)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        query_states = self.query_layernorm(query_states)
        key_states = self.key_layernorm(key_states)
        return self.attend(query_states, key_states, value_states, attention_mask, past_key_value, input_shape)


class SmolLM3Attention(ModernAttention):
    """modeling_smollm3.py (transformers 4.53+, SmolLM3-3B): Llama's attention, with the rotary
    only on the layers no_rope_layers flags 1 (every fourth layer has none: NoPE)."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx, config.head_dim ** -0.5)
        self.use_rope = config.no_rope_layers[layer_idx]

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings):
        input_shape, query_states, key_states, value_states = self.heads(hidden_states)
        if self.use_rope:
            cos, sin = position_embeddings
            query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        return self.attend(query_states, key_states, value_states, attention_mask, past_key_value, input_shape)


class OlmoLayerNorm(nn.Module):
    """LayerNorm without a learned gain or bias, in float32 (OLMo-1)."""

    def __init__(self, hidden_size, eps=None):
        super().__init__()
        self.normalized_shape = (hidden_size,)

    def forward(self, hidden_states):
        orig_dtype = hidden_states.dtype
        return F.layer_norm(hidden_states.to(dtype=torch.float32), self.normalized_shape, None, None,
                            eps=1e-5).to(orig_dtype)


class NemotronAttention(ModernAttention):
    """modeling_nemotron.py (transformers 4.48+, Nemotron-Mini / Minitron): Llama's attention with
    the rotary over the first partial_rotary_factor of head_dim (model-level tables)."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx, config.head_dim ** -0.5)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings):
        input_shape, query_states, key_states, value_states = self.heads(hidden_states)
        cos, sin = position_embeddings
        query_states, key_states = apply_partial_rotary(query_states, key_states, cos.unsqueeze(1), sin.unsqueeze(1))
        return self.attend(query_states, key_states, value_states, attention_mask, past_key_value, input_shape)


class NemotronLayerNorm1p(nn.LayerNorm):
    """LayerNorm whose stored gain is the offset from 1: F.layer_norm(x, w + 1, b)."""

    def __init__(self, hidden_size, eps=1e-5):
        super().__init__(hidden_size, eps=eps)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight + 1, self.bias, self.eps)


class NemotronMLP(nn.Module):
    """up_proj, squared ReLU (relu2: torch.square(relu(x))), down_proj: no gate."""

    def __init__(self, config):
        super().__init__()
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.raw.get("mlp_bias", False))
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.raw.get("mlp_bias", False))

    def forward(self, x):
        return self.down_proj(torch.square(F.relu(self.up_proj(x))))


class StableLmAttention(ModernAttention):
    """modeling_stablelm.py (transformers 4.48+, StableLM-2-1.6B): q/k/v with bias (use_qkv_bias),
    o_proj without; the rotary over the first partial_rotary_factor of head_dim, cut and joined
    back by hand (query_rot / query_pass) around Llama's apply_rotary_pos_emb."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx, config.head_dim ** -0.5)
        self.rotary_ndims = int(self.head_dim * config.partial_rotary_factor)
        b = config.raw.get("use_qkv_bias", False)
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=b)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=b)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=b)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings):
        input_shape, query_states, key_states, value_states = self.heads(hidden_states)
        cos, sin = position_embeddings
        r = self.rotary_ndims
        query_rot, query_pass = query_states[..., :r], query_states[..., r:]
        key_rot, key_pass = key_states[..., :r], key_states[..., r:]
        query_rot, key_rot = apply_rotary_pos_emb(query_rot, key_rot, cos, sin)
        query_states = torch.cat((query_rot, query_pass), dim=-1)
        key_states = torch.cat((key_rot, key_pass), dim=-1)
        return self.attend(query_states, key_states, value_states, attention_mask, past_key_value, input_shape)


class HeadNormAttention(ModernAttention):
    """q_norm / k_norm over each head's head_dim after the head transpose, then the rotary
    (Gemma-3, EXAONE-4.0; EXAONE-4.0's global layers of a hybrid model take none)."""

    def __init__(self, config, layer_idx, scaling, norm, rotary=True):
        super().__init__(config, layer_idx, scaling)
        self.q_norm = norm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = norm(self.head_dim, eps=config.rms_norm_eps)
        self.rotary = rotary

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings):
        input_shape, query_states, key_states, value_states = self.heads(hidden_states)
        query_states = self.q_norm(query_states)
        key_states = self.k_norm(key_states)
        if self.rotary:
            cos, sin = position_embeddings
            query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        return self.attend(query_states, key_states, value_states, attention_mask, past_key_value, input_shape)


class Gemma3Attention(HeadNormAttention):
    """modeling_gemma3.py (transformers 4.50+): the norms after the head transpose."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx, config.query_pre_attn_scalar ** -0.5, GemmaRMSNorm)


class Exaone4Attention(HeadNormAttention):
    """modeling_exaone4.py (transformers 4.54+): Llama's RMSNorm of each head after the head
    transpose; with a sliding window the global layers take no rotary (NoPE)."""

    def __init__(self, config, layer_idx):
        self.is_sliding = config.layer_types[layer_idx] == "sliding_attention"
        super().__init__(config, layer_idx, config.head_dim ** -0.5, LlamaRMSNorm,
                         rotary=config.sliding_window is None or self.is_sliding)


class GlmAttention(ModernAttention):
    """modeling_glm.py (transformers 4.46+, GLM-Edge): q/k/v with biases, o_proj without; rotary
    on the first partial_rotary_factor of head_dim, pairing neighbouring dims (x[0::2],
    x[1::2]) with the tables' first half repeated per pair."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx, config.head_dim ** -0.5)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings):
        input_shape, query_states, key_states, value_states = self.heads(hidden_states)
        cos, sin = position_embeddings
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        # HF's repeat_interleave(2), written as stack + flatten (torch 1.13's exporter of
        # repeat_interleave rewrites unrelated -1 constants, see cohere2)
        cos = torch.stack((cos[..., : cos.shape[-1] // 2],) * 2, dim=-1).flatten(-2)
        sin = torch.stack((sin[..., : sin.shape[-1] // 2],) * 2, dim=-1).flatten(-2)
        query_states, key_states = apply_partial_rotary(query_states, key_states, cos, sin, cohere_rotate_half)
        return self.attend(query_states, key_states, value_states, attention_mask, past_key_value, input_shape)


class Ernie4_5Attention(ModernAttention):
    """modeling_ernie4_5.py (transformers 4.54+, ERNIE-4.5-0.3B): Llama's attention with GLM's
    pairwise rotary over the whole head_dim: the tables' first half repeat_interleave'd, q and k
    rotated in float32 (`.float()`, back with `.to(dtype)`)."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx, config.head_dim ** -0.5)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings):
        input_shape, query_states, key_states, value_states = self.heads(hidden_states)
        cos, sin = position_embeddings
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
        sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
        dtype = query_states.dtype
        query_states = ((query_states.float() * cos) + (cohere_rotate_half(query_states).float() * sin)).to(dtype)
        key_states = ((key_states.float() * cos) + (cohere_rotate_half(key_states).float() * sin)).to(dtype)
        return self.attend(query_states, key_states, value_states, attention_mask, past_key_value, input_shape)


class OlmoAttention(ModernAttention):
    """modeling_olmo.py (transformers 4.48+, OLMo-1): Llama's attention with q, k and v each
    clamped to [-clip_qkv, clip_qkv] after its projection (clamp_: Clip), before the head view."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx, config.head_dim ** -0.5)

    def qkv(self, hidden_states):
        return self.q_proj(hidden_states), self.k_proj(hidden_states), self.v_proj(hidden_states)

    def project(self, hidden_states):
        query_states, key_states, value_states = self.qkv(hidden_states)
        clip = getattr(self.config, "clip_qkv", None)  # OLMo-1 and OLMoE configs may set it
        if clip is not None:
            query_states.clamp_(min=-clip, max=clip)
            key_states.clamp_(min=-clip, max=clip)
            value_states.clamp_(min=-clip, max=clip)
        return query_states, key_states, value_states

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states, key_states, value_states = self.project(hidden_states)
        query_states = query_states.view(hidden_shape).transpose(1, 2)
        key_states = key_states.view(hidden_shape).transpose(1, 2)
        value_states = value_states.view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        return self.attend(query_states, key_states, value_states, attention_mask, past_key_value, input_shape)


class Olmo2Attention(OlmoAttention):
    """modeling_olmo2.py (transformers 4.47+): RMSNorm over all heads' values of q and k."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.q_norm = LlamaRMSNorm(config.num_attention_heads * self.head_dim, config.rms_norm_eps)
        self.k_norm = LlamaRMSNorm(config.num_key_value_heads * self.head_dim, config.rms_norm_eps)

    def qkv(self, hidden_states):
        return self.q_norm(self.q_proj(hidden_states)), self.k_norm(self.k_proj(hidden_states)), self.v_proj(hidden_states)


class Olmo2DecoderLayer(nn.Module):
    """No norm before attention or MLP; one after each, before its residual Add."""

    def __init__(self, config, layer_idx, attention=None):
        super().__init__()
        self.self_attn = attention or Olmo2Attention(config, layer_idx)
        self.mlp = LlamaMLP(config, act=config.hidden_act)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_feedforward_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings=None):
        residual = hidden_states
        hidden_states, present = self.self_attn(hidden_states, attention_mask, position_ids, past_key_value,
                                                position_embeddings)
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.mlp(hidden_states)
        hidden_states = self.post_feedforward_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states, present


class Olmo3DecoderLayer(Olmo2DecoderLayer):
    """modeling_olmo3.py (transformers 4.57+, OLMo-3-7B): OLMo-2's layer and attention; the layers
    layer_types calls sliding attend over a window and take the default rotary, the full ones
    the configured rotary. The model hands each layer (full, sliding) masks and tables."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.is_sliding = config.layer_types[layer_idx] == "sliding_attention"

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings=None):
        pick = 1 if self.is_sliding else 0
        return super().forward(hidden_states, attention_mask[pick], position_ids, past_key_value, position_embeddings[pick])


class Cohere2LayerNorm(nn.Module):
    """modeling_cohere2.py: LayerNorm without bias, in float32."""

    def __init__(self, hidden_size, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        mean = hidden_states.mean(-1, keepdim=True)
        variance = (hidden_states - mean).pow(2).mean(-1, keepdim=True)
        hidden_states = (hidden_states - mean) * torch.rsqrt(variance + self.variance_epsilon)
        hidden_states = self.weight.to(torch.float32) * hidden_states
        return hidden_states.to(input_dtype)


def cohere_rotate_half(x):
    """Cohere's rotation pairs neighbouring dims (0, 1), (2, 3), ... instead of the halves."""
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    return torch.stack([-x2, x1], dim=-1).flatten(-2)


class Cohere2RotaryEmbedding(LlamaRotaryEmbedding):
    """Cohere's tables repeat each frequency for its pair of dims. HF writes
    repeat_interleave(freqs, 2, dim=-1); stack + flatten gives the same tensor, because torch
    1.13's exporter of repeat_interleave turns unrelated -1 constants of the graph (the causal
    mask's expand) into 2."""

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.stack([freqs, freqs], dim=-1).flatten(-2)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


class Cohere2Attention(ModernAttention):
    """modeling_cohere2.py (transformers 4.48+): rotary on the sliding layers only."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx, config.head_dim ** -0.5)
        self.sliding_window = config.sliding_window if (layer_idx + 1) % config.sliding_window_pattern else None

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings):
        input_shape, query_states, key_states, value_states = self.heads(hidden_states)
        if self.sliding_window is not None:  # the global layers have no position encoding
            cos, sin = position_embeddings
            dtype = query_states.dtype
            q, k = query_states.float(), key_states.float()
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            query_states = ((q * cos) + (cohere_rotate_half(q) * sin)).to(dtype=dtype)
            key_states = ((k * cos) + (cohere_rotate_half(k) * sin)).to(dtype=dtype)
        return self.attend(query_states, key_states, value_states, attention_mask, past_key_value, input_shape)


class Phi3Attention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.attention_dropout = config.attention_dropout
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.hidden_size // self.num_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.max_position_embeddings = config.max_position_embeddings
        self.rope_theta = config.rope_theta
        if (self.head_dim * self.num_heads) != self.hidden_size:
            raise ValueError("hidden_size must be divisible by num_heads")
        op_size = self.num_heads * self.head_dim + 2 * (self.num_key_value_heads * self.head_dim)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=False)
        self.qkv_proj = nn.Linear(self.hidden_size, op_size, bias=False)
        self.rotary_emb = GemmaRotaryEmbedding(self.head_dim, max_position_embeddings=self.max_position_embeddings,
                                               base=self.rope_theta)  # Phi3RotaryEmbedding

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings=None):
        bsz, q_len, _ = hidden_states.size()

        qkv = self.qkv_proj(hidden_states)
        query_pos = self.num_heads * self.head_dim
        query_states = qkv[..., :query_pos]
        key_states = qkv[..., query_pos: query_pos + self.num_key_value_heads * self.head_dim]
        value_states = qkv[..., query_pos + self.num_key_value_heads * self.head_dim:]

        query_states = query_states.view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = key_states.view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        value_states = value_states.view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)

        kv_seq_len = key_states.shape[-2] + past_key_value[0].shape[-2]
        cos, sin = self.rotary_emb(value_states, position_ids, seq_len=kv_seq_len)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin, position_ids)

        key_states = torch.cat([past_key_value[0], key_states], dim=-2)
        value_states = torch.cat([past_key_value[1], value_states], dim=-2)
        present = (key_states, value_states)

        # repeat k/v heads if n_kv_heads < n_heads
        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)

        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)

        if attention_mask is not None:
            causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
            attn_weights += causal_mask

        # upcast attention to fp32
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(value_states.dtype)
        attn_weights = nn.functional.dropout(attn_weights, p=self.attention_dropout, training=self.training)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, q_len, self.hidden_size)
        attn_output = self.o_proj(attn_output)
        return attn_output, present


class Phi4MiniAttention(nn.Module):
    """modeling_phi3.py (transformers 4.49+): fused qkv_proj, rotary on the first
    partial_rotary_factor of head_dim."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        self.head_dim = config.head_dim
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = config.attention_dropout
        op_size = config.num_attention_heads * self.head_dim + 2 * (config.num_key_value_heads * self.head_dim)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=False)
        self.qkv_proj = nn.Linear(config.hidden_size, op_size, bias=False)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        qkv = self.qkv_proj(hidden_states)
        query_pos = self.config.num_attention_heads * self.head_dim
        query_states = qkv[..., :query_pos]
        key_states = qkv[..., query_pos: query_pos + self.num_key_value_heads * self.head_dim]
        value_states = qkv[..., query_pos + self.num_key_value_heads * self.head_dim:]

        query_states = query_states.view(hidden_shape).transpose(1, 2)
        key_states = key_states.view(hidden_shape).transpose(1, 2)
        value_states = value_states.view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings  # [b, s, rotary_dim]
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        query_states, key_states = apply_partial_rotary(query_states, key_states, cos, sin)
        return attend(self, query_states, key_states, value_states, attention_mask, past_key_value, input_shape,
                      self.o_proj)


class GemmaAttention(nn.Module):
    """modeling_gemma.py 4.44; with gemma2=True modeling_gemma2.py's
    Gemma2Attention (query_pre_attn_scalar scaling, attention logit soft-capping)."""

    def __init__(self, config, layer_idx, gemma2=False):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.gemma2 = gemma2
        self.attention_dropout = config.attention_dropout
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.max_position_embeddings = config.max_position_embeddings
        self.rope_theta = config.rope_theta
        b = config.attention_bias
        self.q_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=b)
        self.k_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=b)
        self.v_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=b)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=b)
        if gemma2:
            self.scaling = config.query_pre_attn_scalar ** -0.5
            self.sliding_window = config.sliding_window if not bool(layer_idx % 2) else None
        self.rotary_emb = GemmaRotaryEmbedding(self.head_dim, max_position_embeddings=self.max_position_embeddings,
                                               base=self.rope_theta)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings=None):
        bsz, q_len, query_states, key_states, value_states = project_heads(self, hidden_states)

        cos, sin = self.rotary_emb(value_states, position_ids)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        key_states = torch.cat([past_key_value[0], key_states], dim=-2)
        value_states = torch.cat([past_key_value[1], value_states], dim=-2)
        present = (key_states, value_states)

        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)

        if self.gemma2:
            attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.scaling
            if self.config.attn_logit_softcapping is not None:
                attn_weights = attn_weights / self.config.attn_logit_softcapping
                attn_weights = torch.tanh(attn_weights)
                attn_weights = attn_weights * self.config.attn_logit_softcapping
        else:
            attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)

        if attention_mask is not None:  # no matter the length, we just slice it
            causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
            attn_weights = attn_weights + causal_mask

        # upcast attention to fp32
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_weights = nn.functional.dropout(attn_weights, p=self.attention_dropout, training=self.training)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.view(bsz, q_len, -1)
        attn_output = self.o_proj(attn_output)
        return attn_output, present


# --------------------------------------------------------------------------- MLPs

def gelu_pytorch_tanh(x):
    return F.gelu(x, approximate="tanh")


def gelu_new(x):
    """transformers' NewGELUActivation (GPT-2's tanh approximation, written out)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


ACT2FN = {"silu": F.silu, "gelu_pytorch_tanh": gelu_pytorch_tanh, "gelu_new": gelu_new}


class XIELUActivation(nn.Module):
    """transformers activations.py XIELUActivation, its Python path (what an export traces):
    learnable alpha_p / alpha_n stored through softplus, beta and eps buffers;
    where(x > 0, alpha_p x^2 + beta x, (expm1(min(x, eps)) - x) alpha_n + beta x)."""

    def __init__(self, alpha_p_init=0.8, alpha_n_init=0.8, beta=0.5, eps=-1e-6):
        super().__init__()
        self.alpha_p = nn.Parameter(torch.log(torch.expm1(torch.tensor(alpha_p_init))).unsqueeze(0))
        self.alpha_n = nn.Parameter(torch.log(torch.expm1(torch.tensor(alpha_n_init - beta))).unsqueeze(0))
        self.register_buffer("beta", torch.tensor(beta))
        self.register_buffer("eps", torch.tensor(eps))

    def forward(self, x):
        alpha_p = nn.functional.softplus(self.alpha_p)
        alpha_n = self.beta + nn.functional.softplus(self.alpha_n)
        return torch.where(x > 0, alpha_p * x * x + self.beta * x,
                           (torch.expm1(torch.min(x, self.eps)) - x) * alpha_n + self.beta * x)


class ApertusMLP(nn.Module):
    """modeling_apertus.py (transformers 4.56+, Apertus-8B): no gate, down(xielu(up(x)))."""

    def __init__(self, config):
        super().__init__()
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = XIELUActivation()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.up_proj(x)))


class LlamaMLP(nn.Module):
    """LlamaMLP / Qwen2MLP / GemmaMLP / Qwen2MoeMLP: down(act(gate(x)) * up(x))."""

    def __init__(self, config, intermediate_size=None, act="silu"):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.intermediate_size = intermediate_size or config.intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        self.act_fn = ACT2FN[act]

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Starcoder2MLP(nn.Module):
    """c_proj(gelu_pytorch_tanh(c_fc(x))), both with biases (use_bias)."""

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.use_bias)
        self.c_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.use_bias)
        self.act = ACT2FN[config.hidden_act]

    def forward(self, hidden_states):
        return self.c_proj(self.act(self.c_fc(hidden_states)))


def layer_norm(hidden_size, eps):
    return nn.LayerNorm(hidden_size, eps=eps)


class Phi3MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.activation_fn = ACT2FN[config.hidden_act]

    def forward(self, hidden_states):
        up_states = self.gate_up_proj(hidden_states)
        gate, up_states = up_states.chunk(2, dim=-1)
        up_states = up_states * self.activation_fn(gate)
        return self.down_proj(up_states)


class MixtralBlockSparseTop2MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ffn_dim = config.intermediate_size
        self.hidden_dim = config.hidden_size
        self.w1 = nn.Linear(self.hidden_dim, self.ffn_dim, bias=False)
        self.w2 = nn.Linear(self.ffn_dim, self.hidden_dim, bias=False)
        self.w3 = nn.Linear(self.hidden_dim, self.ffn_dim, bias=False)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, hidden_states):
        current_hidden_states = self.act_fn(self.w1(hidden_states)) * self.w3(hidden_states)
        current_hidden_states = self.w2(current_hidden_states)
        return current_hidden_states


class MixtralSparseMoeBlock(nn.Module):
    """modeling_mixtral.MixtralSparseMoeBlock with HF's per-expert
    `torch.where(expert_mask[e])` / `index_add_` loop replaced by a dense sum
    over all experts (every expert runs on every token; a token's weight for an
    expert it did not select is exactly 0), so the graph has static shapes.

    routing "hf":      HF's own loop, as modeling_mixtral writes it: per expert, NonZero of its
                       one-hot mask, its rows gathered, index_add_ back (ScatterElements add)
    routing "onehot":  w_e = (routing_weights * (selected_experts == e)).sum(-1, keepdim=True)
    routing "scatter": dense = zeros_like(router_logits).scatter(1, selected_experts, routing_weights)
                       w_e = dense[:, e].unsqueeze(-1) (even e, Gather) or
                             torch.gather(dense, 1, full(e)) (odd e, GatherElements)
    """

    def __init__(self, config, routing="onehot"):
        super().__init__()
        self.hidden_dim = config.hidden_size
        self.ffn_dim = config.intermediate_size
        self.num_experts = config.num_local_experts
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = getattr(config, "norm_topk_prob", True)  # OLMoE's block: false
        self.routing = routing
        self.gate = nn.Linear(self.hidden_dim, self.num_experts, bias=False)
        self.experts = nn.ModuleList([MixtralBlockSparseTop2MLP(config) for _ in range(self.num_experts)])

    def route(self, hidden_states):
        """(router_logits, routing_weights [T, k], selected_experts [T, k]) for 2D hidden_states."""
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        if self.norm_topk_prob:
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        # we cast back to the input dtype
        routing_weights = routing_weights.to(hidden_states.dtype)
        return router_logits, routing_weights, selected_experts

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits, routing_weights, selected_experts = self.route(hidden_states)
        if self.routing == "hf":
            return mixtral_hf_loop(self, hidden_states, routing_weights, selected_experts, batch_size,
                                   sequence_length).reshape(batch_size, sequence_length, hidden_dim), router_logits
        if self.routing == "scatter":
            dense = torch.zeros_like(router_logits).scatter(1, selected_experts, routing_weights)
        final_hidden_states = None
        for expert_idx in range(self.num_experts):
            expert_layer = self.experts[expert_idx]
            if self.routing == "onehot":
                w = (routing_weights * (selected_experts == expert_idx)).sum(-1, keepdim=True)
            elif expert_idx % 2 == 0:
                w = dense[:, expert_idx].unsqueeze(-1)
            else:
                col = torch.full_like(selected_experts[:, :1], expert_idx)
                w = torch.gather(dense, 1, col)
            current_hidden_states = expert_layer(hidden_states) * w
            final_hidden_states = current_hidden_states if final_hidden_states is None \
                else final_hidden_states + current_hidden_states
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


def mixtral_hf_loop(self, hidden_states, routing_weights, selected_experts, batch_size, sequence_length):
    """modeling_mixtral 4.44's dispatch: each expert runs on the rows that chose it (torch.where
    of its one-hot mask: NonZero, data-dependent shapes) and index_add_s its weighted output back."""
    final_hidden_states = torch.zeros((batch_size * sequence_length, self.hidden_dim), dtype=hidden_states.dtype)
    expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
    for expert_idx in range(self.num_experts):
        expert_layer = self.experts[expert_idx]
        idx, top_x = torch.where(expert_mask[expert_idx])
        current_state = hidden_states[None, top_x].reshape(-1, self.hidden_dim)
        current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
        final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
    return final_hidden_states



class Qwen2MoeSparseMoeBlock(nn.Module):
    """modeling_qwen2_moe.Qwen2MoeSparseMoeBlock, expert loop dense: the
    expert mask is HF's one_hot(selected_experts, E).permute(2, 1, 0)
    ([E, top_k, T]); a token's weight for expert e is
    sum_k routing_weights[t, k] * expert_mask[e, k, t]. routing "hf": HF's own loop
    (mixtral_hf_loop: NonZero, gathered rows, index_add_)."""

    def __init__(self, config, routing="dense"):
        super().__init__()
        self.routing = routing
        self.hidden_dim = config.hidden_size
        self.num_experts = config.num_experts
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        self.gate = nn.Linear(config.hidden_size, config.num_experts, bias=False)
        self.experts = nn.ModuleList(
            [LlamaMLP(config, intermediate_size=config.moe_intermediate_size, act=config.hidden_act)
             for _ in range(self.num_experts)])
        self.shared_expert = LlamaMLP(config, intermediate_size=config.shared_expert_intermediate_size,
                                      act=config.hidden_act)
        self.shared_expert_gate = torch.nn.Linear(config.hidden_size, 1, bias=False)

    def route(self, hidden_states):
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        if self.norm_topk_prob:
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        return router_logits, routing_weights, selected_experts

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits, routing_weights, selected_experts = self.route(hidden_states)
        if self.routing == "hf":
            final_hidden_states = mixtral_hf_loop(self, hidden_states, routing_weights, selected_experts, batch_size,
                                                  sequence_length)
            shared_expert_output = self.shared_expert(hidden_states)
            shared_expert_output = F.sigmoid(self.shared_expert_gate(hidden_states)) * shared_expert_output
            final_hidden_states = final_hidden_states + shared_expert_output
            return final_hidden_states.reshape(batch_size, sequence_length, hidden_dim), router_logits
        expert_mask = torch.nn.functional.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        final_hidden_states = None
        for expert_idx in range(self.num_experts):
            expert_layer = self.experts[expert_idx]
            w = (routing_weights * expert_mask[expert_idx].transpose(0, 1).to(routing_weights.dtype)).sum(
                -1, keepdim=True)
            current_hidden_states = expert_layer(hidden_states) * w
            final_hidden_states = current_hidden_states if final_hidden_states is None \
                else final_hidden_states + current_hidden_states
        shared_expert_output = self.shared_expert(hidden_states)
        shared_expert_output = F.sigmoid(self.shared_expert_gate(hidden_states)) * shared_expert_output
        final_hidden_states = final_hidden_states + shared_expert_output
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


# --------------------------------------------------------------------------- decoder layers

class PhiAttention(nn.Module):
    """modeling_phi.py 4.44 (Phi-2): q/k/v and `dense` with biases, partial rotary over the
    first partial_rotary_factor of head_dim from per-layer cos/sin tables indexed by
    position_ids, scores in float32."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.attention_dropout = config.attention_dropout
        self.q_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(self.hidden_size, self.num_key_value_heads * self.head_dim, bias=True)
        self.dense = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=True)
        self.rotary_emb = Qwen2RotaryEmbedding(int(config.partial_rotary_factor * self.head_dim),
                                               max_position_embeddings=config.max_position_embeddings,
                                               base=config.rope_theta)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings=None):
        bsz, q_len, query_states, key_states, value_states = project_heads(self, hidden_states)

        kv_seq_len = key_states.shape[-2] + past_key_value[0].shape[-2]
        cos, sin = self.rotary_emb(value_states, seq_len=kv_seq_len)
        # Partial rotary embedding
        rot = self.rotary_emb.dim
        query_rot, query_pass = query_states[..., :rot], query_states[..., rot:]
        key_rot, key_pass = key_states[..., :rot], key_states[..., rot:]
        query_rot, key_rot = apply_rotary_pos_emb_indexed(query_rot, key_rot, cos, sin, position_ids)
        query_states = torch.cat((query_rot, query_pass), dim=-1)
        key_states = torch.cat((key_rot, key_pass), dim=-1)

        key_states = torch.cat([past_key_value[0], key_states], dim=-2)
        value_states = torch.cat([past_key_value[1], value_states], dim=-2)
        present = (key_states, value_states)
        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)

        # Queries and keys upcast to fp32 is required by Phi-2 to avoid overflow
        attn_weights = torch.matmul(query_states.to(torch.float32),
                                    key_states.to(torch.float32).transpose(2, 3)) / math.sqrt(self.head_dim)
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(value_states.dtype)
        attn_weights = nn.functional.dropout(attn_weights, p=self.attention_dropout, training=self.training)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous().reshape(bsz, q_len, self.hidden_size)
        return self.dense(attn_output), present


class PhiMLP(nn.Module):
    """fc2(gelu_new(fc1(x))), both with biases."""

    def __init__(self, config):
        super().__init__()
        self.activation_fn = ACT2FN[config.hidden_act]
        self.fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, hidden_states):
        return self.fc2(self.activation_fn(self.fc1(hidden_states)))


class PhiDecoderLayer(nn.Module):
    """One nn.LayerNorm (with bias) feeds attention and MLP in parallel; both add to the residual."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.self_attn = PhiAttention(config, layer_idx)
        self.mlp = PhiMLP(config)
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        attn_outputs, present = self.self_attn(hidden_states, attention_mask, position_ids, past_key_value)
        attn_outputs = self.resid_dropout(attn_outputs)
        feed_forward_hidden_states = self.resid_dropout(self.mlp(hidden_states))
        hidden_states = attn_outputs + feed_forward_hidden_states + residual
        return hidden_states, present


class DecoderLayer(nn.Module):
    """LlamaDecoderLayer / Qwen2DecoderLayer / GemmaDecoderLayer /
    MixtralDecoderLayer (mlp under `block_sparse_moe`) / Qwen2MoeDecoderLayer /
    Phi3DecoderLayer (resid dropouts, no-ops in eval): pre-norm, two residuals."""

    def __init__(self, config, layer_idx, attn, mlp, norm_cls, mlp_name="mlp", phi3=False):
        super().__init__()
        self.hidden_size = config.hidden_size
        # GraniteDecoderLayer: residual + branch * residual_multiplier
        self.residual_multiplier = getattr(config, "residual_multiplier", None)
        self.self_attn = attn
        self.mlp_name = mlp_name
        setattr(self, mlp_name, mlp)
        self.input_layernorm = norm_cls(config.hidden_size, eps=config.rms_norm_eps)
        if phi3:
            self.resid_attn_dropout = nn.Dropout(config.resid_pdrop)
            self.resid_mlp_dropout = nn.Dropout(config.resid_pdrop)
        self.post_attention_layernorm = norm_cls(config.hidden_size, eps=config.rms_norm_eps)
        self.phi3 = phi3

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, present = self.self_attn(hidden_states, attention_mask, position_ids, past_key_value,
                                                position_embeddings)
        if self.phi3:
            hidden_states = self.resid_attn_dropout(hidden_states)
        if self.residual_multiplier is not None:
            hidden_states = hidden_states * self.residual_multiplier
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = getattr(self, self.mlp_name)(hidden_states)
        if isinstance(hidden_states, tuple):
            hidden_states, _router_logits = hidden_states
        if self.phi3:
            hidden_states = self.resid_mlp_dropout(hidden_states)
        if self.residual_multiplier is not None:
            hidden_states = hidden_states * self.residual_multiplier
        hidden_states = residual + hidden_states
        return hidden_states, present


class Gemma2DecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.config = config
        self.self_attn = GemmaAttention(config, layer_idx, gemma2=True)
        self.mlp = LlamaMLP(config, act=config.hidden_activation)
        self.input_layernorm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.is_sliding = not bool(layer_idx % 2)
        self.pre_feedforward_layernorm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_feedforward_layernorm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.sliding_window = config.sliding_window

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings=None):
        if self.is_sliding and attention_mask is not None:  # efficient SDPA and no padding
            min_dtype = torch.finfo(hidden_states.dtype).min
            sliding_window_mask = torch.tril(
                torch.ones_like(attention_mask, dtype=torch.bool), diagonal=-self.sliding_window)
            # HF passes the python float min_dtype; torch 1.13's exporter turns that
            # scalar into a float64 Constant, so Where and the score Add of the
            # sliding layers run in double in the graph (eager stays float32). A
            # float32 0-d tensor gives the same numbers without the float64 island.
            min_dtype = torch.tensor(min_dtype, dtype=hidden_states.dtype)
            attention_mask = torch.where(sliding_window_mask, min_dtype, attention_mask)
            if attention_mask.shape[-1] <= 1:  # when decoding
                attention_mask = attention_mask[:, :, :, -self.sliding_window:]

        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, present = self.self_attn(hidden_states, attention_mask, position_ids, past_key_value)
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.pre_feedforward_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = self.post_feedforward_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states, present


def gemma3_is_sliding(config, layer_idx):
    """Gemma-3 configs before layer_types: every sliding_window_pattern-th layer is global."""
    return bool((layer_idx + 1) % config.sliding_window_pattern)


class Gemma3DecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.is_sliding = gemma3_is_sliding(config, layer_idx)
        self.self_attn = Gemma3Attention(config, layer_idx)
        self.mlp = LlamaMLP(config, act=config.hidden_activation)
        self.input_layernorm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.pre_feedforward_layernorm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_feedforward_layernorm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings=None):
        # The model hands each layer its mask and rotary tables: (full, sliding) and (global, local).
        attention_mask = attention_mask[1] if self.is_sliding else attention_mask[0]
        position_embeddings = position_embeddings[1] if self.is_sliding else position_embeddings[0]
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, present = self.self_attn(hidden_states, attention_mask, position_ids, past_key_value,
                                                position_embeddings)
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.pre_feedforward_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = self.post_feedforward_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states, present


class Cohere2DecoderLayer(nn.Module):
    """Attention and MLP read the same normed input; both add to the residual."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.is_sliding = bool((layer_idx + 1) % config.sliding_window_pattern)
        self.self_attn = Cohere2Attention(config, layer_idx)
        self.mlp = LlamaMLP(config, act=config.hidden_act)
        self.input_layernorm = Cohere2LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings=None):
        attention_mask = attention_mask[1] if self.is_sliding else attention_mask[0]
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states_attention, present = self.self_attn(hidden_states, attention_mask, position_ids,
                                                          past_key_value, position_embeddings)
        hidden_states_mlp = self.mlp(hidden_states)
        hidden_states = residual + hidden_states_attention + hidden_states_mlp
        return hidden_states, present


class Exaone4DecoderLayer(Olmo2DecoderLayer):
    """OLMo-2's layer with EXAONE-4.0's attention; the model hands it (full, sliding) masks."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx, Exaone4Attention(config, layer_idx))

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings=None):
        attention_mask = attention_mask[1] if self.self_attn.is_sliding else attention_mask[0]
        return super().forward(hidden_states, attention_mask, position_ids, past_key_value, position_embeddings)


class ApertusDecoderLayer(DecoderLayer):
    """Llama's layer; the two pre-norms are named attention_layernorm and feedforward_layernorm."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx, Qwen3Attention(config, layer_idx), ApertusMLP(config), LlamaRMSNorm)
        self.attention_layernorm = self.input_layernorm
        self.feedforward_layernorm = self.post_attention_layernorm
        del self.input_layernorm, self.post_attention_layernorm

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.attention_layernorm(hidden_states)
        hidden_states, present = self.self_attn(hidden_states, attention_mask, position_ids, past_key_value,
                                                position_embeddings)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = residual + self.mlp(self.feedforward_layernorm(hidden_states))
        return hidden_states, present


def sliding_window_mask(causal_mask, cache_position, window):
    """masking_utils' sliding overlay on the causal mask: a query at position p sees keys
    kv_idx > p - window."""
    kv_idx = torch.arange(causal_mask.shape[-1])
    too_old = kv_idx[None, :] <= (cache_position[:, None] - window)
    return causal_mask.masked_fill(too_old[None, None], torch.finfo(causal_mask.dtype).min)


# --------------------------------------------------------------------------- models

class DecoderModel(nn.Module):
    """LlamaModel & co: embed_tokens, layers, norm (+ rotary_emb for Llama)."""

    def __init__(self, config, family):
        super().__init__()
        self.config = config
        self.family = family
        self.vocab_size = config.vocab_size
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        layers = []
        for i in range(config.num_hidden_layers):
            layers.append(make_layer(config, family, i))
        self.layers = nn.ModuleList(layers)
        gemma = family in ("gemma", "gemma2", "gemma3")
        if family == "phi":  # PhiModel: final_layernorm, an nn.LayerNorm
            self.final_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        elif family == "starcoder2":
            self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_epsilon)
        elif family == "cohere2":
            self.norm = Cohere2LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            self.rotary_emb = Cohere2RotaryEmbedding(config)
        elif family == "olmo":
            self.norm = OlmoLayerNorm(config.hidden_size)
        elif family == "nemotron":
            self.norm = NemotronLayerNorm1p(config.hidden_size, eps=config.norm_eps)
        elif family == "stablelm":
            self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        else:
            self.norm = (GemmaRMSNorm if gemma else LlamaRMSNorm)(config.hidden_size, eps=config.rms_norm_eps)
        if family in ("llama3", "mqa", "qwen3", "gemma3", "granite", "phi4_mini", "olmo2", "glm", "exaone4", "smollm3", "olmo",
                      "nemotron", "stablelm", "olmoe", "qwen3_moe", "apertus", "hunyuan_v1_dense", "olmo3", "ernie4_5"):
            self.rotary_emb = LlamaRotaryEmbedding(config)  # Qwen3's and Gemma3's are the same
        if family == "gemma3":  # the sliding layers' table: rope_local_base_freq, no scaling
            local = FamilyConfig(dict(config.raw, rope_theta=config.rope_local_base_freq, rope_scaling=None))
            self.rotary_emb_local = LlamaRotaryEmbedding(local)
        if family == "olmo3":  # Olmo3Model.rotary_embs: the sliding layers' default rotary
            self.rotary_emb_local = LlamaRotaryEmbedding(FamilyConfig(dict(config.raw, rope_scaling=None)))

    def forward(self, input_ids, attention_mask, position_ids, past_key_values, mask_style):
        inputs_embeds = self.embed_tokens(input_ids)
        if self.family == "granite":
            inputs_embeds = inputs_embeds * self.config.embedding_multiplier
        past_seen_tokens = past_key_values[0][0].shape[-2]
        cache_position = torch.arange(past_seen_tokens, past_seen_tokens + inputs_embeds.shape[1])
        causal_mask = update_causal_mask(attention_mask, inputs_embeds, cache_position, past_seen_tokens,
                                         mask_style)
        sliding = self.family in ("gemma3", "cohere2", "exaone4", "olmo3")  # (full, sliding) masks; each layer takes its own
        if sliding and mask_style == "masking_utils":  # transformers >= 4.53 makes both first
            causal_mask = (causal_mask, masking_utils_causal_mask(attention_mask, inputs_embeds, cache_position,
                                                                  window=self.config.sliding_window))
        hidden_states = inputs_embeds
        if position_ids is None:  # transformers: the cache positions when no position_ids are given
            position_ids = cache_position.unsqueeze(0)
        position_embeddings = None
        if hasattr(self, "rotary_emb"):
            # create position embeddings to be shared across the decoder layers
            position_embeddings = self.rotary_emb(hidden_states, position_ids)
        if self.family in ("gemma3", "olmo3"):
            position_embeddings = (position_embeddings, self.rotary_emb_local(hidden_states, position_ids))
        if sliding and mask_style != "masking_utils":
            causal_mask = (causal_mask, sliding_window_mask(causal_mask, cache_position, self.config.sliding_window))
        if self.family == "starcoder2":  # Mistral's mask: every layer sliding
            causal_mask = sliding_window_mask(causal_mask, cache_position, self.config.sliding_window)
        if self.family in ("gemma", "gemma2", "gemma3"):
            # normalized; Gemma downcasts the below to the input dtype
            normalizer = torch.tensor(self.config.hidden_size ** 0.5, dtype=hidden_states.dtype)
            hidden_states = hidden_states * normalizer
        presents = []
        for decoder_layer, past_key_value in zip(self.layers, past_key_values):
            hidden_states, present = decoder_layer(hidden_states, causal_mask, position_ids, past_key_value,
                                                   position_embeddings)
            presents.append(present)
        hidden_states = (self.final_layernorm if self.family == "phi" else self.norm)(hidden_states)
        return hidden_states, presents


# Families whose layer is Llama's (pre-norm RMSNorms, gated MLP) with their own attention.
LLAMA_LAYER_ATTENTION = {"llama3": LlamaAttention, "mqa": LlamaAttention, "granite": LlamaAttention,
                         "qwen3": Qwen3Attention, "smollm3": SmolLM3Attention, "ernie4_5": Ernie4_5Attention,
                         "hunyuan_v1_dense": HunYuanDenseV1Attention}


def make_layer(config, family, i):
    if family in LLAMA_LAYER_ATTENTION:  # Llama's layer around the family's own attention
        return DecoderLayer(config, i, LLAMA_LAYER_ATTENTION[family](config, i),
                            LlamaMLP(config, act=config.hidden_act), LlamaRMSNorm)
    if family == "qwen2_untied":
        return DecoderLayer(config, i, Qwen2Attention(config, i, bias=True),
                            LlamaMLP(config, act=config.hidden_act), LlamaRMSNorm)
    if family == "phi3":
        return DecoderLayer(config, i, Phi3Attention(config, i), Phi3MLP(config), LlamaRMSNorm, phi3=True)
    if family == "phi4_mini":
        return DecoderLayer(config, i, Phi4MiniAttention(config, i), Phi3MLP(config), LlamaRMSNorm, phi3=True)
    if family == "gemma":
        return DecoderLayer(config, i, GemmaAttention(config, i), LlamaMLP(config, act=config.hidden_activation),
                            GemmaRMSNorm)
    if family == "gemma2":
        return Gemma2DecoderLayer(config, i)
    if family in ("mixtral_onehot", "mixtral_scatter", "mixtral_hf"):
        routing = family.split("_")[1]
        return DecoderLayer(config, i, Qwen2Attention(config, i, bias=False),
                            MixtralSparseMoeBlock(config, routing=routing), LlamaRMSNorm,
                            mlp_name="block_sparse_moe")
    if family == "qwen3_moe":  # Qwen3's attention, Mixtral's loop (Qwen3MoeSparseMoeBlock), renormalised
        experts = FamilyConfig(dict(config.raw, num_local_experts=config.num_experts,
                                    intermediate_size=config.moe_intermediate_size))
        return DecoderLayer(config, i, Qwen3Attention(config, i), MixtralSparseMoeBlock(experts, routing="hf"),
                            LlamaRMSNorm)
    if family == "olmoe":  # OLMo-2's q/k norms before pre-norms, Mixtral's loop without renormalising
        experts = FamilyConfig(dict(config.raw, num_local_experts=config.num_experts))
        return DecoderLayer(config, i, Olmo2Attention(config, i), MixtralSparseMoeBlock(experts, routing="hf"),
                            LlamaRMSNorm)
    if family == "qwen2_moe_hf":
        return DecoderLayer(config, i, Qwen2Attention(config, i, bias=True),
                            Qwen2MoeSparseMoeBlock(config, routing="hf"), LlamaRMSNorm)
    if family == "qwen2_moe":
        return DecoderLayer(config, i, Qwen2Attention(config, i, bias=True), Qwen2MoeSparseMoeBlock(config),
                            LlamaRMSNorm)
    if family == "gemma3":
        return Gemma3DecoderLayer(config, i)
    if family == "cohere2":
        return Cohere2DecoderLayer(config, i)
    if family == "olmo2":
        return Olmo2DecoderLayer(config, i)
    if family == "exaone4":
        return Exaone4DecoderLayer(config, i)
    if family == "phi":
        return PhiDecoderLayer(config, i)
    if family == "glm":
        return DecoderLayer(config, i, GlmAttention(config, i), Phi3MLP(config), LlamaRMSNorm)
    if family == "starcoder2":  # modeling_starcoder2.py 4.44: Qwen2's attention (+ o_proj bias), LayerNorms
        return DecoderLayer(config, i, Qwen2Attention(config, i, bias=config.use_bias, o_bias=config.use_bias),
                            Starcoder2MLP(config), layer_norm)
    if family == "stablelm":
        return DecoderLayer(config, i, StableLmAttention(config, i), LlamaMLP(config, act=config.hidden_act),
                            lambda size, eps: nn.LayerNorm(size, eps=config.layer_norm_eps))
    if family == "nemotron":
        return DecoderLayer(config, i, NemotronAttention(config, i), NemotronMLP(config),
                            lambda size, eps: NemotronLayerNorm1p(size, eps=config.norm_eps))
    if family == "olmo":
        return DecoderLayer(config, i, OlmoAttention(config, i), LlamaMLP(config, act=config.hidden_act),
                            OlmoLayerNorm)
    if family == "apertus":
        return ApertusDecoderLayer(config, i)
    if family == "olmo3":
        return Olmo3DecoderLayer(config, i)
    raise ValueError(family)


FAMILIES = ("llama3", "mqa", "qwen2_untied", "phi3", "gemma", "gemma2",
            "mixtral_onehot", "mixtral_scatter", "qwen2_moe", "qwen3", "gemma3", "granite", "cohere2", "phi4_mini", "olmo2", "phi", "starcoder2", "glm", "exaone4", "smollm3", "olmo", "nemotron", "stablelm", "mixtral_hf", "qwen2_moe_hf", "olmoe", "qwen3_moe", "apertus", "hunyuan_v1_dense", "olmo3", "ernie4_5")


class DecoderLM(nn.Module):
    """What every XxxForCausalLM here offers the goldens beside forward (the optimum layout):
    run, the list-of-(k, v) form of forward; empty_past; moe_blocks (none unless overridden)."""

    def run(self, input_ids, attention_mask, position_ids, past):
        flat = []
        for k, v in past:
            flat += [k, v]
        out = self.forward(input_ids, attention_mask, position_ids, *flat)
        return out[0], [(out[1 + 2 * i], out[2 + 2 * i]) for i in range(len(past))]

    def empty_past(self, batch=1, dtype=torch.float32):
        c = self.config
        return [(torch.zeros(batch, c.num_key_value_heads, 0, c.head_dim, dtype=dtype),
                 torch.zeros(batch, c.num_key_value_heads, 0, c.head_dim, dtype=dtype))
                for _ in range(c.num_hidden_layers)]

    def moe_blocks(self):
        return []

    def layer_stack(self, layers, hidden_states, attention_mask, past_flat, call):
        """transformers' additive causal mask for the rows after the cache, then each layer as
        `call(layer, hidden_states, causal_mask, (key, value) cache)`: the last hidden states
        and the flat presents (Falcon, GPT-J; GPT-NeoX and OPT compute their rotary or positions
        between the mask and the layers, as HF does, and keep their own loop)."""
        past_seen = past_flat[0].shape[-2]
        cache_position = torch.arange(past_seen, past_seen + hidden_states.shape[1])
        causal_mask = update_causal_mask(attention_mask, hidden_states, cache_position, past_seen, self.mask_style)
        out = []
        for i, layer in enumerate(layers):
            hidden_states, (k, v) = call(layer, hidden_states, causal_mask, (past_flat[2 * i], past_flat[2 * i + 1]))
            out += [k, v]
        return hidden_states, out


class CausalLM(DecoderLM):
    """XxxForCausalLM: `model` + `lm_head` (+ Gemma2's final logit soft-capping).

    forward takes the optimum ONNX layout (flat past tensors) and returns
    (logits, present.0.key, present.0.value, ...)."""

    def __init__(self, cfg_dict, family, mask_style="masked_fill", attn_implementation="eager"):
        super().__init__()
        if family not in FAMILIES:
            raise ValueError(family)
        config = FamilyConfig(cfg_dict)
        config.attn_implementation = attn_implementation
        self.config = config
        self.family = family
        self.mask_style = mask_style
        self.model = DecoderModel(config, family)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=family == "phi")
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids, attention_mask, position_ids, *past_flat):
        past = [(past_flat[2 * i], past_flat[2 * i + 1]) for i in range(len(past_flat) // 2)]
        hidden_states, presents = self.model(input_ids, attention_mask, position_ids, past, self.mask_style)
        logits = self.lm_head(hidden_states)
        if self.family == "granite":
            logits = logits / self.config.logits_scaling
        if self.family == "cohere2":
            logits = logits * self.config.logit_scale
        cap = getattr(self.config, "final_logit_softcapping", None)
        if self.family == "gemma2" and cap is not None:
            logits = logits / cap
            logits = torch.tanh(logits)
            logits = logits * cap
        logits = logits.float()
        out = [logits]
        for k, v in presents:
            out += [k, v]
        return tuple(out)

    def moe_blocks(self):
        return [getattr(lay, lay.mlp_name) for lay in self.model.layers
                if isinstance(getattr(lay, "mlp_name", None), str)
                and isinstance(getattr(lay, lay.mlp_name), (MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock))]


class Conv1D(nn.Module):
    """transformers' GPT-2 Conv1D: a linear layer with the weight stored [in, out], computed as
    addmm on the rows flattened to 2-D (exports as Reshape, Gemm, Reshape)."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class GPT2Attention(nn.Module):
    """modeling_gpt2.py 4.44, eager: fused c_attn split in three, learned positions (no rotary),
    the causal mask from the `bias` buffer (tril [n_positions, n_positions] bool) sliced to the
    key and query lengths and applied with Where, then the padding mask added."""

    def __init__(self, config):
        super().__init__()
        n = config.max_position_embeddings
        self.register_buffer("bias", torch.tril(torch.ones((n, n), dtype=torch.bool)).view(1, 1, n, n),
                             persistent=False)
        self.embed_dim = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.embed_dim // self.num_heads
        self.split_size = self.embed_dim
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def _split_heads(self, tensor, num_heads, attn_head_size):
        new_shape = tensor.size()[:-1] + (num_heads, attn_head_size)
        return tensor.view(new_shape).permute(0, 2, 1, 3)  # (batch, head, seq_length, head_features)

    def _merge_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        return tensor.view(tensor.size()[:-2] + (num_heads * attn_head_size,))

    def _attn(self, query, key, value, attention_mask):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full([], value.size(-1) ** 0.5, dtype=attn_weights.dtype)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        mask_value = torch.full([], torch.finfo(attn_weights.dtype).min, dtype=attn_weights.dtype)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = self.attn_dropout(attn_weights.type(value.dtype))
        return torch.matmul(attn_weights, value)

    def project(self, hidden_states):
        return self.c_attn(hidden_states).split(self.split_size, dim=2)

    def out(self, attn_output):
        return self.c_proj(attn_output)

    def forward(self, hidden_states, layer_past, attention_mask):
        query, key, value = self.project(hidden_states)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)
        past_key, past_value = layer_past
        key = torch.cat((past_key, key), dim=-2)
        value = torch.cat((past_value, value), dim=-2)
        present = (key, value)
        attn_output = self._attn(query, key, value, attention_mask)
        attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
        return self.resid_dropout(self.out(attn_output)), present


class GPT2Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        inner = config.n_inner if getattr(config, "n_inner", None) is not None else 4 * config.hidden_size
        self.ln_1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attn = GPT2Attention(config)
        self.ln_2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = nn.Module()
        self.mlp.c_fc = Conv1D(inner, config.hidden_size)
        self.mlp.c_proj = Conv1D(config.hidden_size, inner)
        self.mlp.dropout = nn.Dropout(config.resid_pdrop)
        self.act = ACT2FN[config.activation_function]

    def forward(self, hidden_states, layer_past, attention_mask):
        residual = hidden_states
        attn_output, present = self.attn(self.ln_1(hidden_states), layer_past, attention_mask)
        hidden_states = attn_output + residual
        residual = hidden_states
        h = self.ln_2(hidden_states)
        feed_forward_hidden_states = self.mlp.dropout(self.mlp.c_proj(self.act(self.mlp.c_fc(h))))
        return residual + feed_forward_hidden_states, present


class GPT2LMHeadModel(DecoderLM):
    """modeling_gpt2.py 4.44 (GPT2LMHeadModel, eager): `transformer` (wte + wpe, blocks, ln_f)
    and a tied lm_head; the padding mask is (1 - mask) * min, added to the scores."""

    def __init__(self, cfg_dict, family="gpt2", mask_style=None, attn_implementation="eager"):
        super().__init__()
        config = FamilyConfig(cfg_dict)
        self.config, self.family, self.mask_style = config, family, mask_style
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(config.vocab_size, config.hidden_size)
        self.transformer.wpe = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.transformer.drop = nn.Dropout(config.raw.get("embd_pdrop", config.raw.get("embed_dropout", 0.0)))
        self.transformer.h = nn.ModuleList([self.block(config, i) for i in range(config.num_hidden_layers)])
        self.transformer.ln_f = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight

    def block(self, config, layer_id):
        return GPT2Block(config)

    def causal_mask(self, attention_mask, hidden_states, input_ids, past_flat):
        attention_mask = attention_mask.view(input_ids.shape[0], -1)[:, None, None, :]
        attention_mask = attention_mask.to(dtype=hidden_states.dtype)
        return (1.0 - attention_mask) * torch.finfo(hidden_states.dtype).min

    def forward(self, input_ids, attention_mask, position_ids, *past_flat):
        t = self.transformer
        hidden_states = t.drop(t.wte(input_ids) + t.wpe(position_ids))
        attention_mask = self.causal_mask(attention_mask, hidden_states, input_ids, past_flat)
        out = []
        for i, block in enumerate(t.h):
            hidden_states, (k, v) = block(hidden_states, (past_flat[2 * i], past_flat[2 * i + 1]), attention_mask)
            out += [k, v]
        logits = self.lm_head(t.ln_f(hidden_states))
        return tuple([logits] + out)


class GPTBigCodeAttention(nn.Module):
    """modeling_gpt_bigcode.py 4.54+ (the Cache-object rewrite; exports hold key/value pairs), eager,
    multi_query: one nn.Linear c_attn to [E + 2 kv_dim], `unsqueeze(1).split(.., dim=3)` gives
    the queries [b, 1, s, E] (viewed as heads, transposed) and the one KV head's key and value
    [b, 1, s, head_dim] as they are; the scores `matmul(query, key^T) * scaling` broadcast that
    head over the queries (no repeat_kv), the mask added, softmax in float32."""

    def __init__(self, config):
        super().__init__()
        self.embed_dim = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.embed_dim // self.num_heads
        self.kv_dim = config.num_key_value_heads * self.head_dim
        self.scaling = self.head_dim ** -0.5 if config.raw.get("scale_attn_weights", True) else 1.0
        self.c_attn = nn.Linear(self.embed_dim, self.embed_dim + 2 * self.kv_dim)
        self.c_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.resid_dropout = nn.Dropout(config.raw.get("resid_pdrop", 0.0))

    def forward(self, hidden_states, layer_past, attention_mask):
        input_shape = hidden_states.shape[:-1]
        query, key, value = self.c_attn(hidden_states).unsqueeze(1).split((self.embed_dim, self.kv_dim, self.kv_dim), dim=3)
        query = query.view(*input_shape, -1, self.head_dim).transpose(1, 2)
        past_key, past_value = layer_past
        key = torch.cat((past_key, key), dim=-2)
        value = torch.cat((past_value, value), dim=-2)
        attn_weights = torch.matmul(query, key.transpose(2, 3)) * self.scaling
        attn_weights = attn_weights + attention_mask[:, :, :, : key.shape[-2]]
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
        attn_output = torch.matmul(attn_weights, value).transpose(1, 2)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.resid_dropout(self.c_proj(attn_output)), (key, value)


class GPTBigCodeBlock(GPT2Block):
    """GPT-2's block with nn.Linear (not Conv1D) in the MLP and GPTBigCodeAttention."""

    def __init__(self, config):
        super().__init__(config)
        inner = self.mlp.c_fc.nf
        self.attn = GPTBigCodeAttention(config)
        self.mlp.c_fc = nn.Linear(config.hidden_size, inner)
        self.mlp.c_proj = nn.Linear(inner, config.hidden_size)


class GPTBigCodeForCausalLM(GPT2LMHeadModel):
    """modeling_gpt_bigcode.py 4.54+ (StarCoder, SantaCoder, Granite-Code): GPT-2's `transformer`
    (wte + wpe, LayerNorms, gelu_pytorch_tanh MLP, tied head) with multi-query attention and
    transformers >= 4.53's mask (masking_utils)."""

    def __init__(self, cfg_dict):
        assert cfg_dict.get("multi_query", True), "only multi_query (every published GPTBigCode checkpoint)"
        super().__init__(dict(cfg_dict, num_key_value_heads=1), family="gpt_bigcode", mask_style="masking_utils")

    def block(self, config, layer_id):
        return GPTBigCodeBlock(config)

    def causal_mask(self, attention_mask, hidden_states, input_ids, past_flat):
        past_seen = past_flat[0].shape[-2]
        cache_position = torch.arange(past_seen, past_seen + hidden_states.shape[1])
        return update_causal_mask(attention_mask, hidden_states, cache_position, past_seen, self.mask_style)


class GPTBigCodeFusedAttention(nn.Module):
    """modeling_gpt_bigcode.py before 4.54 (what optimum exported until then), eager, multi_query:
    the one KV head's key and value stay fused as one cache tensor [b, t, 2 head_dim] per layer
    (`past_key_values.N.key_value`), appended along t and split after; the heads are folded into
    the rows: query [b, s * heads, hd] times key^T by baddbmm, viewed [b, s, heads, t], the
    boolean mask [b, s, 1, t] applied by Where, softmax, bmm with value [b, t, hd]."""

    def __init__(self, config):
        super().__init__()
        self.embed_dim = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.embed_dim // self.num_heads
        self.kv_dim = self.head_dim
        self.scale = self.head_dim ** -0.5
        self.c_attn = nn.Linear(self.embed_dim, self.embed_dim + 2 * self.kv_dim)
        self.c_proj = nn.Linear(self.embed_dim, self.embed_dim)

    def forward(self, hidden_states, layer_past, attention_mask):
        query, key_value = self.c_attn(hidden_states).split((self.embed_dim, 2 * self.kv_dim), dim=2)
        key_value = torch.cat((layer_past, key_value), dim=-2)
        key, value = key_value.split((self.head_dim, self.head_dim), dim=-1)
        key = key.transpose(-1, -2)
        batch_size, query_length = query.shape[0], query.shape[1]
        key_length = key.size(-1)
        query = query.reshape(batch_size, query_length * self.num_heads, self.head_dim)
        attn_weights = torch.zeros((batch_size, query_length * self.num_heads, key_length), dtype=query.dtype)
        attn_weights = torch.baddbmm(attn_weights, query, key, beta=1, alpha=self.scale)
        attn_weights = attn_weights.view(batch_size, query_length, self.num_heads, key_length)
        mask_value = torch.full([], torch.finfo(attn_weights.dtype).min, dtype=attn_weights.dtype)
        attn_weights = torch.where(attention_mask, attn_weights, mask_value)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_output = torch.bmm(attn_weights.view(batch_size, query_length * self.num_heads, key_length), value)
        attn_output = attn_output.view(batch_size, query_length, self.embed_dim)
        return self.c_proj(attn_output), key_value


class GPTBigCodeFusedForCausalLM(GPTBigCodeForCausalLM):
    """GPTBigCodeForCausalLM as transformers < 4.54 writes it: GPTBigCodeFusedAttention, and the
    mask from the model's `bias` buffer (tril [n_positions, n_positions] bool) sliced to the
    lengths, ANDed with the padding mask, unsqueezed to [b, s, 1, t]. forward takes one fused
    cache tensor per layer and returns (logits, present.0.key_value, ...)."""

    def __init__(self, cfg_dict):
        super().__init__(cfg_dict)
        for block in self.transformer.h:
            block.attn = GPTBigCodeFusedAttention(self.config)
        n = self.config.max_position_embeddings
        self.register_buffer("bias", torch.tril(torch.ones((n, n), dtype=torch.bool)), persistent=False)

    def forward(self, input_ids, attention_mask, position_ids, *past):
        t = self.transformer
        hidden_states = t.drop(t.wte(input_ids) + t.wpe(position_ids))
        query_length, key_length = input_ids.shape[1], attention_mask.shape[1]
        mask = self.bias[None, key_length - query_length: key_length, :key_length]
        mask = (mask * attention_mask.view(input_ids.shape[0], 1, -1).to(dtype=torch.bool)).unsqueeze(2)
        presents = []
        for block, layer_past in zip(t.h, past):
            hidden_states, present = block(hidden_states, layer_past, mask)
            presents.append(present)
        return tuple([self.lm_head(t.ln_f(hidden_states))] + presents)


class GPTNeoSelfAttention(GPT2Attention):
    """modeling_gpt_neo.py 4.44: q/k/v without bias, out_proj with; scores in float32 and not
    scaled; a local layer's `bias` buffer keeps each query's last window_size keys (tril xor
    tril(-window_size)), applied with Where as GPT-2's, then the model's causal mask added."""

    def __init__(self, config, attention_type):
        nn.Module.__init__(self)
        n = config.max_position_embeddings
        bias = torch.tril(torch.ones((n, n), dtype=torch.bool)).view(1, 1, n, n)
        if attention_type == "local":
            bias = torch.bitwise_xor(bias, torch.tril(bias, -config.window_size))
        self.register_buffer("bias", bias, persistent=False)
        self.embed_dim = config.hidden_size
        self.num_heads = config.num_heads
        self.head_dim = self.embed_dim // self.num_heads
        self.k_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.v_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=False)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim, bias=True)
        self.attn_dropout = nn.Dropout(config.attention_dropout)
        self.resid_dropout = nn.Dropout(config.resid_dropout)

    def _attn(self, query, key, value, attention_mask):
        query = query.to(torch.float32)
        key = key.to(torch.float32)
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        mask_value = torch.tensor(torch.finfo(attn_weights.dtype).min, dtype=attn_weights.dtype)
        attn_weights = torch.where(causal_mask, attn_weights, mask_value)
        attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = self.attn_dropout(attn_weights.to(value.dtype))
        return torch.matmul(attn_weights, value)

    def project(self, hidden_states):
        return self.q_proj(hidden_states), self.k_proj(hidden_states), self.v_proj(hidden_states)

    def out(self, attn_output):
        return self.out_proj(attn_output)


class GPTNeoBlock(nn.Module):
    def __init__(self, config, layer_id):
        super().__init__()
        inner = config.intermediate_size if config.intermediate_size is not None else 4 * config.hidden_size
        self.ln_1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.attn = nn.Module()  # GPTNeoAttention: the local or global self-attention
        self.attn.attention = GPTNeoSelfAttention(config, config.attention_layers[layer_id])
        self.ln_2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(config.hidden_size, inner)
        self.mlp.c_proj = nn.Linear(inner, config.hidden_size)
        self.mlp.dropout = nn.Dropout(config.resid_dropout)
        self.act = ACT2FN[config.activation_function]

    def forward(self, hidden_states, layer_past, attention_mask):
        residual = hidden_states
        attn_output, present = self.attn.attention(self.ln_1(hidden_states), layer_past, attention_mask)
        hidden_states = attn_output + residual
        residual = hidden_states
        feed_forward = self.mlp.dropout(self.mlp.c_proj(self.act(self.mlp.c_fc(self.ln_2(hidden_states)))))
        return residual + feed_forward, present


class GPTNeoForCausalLM(GPT2LMHeadModel):
    """modeling_gpt_neo.py 4.44: GPT-2's model with GPT-Neo's blocks, alternating global and
    local attention as attention_layers lists them, and the model's causal mask (HF's
    _update_causal_mask) added to the scores after each layer's own Where."""

    def __init__(self, cfg_dict, mask_style="masked_fill"):
        super().__init__(cfg_dict, "gpt_neo", mask_style)

    def block(self, config, layer_id):
        return GPTNeoBlock(config, layer_id)

    def causal_mask(self, attention_mask, hidden_states, input_ids, past_flat):
        past_seen_tokens = past_flat[0].shape[-2]
        cache_position = torch.arange(past_seen_tokens, past_seen_tokens + input_ids.shape[1])
        return update_causal_mask(attention_mask, hidden_states, cache_position, past_seen_tokens, self.mask_style)


class GPTNeoXAttention(nn.Module):
    """modeling_gpt_neox.py (transformers 4.48+, Pythia): one query_key_value projection viewed
    as [b, s, heads, 3 * head_size] (each head's q, k and v side by side), transposed, then
    chunk(3) on the last axis; rotary over the first rotary_pct of each head (model-level
    tables); eager attention with `* scaling`; `dense` with bias."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        self.head_size = config.hidden_size // config.num_attention_heads
        self.scaling = self.head_size ** -0.5
        self.num_key_value_groups = 1
        self.attention_dropout = config.attention_dropout
        self.query_key_value = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.attention_bias)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, 3 * self.head_size)
        qkv = self.query_key_value(hidden_states).view(hidden_shape).transpose(1, 2)
        query_states, key_states, value_states = qkv.chunk(3, dim=-1)
        cos, sin = position_embeddings
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        query_states, key_states = apply_partial_rotary(query_states, key_states, cos, sin)
        return attend(self, query_states, key_states, value_states, attention_mask, past_key_value, input_shape,
                      self.dense)


class GPTNeoXLayer(nn.Module):
    """Parallel residual (use_parallel_residual): x + attn(ln1(x)) + mlp(ln2(x))."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.post_attention_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attention = GPTNeoXAttention(config, layer_idx)
        self.mlp = nn.Module()
        self.mlp.dense_h_to_4h = nn.Linear(config.hidden_size, config.intermediate_size)
        self.mlp.dense_4h_to_h = nn.Linear(config.intermediate_size, config.hidden_size)
        self.act = F.gelu  # hidden_act "gelu": the exact erf form

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings):
        attn_output, present = self.attention(self.input_layernorm(hidden_states), attention_mask, position_ids,
                                              past_key_value, position_embeddings)
        mlp_output = self.mlp.dense_4h_to_h(self.act(self.mlp.dense_h_to_4h(self.post_attention_layernorm(hidden_states))))
        return mlp_output + attn_output + hidden_states, present


class GPTNeoXForCausalLM(DecoderLM):
    """`gpt_neox` (embed_in, layers, final_layer_norm, model-level rotary) and an untied
    `embed_out`."""

    def __init__(self, cfg_dict, mask_style="masked_fill"):
        super().__init__()
        config = FamilyConfig(dict(cfg_dict, partial_rotary_factor=cfg_dict["rotary_pct"],
                                   rope_theta=cfg_dict["rotary_emb_base"]))
        self.config, self.family, self.mask_style = config, "gpt_neox", mask_style
        self.gpt_neox = nn.Module()
        self.gpt_neox.embed_in = nn.Embedding(config.vocab_size, config.hidden_size)
        self.gpt_neox.layers = nn.ModuleList([GPTNeoXLayer(config, i) for i in range(config.num_hidden_layers)])
        self.gpt_neox.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.gpt_neox.rotary_emb = LlamaRotaryEmbedding(config)
        self.embed_out = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask, position_ids, *past_flat):
        m = self.gpt_neox
        hidden_states = m.embed_in(input_ids)
        past_seen = past_flat[0].shape[-2]
        cache_position = torch.arange(past_seen, past_seen + hidden_states.shape[1])
        causal_mask = update_causal_mask(attention_mask, hidden_states, cache_position, past_seen, self.mask_style)
        position_embeddings = m.rotary_emb(hidden_states, position_ids)
        out = []
        for i, layer in enumerate(m.layers):
            hidden_states, (k, v) = layer(hidden_states, causal_mask, position_ids,
                                          (past_flat[2 * i], past_flat[2 * i + 1]), position_embeddings)
            out += [k, v]
        return tuple([self.embed_out(m.final_layer_norm(hidden_states))] + out)


class FalconAttention(nn.Module):
    """modeling_falcon.py 4.44, Falcon-7B (multi_query, not new_decoder_architecture): one
    query_key_value viewed as [b, s, heads + 2, head_dim]; the queries are heads [:-2], the
    one key head [[-2]] and the one value head [[-1]] (index lists: Gather on the head axis);
    per-layer rotary tables indexed by position_ids; eager attention that broadcasts the one
    KV head over the query heads (no repeat_kv)."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.num_heads
        self.query_key_value = nn.Linear(config.hidden_size, config.hidden_size + 2 * self.head_dim, bias=config.bias)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.bias)
        self.rotary_emb = Qwen2RotaryEmbedding(self.head_dim, max_position_embeddings=config.max_position_embeddings,
                                               base=config.rope_theta)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings=None):
        fused_qkv = self.query_key_value(hidden_states)
        batch_size, query_length, _ = fused_qkv.shape
        fused_qkv = fused_qkv.view(batch_size, query_length, self.num_heads + 2, self.head_dim)
        query_layer, key_layer, value_layer = fused_qkv[..., :-2, :], fused_qkv[..., [-2], :], fused_qkv[..., [-1], :]
        query_layer = query_layer.transpose(1, 2).reshape(batch_size, self.num_heads, query_length, self.head_dim)
        key_layer = key_layer.transpose(1, 2).reshape(batch_size, 1, query_length, self.head_dim)
        value_layer = value_layer.transpose(1, 2).reshape(batch_size, 1, query_length, self.head_dim)
        kv_seq_len = key_layer.shape[-2] + past_key_value[0].shape[-2]
        cos, sin = self.rotary_emb(value_layer, seq_len=kv_seq_len)
        query_layer, key_layer = apply_rotary_pos_emb_indexed(query_layer, key_layer, cos, sin, position_ids)
        key_layer = torch.cat((past_key_value[0], key_layer), dim=-2)
        value_layer = torch.cat((past_key_value[1], value_layer), dim=-2)
        present = (key_layer, value_layer)
        attention_scores = query_layer @ key_layer.transpose(-1, -2)
        attention_scores /= math.sqrt(self.head_dim)
        attention_scores = F.softmax(attention_scores + attention_mask[:, :, :, : key_layer.shape[-2]], dim=-1,
                                     dtype=hidden_states.dtype)
        attn_output = attention_scores @ value_layer
        attn_output = attn_output.view(batch_size, self.num_heads, query_length, self.head_dim)
        attn_output = attn_output.permute(0, 2, 1, 3).reshape(batch_size, query_length, self.num_heads * self.head_dim)
        return self.dense(attn_output), present


class FalconDecoderLayer(nn.Module):
    """parallel_attn: one input_layernorm feeds attention and MLP; both add to the residual."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.self_attention = FalconAttention(config, layer_idx)
        self.mlp = nn.Module()
        self.mlp.dense_h_to_4h = nn.Linear(config.hidden_size, 4 * config.hidden_size, bias=config.bias)
        self.mlp.dense_4h_to_h = nn.Linear(4 * config.hidden_size, config.hidden_size, bias=config.bias)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings=None):
        residual = hidden_states
        attention_layernorm_out = self.input_layernorm(hidden_states)
        attention_output, present = self.self_attention(attention_layernorm_out, attention_mask, position_ids,
                                                        past_key_value)
        mlp_output = self.mlp.dense_4h_to_h(F.gelu(self.mlp.dense_h_to_4h(attention_layernorm_out)))
        return mlp_output + attention_output + residual, present


class FalconForCausalLM(DecoderLM):
    """`transformer` (word_embeddings, h, ln_f) and a tied lm_head."""

    def __init__(self, cfg_dict, mask_style="masked_fill"):
        super().__init__()
        config = FamilyConfig(dict(cfg_dict, num_key_value_heads=1))
        config.head_dim = config.hidden_size // config.num_attention_heads
        self.config, self.family, self.mask_style = config, "falcon", mask_style
        self.transformer = nn.Module()
        self.transformer.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.transformer.h = nn.ModuleList([FalconDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.transformer.ln_f = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.word_embeddings.weight

    def forward(self, input_ids, attention_mask, position_ids, *past_flat):
        t = self.transformer
        hidden_states, out = self.layer_stack(t.h, t.word_embeddings(input_ids), attention_mask, past_flat,
                                              lambda layer, h, mask, past: layer(h, mask, position_ids, past))
        return tuple([self.lm_head(t.ln_f(hidden_states))] + out)


class GPTJAttention(nn.Module):
    """modeling_gptj.py (4.48+): q/k/v/out_proj without bias. q and k are viewed [b, s, heads,
    head_dim] and rotated in that layout (the first rotary_dim dims, interleaved pairs), then
    permuted; sin and cos come from a [n_positions, rotary_dim] sinusoid table repeated over
    the batch and gathered by position_ids (torch.gather: GatherElements); scores in float32
    over the model's additive causal mask, divided by sqrt(head_dim)."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.num_attention_heads
        self.scale_attn = torch.sqrt(torch.tensor(self.head_dim, dtype=torch.float32))
        self.q_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.out_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.rotary_dim = config.rotary_dim
        self.embed_positions = gptj_sinusoidal_positions(config.max_position_embeddings,
                                                         self.rotary_dim or config.hidden_size)

    def _split_heads(self, tensor, rotary):
        tensor = tensor.view(tensor.size()[:-1] + (self.num_attention_heads, self.head_dim))
        return tensor if rotary else tensor.permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value):
        query = self._split_heads(self.q_proj(hidden_states), True)
        key = self._split_heads(self.k_proj(hidden_states), True)
        value = self._split_heads(self.v_proj(hidden_states), False)
        embed_positions = self.embed_positions.repeat(position_ids.shape[0], 1, 1)
        repeated_position_ids = position_ids.unsqueeze(-1).repeat(1, 1, embed_positions.shape[-1])
        sincos = torch.gather(embed_positions, 1, repeated_position_ids)
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
        r = self.rotary_dim
        key = torch.cat([gptj_apply_rotary(key[:, :, :, :r], sin, cos), key[:, :, :, r:]], dim=-1)
        query = torch.cat([gptj_apply_rotary(query[:, :, :, :r], sin, cos), query[:, :, :, r:]], dim=-1)
        key = key.permute(0, 2, 1, 3)
        query = query.permute(0, 2, 1, 3)
        key = torch.cat((past_key_value[0], key), dim=-2)
        value = torch.cat((past_key_value[1], value), dim=-2)
        present = (key, value)
        attn_weights = torch.matmul(query.to(torch.float32), key.to(torch.float32).transpose(-1, -2))
        attn_weights = attn_weights / self.scale_attn
        attn_weights = attn_weights + attention_mask[:, :, :, : key.shape[-2]]
        attn_weights = nn.functional.softmax(attn_weights, dim=-1).to(value.dtype)
        attn_output = torch.matmul(attn_weights, value).permute(0, 2, 1, 3).contiguous()
        attn_output = attn_output.view(attn_output.size()[:-2] + (self.num_attention_heads * self.head_dim,))
        return self.out_proj(attn_output), present


def gptj_sinusoidal_positions(num_pos, dim):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64) / dim))
    sinusoid_inp = torch.einsum("i , j -> i j", torch.arange(num_pos, dtype=torch.int64).float(), inv_freq).float()
    return torch.cat((torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)), dim=1)


def rotate_every_two(x):
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def gptj_apply_rotary(tensor, sin, cos):
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    return (tensor * cos) + (rotate_every_two(tensor) * sin)


class GPTJBlock(nn.Module):
    """ln_1 feeds attention and the MLP (fc_in, gelu_new, fc_out; both with bias) in parallel."""

    def __init__(self, config, layer_idx):
        super().__init__()
        inner = config.n_inner if getattr(config, "n_inner", None) is not None else 4 * config.hidden_size
        self.ln_1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attn = GPTJAttention(config, layer_idx)
        self.mlp = nn.Module()
        self.mlp.fc_in = nn.Linear(config.hidden_size, inner)
        self.mlp.fc_out = nn.Linear(inner, config.hidden_size)
        self.act = ACT2FN[config.activation_function]

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_output, present = self.attn(hidden_states, attention_mask, position_ids, past_key_value)
        feed_forward_hidden_states = self.mlp.fc_out(self.act(self.mlp.fc_in(hidden_states)))
        return attn_output + feed_forward_hidden_states + residual, present


class GPTJForCausalLM(DecoderLM):
    """`transformer` (wte, h, ln_f; the Llama-style additive causal mask) and an untied lm_head
    with bias."""

    def __init__(self, cfg_dict, mask_style="masked_fill"):
        super().__init__()
        config = FamilyConfig(cfg_dict)
        self.config, self.family, self.mask_style = config, "gptj", mask_style
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(config.vocab_size, config.hidden_size)
        self.transformer.h = nn.ModuleList([GPTJBlock(config, i) for i in range(config.num_hidden_layers)])
        self.transformer.ln_f = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, input_ids, attention_mask, position_ids, *past_flat):
        t = self.transformer
        hidden_states, out = self.layer_stack(t.h, t.wte(input_ids), attention_mask, past_flat,
                                              lambda block, h, mask, past: block(h, mask, position_ids, past))
        return tuple([self.lm_head(t.ln_f(hidden_states))] + out)


class OPTAttention(nn.Module):
    """modeling_opt.py (4.50+): q_proj(x) * head_dim**-0.5 before the head view, so the attention
    function scales by 1.0; q/k/v/out_proj with bias (enable_bias)."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.num_heads
        self.q_scaling = self.head_dim ** -0.5
        self.scaling = 1.0
        self.num_key_value_groups = 1
        self.attention_dropout = 0.0
        bias = config.raw.get("enable_bias", True)
        self.k_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=bias)
        self.q_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=bias)
        self.out_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=bias)

    def forward(self, hidden_states, attention_mask, past_key_value):
        bsz, tgt_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states) * self.q_scaling
        query_states = query_states.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        return attend(self, query_states, key_states, value_states, attention_mask, past_key_value, (bsz, tgt_len),
                      self.out_proj)


class OPTDecoderLayer(nn.Module):
    """do_layer_norm_before (every OPT but 350m); the MLP runs on the rows flattened to 2-D, so
    fc1 / fc2 export as Gemm (transB=1)."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.self_attn = OPTAttention(config, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.hidden_size)
        self.fc1 = nn.Linear(config.hidden_size, config.raw["ffn_dim"])
        self.fc2 = nn.Linear(config.raw["ffn_dim"], config.hidden_size)
        self.final_layer_norm = nn.LayerNorm(config.hidden_size)

    def forward(self, hidden_states, attention_mask, past_key_value):
        residual = hidden_states
        hidden_states, present = self.self_attn(self.self_attn_layer_norm(hidden_states), attention_mask, past_key_value)
        hidden_states = residual + hidden_states
        hidden_states_shape = hidden_states.shape
        hidden_states = hidden_states.reshape(-1, hidden_states.size(-1))
        residual = hidden_states
        hidden_states = self.fc2(F.relu(self.fc1(self.final_layer_norm(hidden_states))))
        return (residual + hidden_states).view(hidden_states_shape), present


class OPTForCausalLM(DecoderLM):
    """`model.decoder` (embed_tokens, embed_positions with its offset of 2, layers,
    final_layer_norm) and lm_head tied to embed_tokens; position_ids given (optimum's export
    with transformers >= 4.46)."""

    def __init__(self, cfg_dict, mask_style="masked_fill", attn_implementation="sdpa"):
        super().__init__()
        config = FamilyConfig(cfg_dict)
        config.attn_implementation = attn_implementation
        self.config, self.family, self.mask_style = config, "opt", mask_style
        self.model = nn.Module()
        d = self.model.decoder = nn.Module()
        d.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        d.embed_positions = nn.Embedding(config.max_position_embeddings + 2, config.hidden_size)
        d.final_layer_norm = nn.LayerNorm(config.hidden_size)
        d.layers = nn.ModuleList([OPTDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.lm_head.weight = d.embed_tokens.weight

    def forward(self, input_ids, attention_mask, position_ids, *past_flat):
        d = self.model.decoder
        inputs_embeds = d.embed_tokens(input_ids)
        past_seen = past_flat[0].shape[-2]
        cache_position = torch.arange(past_seen, past_seen + inputs_embeds.shape[1])
        causal_mask = update_causal_mask(attention_mask, inputs_embeds, cache_position, past_seen, self.mask_style)
        hidden_states = inputs_embeds + d.embed_positions(position_ids + 2)
        out = []
        for i, layer in enumerate(d.layers):
            hidden_states, (k, v) = layer(hidden_states, causal_mask, (past_flat[2 * i], past_flat[2 * i + 1]))
            out += [k, v]
        return tuple([self.lm_head(d.final_layer_norm(hidden_states))] + out)


def bloom_alibi(attention_mask, num_heads, dtype):
    """modeling_bloom.build_alibi_tensor: per-head slopes (2^(-8/n) powers, plus the odd powers
    of the next base for a head count that is not a power of two) times each key's position,
    counted from the 2-D attention mask (cumsum - 1, zero on padding): [b * heads, 1, keys]."""
    batch_size, seq_length = attention_mask.shape
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))), dtype=torch.float32)
    powers = torch.arange(1, 1 + closest_power_of_2, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    if closest_power_of_2 != num_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - 3))), dtype=torch.float32)
        num_remaining_heads = min(closest_power_of_2, num_heads - closest_power_of_2)
        extra_powers = torch.arange(1, 1 + 2 * num_remaining_heads, 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)
    arange_tensor = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
    alibi = slopes[..., None] * arange_tensor
    return alibi.reshape(batch_size * num_heads, 1, seq_length).to(dtype)


class BloomAttention(nn.Module):
    """modeling_bloom.py (transformers 4.48+, the Cache classes): query_key_value viewed as
    [b, s, heads, 3, head_dim] (each head's q, k, v side by side); q, k, v flattened to
    [b * heads, s, head_dim] after the cache append; scores = alibi.baddbmm(q, k^T,
    beta=1, alpha=1/sqrt(head_dim)), viewed [b, heads, q, k], plus the causal mask; bmm with
    the values; `dense` with bias, then the residual (dropout_add)."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.num_heads
        self.inv_norm_factor = 1.0 / math.sqrt(self.head_dim)
        self.beta = 1.0
        self.query_key_value = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=True)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, residual, alibi, attention_mask, layer_past):
        batch_size, q_length, _ = hidden_states.shape
        fused_qkv = self.query_key_value(hidden_states)
        fused_qkv = fused_qkv.view(batch_size, q_length, self.num_heads, 3, self.head_dim)
        query_layer = fused_qkv[..., 0, :].transpose(1, 2)
        key_layer = fused_qkv[..., 1, :].transpose(1, 2)
        value_layer = fused_qkv[..., 2, :].transpose(1, 2)
        key_layer = torch.cat([layer_past[0], key_layer], dim=-2)
        value_layer = torch.cat([layer_past[1], value_layer], dim=-2)
        present = (key_layer, value_layer)
        query_layer = query_layer.reshape(batch_size * self.num_heads, -1, self.head_dim)
        key_layer = key_layer.reshape(batch_size * self.num_heads, -1, self.head_dim).transpose(-1, -2)
        value_layer = value_layer.reshape(batch_size * self.num_heads, -1, self.head_dim)
        attention_scores = alibi.baddbmm(batch1=query_layer, batch2=key_layer, beta=self.beta,
                                         alpha=self.inv_norm_factor)
        attn_weights = attention_scores.view(batch_size, self.num_heads, q_length, -1)
        attn_weights = attn_weights + attention_mask[:, :, :, : key_layer.shape[-1]]
        attention_probs = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(value_layer.dtype)
        attention_probs_reshaped = attention_probs.view(batch_size * self.num_heads, q_length, -1)
        context_layer = torch.bmm(attention_probs_reshaped, value_layer)
        x = context_layer.view(batch_size, self.num_heads, q_length, self.head_dim).permute(0, 2, 1, 3)
        context_layer = x.reshape(batch_size, q_length, self.num_heads * self.head_dim)
        return self.dense(context_layer) + residual, present


def bloom_gelu(x):
    """modeling_bloom.bloom_gelu_forward: the tanh GELU with Bloom's rounded constant."""
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


class BloomBlock(nn.Module):
    """input_layernorm -> attention (+ residual) -> post_attention_layernorm -> MLP
    (+ residual); apply_residual_connection_post_layernorm false, as every released Bloom."""

    def __init__(self, config, layer_idx):
        super().__init__()
        eps = config.raw["layer_norm_epsilon"]
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=eps)
        self.self_attention = BloomAttention(config, layer_idx)
        self.post_attention_layernorm = nn.LayerNorm(config.hidden_size, eps=eps)
        self.mlp = nn.Module()
        self.mlp.dense_h_to_4h = nn.Linear(config.hidden_size, 4 * config.hidden_size)
        self.mlp.dense_4h_to_h = nn.Linear(4 * config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, alibi, attention_mask, layer_past):
        attention_output, present = self.self_attention(self.input_layernorm(hidden_states), hidden_states, alibi,
                                                        attention_mask, layer_past)
        h = self.mlp.dense_h_to_4h(self.post_attention_layernorm(attention_output))
        return self.mlp.dense_4h_to_h(bloom_gelu(h)) + attention_output, present


class BloomForCausalLM(DecoderLM):
    """`transformer` (word_embeddings, word_embeddings_layernorm, h, ln_f) and an lm_head tied
    to the embeddings. No position ids: positions enter only through ALiBi, counted from the
    attention mask (optimum exports Bloom without a position_ids input)."""

    takes_position_ids = False

    def __init__(self, cfg_dict, mask_style="hf"):
        super().__init__()
        config = FamilyConfig(cfg_dict)
        self.config, self.family, self.mask_style = config, "bloom", mask_style
        self.transformer = nn.Module()
        t = self.transformer
        t.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        t.word_embeddings_layernorm = nn.LayerNorm(config.hidden_size, eps=cfg_dict["layer_norm_epsilon"])
        t.h = nn.ModuleList([BloomBlock(config, i) for i in range(config.num_hidden_layers)])
        t.ln_f = nn.LayerNorm(config.hidden_size, eps=cfg_dict["layer_norm_epsilon"])
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.lm_head.weight = t.word_embeddings.weight

    def forward(self, input_ids, attention_mask, position_ids, *past_flat):
        t = self.transformer
        hidden_states = t.word_embeddings_layernorm(t.word_embeddings(input_ids))
        alibi = bloom_alibi(attention_mask, self.config.num_attention_heads, hidden_states.dtype)
        hidden_states, out = self.layer_stack(t.h, hidden_states, attention_mask, past_flat,
                                              lambda layer, h, mask, past: layer(h, alibi, mask, past))
        return tuple([self.lm_head(t.ln_f(hidden_states))] + out)


def attention_mask_converter_4d(attention_mask, query_length, past_length, dtype):
    """transformers' `_prepare_4d_causal_attention_mask` (AttentionMaskConverter.to_4d with
    is_causal, as MPT still calls it in 4.48): `_make_causal_mask` (a [q, q] triangle of min
    after `past_length` zero columns) filled with min where `_expand_mask`'s inverted padding
    mask is set."""
    bsz = attention_mask.shape[0]
    min_dtype = torch.finfo(dtype).min
    mask = torch.full((query_length, query_length), min_dtype)
    mask_cond = torch.arange(mask.size(-1))
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(dtype)
    if past_length > 0:
        mask = torch.cat([torch.zeros(query_length, past_length, dtype=dtype), mask], dim=-1)
    causal_4d = mask[None, None, :, :].expand(bsz, 1, query_length, query_length + past_length)
    src_len = attention_mask.shape[-1]
    expanded = attention_mask[:, None, None, :].expand(bsz, 1, query_length, src_len).to(dtype)
    inverted = 1.0 - expanded
    inverted = inverted.masked_fill(inverted.to(torch.bool), min_dtype)
    return causal_4d.masked_fill(inverted.bool(), min_dtype)


def build_mpt_alibi_tensor(num_heads, sequence_length, alibi_bias_max=8):
    """modeling_mpt.build_mpt_alibi_tensor: slopes 2^(-8 i / heads') (heads' the next power of
    two, odd then even slopes when heads is not one) times the key offset from the last key,
    arange(1 - L, 1): [heads, 1, L] for L = max_seq_len, a constant the exporter folds."""
    alibi = torch.arange(1 - sequence_length, 1, dtype=torch.int32).view(1, 1, 1, sequence_length)
    num_heads_power_of_2 = 2 ** math.ceil(math.log2(num_heads))
    base = torch.arange(1, num_heads_power_of_2 + 1, dtype=torch.int64).float()
    base = base * (alibi_bias_max / num_heads_power_of_2)
    slopes = 1.0 / torch.pow(2, base)
    slopes = slopes.view(1, num_heads_power_of_2, 1, 1)
    if num_heads_power_of_2 != num_heads:
        slopes = torch.concat([slopes[:, 1::2, ...], slopes[:, ::2, ...]], dim=1)[:, :num_heads, ...]
    alibi = alibi * slopes
    return alibi.squeeze(0)


class MptAttention(nn.Module):
    """modeling_mpt.py (transformers 4.48): Wqkv without bias, chunk(3) on the last axis, each
    viewed [b, s, heads, head_dim] and transposed; scores * softmax_scale plus the ALiBi
    buffer sliced to the last query and key columns, then masked_fill(mask, min) with the
    boolean causal mask; softmax in float32; out_proj without bias."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.n_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.n_heads
        self.softmax_scale = 1 / math.sqrt(config.hidden_size / self.n_heads)
        self.Wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=False)
        self.out_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)

    def forward(self, hidden_states, position_bias, past_key_value, attention_mask):
        batch_size, seq_length = hidden_states.shape[:2]
        query_states, key_states, value_states = self.Wqkv(hidden_states).chunk(3, dim=2)
        query_states = query_states.reshape(batch_size, seq_length, self.n_heads, self.head_dim).transpose(1, 2)
        key_states = key_states.reshape(batch_size, seq_length, self.n_heads, self.head_dim).transpose(1, 2)
        value_states = value_states.reshape(batch_size, seq_length, self.n_heads, self.head_dim).transpose(1, 2)
        key_states = torch.cat([past_key_value[0], key_states], dim=2)
        value_states = torch.cat([past_key_value[1], value_states], dim=2)
        present = (key_states, value_states)
        attention_scores = torch.matmul(query_states, key_states.transpose(-1, -2)) * self.softmax_scale
        query_length = seq_length + past_key_value[0].shape[2]
        key_length = key_states.shape[-2]
        position_bias_query_index = max(0, position_bias.size(1) - query_length)
        position_bias_key_index = max(0, position_bias.size(2) - key_length)
        position_bias = position_bias[:, position_bias_query_index:, position_bias_key_index:]
        attention_scores = attention_scores + position_bias
        attention_scores = attention_scores.masked_fill(attention_mask, torch.finfo(query_states.dtype).min)
        attn_weights = F.softmax(attention_scores.float(), dim=-1).to(value_states.dtype)
        context_states = torch.matmul(attn_weights, value_states)
        context_states = context_states.permute(0, 2, 1, 3).contiguous().view(batch_size, seq_length, -1)
        return self.out_proj(context_states), present


def layer_norm_no_bias(hidden_size, eps):
    """MPT's LayerNorm with `bias = None` (no_bias)."""
    norm = nn.LayerNorm(hidden_size, eps=eps)
    norm.bias = None
    return norm


class MptBlock(nn.Module):
    """norm_1 -> attention (+ residual) -> norm_2 -> up_proj, exact GELU, down_proj (+ residual);
    no biases anywhere (no_bias)."""

    def __init__(self, config, layer_idx):
        super().__init__()
        eps = config.raw["layer_norm_epsilon"]
        self.norm_1 = layer_norm_no_bias(config.hidden_size, eps)
        self.attn = MptAttention(config, layer_idx)
        self.norm_2 = layer_norm_no_bias(config.hidden_size, eps)
        self.ffn = nn.Module()
        self.ffn.up_proj = nn.Linear(config.hidden_size, config.raw["expansion_ratio"] * config.hidden_size, bias=False)
        self.ffn.down_proj = nn.Linear(config.raw["expansion_ratio"] * config.hidden_size, config.hidden_size, bias=False)

    def forward(self, hidden_states, position_bias, attention_mask, layer_past):
        attn_output, present = self.attn(self.norm_1(hidden_states), position_bias, layer_past, attention_mask)
        hidden_states = attn_output + hidden_states
        h = self.ffn.down_proj(F.gelu(self.ffn.up_proj(self.norm_2(hidden_states))))
        return h + hidden_states, present


class MptForCausalLM(DecoderLM):
    """`transformer` (wte, blocks, norm_f) and an lm_head tied to wte. No position ids (optimum
    exports MPT without them): ALiBi from a [heads, 1, max_seq_len] constant buffer, sliced
    to the keys, assumes the keys sit at consecutive positions ending with the last one."""

    takes_position_ids = False

    def __init__(self, cfg_dict, mask_style="converter"):
        super().__init__()
        config = FamilyConfig(cfg_dict)
        self.config, self.family, self.mask_style = config, "mpt", mask_style
        self.transformer = nn.Module()
        t = self.transformer
        t.wte = nn.Embedding(config.vocab_size, config.hidden_size)
        t.blocks = nn.ModuleList([MptBlock(config, i) for i in range(config.num_hidden_layers)])
        t.norm_f = layer_norm_no_bias(config.hidden_size, cfg_dict["layer_norm_epsilon"])
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.lm_head.weight = t.wte.weight

    def forward(self, input_ids, attention_mask, position_ids, *past_flat):
        t = self.transformer
        hidden_states = t.wte(input_ids)
        past_length = past_flat[0].shape[2]
        alibi = build_mpt_alibi_tensor(self.config.num_attention_heads, self.config.raw["max_seq_len"])
        causal_mask = attention_mask_converter_4d(attention_mask, input_ids.shape[1], past_length,
                                                  hidden_states.dtype).bool()
        out = []
        for i, block in enumerate(t.blocks):
            hidden_states, (k, v) = block(hidden_states, alibi, causal_mask, (past_flat[2 * i], past_flat[2 * i + 1]))
            out += [k, v]
        return tuple([self.lm_head(t.norm_f(hidden_states))] + out)


class PreNormLayer(nn.Module):
    """Attention, then the MLP, each on its RMSNorm of the stream and added back (times
    `branch_scale` when given: MiniCPM's scale_depth / sqrt(num_hidden_layers)). `names` are
    the family's module names for (attention, mlp, its norm, the mlp's norm): they name the
    exported weights. Baichuan2, InternLM2 and MiniCPM write this layer alike."""

    def __init__(self, names, attention, mlp, attention_norm, mlp_norm, branch_scale=None):
        super().__init__()
        self.names = names
        for name, module in zip(names, (attention, mlp, attention_norm, mlp_norm)):
            setattr(self, name, module)
        self.branch_scale = branch_scale

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value):
        attention, mlp, attention_norm, mlp_norm = (getattr(self, n) for n in self.names)
        scaled = (lambda x: x) if self.branch_scale is None else (lambda x: x * self.branch_scale)
        attn_output, present = attention(attention_norm(hidden_states), attention_mask, position_ids, past_key_value)
        hidden_states = hidden_states + scaled(attn_output)
        return hidden_states + scaled(mlp(mlp_norm(hidden_states))), present


def converter_layer_stack(layers, hidden_states, input_ids, attention_mask, position_ids, past_flat):
    """The layer loop of the remote-code families on _prepare_4d_causal_attention_mask's
    additive mask (Baichuan2, MiniCPM): the mask from input_ids' length and the cache's, then
    each layer with position_ids. Returns the last hidden states and the flat presents."""
    past_length = past_flat[0].shape[2]
    mask = attention_mask_converter_4d(attention_mask, input_ids.shape[1], past_length, hidden_states.dtype)
    out = []
    for i, layer in enumerate(layers):
        hidden_states, (k, v) = layer(hidden_states, mask, position_ids, (past_flat[2 * i], past_flat[2 * i + 1]))
        out += [k, v]
    return hidden_states, out


class BaichuanAttention(nn.Module):
    """Baichuan2-7B's modeling_baichuan.py (trust_remote_code): one W_pack projection cut as
    `proj.unflatten(-1, (3, hidden)).unsqueeze(0).transpose(0, -2).squeeze(-2)` and indexed
    proj[0], proj[1], proj[2]; each viewed as heads and transposed; rotary tables indexed by
    position_ids (in float32); F.scaled_dot_product_attention with the additive mask;
    o_proj, no biases."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.hidden_size // self.num_heads
        self.W_pack = nn.Linear(self.hidden_size, 3 * self.hidden_size, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=False)
        self.rotary_emb = Qwen2RotaryEmbedding(self.head_dim, max_position_embeddings=config.max_position_embeddings)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value):
        bsz, q_len, _ = hidden_states.size()
        proj = self.W_pack(hidden_states)
        proj = proj.unflatten(-1, (3, self.hidden_size)).unsqueeze(0).transpose(0, -2).squeeze(-2)
        query_states = proj[0].view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = proj[1].view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        value_states = proj[2].view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        kv_seq_len = key_states.shape[-2] + past_key_value[0].shape[-2]
        cos, sin = self.rotary_emb(value_states, seq_len=kv_seq_len)
        query_states, key_states = apply_rotary_pos_emb_indexed(query_states, key_states, cos, sin, position_ids)
        key_states = torch.cat([past_key_value[0], key_states], dim=2)
        value_states = torch.cat([past_key_value[1], value_states], dim=2)
        present = (key_states, value_states)
        attn_output = ScaledDotProductAttention.apply(query_states, key_states, value_states, attention_mask, None)
        attn_output = attn_output.transpose(1, 2).reshape(bsz, q_len, self.hidden_size)
        return self.o_proj(attn_output), present


class BaichuanDecoderLayer(PreNormLayer):
    def __init__(self, config, layer_idx):
        super().__init__(("self_attn", "mlp", "input_layernorm", "post_attention_layernorm"),
                         BaichuanAttention(config, layer_idx), LlamaMLP(config),
                         LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps),
                         LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps))


class BaichuanForCausalLM(DecoderLM):
    """`model` (embed_tokens, layers, norm) and NormHead: an untied head whose rows it
    L2-normalizes in place on the first eval call, so an export holds the normalized weight
    as a plain linear. The mask is the old `_prepare_decoder_attention_mask` (as MPT's)."""

    def __init__(self, cfg_dict, mask_style="converter"):
        super().__init__()
        config = FamilyConfig(cfg_dict)
        self.config, self.family, self.mask_style = config, "baichuan", mask_style
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.model.layers = nn.ModuleList([BaichuanDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.model.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def normalize_head(self):
        """NormHead's first eval call: weight = F.normalize(weight) (each row to unit L2 norm)."""
        with torch.no_grad():
            self.lm_head.weight.copy_(F.normalize(self.lm_head.weight))

    def forward(self, input_ids, attention_mask, position_ids, *past_flat):
        hidden_states, out = converter_layer_stack(self.model.layers, self.model.embed_tokens(input_ids), input_ids,
                                                   attention_mask, position_ids, past_flat)
        return tuple([self.lm_head(self.model.norm(hidden_states))] + out)


class InternLM2Attention(nn.Module):
    """InternLM2 / 2.5's modeling_internlm2.py (trust_remote_code, eager path): one `wqkv`
    projection whose columns hold, per KV group, the group's query heads then its key and its
    value (`rearrange(qkv, "b q (h gs d) -> b q h gs d", gs=2 + groups)`: a Reshape of the
    columns; the queries a Slice of the group axis folded back to heads, key and value a
    Gather of its last two entries); rotary from position_ids; repeat_kv after the cache;
    scores / sqrt(head_dim) + mask, fp32 softmax; `wo`, no biases."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.num_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.wqkv = nn.Linear(config.hidden_size, (self.num_heads + 2 * self.num_key_value_heads) * self.head_dim,
                              bias=config.bias)
        self.wo = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=config.bias)
        # InternLM2DynamicNTKScalingRotaryEmbedding recomputes its base only past
        # max_position_embeddings, which no traced length reaches: the default table.
        self.rotary_emb = LlamaRotaryEmbedding(FamilyConfig(dict(config.raw, rope_scaling=None,
                                                                 head_dim=self.head_dim)))

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value, position_embeddings=None):
        bsz, q_len, _ = hidden_states.size()
        qkv_states = self.wqkv(hidden_states)
        # rearrange(qkv_states, "b q (h gs d) -> b q h gs d", gs=2 + groups, d=head_dim)
        qkv_states = qkv_states.reshape(bsz, q_len, -1, 2 + self.num_key_value_groups, self.head_dim)
        query_states = qkv_states[..., : self.num_key_value_groups, :]
        # rearrange(query_states, "b q h gs d -> b q (h gs) d")
        query_states = query_states.reshape(bsz, q_len, -1, self.head_dim)
        key_states = qkv_states[..., -2, :]
        value_states = qkv_states[..., -1, :]
        query_states = query_states.transpose(1, 2)
        key_states = key_states.transpose(1, 2)
        value_states = value_states.transpose(1, 2)
        cos, sin = self.rotary_emb(value_states, position_ids)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        key_states = torch.cat([past_key_value[0], key_states], dim=2)
        value_states = torch.cat([past_key_value[1], value_states], dim=2)
        present = (key_states, value_states)
        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, q_len, self.num_heads * self.head_dim)
        return self.wo(attn_output), present


class InternLM2MLP(nn.Module):
    """w2(silu(w1(x)) * w3(x))."""

    def __init__(self, config):
        super().__init__()
        self.w1 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.w3 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.w2 = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class InternLM2DecoderLayer(PreNormLayer):
    def __init__(self, config, layer_idx):
        super().__init__(("attention", "feed_forward", "attention_norm", "ffn_norm"),
                         InternLM2Attention(config, layer_idx), InternLM2MLP(config),
                         LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps),
                         LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps))


class InternLM2ForCausalLM(DecoderLM):
    """`model` (tok_embeddings, layers, norm) and the untied head `output`; the mask is
    InternLM2Model._update_causal_mask, Llama's of the same transformers era."""

    def __init__(self, cfg_dict, mask_style="hf"):
        super().__init__()
        config = FamilyConfig(cfg_dict)
        self.config, self.family, self.mask_style = config, "internlm2", mask_style
        self.model = nn.Module()
        self.model.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.model.layers = nn.ModuleList([InternLM2DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.model.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.output = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask, position_ids, *past_flat):
        hidden_states = self.model.tok_embeddings(input_ids)
        hidden_states, out = self.layer_stack(
            self.model.layers, hidden_states, attention_mask, past_flat,
            lambda layer, h, mask, past: layer(h, mask, position_ids, past))
        return tuple([self.output(self.model.norm(hidden_states)).float()] + out)


class MiniCPMLongRoPE(nn.Module):
    """MiniCPM4's modeling_minicpm.py MiniCPMLongRoPE: cos/sin tables for max_position_embeddings
    positions made at init, each frequency divided by its short factor (the long ones past
    original_max_position_embeddings) and the tables times sqrt(1 + log(scale) /
    log(original_max_position_embeddings)); forward slices them to seq_len."""

    def __init__(self, dim, config):
        super().__init__()
        rs = config.rope_scaling
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        original = rs["original_max_position_embeddings"]
        scale = config.max_position_embeddings / original
        scaling_factor = math.sqrt(1 + math.log(scale) / math.log(original))
        t = torch.arange(config.max_position_embeddings, dtype=inv_freq.dtype)
        factors = torch.tensor(rs["long_factor"] if config.max_position_embeddings > original else rs["short_factor"],
                               dtype=torch.float32)
        freqs = torch.mul(torch.outer(t, 1.0 / factors), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos() * scaling_factor, persistent=False)
        self.register_buffer("sin_cached", emb.sin() * scaling_factor, persistent=False)

    def forward(self, x, seq_len):
        return self.cos_cached[:seq_len].to(dtype=x.dtype), self.sin_cached[:seq_len].to(dtype=x.dtype)


class MiniCPMAttention(nn.Module):
    """MiniCPMAttention (eager): Llama's projections, rotary tables indexed by position_ids
    with q and k rotated in float32, scores / sqrt(head_dim) + the mask, float32 softmax."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.num_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        b = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=b)
        self.k_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=b)
        self.v_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * self.head_dim, bias=b)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=b)
        self.rotary_emb = MiniCPMLongRoPE(self.head_dim, config)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value):
        bsz, q_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads,
                                                       self.head_dim).transpose(1, 2)
        kv_seq_len = key_states.shape[-2] + past_key_value[0].shape[-2]
        cos, sin = self.rotary_emb(value_states.to(torch.float32), seq_len=kv_seq_len)
        orig_dtype = key_states.dtype
        q_embed, k_embed = apply_rotary_pos_emb_indexed(query_states.to(torch.float32), key_states.to(torch.float32),
                                                        cos, sin, position_ids)
        query_states, key_states = q_embed.to(orig_dtype), k_embed.to(orig_dtype)
        key_states = torch.cat([past_key_value[0], key_states], dim=2)
        value_states = torch.cat([past_key_value[1], value_states], dim=2)
        present = (key_states, value_states)
        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)
        attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()
        return self.o_proj(attn_output.reshape(bsz, q_len, -1)), present


class MiniCPMRMSNorm(nn.Module):
    """rms_layernorm: the mean of squares in float32, the product with the weight after the
    cast back."""

    def __init__(self, hidden_size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        old_dtype = hidden_states.dtype
        variance = hidden_states.to(torch.float32).pow(2).mean(dim=-1, keepdim=True)
        hidden_states = (hidden_states * torch.rsqrt(variance + self.variance_epsilon)).to(old_dtype)
        return hidden_states * self.weight


class MiniCPMDecoderLayer(PreNormLayer):
    """Each branch scaled by scale_depth / sqrt(num_hidden_layers) before its residual."""

    def __init__(self, config, layer_idx):
        super().__init__(("self_attn", "mlp", "input_layernorm", "post_attention_layernorm"),
                         MiniCPMAttention(config, layer_idx), LlamaMLP(config, act=config.hidden_act),
                         MiniCPMRMSNorm(config.hidden_size, eps=config.rms_norm_eps),
                         MiniCPMRMSNorm(config.hidden_size, eps=config.rms_norm_eps),
                         branch_scale=config.scale_depth / math.sqrt(config.num_hidden_layers))


class MiniCPMForCausalLM(DecoderLM):
    """MiniCPM / MiniCPM4's modeling_minicpm.py (trust_remote_code): muP scalings (embeddings x
    scale_emb; the final hidden states / (hidden_size / dim_model_base) before the tied head),
    LongRoPE; the mask is _prepare_4d_causal_attention_mask's (as Baichuan2's)."""

    def __init__(self, cfg_dict):
        super().__init__()
        config = FamilyConfig(cfg_dict)
        self.config, self.family, self.mask_style = config, "minicpm", "converter"
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.model.layers = nn.ModuleList([MiniCPMDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.model.norm = MiniCPMRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids, attention_mask, position_ids, *past_flat):
        hidden_states, out = converter_layer_stack(self.model.layers, self.model.embed_tokens(input_ids) * self.config.scale_emb,
                                                   input_ids, attention_mask, position_ids, past_flat)
        hidden_states = self.model.norm(hidden_states)
        logits = self.lm_head(hidden_states / (self.config.hidden_size / self.config.dim_model_base))
        return tuple([logits.float()] + out)


def causal_lm(cfg_dict, family, mask_style="masked_fill", attn_implementation="eager"):
    """The family's XxxForCausalLM."""
    if family == "falcon":
        return FalconForCausalLM(cfg_dict, mask_style)
    if family == "bloom":
        return BloomForCausalLM(cfg_dict, mask_style)
    if family == "mpt":
        return MptForCausalLM(cfg_dict)
    if family == "baichuan":
        return BaichuanForCausalLM(cfg_dict)
    if family == "internlm2":
        return InternLM2ForCausalLM(cfg_dict, mask_style)
    if family == "minicpm":
        return MiniCPMForCausalLM(cfg_dict)
    if family == "gpt2":
        return GPT2LMHeadModel(cfg_dict)
    if family == "gpt_bigcode":
        return GPTBigCodeForCausalLM(cfg_dict)
    if family == "gpt_neo":
        return GPTNeoForCausalLM(cfg_dict, mask_style)
    if family == "gpt_neox":
        return GPTNeoXForCausalLM(cfg_dict, mask_style)
    if family == "gptj":
        return GPTJForCausalLM(cfg_dict, mask_style)
    if family == "opt":
        return OPTForCausalLM(cfg_dict, mask_style, attn_implementation)
    return CausalLM(cfg_dict, family, mask_style, attn_implementation)


# --------------------------------------------------------------------------- export / greedy

def _repeat_interleave_symbolic(g, self, repeats, dim=None, output_size=None):
    """torch >= 2.0's ONNX export of repeat_interleave by one int along a known dim
    (symbolic_helper._repeat_interleave_single_value_repeat_helper): Unsqueeze after dim, Tile
    by a constant, Reshape of the two dims into one. torch 1.13 writes a Loop over splits (and
    rewrites unrelated -1 constants, see Cohere2RotaryEmbedding), which no current exporter does."""
    import torch.onnx.symbolic_helper as sym
    reps = sym._get_const(repeats, "i", "repeats")
    rank = sym._get_tensor_rank(self)
    d = sym._get_const(dim, "i", "dim") % rank
    unsqueezed = g.op("Unsqueeze", self, g.op("Constant", value_t=torch.tensor([d + 1])))
    per_dim = torch.ones(rank + 1, dtype=torch.int64)
    per_dim[d + 1] = reps
    tiled = g.op("Tile", unsqueezed, g.op("Constant", value_t=per_dim))
    return sym._flatten_helper(g, tiled, d, d + 1, rank + 1)


def _layer_norm_symbolic(g, input, normalized_shape, weight, bias, eps, cudnn_enable):
    """torch >= 2.0's LayerNormalization export (symbolic_opset17.layer_norm): a missing gain
    or bias becomes a Constant of ones or zeros (OLMo-1's norms have neither). torch 1.13
    leaves the inputs out, which onnx.checker refuses; with both given the nodes are the same."""
    import torch.onnx.symbolic_helper as sym
    shape = sym._get_const(normalized_shape, "is", "normalized_shape")
    if sym._is_none(weight):
        weight = g.op("Constant", value_t=torch.ones(shape, dtype=torch.float32))
    if sym._is_none(bias):
        bias = g.op("Constant", value_t=torch.zeros(shape, dtype=torch.float32))
    return g.op("LayerNormalization", input, weight, bias, epsilon_f=sym._get_const(eps, "f", "eps"),
                axis_i=-len(shape))


def _unflatten_symbolic(g, input, dim, unflattened_size):
    """torch >= 2.0's export of unflatten (symbolic_opset13.unflatten): Shape of the input
    sliced before and after `dim`, concatenated around the new sizes, and a Reshape. torch 1.13
    has none (Baichuan2's W_pack cut)."""
    import torch.onnx.symbolic_helper as sym
    rank = sym._get_tensor_rank(input)
    d = sym._get_const(dim, "i", "dim") % rank
    shape = g.op("Shape", input)
    head = g.op("Slice", shape, g.op("Constant", value_t=torch.tensor([0])), g.op("Constant", value_t=torch.tensor([d])))
    tail = g.op("Slice", shape, g.op("Constant", value_t=torch.tensor([d + 1])),
                g.op("Constant", value_t=torch.tensor([9223372036854775807])))
    sizes = g.op("Constant", value_t=torch.tensor(sym._get_const(unflattened_size, "is", "unflattened_size")))
    return g.op("Reshape", input, g.op("Concat", head, sizes, tail, axis_i=0))


def _expm1_symbolic(g, self):
    """torchlib's aten_expm1 (the dynamo exporter, torch's default since 2.9): Exp(x) - 1.
    The TorchScript exporter has no symbolic for expm1 (xIELU's negative branch)."""
    return g.op("Sub", g.op("Exp", self), g.op("Constant", value_t=torch.tensor(1.0)))


# The domain the opset-20 export writes its Gelu in while torch checks the opset-17 graph;
# to_opset18_forms moves it into ai.onnx.
_LATER_OPSET = "npuforge.later_opset"


def _gelu_opset20_symbolic(g, self, approximate):
    """torchlib's aten_gelu_opset20 (the dynamo exporter from opset 20, torch's default since
    2.9): one Gelu node with F.gelu's approximate, where the TorchScript exporter writes the
    erf or tanh formula out."""
    import torch.onnx.symbolic_helper as sym
    return g.op(f"{_LATER_OPSET}::Gelu", self, approximate_s=sym._maybe_get_const(approximate, "s"))


def _rsqrt_opset20_symbolic(g, self):
    """torchlib's aten_rsqrt (the dynamo exporter): Reciprocal(Sqrt(x)), where the TorchScript
    exporter writes Div(1, Sqrt(x)). Every HF RMSNorm calls torch.rsqrt."""
    return g.op("Reciprocal", g.op("Sqrt", self))


def to_opset18_forms(path, opset, typed):
    """Rewrites an opset-17 export in place as an opset-`opset` (18-20) model: every Reduce*
    but ReduceSum takes its axes as an int64 input instead of an attribute, a Split into equal
    parts says num_outputs instead of the sizes (both opset 18), and the model imports
    `opset`. Nothing else the decoders use changed meaning between 17 and 20. torch's shape
    inference stops at the Gelu of the export's own domain: the value types are taken from
    `typed`, the same model exported without it (a Gelu's output typed as its input)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    m, ref = onnx.load(path), onnx.load(typed)
    types = {v.name: v for v in list(ref.graph.value_info) + list(ref.graph.output)}
    for v in m.graph.output:
        v.CopyFrom(types[v.name])
    known = {v.name: v for v in m.graph.value_info if v.name in types}
    for node in m.graph.node:
        if node.domain == _LATER_OPSET and node.input[0] in types:
            known[node.output[0]] = onnx.ValueInfoProto()
            known[node.output[0]].CopyFrom(types[node.input[0]])
            known[node.output[0]].name = node.output[0]
    del m.graph.value_info[:]
    for name, v in known.items():
        m.graph.value_info.append(types.get(name, v))
    consts = {t.name: t for t in m.graph.initializer}
    consts.update({n.output[0]: n.attribute[0].t for n in m.graph.node if n.op_type == "Constant"})
    for i, node in enumerate(m.graph.node):
        if node.op_type == "Split" and len(node.input) == 2 and node.input[1] in consts:
            # torch.split / chunk: torchlib's SplitToSequence, which the exporter's optimizer
            # folds into a Split of num_outputs equal parts (opset 18)
            sizes = numpy_helper.to_array(consts[node.input[1]]).tolist()
            if len(set(sizes)) == 1:
                del node.input[1]
                node.attribute.append(onnx.helper.make_attribute("num_outputs", len(sizes)))
            continue
        if not node.op_type.startswith("Reduce") or node.op_type == "ReduceSum":
            continue
        axes = [a for a in node.attribute if a.name == "axes"]
        if axes:
            name = f"{node.name or node.output[0]}_axes_{i}"
            m.graph.initializer.append(numpy_helper.from_array(np.array(axes[0].ints, dtype=np.int64), name))
            node.attribute.remove(axes[0])
            node.input.append(name)
    for node in m.graph.node:
        if node.domain == _LATER_OPSET:
            node.domain = ""
    for op in list(m.opset_import):
        if op.domain in ("", "ai.onnx"):
            op.version = opset
        elif op.domain == _LATER_OPSET:
            m.opset_import.remove(op)
    onnx.save(m, path)


class NoPositionIds(nn.Module):
    """The optimum inputs of a model that takes no position_ids (optimum's Bloom and MPT)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, *past_flat):
        return self.model(input_ids, attention_mask, None, *past_flat)


def export_onnx(model, path, opset=17):
    """torch.onnx.export in the optimum layout, graph as the exporter writes it
    (do_constant_folding=True, no optimizer afterwards). Traced with batch 2,
    past 3, sequence 4 so that no axis is specialised. opset 20: the op forms torch >= 2.9's
    default (dynamo) exporter writes at its default opset 20, on the TorchScript graph (torch
    1.13 exports up to 17): F.gelu as one Gelu node, torch.rsqrt as Reciprocal(Sqrt), Reduce*
    axes as inputs, equal Splits by num_outputs."""
    c = model.config
    model.eval()
    b, past, seq = 2, 3, 4
    g = torch.Generator().manual_seed(1234)
    input_ids = torch.randint(0, c.vocab_size, (b, seq), generator=g)
    attention_mask = torch.ones(b, past + seq, dtype=torch.int64)
    position_ids = torch.arange(past, past + seq, dtype=torch.int64)[None].expand(b, seq).contiguous()
    flat = []
    for _ in range(c.num_hidden_layers):
        flat += [torch.randn(b, c.num_key_value_heads, past, c.head_dim, generator=g) for _ in range(2)]
    ins, outs = io_names(c.num_hidden_layers)
    args, axes = [input_ids, attention_mask, position_ids] + flat, dynamic_axes(c.num_hidden_layers)
    if not getattr(model, "takes_position_ids", True):  # Bloom, MPT: positions come from the mask
        model = NoPositionIds(model)
        ins.remove("position_ids")
        del args[2], axes["position_ids"]
    torch.onnx.register_custom_op_symbolic("aten::repeat_interleave", _repeat_interleave_symbolic, 13)
    torch.onnx.register_custom_op_symbolic("aten::layer_norm", _layer_norm_symbolic, 17)
    torch.onnx.register_custom_op_symbolic("aten::expm1", _expm1_symbolic, 9)
    torch.onnx.register_custom_op_symbolic("aten::unflatten", _unflatten_symbolic, 13)
    later = {"aten::gelu": _gelu_opset20_symbolic, "aten::rsqrt": _rsqrt_opset20_symbolic} if opset >= 20 else {}

    def export(to, symbolics):
        for name, fn in symbolics.items():
            torch.onnx.register_custom_op_symbolic(name, fn, 17)
        try:
            with torch.no_grad():
                torch.onnx.export(model, tuple(args), to, input_names=ins, output_names=outs, dynamic_axes=axes,
                                  opset_version=min(opset, 17), do_constant_folding=True,
                                  custom_opsets={_LATER_OPSET: 1} if symbolics else None)
        finally:
            for name in symbolics:
                torch.onnx.unregister_custom_op_symbolic(name, 17)

    export(path, {})
    if opset > 17:
        typed = path + ".opset17"
        os.replace(path, typed)
        export(path, later)
        to_opset18_forms(path, opset, typed)
        os.remove(typed)


def greedy_with_cache(model, prompt_ids, n_new):
    """optimum_layout.greedy_with_cache on `model` from an empty cache."""
    return layout.greedy_with_cache(model.run, model.empty_past(1), prompt_ids, n_new)


def full_logits(model, ids):
    """No-cache forward over a whole sequence (batch 1)."""
    return layout.full_logits(model.run, model.empty_past(1), ids)
