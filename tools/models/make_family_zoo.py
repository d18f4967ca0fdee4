#!/usr/bin/python3
"""Make the "family zoo": tiny random-weight decoders of several HF families,
written by hf_families.py the way each HF modeling_*.py writes its model, and
exported by torch.onnx in the optimum layout.

    /usr/bin/python3 tools/models/make_family_zoo.py [--only NAME ...] [--out DIR] [--no-check]

Writes <out>/<name>/{model.onnx, config.json, golden.json} (default out:
tests/models/zoo). Names ending in _opset14 are the same model (same weights,
same config.json and golden.json) exported at opset 14 instead of 17.
Everything is computed by torch from fixed seeds (single-threaded); each
model.onnx is checked with onnx.checker, the optimum IO layout, and re-run
with the numpy interpreter onnx_ref.py (greedy tokens identical, logits within
1e-3 relative), see onnx_check.py.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_families as hf  # noqa: E402
import optimum_layout as layout  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
N_NEW = 16

COMMON = {
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "torch_dtype": "float32",
    "use_cache": True,
    "transformers_version": "4.44.0",
    "max_position_embeddings": 256,
}

LLAMA = dict(COMMON, **{
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "pretraining_tp": 1,
    "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
    "sliding_window": None, "num_local_experts": 0, "num_experts_per_tok": 0,
})

MODELS = {
    "llama3": dict(LLAMA, **{
        "vocab_size": 256, "hidden_size": 64, "intermediate_size": 192,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        # Llama-3.1 style scaling; original_max_position_embeddings is small so
        # that the low/medium/high frequency bands all occur with head_dim 16
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    }),
    "mqa": dict(LLAMA, **{
        "vocab_size": 384, "hidden_size": 96, "intermediate_size": 256,
        "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 1,
        "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None,
    }),
    "qwen2_untied": dict(COMMON, **{
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "hidden_act": "silu", "vocab_size": 384, "hidden_size": 128, "intermediate_size": 192,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None,
        "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": 2, "bos_token_id": 0, "eos_token_id": 3,
        "num_local_experts": 0, "num_experts_per_tok": 0,
    }),
    "phi3": dict(COMMON, **{
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
        "hidden_act": "silu", "vocab_size": 320, "hidden_size": 96, "intermediate_size": 192,
        "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2,
        "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None,
        "original_max_position_embeddings": 256, "partial_rotary_factor": 1.0,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "tie_word_embeddings": False,
        "sliding_window": None, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        "num_local_experts": 0, "num_experts_per_tok": 0,
    }),
    "stablelm": dict(COMMON, **{
        # StableLM-2-1.6B: rotary on a quarter of head_dim, q/k/v biases, no qk_layernorm,
        # sequential residual
        "architectures": ["StableLmForCausalLM"], "model_type": "stablelm", "transformers_version": "4.48.0",
        "vocab_size": 320, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 4, "hidden_act": "silu", "layer_norm_eps": 1e-5,
        "partial_rotary_factor": 0.25, "rope_theta": 10000.0, "rope_scaling": None, "use_qkv_bias": True,
        "qk_layernorm": False, "use_parallel_residual": False, "hidden_dropout": 0.0, "tie_word_embeddings": False,
        "bos_token_id": 0, "eos_token_id": 0, "num_local_experts": 0, "num_experts_per_tok": 0,
    }),
    "nemotron": dict(COMMON, **{
        # Nemotron-Mini-4B's proportions: rotary on half of head_dim, GQA 3:1, untied
        "architectures": ["NemotronForCausalLM"], "model_type": "nemotron", "transformers_version": "4.48.0",
        "vocab_size": 320, "hidden_size": 96, "intermediate_size": 288, "num_hidden_layers": 2,
        "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "relu2",
        "norm_eps": 1e-5, "partial_rotary_factor": 0.5, "rope_theta": 10000.0, "rope_scaling": None,
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
        "bos_token_id": 2, "eos_token_id": 3, "num_local_experts": 0, "num_experts_per_tok": 0,
    }),
    "olmo": dict(COMMON, **{
        # OLMo-7B-0424's clip_qkv is 8.0; 0.5 here so that the clamps cut values of this model
        "architectures": ["OlmoForCausalLM"], "model_type": "olmo", "transformers_version": "4.48.0",
        "vocab_size": 320, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 4, "hidden_act": "silu", "rope_theta": 10000.0,
        "rope_scaling": None, "attention_bias": False, "clip_qkv": 0.5, "tie_word_embeddings": False,
        "pad_token_id": 1, "bos_token_id": None, "eos_token_id": 2, "num_local_experts": 0, "num_experts_per_tok": 0,
    }),
    "olmoe": dict(COMMON, **{
        # OLMoE-1B-7B: 64 experts, top-8, not renormalised; here 8, top-2
        "architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "transformers_version": "4.48.0",
        "vocab_size": 320, "hidden_size": 64, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 4, "hidden_act": "silu", "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False, "clip_qkv": None,
        "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": False, "output_router_logits": False,
        "router_aux_loss_coef": 0.01, "tie_word_embeddings": False, "pad_token_id": 1, "bos_token_id": None,
        "eos_token_id": 2,
    }),
    "olmo2": dict(COMMON, **{
        "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "transformers_version": "4.47.0",
        "hidden_act": "silu", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 192,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
        "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "rope_scaling": None,
        "attention_bias": False, "tie_word_embeddings": False,
        "bos_token_id": None, "eos_token_id": 100257 % 320, "pad_token_id": 1,
        "num_local_experts": 0, "num_experts_per_tok": 0,
    }),
    "exaone4": dict(COMMON, **{
        "architectures": ["Exaone4ForCausalLM"], "model_type": "exaone4", "transformers_version": "4.54.0",
        "hidden_act": "silu", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 192,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0, "rope_scaling": None,
        "attention_bias": False, "tie_word_embeddings": True,
        # EXAONE-4.0-32B's hybrid attention ("LLLG": three sliding layers, then a global one
        # without rotary), with a window of 4 so that it is active in the 23-token golden
        "sliding_window": 4, "sliding_window_pattern": "LLLG",
        "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
        "bos_token_id": 1, "eos_token_id": 361 % 320, "pad_token_id": 0,
        "num_local_experts": 0, "num_experts_per_tok": 0,
    }),
    "olmo3": dict(COMMON, **{
        # OLMo-3-7B: 32 MHA heads of 128 on 4096, 11008 MLP, window 4096 on three of every four
        # layers; here a window of 4 so that it is active in the 23-token golden
        "architectures": ["Olmo3ForCausalLM"], "model_type": "olmo3", "transformers_version": "4.57.0",
        "hidden_act": "silu", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 192,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
        "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "rope_scaling": None, "attention_bias": False,
        "sliding_window": 4,
        "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
        "tie_word_embeddings": False, "pad_token_id": 1, "bos_token_id": None, "eos_token_id": 2,
    }),
    "ernie4_5": dict(COMMON, **{
        # ERNIE-4.5-0.3B: 16 heads of 128 on 1024, 2 KV heads, 18 layers, tied
        "architectures": ["Ernie4_5ForCausalLM"], "model_type": "ernie4_5", "transformers_version": "4.54.0",
        "hidden_act": "silu", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 192,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "rope_scaling": None, "use_bias": False,
        "tie_word_embeddings": True, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
    }),
    "phi4_mini": dict(COMMON, **{
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "transformers_version": "4.49.0",
        "hidden_act": "silu", "vocab_size": 320, "hidden_size": 96, "intermediate_size": 192,
        "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2,
        "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None,
        # rotary on the first 12 of 16 dims, as Phi-4-mini's 96 of 128
        "partial_rotary_factor": 0.75, "original_max_position_embeddings": 256,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "tie_word_embeddings": True,
        "sliding_window": None, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        "num_local_experts": 0, "num_experts_per_tok": 0,
    }),
    "gemma": dict(COMMON, **{
        "architectures": ["GemmaForCausalLM"], "model_type": "gemma",
        "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
        "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None,
        "attention_bias": False, "tie_word_embeddings": True, "sliding_window": None,
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
        "num_local_experts": 0, "num_experts_per_tok": 0,
    }),
    "gemma2": dict(COMMON, **{
        "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
        "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
        "vocab_size": 256, "hidden_size": 64, "intermediate_size": 192,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None,
        "attention_bias": False, "tie_word_embeddings": True,
        # != head_dim, so scaling by head_dim**-0.5 instead gives other numbers
        "query_pre_attn_scalar": 24,
        # small caps so that the tanh really bends these random logits/scores
        "attn_logit_softcapping": 3.0, "final_logit_softcapping": 8.0,
        # larger than any test context: the sliding-window layers behave as global ones
        "sliding_window": 4096, "cache_implementation": "hybrid",
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
        "num_local_experts": 0, "num_experts_per_tok": 0,
    }),
    "mixtral_onehot": dict(COMMON, **{
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
        "hidden_act": "silu", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0, "rope_scaling": None,
        "tie_word_embeddings": False, "sliding_window": None,
        "num_local_experts": 4, "num_experts_per_tok": 2,
        "router_aux_loss_coef": 0.02, "output_router_logits": False, "router_jitter_noise": 0.0,
        "bos_token_id": 1, "eos_token_id": 2,
    }),
    "mixtral_scatter": dict(COMMON, **{
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
        "hidden_act": "silu", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 48,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
        "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0, "rope_scaling": None,
        "tie_word_embeddings": False, "sliding_window": None,
        "num_local_experts": 8, "num_experts_per_tok": 2,
        "router_aux_loss_coef": 0.02, "output_router_logits": False, "router_jitter_noise": 0.0,
        "bos_token_id": 1, "eos_token_id": 2,
    }),
    "qwen2_moe": dict(COMMON, **{
        "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
        "hidden_act": "silu", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
        "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None,
        "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": 2, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "num_experts": 8, "num_experts_per_tok": 4, "norm_topk_prob": False,
        "moe_intermediate_size": 32, "shared_expert_intermediate_size": 128,
        "router_aux_loss_coef": 0.001, "output_router_logits": False,
        "bos_token_id": 0, "eos_token_id": 3,
    }),
    "gemma3": dict(COMMON, **{
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "transformers_version": "4.50.0",
        "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
        "vocab_size": 256, "hidden_size": 64, "intermediate_size": 192,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
        "rope_scaling": None, "attention_bias": False, "tie_word_embeddings": True,
        "query_pre_attn_scalar": 24, "attn_logit_softcapping": None, "final_logit_softcapping": None,
        # layers 0 and 1 slide over the last 4 positions (a 23-token golden context: active),
        # layer 2 is global; the config of a Gemma-3 snapshot before layer_types
        "sliding_window": 4, "sliding_window_pattern": 3, "cache_implementation": "hybrid",
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
        "num_local_experts": 0, "num_experts_per_tok": 0,
    }),
    "cohere2": dict(COMMON, **{
        "architectures": ["Cohere2ForCausalLM"], "model_type": "cohere2", "transformers_version": "4.48.0",
        "hidden_act": "silu", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 192,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "layer_norm_eps": 1e-5, "rope_theta": 50000.0, "rope_scaling": None,
        "attention_bias": False, "tie_word_embeddings": True, "use_embedding_sharing": True,
        "logit_scale": 0.5,
        # layers 0-2 slide over the last 4 positions with rotary, layer 3 is global without
        "sliding_window": 4, "sliding_window_pattern": 4, "cache_implementation": "hybrid",
        "bos_token_id": 5, "eos_token_id": 255001 % 320, "pad_token_id": 0,
        "num_local_experts": 0, "num_experts_per_tok": 0,
    }),
    "granite": dict(LLAMA, **{
        "architectures": ["GraniteForCausalLM"], "model_type": "granite", "transformers_version": "4.45.0",
        "vocab_size": 320, "hidden_size": 64, "intermediate_size": 160,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None,
        "tie_word_embeddings": True,
        # Granite-3.1-8B writes 12.0, 0.22, 0.0078125 (1 / head_dim) and 16.0; these keep the
        # tiny random model's logits from flattening or saturating
        "embedding_multiplier": 1.5, "residual_multiplier": 1.5, "attention_multiplier": 0.125,
        "logits_scaling": 0.5,
    }),
    "qwen3": dict(COMMON, **{
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "transformers_version": "4.51.0",
        "hidden_act": "silu", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 192,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        # nh * hd = 128 != hidden 64, as in Qwen3-4B (32 x 128 on 2560)
        "head_dim": 32, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None,
        "attention_bias": False, "tie_word_embeddings": True, "use_sliding_window": False,
        "sliding_window": None, "max_window_layers": 2, "bos_token_id": 0, "eos_token_id": 3,
        "num_local_experts": 0, "num_experts_per_tok": 0,
    }),
    "qwen3_moe": dict(COMMON, **{
        # Qwen3-30B-A3B: 128 experts, top-8, renormalised, no shared expert; here 8, top-2
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "transformers_version": "4.51.0",
        "hidden_act": "silu", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 192,
        "moe_intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None,
        "attention_bias": False, "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": 2, "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": True,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "output_router_logits": False, "router_aux_loss_coef": 0.001,
        "bos_token_id": 0, "eos_token_id": 3,
    }),
    "smollm3": dict(COMMON, **{
        # SmolLM3-3B: 36 layers, no rotary on every fourth (no_rope_layer_interval 4); here 4
        # layers, the last without
        "architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", "transformers_version": "4.53.0",
        "vocab_size": 320, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "rope_theta": 5000000.0, "rope_scaling": None, "attention_bias": False, "mlp_bias": False,
        "no_rope_layers": [1, 1, 1, 0], "no_rope_layer_interval": 4, "use_sliding_window": False,
        "sliding_window": None, "layer_types": ["full_attention"] * 4, "tie_word_embeddings": True,
        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "num_local_experts": 0, "num_experts_per_tok": 0,
    }),
    "apertus": dict(COMMON, **{
        # Apertus-8B: 32 x 128 on 4096, 8 KV heads, xIELU MLP 21504 wide, llama3 rope scaling
        "architectures": ["ApertusForCausalLM"], "model_type": "apertus", "transformers_version": "4.56.0",
        "vocab_size": 320, "hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "xielu",
        "rms_norm_eps": 1e-5, "rope_theta": 12000000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
        "attention_bias": False, "mlp_bias": False, "qk_norm": True, "post_norm": False,
        "tie_word_embeddings": False, "pad_token_id": 3, "bos_token_id": 1, "eos_token_id": 68,
    }),
    "hunyuan_v1_dense": dict(COMMON, **{
        # Hunyuan-7B-Instruct: 32 x 128 on 4096, 8 KV heads, NTK-alpha 1000 rotary, tied
        "architectures": ["HunYuanDenseV1ForCausalLM"], "model_type": "hunyuan_v1_dense",
        "transformers_version": "4.57.0", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 192,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": {"alpha": 1000.0, "factor": 1.0, "type": "dynamic", "beta_fast": 32, "beta_slow": 1,
                         "mscale": 1.0, "mscale_all_dim": 1.0},
        "attention_bias": False, "mlp_bias": False, "use_qk_norm": True, "tie_word_embeddings": True,
        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
    }),
    "phi": dict(COMMON, **{
        "architectures": ["PhiForCausalLM"], "model_type": "phi",
        "vocab_size": 320, "hidden_size": 80, "intermediate_size": 320,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
        # head_dim 20, 8 of them rotated (Phi-2: 80, 32 rotated, partial_rotary_factor 0.4)
        "partial_rotary_factor": 0.4, "hidden_act": "gelu_new", "layer_norm_eps": 1e-5,
        "rope_theta": 10000.0, "rope_scaling": None, "qk_layernorm": False,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "tie_word_embeddings": False,
        "bos_token_id": 1, "eos_token_id": 2,
    }),
    "starcoder2": dict(COMMON, **{
        "architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2", "transformers_version": "4.44.0",
        "vocab_size": 320, "hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "gelu_pytorch_tanh",
        # StarCoder2-3B: 4096; 4 keeps the window active in the 23-token golden
        "sliding_window": 4, "norm_epsilon": 1e-5, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": None, "use_bias": True, "residual_dropout": 0.0, "embedding_dropout": 0.0,
        "tie_word_embeddings": True, "bos_token_id": 0, "eos_token_id": 0,
    }),
    "glm": dict(COMMON, **{
        "architectures": ["GlmForCausalLM"], "model_type": "glm", "transformers_version": "4.46.0",
        "vocab_size": 320, "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2,
        # GLM-Edge-1.5B: 16 x 128 on 2048, 4 KV heads, rotary on half of head_dim
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "partial_rotary_factor": 0.5,
        "attention_bias": True, "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": None, "tie_word_embeddings": False, "pad_token_id": 0, "bos_token_id": 1,
        "eos_token_id": [2, 3], "num_local_experts": 0, "num_experts_per_tok": 0,
    }),
    "gpt2": {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "transformers_version": "4.44.0",
        "vocab_size": 320, "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 256, "n_inner": None,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
        "attn_pdrop": 0.0, "initializer_range": 0.02, "scale_attn_weights": True, "use_cache": True,
        "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": True, "torch_dtype": "float32",
    },
    "gpt_bigcode": {
        # SantaCoder / StarCoderBase-1B proportions: multi-query, n_inner 4 x n_embd
        "architectures": ["GPTBigCodeForCausalLM"], "model_type": "gpt_bigcode", "transformers_version": "4.55.0",
        "vocab_size": 320, "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 256, "n_inner": 256,
        "activation_function": "gelu_pytorch_tanh", "layer_norm_epsilon": 1e-5, "multi_query": True,
        "scale_attn_weights": True, "attention_softmax_in_fp32": True, "scale_attention_softmax_in_fp32": True,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "initializer_range": 0.02, "use_cache": True,
        "bos_token_id": 0, "eos_token_id": 0, "tie_word_embeddings": True, "torch_dtype": "float32",
    },
    "gpt_neo": {
        "architectures": ["GPTNeoForCausalLM"], "model_type": "gpt_neo", "transformers_version": "4.44.0",
        "vocab_size": 320, "hidden_size": 64, "num_layers": 4, "num_heads": 4, "intermediate_size": None,
        # GPT-Neo's alternating global and local layers, with a window of 4 so that it is active
        # in the 23-token golden (GPT-Neo-1.3B: 256)
        "attention_types": [[["global", "local"], 2]],
        "attention_layers": ["global", "local", "global", "local"], "window_size": 4,
        "max_position_embeddings": 256, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
        "embed_dropout": 0.0, "attention_dropout": 0.0, "resid_dropout": 0.0, "initializer_range": 0.02,
        "use_cache": True, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": True, "torch_dtype": "float32",
    },
    "gpt_neox": {
        "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "transformers_version": "4.48.0",
        "vocab_size": 320, "hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "rotary_pct": 0.25, "rotary_emb_base": 10000, "max_position_embeddings": 256,
        "hidden_act": "gelu", "layer_norm_eps": 1e-5, "use_parallel_residual": True, "attention_bias": True,
        "attention_dropout": 0.0, "hidden_dropout": 0.0, "initializer_range": 0.02, "tie_word_embeddings": False,
        "use_cache": True, "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32", "rope_scaling": None,
    },
    "gptj": {
        # GPT-J-6B's proportions: rotary over a quarter of each head (64 of 256), the rest
        # passes through; n_inner null (4 x n_embd)
        "architectures": ["GPTJForCausalLM"], "model_type": "gptj", "transformers_version": "4.48.0",
        "vocab_size": 320, "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 256, "rotary_dim": 4,
        "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0,
        "embd_pdrop": 0.0, "attn_pdrop": 0.0, "initializer_range": 0.02, "use_cache": True,
        "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False, "torch_dtype": "float32",
    },
    "opt": {
        # OPT-1.3B's layout (do_layer_norm_before, word_embed_proj_dim = hidden_size, ReLU)
        "architectures": ["OPTForCausalLM"], "model_type": "opt", "transformers_version": "4.50.0",
        "vocab_size": 320, "hidden_size": 64, "ffn_dim": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "max_position_embeddings": 256, "word_embed_proj_dim": 64, "do_layer_norm_before": True,
        "enable_bias": True, "layer_norm_elementwise_affine": True, "activation_function": "relu",
        "dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0, "layerdrop": 0.0,
        "init_std": 0.02, "use_cache": True, "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 2,
        "prefix": "</s>", "tie_word_embeddings": True, "torch_dtype": "float32",
    },
    "falcon": {
        "architectures": ["FalconForCausalLM"], "model_type": "falcon", "transformers_version": "4.44.0",
        "vocab_size": 320, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "multi_query": True, "new_decoder_architecture": False, "parallel_attn": True, "alibi": False,
        "bias": False, "layer_norm_epsilon": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 256,
        "attention_dropout": 0.0, "hidden_dropout": 0.0, "initializer_range": 0.02, "tie_word_embeddings": True,
        "use_cache": True, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
    },
    "bloom": {
        # bloom-560m's layout (ALiBi, no position ids; tied; LayerNorm after the embeddings)
        "architectures": ["BloomForCausalLM"], "model_type": "bloom", "transformers_version": "4.48.0",
        "vocab_size": 320, "hidden_size": 64, "n_layer": 2, "n_head": 4, "layer_norm_epsilon": 1e-5,
        "apply_residual_connection_post_layernorm": False, "hidden_dropout": 0.0, "attention_dropout": 0.0,
        "pretraining_tp": 1, "slow_but_exact": False, "initializer_range": 0.02, "use_cache": True,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3, "tie_word_embeddings": True,
        "torch_dtype": "float32",
    },
    "mpt": {
        # mpt-7b's layout (ALiBi from a max_seq_len buffer, no biases, no position ids; tied)
        "architectures": ["MptForCausalLM"], "model_type": "mpt", "transformers_version": "4.48.0",
        "vocab_size": 320, "d_model": 64, "n_layers": 2, "n_heads": 4, "expansion_ratio": 4,
        "max_seq_len": 256, "layer_norm_epsilon": 1e-5, "no_bias": True, "learned_pos_emb": True,
        "attn_config": {"alibi": True, "alibi_bias_max": 8, "attn_type": "multihead_attention", "clip_qkv": None,
                        "softmax_scale": None, "qk_ln": False, "attn_pdrop": 0.0, "prefix_lm": False},
        "emb_pdrop": 0.0, "resid_pdrop": 0.0, "logit_scale": None, "initializer_range": 0.02,
        "use_cache": True, "bos_token_id": 0, "eos_token_id": 0, "tie_word_embeddings": True,
        "torch_dtype": "float32",
    },
    "baichuan": {
        # Baichuan2-7B's layout (trust_remote_code: W_pack, NormHead, RoPE, SDPA; untied)
        "architectures": ["BaichuanForCausalLM"], "model_type": "baichuan", "vocab_size": 320, "hidden_size": 64,
        "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 256,
        "model_max_length": 256, "rms_norm_eps": 1e-6, "hidden_act": "silu", "pad_token_id": 0, "bos_token_id": 1,
        "eos_token_id": 2, "tie_word_embeddings": False, "z_loss_weight": 0, "use_cache": True,
        "initializer_range": 0.02, "torch_dtype": "float32",
    },
    "internlm2": {
        # internlm2_5-7b-chat's layout (trust_remote_code: grouped wqkv, dynamic NTK rope; untied)
        "architectures": ["InternLM2ForCausalLM"], "model_type": "internlm2", "vocab_size": 320, "hidden_size": 64,
        "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
        "rope_scaling": {"type": "dynamic", "factor": 2.0}, "hidden_act": "silu", "bias": False,
        "attn_implementation": "eager", "pad_token_id": 2, "bos_token_id": 1, "eos_token_id": 2,
        "tie_word_embeddings": False, "use_cache": True, "initializer_range": 0.02, "torch_dtype": "float32",
    },
    "minicpm": {
        # MiniCPM4-0.5B's layout (trust_remote_code: muP scalings, LongRoPE, tied)
        "architectures": ["MiniCPMForCausalLM"], "model_type": "minicpm", "vocab_size": 320, "hidden_size": 64,
        "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "rope_scaling": {"rope_type": "longrope", "original_max_position_embeddings": 128,
                         "short_factor": [1.0, 1.01, 1.03, 1.08, 1.17, 1.35, 1.62, 2.05],
                         "long_factor": [1.0, 1.3, 2.1, 3.9, 7.2, 13.1, 22.8, 36.4]},
        "scale_emb": 12, "dim_model_base": 256, "scale_depth": 1.4, "hidden_act": "silu", "attention_bias": False,
        "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": True, "use_cache": True,
        "initializer_range": 0.1, "torch_dtype": "float32",
    },
}

# HF's own per-expert MoE loop on the same configs (hf_families: routing "hf")
MODELS.update({"mixtral_hf": MODELS["mixtral_scatter"], "qwen2_moe_hf": MODELS["qwen2_moe"]})

# The same families exported with attn_implementation "sdpa", transformers' default since 4.36
# and what optimum exports: (family, attention). llama3_sdpa is 4.44's LlamaSdpaAttention (the
# scale computed in the graph from Shape(query)); qwen3_sdpa 4.51's sdpa_attention_forward
# (scale=module.scaling, a constant).
VARIANTS = {"llama3_sdpa": ("llama3", "sdpa"), "qwen3_sdpa": ("qwen3", "sdpa"),
            "llama3_masking_utils": ("llama3", "eager"), "qwen3_sdpa_masking_utils": ("qwen3", "sdpa"),
            "gemma3_masking_utils": ("gemma3", "eager"), "llama3_cache_positions": ("llama3", "eager")}
# Exported without position_ids (a plain torch.onnx.export of input_ids, attention_mask and the
# cache): the model numbers its rows from the cache's length (transformers' cache_position).
CACHE_POSITIONS = ("llama3_cache_positions",)
MODELS.update({name: MODELS[family] for name, (family, _) in VARIANTS.items()})

# Families whose zoo model takes transformers' default sdpa attention (as optimum exports it).
DEFAULT_ATTENTION = {"opt": "sdpa"}

# HF's eager mask with its slice assignment (-> ScatterND) for these; the
# equivalent whole-tensor masked_fill for the others (see hf_families.py)
MASK_STYLE = {"llama3": "hf", "bloom": "hf", "phi3": "hf", "gemma": "hf", "gemma2": "hf", "gemma3": "hf",
              # transformers >= 4.53's masks (masking_utils): what current exports of every family hold
              "llama3_masking_utils": "masking_utils", "smollm3": "masking_utils", "gemma3_masking_utils": "masking_utils",
              # the sdpa path of those masks: SDPA takes the boolean mask (Where(mask, 0, -inf))
              "qwen3_sdpa_masking_utils": "masking_utils_sdpa", "olmo3": "masking_utils"}
SEEDS = {"llama3": 101, "mqa": 102, "qwen2_untied": 103, "phi3": 104, "gemma": 105, "gemma2": 106,
         "mixtral_onehot": 107, "mixtral_scatter": 108, "qwen2_moe": 109, "qwen3": 110, "gemma3": 111, "granite": 112, "cohere2": 113, "phi4_mini": 114, "olmo2": 115,
         "llama3_sdpa": 116, "qwen3_sdpa": 117, "phi": 118, "gpt2": 119, "gpt_neox": 120, "falcon": 121, "starcoder2": 122, "glm": 123, "exaone4": 124, "gpt_neo": 125, "gptj": 126, "opt": 127, "smollm3": 128, "olmo": 129, "nemotron": 130, "llama3_masking_utils": 131, "stablelm": 132, "mixtral_hf": 133, "qwen2_moe_hf": 134, "olmoe": 135, "qwen3_moe": 136, "qwen3_sdpa_masking_utils": 137, "gemma3_masking_utils": 138, "gpt_bigcode": 149, "apertus": 140, "hunyuan_v1_dense": 141, "olmo3": 142, "ernie4_5": 148, "bloom": 143, "mpt": 144, "baichuan": 145, "internlm2": 146, "minicpm": 147, "llama3_cache_positions": 150}
# ALiBi families: the hf_families function that computes the bias
ALIBI = {"bloom": "bloom_alibi", "mpt": "build_mpt_alibi_tensor"}
OPSET14 = ("llama3", "phi3", "gemma", "mixtral_onehot", "phi", "bloom")  # bloom: optimum's default opset for it
# torch >= 2.9's default exporter writes opset 20: F.gelu as one Gelu node (tanh: Gemma-3; erf:
# GPT-NeoX), torch.rsqrt as Reciprocal(Sqrt) (every RMSNorm), Reduce* axes as inputs, a split into
# equal parts as a Split by num_outputs (GPT-2's c_attn) (hf_families.export_onnx)
OPSET20 = ("llama3", "phi3", "gemma3", "gpt_neox", "gpt2")
ALL = list(MODELS) + [n + "_opset14" for n in OPSET14] + [n + "_opset20" for n in OPSET20]


# Tied models need more than the tied recipe of make_test_models.py not to
# collapse into repeating a token (tried on these seeds): Gemma's residual
# stream starts at embedding * sqrt(hidden), and with one or two KV heads the
# attention output is nearly the same at every position. So: smaller
# embeddings, sharper attention (q/k gain), stronger MLP output, larger final
# norm scale; Gemma2's post-attention / post-feedforward norms x2.
TIED_TWEAKS = {
    "gemma": {"embed_scale": 0.125, "qk_gain": 3.0, "o_gain": 4.0, "down_gain": 16.0,
              "final_norm_scale": 4.0, "post_norm_scale": 1.0},
    "gemma2": {"embed_scale": 0.25, "qk_gain": 3.0, "o_gain": 4.0, "down_gain": 4.0,
               "final_norm_scale": 2.0, "post_norm_scale": 2.0},
    "gemma3": {"embed_scale": 0.25, "qk_gain": 3.0, "o_gain": 4.0, "down_gain": 4.0,
               "final_norm_scale": 2.0, "post_norm_scale": 2.0},
    "phi4_mini": {"embed_scale": 0.25, "qk_gain": 1.0, "o_gain": 2.0, "down_gain": 4.0,
                  "final_norm_scale": 2.0, "post_norm_scale": 1.0},
    "granite": {"embed_scale": 0.5, "qk_gain": 3.0, "o_gain": 4.0, "down_gain": 4.0,
                "final_norm_scale": 2.0, "post_norm_scale": 1.0},
    "smollm3": {"embed_scale": 0.5, "qk_gain": 3.0, "o_gain": 1.0, "down_gain": 16.0,
                "final_norm_scale": 2.0, "post_norm_scale": 1.0},
    # the embeddings are multiplied by scale_emb (12) in the graph
    "minicpm": {"embed_scale": 0.05, "qk_gain": 3.0, "o_gain": 1.0, "down_gain": 4.0,
                "final_norm_scale": 1.0, "post_norm_scale": 1.0},
}
# sharper attention so that positions (and so the rope scaling) decide tokens:
# with the plain init, llama3's greedy tokens are the same without rope scaling
QK_GAIN = {"llama3": 3.0}
TIED_DEFAULT = {"embed_scale": 0.5, "qk_gain": 1.0, "o_gain": 4.0, "down_gain": 4.0,
                "final_norm_scale": 1.0, "post_norm_scale": 1.0}


def random_init(model, seed, logit_gain=4.0):
    """As make_test_models.random_init: N(0,1) embeddings, uniform(+-1/sqrt(fan_in))
    linears, norm weights 1 + N(0, 0.1^2) (Gemma norms store the offset w of
    (1 + w): N(0, 0.1^2)), biases N(0, 0.1^2), lm_head x logit_gain. MoE routers
    (`.gate`) x4 so the top-k choice is not a near-tie. Tied models: embeddings
    x embed_scale, o_proj / down_proj x o_gain / down_gain, q/k x qk_gain, final
    norm scale final_norm_scale * N(0,1) (TIED_TWEAKS). Untied: q/k x QK_GAIN."""
    g = torch.Generator().manual_seed(seed)
    if model.family in ("gpt2", "gpt_bigcode", "gpt_neo", "gpt_neox", "falcon", "gptj", "opt", "bloom", "mpt"):
        return gpt2_init(model, g)
    gemma = model.family in ("gemma", "gemma2", "gemma3")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("embed_tokens.weight", "tok_embeddings.weight")):
                p.copy_(torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):  # projections' and LayerNorms' (Phi-2) biases
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "norm" in name:
                p.copy_((0.0 if gemma else 1.0) + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(("act_fn.alpha_p", "act_fn.alpha_n")):  # xIELU's, kept near HF's init
                p.add_(0.1 * torch.randn(p.shape, generator=g))
            else:
                bound = 1.0 / (p.shape[1] ** 0.5)
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)
                if name.endswith(".gate.weight"):
                    p.mul_(4.0)
        if not model.config.tie_word_embeddings:
            (model.output if model.family == "internlm2" else model.lm_head).weight.mul_(logit_gain)
            for name, p in model.named_parameters():
                if name.endswith("q_proj.weight") or name.endswith("k_proj.weight"):
                    p.mul_(QK_GAIN.get(model.family, 1.0))
                elif name.endswith(("W_pack.weight", "wqkv.weight")):  # Baichuan's q, k, v: x1 alternates two tokens
                    p.mul_(3.0)
            return
        t = TIED_TWEAKS.get(model.family, TIED_DEFAULT)
        model.model.embed_tokens.weight.mul_(t["embed_scale"])
        for name, p in model.named_parameters():
            if name.endswith("q_proj.weight") or name.endswith("k_proj.weight"):
                p.mul_(t["qk_gain"])
            elif name.endswith("o_proj.weight"):
                p.mul_(t["o_gain"])
            elif name.endswith("down_proj.weight"):
                p.mul_(t["down_gain"])
            elif "post_attention_layernorm" in name or "post_feedforward_layernorm" in name:
                if model.family in ("gemma2", "gemma3"):
                    p.copy_((p + 1.0) * t["post_norm_scale"] - 1.0)
        scale = t["final_norm_scale"] * torch.randn(model.model.norm.weight.shape, generator=g)
        model.model.norm.weight.copy_(scale - 1.0 if gemma else scale)


def gpt2_init(model, g):
    """GPT-2 and OPT (tied), GPT-NeoX and GPT-J (untied embed_out / lm_head x4): embeddings N(0, 0.5^2)
    (OPT's 0.125^2: with ReLU and its tied head, larger ones make it repeat its input token),
    positions N(0, 0.1^2), LayerNorm gains 1 + N(0, 0.1^2)
    and biases N(0, 0.1^2), Conv1D weights [in, out] uniform(+-1/sqrt(in)), the attention's x3
    and the projections back to the stream x4 so that tokens do not collapse into a loop.
    Bloom's (LayerNorm after the embeddings, tied) x6 and x16, MPT's x3 and x16 with OPT's
    embeddings: with x3 and x4 both repeat one token within a few steps."""
    qkv_gain, out_gain = {"bloom": (6.0, 16.0), "mpt": (3.0, 16.0)}.get(model.family, (3.0, 4.0))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("wte.weight", "embed_in.weight", "word_embeddings.weight", "decoder.embed_tokens.weight")):
                p.copy_((0.125 if model.family in ("opt", "mpt") else 0.5) * torch.randn(p.shape, generator=g))
            elif name.endswith(("wpe.weight", "embed_positions.weight", ".bias")):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif ".ln_" in name or "layernorm" in name or "layer_norm" in name or ".norm_" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[0] if model.family == "gpt2" else p.shape[1]  # Conv1D [in, out], Linear [out, in]
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) / fan_in ** 0.5)
                if "c_attn" in name or "query_key_value" in name or "Wqkv" in name or (
                        model.family == "opt" and name.endswith(("q_proj.weight", "k_proj.weight"))):
                    p.mul_(qkv_gain)
                elif (name.endswith("c_proj.weight") or name.endswith("attention.dense.weight") or "dense_4h_to_h" in name
                      or name.endswith(("out_proj.weight", "fc_out.weight", "fc2.weight", "ffn.down_proj.weight"))):
                    p.mul_(out_gain)
                elif name in ("embed_out.weight", "lm_head.weight"):
                    p.mul_(4.0)


def prompt_for(name, cfg):
    g = torch.Generator().manual_seed(SEEDS[name] + 1000)
    return torch.randint(4, cfg["vocab_size"], (7,), generator=g).tolist()  # clear of bos/eos/pad


def build(name):
    torch.manual_seed(SEEDS[name])
    family, attention = VARIANTS.get(name, (name, DEFAULT_ATTENTION.get(name, "eager")))
    model = hf.causal_lm(MODELS[name], family, mask_style=MASK_STYLE.get(name, MASK_STYLE.get(family, "masked_fill")),
                         attn_implementation=attention)
    random_init(model, SEEDS[name])
    if hasattr(model, "normalize_head"):  # Baichuan2's NormHead, as its first eval call leaves it
        model.normalize_head()
    if name in CACHE_POSITIONS:
        model.takes_position_ids = False
    model.eval()
    return model


@torch.no_grad()
def padded_batch_case(model, prompt):
    """Batch 2 prefill: row 0 the prompt, row 1 prompt[3:] left-padded with 3 pad
    tokens (attention_mask 0); position_ids = cumsum(mask) - 1, pads at 1 (HF)."""
    pad_id = 0
    n = len(prompt)
    short = prompt[3:]
    ids = torch.tensor([prompt, [pad_id] * 3 + short], dtype=torch.int64)
    am = torch.tensor([[1] * n, [0] * 3 + [1] * (n - 3)], dtype=torch.int64)
    pos = am.cumsum(-1) - 1
    pos = pos.masked_fill(am == 0, 1)
    logits, _ = model.run(ids, am, pos, model.empty_past(2))
    ref = hf.full_logits(model, short)[-1]
    diff = float((logits[1, -1] - ref).abs().max())
    assert diff < 1e-4 * max(1.0, float(ref.abs().max())), diff
    return {
        "input_ids": ids.tolist(), "attention_mask": am.tolist(), "position_ids": pos.tolist(),
        "last_logits": [logits[0, -1].tolist(), logits[1, -1].tolist()],
        "row1_vs_unpadded_max_abs_diff": diff,
        "note": "prefill only from an empty cache; row 1's last logits equal the unpadded run of "
                "prompt_ids[3:] (within row1_vs_unpadded_max_abs_diff)",
    }


class TopkGapRecorder:
    """Records the smallest probability gap between the k-th and (k+1)-th expert
    over every routed token (a small gap would make the top-k choice fragile)."""

    def __init__(self, model):
        self.blocks = model.moe_blocks()
        self.gap = float("inf")

    def __enter__(self):
        for blk in self.blocks:
            orig = blk.route

            def rec(h, blk=blk, orig=orig):
                rl, rw, se = orig(h)
                s = torch.softmax(rl.float(), dim=-1).sort(dim=-1, descending=True).values
                self.gap = min(self.gap, float((s[:, blk.top_k - 1] - s[:, blk.top_k]).min()))
                return rl, rw, se
            blk.route = rec
        return self

    def __exit__(self, *a):
        for blk in self.blocks:
            del blk.route


@torch.no_grad()
def make_golden(name, model, prompt):
    cfg = model.config
    with TopkGapRecorder(model) as gaprec:
        toks, prefill_last, last = hf.greedy_with_cache(model, prompt, N_NEW)
    full = hf.full_logits(model, prompt + toks[:-1])
    cache_diff = float((full[-1] - last).abs().max())
    assert int(torch.argmax(full[-1])) == toks[-1]
    golden = layout.greedy_golden(prompt, toks, prefill_last, last, cache_diff)
    if MASK_STYLE.get(name) != "masking_utils_sdpa" and name not in CACHE_POSITIONS:
        # With -inf in the mask, a left-padded row that sees only padding is NaN in the graph
        # (Softmax of all -inf; torch >= 2.5's SDPA returns 0 there), and so is every row
        # reading its values: no padded-batch golden for that export. Without position_ids a
        # left-padded row is numbered from the cache, pads included (as in transformers):
        # none for those exports either.
        golden["padded_batch"] = padded_batch_case(model, prompt)
    if name == "llama3":
        rot = model.model.rotary_emb
        scaled = rot.inv_freq.clone()
        rot.inv_freq = hf.compute_default_rope_parameters(cfg)[0]
        toks_d, _, last_d = hf.greedy_with_cache(model, prompt, N_NEW)
        rot.inv_freq = scaled
        golden["without_rope_scaling"] = {
            "generated_ids": toks_d,
            "last_logits_max_abs_diff_vs_scaled": float((last_d - last).abs().max()),
            "note": "same weights with plain rope (rope_scaling ignored); differs from generated_ids, "
                    "so a runtime that ignores the llama3 rope scaling fails the golden test",
        }
    if name in ALIBI:  # the bias function as a zero of the same shape
        alibi = getattr(hf, ALIBI[name])
        setattr(hf, ALIBI[name], lambda *args: torch.zeros_like(alibi(*args)))
        toks_a, _, _ = hf.greedy_with_cache(model, prompt, N_NEW)
        setattr(hf, ALIBI[name], alibi)
        assert toks_a != toks
        golden["without_alibi"] = {
            "generated_ids": toks_a,
            "note": "same weights with the ALiBi bias left out; differs from generated_ids, so a runtime "
                    "that loses the key positions fails the golden test",
        }
    if name == "gemma2":
        caps = (cfg.attn_logit_softcapping, cfg.final_logit_softcapping)
        cfg.attn_logit_softcapping = cfg.final_logit_softcapping = None
        toks_n, _, last_n = hf.greedy_with_cache(model, prompt, N_NEW)
        cfg.attn_logit_softcapping, cfg.final_logit_softcapping = caps
        cfg.final_logit_softcapping = None
        toks_f, _, last_f = hf.greedy_with_cache(model, prompt, N_NEW)
        cfg.attn_logit_softcapping, cfg.final_logit_softcapping = caps
        assert toks_f == toks  # tanh is monotonic: the final cap never changes argmax
        attns = [lay.self_attn for lay in model.model.layers]
        for a in attns:
            a.scaling = cfg.head_dim ** -0.5
        toks_s, _, _ = hf.greedy_with_cache(model, prompt, N_NEW)
        for a in attns:
            a.scaling = cfg.query_pre_attn_scalar ** -0.5
        golden["with_head_dim_scaling"] = {
            "generated_ids": toks_s,
            "note": "scores scaled by head_dim**-0.5 instead of query_pre_attn_scalar**-0.5 "
                    f"({cfg.query_pre_attn_scalar}); differs from generated_ids",
        }
        golden["without_softcapping"] = {
            "generated_ids": toks_n,
            "last_logits_max_abs_diff_vs_capped": float((last_n - last).abs().max()),
            "without_final_softcapping_only_last_logits_max_abs_diff": float((last_f - last).abs().max()),
            "note": "generated_ids: same weights with both soft-cappings disabled; they differ from the "
                    "golden generated_ids. The final logit cap alone does not change greedy tokens "
                    "(tanh is monotonic) but changes last_logits by the recorded amount",
        }
    blocks = model.moe_blocks()
    if blocks:
        n = len(prompt)
        ids = torch.tensor([prompt])
        captured = {}
        blk = blocks[0]
        orig = blk.route

        def rec(h):
            out = orig(h)
            captured.setdefault("r", out)
            return out
        blk.route = rec
        model.run(ids, torch.ones(1, n, dtype=torch.int64), torch.arange(n)[None], model.empty_past(1))
        del blk.route
        _, topw, topi = captured["r"]
        golden["layer0_routing_prefill"] = {
            "top_k_expert_ids": topi.tolist(), "top_k_weights": topw.tolist(),
            "note": "layer 0, prefill of prompt_ids, one row per prompt position; weights " +
                    ("renormalised to sum 1 (Mixtral)" if isinstance(blk, hf.MixtralSparseMoeBlock)
                     else "NOT renormalised (norm_topk_prob false): softmax probabilities of the chosen "
                          "experts; the shared expert is added on top, scaled by sigmoid(shared_expert_gate)"),
        }
        golden["min_topk_probability_gap"] = gaprec.gap
        if isinstance(blk, hf.Qwen2MoeSparseMoeBlock):
            for b in blocks:
                b.norm_topk_prob = True
            toks_r, _, last_r = hf.greedy_with_cache(model, prompt, N_NEW)
            for b in blocks:
                b.norm_topk_prob = False
            golden["with_renormalised_topk"] = {
                "generated_ids": toks_r,
                "last_logits_max_abs_diff": float((last_r - last).abs().max()),
                "note": "the same weights with norm_topk_prob true (Mixtral-style renormalised top-k "
                        "weights): " + ("the greedy tokens differ" if toks_r != toks else
                                        "same greedy tokens, but last_logits differ by "
                                        "last_logits_max_abs_diff"),
            }
    return golden


def make(name, out_root, check=True):
    base, opset = name, 17
    for suffix in ("_opset14", "_opset20"):
        if name.endswith(suffix):
            base, opset = name[:-len(suffix)], int(suffix[len("_opset"):])
    cfg_d = MODELS[base]
    model = build(base)
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    prompt = prompt_for(base, cfg_d)
    golden = make_golden(base, model, prompt)
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg_d, f, indent=1)
    path = os.path.join(out, "model.onnx")
    hf.export_onnx(model, path, opset=opset)
    rep = "not checked"
    if check:
        from onnx_check import check_onnx  # the numpy interpreter and layout check
        rep = check_onnx(path, model, prompt, golden=golden)
    n = hf.param_count(model)
    size = os.path.getsize(path)
    print(f"{name}: params {n}, opset {opset}, model.onnx {size / 1e6:.2f} MB, prompt {prompt} -> "
          f"{golden['generated_ids']}; {rep}", flush=True)
    return n, size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "models", "zoo"))
    ap.add_argument("--no-check", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in (args.only or ALL):
        if name not in ALL:
            raise SystemExit(f"unknown model {name}; known: {' '.join(ALL)}")
        make(name, args.out, check=not args.no_check)


if __name__ == "__main__":
    main()
