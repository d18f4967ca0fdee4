"""Check an exported decoder: onnx.checker, the optimum IO layout, and that
the ONNX graph reproduces torch (greedy tokens identical, logits close),
run through onnx_ref (numpy) since onnxruntime is not installed here."""
import numpy as np
import onnx
import torch

import hf_decoder as hd
import onnx_ref


def _dims(vi):
    return [d.dim_param if d.dim_param else d.dim_value for d in vi.type.tensor_type.shape.dim]


def check_layout(m, cfg, position_ids=True):
    L, nkv, hd_ = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim
    ins = {i.name: _dims(i) for i in m.graph.input}
    outs = {o.name: _dims(o) for o in m.graph.output}
    exp_in = {"input_ids": ["batch_size", "sequence_length"],
              "attention_mask": ["batch_size", "past_sequence_length + sequence_length"],
              "position_ids": ["batch_size", "sequence_length"]}
    if not position_ids:  # Bloom, MPT
        del exp_in["position_ids"]
    exp_out = {"logits": ["batch_size", "sequence_length", cfg.vocab_size]}
    for i in range(L):
        for kv in ("key", "value"):
            exp_in[f"past_key_values.{i}.{kv}"] = ["batch_size", nkv, "past_sequence_length", hd_]
            exp_out[f"present.{i}.{kv}"] = ["batch_size", nkv, "past_sequence_length + sequence_length", hd_]
    assert ins == exp_in, (ins, exp_in)
    assert outs == exp_out, (outs, exp_out)
    assert [i.name for i in m.graph.input] == list(exp_in), "input order"
    assert [o.name for o in m.graph.output] == list(exp_out), "output order"


def onnx_greedy(sess, cfg, prompt, n_new):
    L = cfg.num_hidden_layers
    past = {}
    for i in range(L):
        for kv in ("key", "value"):
            past[f"past_key_values.{i}.{kv}"] = np.zeros((1, cfg.num_key_value_heads, 0, cfg.head_dim), np.float32)
    ids = np.array([prompt], np.int64)
    total = len(prompt)
    feeds = {"input_ids": ids, "attention_mask": np.ones((1, total), np.int64),
             "position_ids": np.arange(total, dtype=np.int64)[None]}
    toks, prefill_last, last = [], None, None
    for step in range(n_new):
        feeds.update(past)
        out = sess.run(feeds)
        last = out["logits"][0, -1]
        if prefill_last is None:
            prefill_last = last
        tok = int(np.argmax(last))
        toks.append(tok)
        past = {}
        for i in range(L):
            for kv in ("key", "value"):
                past[f"past_key_values.{i}.{kv}"] = out[f"present.{i}.{kv}"]
        total += 1
        feeds = {"input_ids": np.array([[tok]], np.int64),
                 "attention_mask": np.ones((1, total), np.int64),
                 "position_ids": np.array([[total - 1]], np.int64)}
    return toks, prefill_last, last


def check_onnx(path, model, prompt, golden=None, n_new=16, run=True):
    m = onnx.load(path)
    opset = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    checker = opset <= onnx.defs.onnx_opset_version()  # onnx 1.12 knows opset 17 at most
    if checker:
        onnx.checker.check_model(m)
    cfg = model.config
    check_layout(m, cfg, getattr(model, "takes_position_ids", True))
    checked = "checker + layout ok" if checker else f"layout ok (opset {opset}: no checker here)"
    if not run:
        return checked
    if golden is None:
        toks, pl, last = hd.greedy_with_cache(model, prompt, n_new)
        golden = {"generated_ids": toks, "prefill_last_logits": pl.tolist(), "last_logits": last.tolist()}
    sess = onnx_ref.Session(m)
    toks, pl, last = onnx_greedy(sess, cfg, prompt, len(golden["generated_ids"]))
    assert toks == golden["generated_ids"], (toks, golden["generated_ids"])
    d1 = float(np.abs(pl - np.array(golden["prefill_last_logits"])).max())
    d2 = float(np.abs(last - np.array(golden["last_logits"])).max())
    scale = float(np.abs(np.array(golden["last_logits"])).max())
    assert d1 < 1e-3 * max(1.0, scale) and d2 < 1e-3 * max(1.0, scale), (d1, d2)
    msg = f"{checked}; onnx(numpy) greedy == torch, max|dlogits| prefill {d1:.2e} last {d2:.2e}"
    pb = golden.get("padded_batch")
    if pb:
        feeds = {"input_ids": np.array(pb["input_ids"], np.int64),
                 "attention_mask": np.array(pb["attention_mask"], np.int64),
                 "position_ids": np.array(pb["position_ids"], np.int64)}
        for i in range(cfg.num_hidden_layers):
            for kv in ("key", "value"):
                feeds[f"past_key_values.{i}.{kv}"] = np.zeros((2, cfg.num_key_value_heads, 0, cfg.head_dim), np.float32)
        out = sess.run(feeds)
        d3 = float(np.abs(out["logits"][:, -1] - np.array(pb["last_logits"])).max())
        assert d3 < 1e-3 * max(1.0, scale), d3
        msg += f", padded batch {d3:.2e}"
    return msg
