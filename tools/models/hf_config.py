"""A Hugging Face decoder config.json in the Llama key names the shape tools read
(synth_model.py, aries_sim, bench/sim_validation.py).

    normalize(cfg) -> dict     # raises ValueError with one line naming what is missing

The result is the config with the Llama names added where a family used another (the
family's own keys stay; num_key_value_heads and head_dim stay absent when they are the
defaults: all heads, hidden_size / heads).

Families name the same shapes differently: EXAONE 3.5 and ChatGLM say num_layers,
GPT-style configs n_layer / n_embd / n_head, Falcon num_kv_heads or multi_query, ChatGLM
multi_query_group_num / kv_channels / ffn_hidden_size / padded_vocab_size, Cohere
use_embedding_sharing; multimodal configs keep the decoder in text_config. What the cost
tools model is the Llama block (attention with GQA, gated FFN, RMSNorm, LM head); a config
they cannot represent with those shapes (mixture of experts) is refused rather than costed
wrong.
"""

ALIASES = {
    "num_hidden_layers": ["num_layers", "n_layer", "n_layers"],
    "hidden_size": ["n_embd", "d_model", "hidden_dim"],
    "num_attention_heads": ["n_head", "n_heads", "num_heads"],
    "num_key_value_heads": ["num_kv_heads", "n_head_kv", "multi_query_group_num"],
    "intermediate_size": ["ffn_hidden_size", "n_inner", "ffn_dim"],
    "vocab_size": ["padded_vocab_size"],
    "head_dim": ["kv_channels"],
    "tie_word_embeddings": ["use_embedding_sharing"],
}
REQUIRED = ["num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size"]
EXPERTS = ["num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"]


def normalize(cfg):
    if not isinstance(cfg, dict):
        raise ValueError("a config must be a JSON object")
    if isinstance(cfg.get("text_config"), dict):  # multimodal: the decoder's own config
        cfg = dict(cfg["text_config"], architectures=cfg.get("architectures"))
    out = dict(cfg)
    for key, names in ALIASES.items():
        if out.get(key) is None:
            for n in names:
                if cfg.get(n) is not None:
                    out[key] = cfg[n]
                    break
    # ChatGLM keeps its group count even without grouped attention; Falcon's multi_query is one KV head.
    if cfg.get("multi_query_attention") is False and "num_kv_heads" not in cfg and "num_key_value_heads" not in cfg:
        out["num_key_value_heads"] = out.get("num_attention_heads")
    if out.get("num_key_value_heads") is None and cfg.get("multi_query"):
        out["num_key_value_heads"] = 1
    for k in ("num_key_value_heads", "head_dim"):  # null means the default: leave it to the reader
        if out.get(k) is None:
            out.pop(k, None)
    for k in EXPERTS:
        if isinstance(cfg.get(k), int) and cfg[k] > 1:
            raise ValueError(f"{k} = {cfg[k]}: a mixture-of-experts config; the shape tools cost dense "
                             "Llama blocks only")
    missing = [k for k in REQUIRED + ["intermediate_size"] if out.get(k) is None]
    if missing:
        raise ValueError(f"config ({cfg.get('model_type', 'unknown model_type')}) has no {', '.join(missing)} "
                         f"(nor {', '.join(n for k in missing for n in ALIASES.get(k, []))})")
    for k in REQUIRED + ["intermediate_size", "num_key_value_heads", "head_dim"]:
        v = out.get(k)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
            raise ValueError(f"config: {k} = {v!r} is not a positive integer")
    if out["num_attention_heads"] % out.get("num_key_value_heads", out["num_attention_heads"]):
        raise ValueError(f"config: num_attention_heads {out['num_attention_heads']} is not a multiple of "
                         f"num_key_value_heads {out['num_key_value_heads']}")
    return out
