"""The contract every test-model generator shares: the optimum ONNX IO layout,
the golden procedure (prefill + KV-cache greedy decoding) and the golden.json
record it produces. Modeling code lives elsewhere (hf_decoder.py,
hf_families.py); a forward here is any callable
forward(input_ids, attention_mask, position_ids, past) -> (logits, presents).
"""
import torch

GREEDY_PROCEDURE = ("batch 1; prefill the prompt from an empty cache (past length 0, "
                    "attention_mask ones, position_ids 0..n-1), argmax of the last logits; "
                    "then 15 decode steps of one token each with the KV cache "
                    "(attention_mask ones of past+1, position_ids = past)")


def io_names(n_layers):
    inputs = ["input_ids", "attention_mask", "position_ids"]
    outputs = ["logits"]
    for i in range(n_layers):
        inputs += [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
        outputs += [f"present.{i}.key", f"present.{i}.value"]
    return inputs, outputs


def dynamic_axes(n_layers):
    ax = {
        "input_ids": {0: "batch_size", 1: "sequence_length"},
        "attention_mask": {0: "batch_size", 1: "past_sequence_length + sequence_length"},
        "position_ids": {0: "batch_size", 1: "sequence_length"},
        "logits": {0: "batch_size", 1: "sequence_length"},
    }
    for i in range(n_layers):
        for kv in ("key", "value"):
            ax[f"past_key_values.{i}.{kv}"] = {0: "batch_size", 2: "past_sequence_length"}
            ax[f"present.{i}.{kv}"] = {0: "batch_size", 2: "past_sequence_length + sequence_length"}
    return ax


@torch.no_grad()
def greedy_with_cache(forward, past, prompt_ids, n_new):
    """Prefill the prompt from the empty cache `past`, then decode one token at a
    time, the way a runtime drives the ONNX model. Returns (tokens,
    prefill_last_logits, last_step_logits)."""
    ids = torch.tensor([prompt_ids], dtype=torch.int64)
    seq = ids.shape[1]
    am = torch.ones(1, seq, dtype=torch.int64)
    pos = torch.arange(seq, dtype=torch.int64)[None]
    logits, past = forward(ids, am, pos, past)
    prefill_last = logits[0, -1].clone()
    step_logits = logits[0, -1]
    out = []
    total = seq
    for step in range(n_new):
        tok = int(torch.argmax(step_logits))
        out.append(tok)
        if step == n_new - 1:
            break
        total += 1
        am = torch.ones(1, total, dtype=torch.int64)
        pos = torch.tensor([[total - 1]], dtype=torch.int64)
        logits, past = forward(torch.tensor([[tok]]), am, pos, past)
        step_logits = logits[0, -1]
    return out, prefill_last, step_logits.clone()


@torch.no_grad()
def full_logits(forward, past, ids):
    """No-cache forward over a whole sequence (batch 1) from the empty cache `past`."""
    t = torch.tensor([ids], dtype=torch.int64)
    logits, _ = forward(t, torch.ones_like(t), torch.arange(t.shape[1])[None], past)
    return logits[0]


def param_count(model):
    seen, n = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n


def greedy_golden(prompt, tokens, prefill_last, last, cache_diff):
    """The keys every golden.json starts with, in this order."""
    return {
        "prompt_ids": prompt,
        "generated_ids": tokens,
        "n_new_tokens": len(tokens),
        "procedure": GREEDY_PROCEDURE,
        "prefill_last_logits": prefill_last.tolist(),
        "last_logits": last.tolist(),
        "last_logits_step": "logits from which generated_ids[-1] was chosen (decode step 15)",
        "no_cache_vs_cache_max_abs_diff": cache_diff,
    }
