#!/usr/bin/python3
"""Fits the htp and aries simulators on a stated subset of published LLM figures and
predicts the rest (bench/sim_validation.sh runs this; bench/RESULTS.md shows the output).

    /usr/bin/python3 bench/sim_validation.py BUILD_DIR WORK_DIR

Every published figure, its source and which ones are fitted (and the figure a
leave-one-out fit uses instead) are in bench/sim_figures.json.

htp: one estimate-only package per model shape (synth_model.py --zeros -> arcl AR {1, 128}
x CL 4096, or the figure's "context" -> htp, one target per chip with a figure for that model; weights costed as AI
Hub's w4a16 recipe stores them: LPBQ 4-bit linears (a share at int8 where AI Hub publishes
the package's size, int8_share), int8 LM head, 16-bit activations; the
KV cache at `kv_bits` per figure in sim_figures.json: 8 when not given, as AIMET's LLM recipe
stores it (facts.md) and as AI Hub's qnn_context_binary input specs declare it (uint8) for
Qwen2-7B and Mistral-7B; 16 for the exports with no such spec, an assumption), timed with
`npuforge estimate`; a figure of "precision" "w4" (4-bit weights, fp16
activations and cache) gets a package of its own without the activation and cache
assumptions, so its HMX ops run at the fp16 rate over expanded weights. The fits, stated
as groups in sim_figures.json's "fits" (fit_group lists the kinds), write the chip files
(plugins/backends/htp/chips/, and the build's copy the plugin reads); ours:
  sm8750    npu_gb_per_s + per_op_us on 1B and 8B decode, a16w8 on 3B TTFT (hardware.md),
            the HVX rate on 1B TTFT
  sm8850    per-op and HVX = sm8750's x 1.37 (published NPU speed-up); a16w8 alone on its
            3B TTFT; npu_gb_per_s on its 1B decode
  sc8380xp  a16w8 on its 3B and 8B TTFTs with per-op and HVX by the same ratio (no published
            NPU speed-up); npu_gb_per_s on its 3B decode
  sc8480xp  (the b61a009 and 1db1fe5 files) as sc8380xp: a16w8 with per-op and HVX on its 3B
            TTFT, npu_gb_per_s on its 3B decode
  sm8650    a16w8, per-op, HVX = sm8750's / 1.45 (published); npu_gb_per_s on its Phi-3.5 decode
  sm8550    sm8650's / 1.98 (published); NPU ceiling of sc8380xp (same v73 generation)
  fp16      sm8750's fp16 rate and weight expansion on its Llama-3.2-1B w4 decode and TTFT;
            sc8380xp's expansion on its Qwen2.5-1.5B w4 decode; the other chips by NPU speed
A chip no group fits takes sm8750's rates times its published NPU speed-up (SPEED).
aries: aries_sim fit on the 1B (bandwidth, efficiency) and the 8B TTFT (on-chip buffer),
written to plugins/backends/aries/devices/aries-rb.json (a figures file without the buffer
group keeps the buffer, one without aries groups keeps the device file as it is, other aries
groups are fitted by least squares); predictions with aries_sim predict
from the configs (the compile path gives the same figures, bench/aries_estimate.sh).
"""
import functools
import json
import math
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD, WORK = sys.argv[1], sys.argv[2]  # [--no-loo]: skip the leave-one-out fits
NF = f"{BUILD}/bin/npuforge"
SIM = f"{BUILD}/bin/aries_sim"
CHIPS_SRC = f"{ROOT}/plugins/backends/htp/chips"
CHIPS_BUILD = f"{BUILD}/lib/npuforge/plugins/htp/chips"
DEVICE = f"{ROOT}/plugins/backends/aries/devices/aries-rb.json"
DEVICE_BUILD = f"{BUILD}/lib/npuforge/plugins/aries/devices/aries-rb.json"  # what the plugin reads
CONFIGS = f"{ROOT}/tools/models/configs"
# FIGURES=path: another set of figures and fits in sim_figures.json's layout (a check on
# figures kept out of the repo); its fits rewrite the chip and device files like ours.
FIGURES_FILE = os.environ.get("FIGURES") or f"{ROOT}/bench/sim_figures.json"
DATA = json.load(open(FIGURES_FILE))
if os.environ.get("FITS") == "none":  # predict every figure with the chip and device files as they are
    DATA["fits"] = []
FIGS = DATA["figures"]
sys.path.insert(0, f"{ROOT}/tools/models")
import hf_config  # noqa: E402
# AI Hub's NPU speed-ups between chip generations (launch material, see the chip files).
SPEED = {"sm8850": 1.37, "sm8650": 1 / 1.45, "sm8550": 1 / 1.45 / 1.98, "sa8295p": 1 / 1.45 / 1.98}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- model configs
CONFIG_CACHE = {}


def config_of(name):
    """A figure's "config": a name in tools/models/configs, or a path (absolute, or relative to
    the figures file) to any HF decoder config.json. Returns (the config in Llama key names,
    written under WORK/configs for synth_model and aries_sim; its shape signature)."""
    if name not in CONFIG_CACHE:
        is_path = name.endswith(".json") or "/" in name
        src = os.path.join(os.path.dirname(os.path.abspath(FIGURES_FILE)), name) if is_path else f"{CONFIGS}/{name}.json"
        try:
            cfg = hf_config.normalize(json.load(open(src)))
        except (OSError, ValueError) as e:
            raise SystemExit(f"sim_validation: figure config '{name}': {e}")
        key = name
        if is_path:  # .../<model>/config.json -> <model>; .../<model>.json -> <model>
            stem = os.path.splitext(name)[0]
            key = os.path.basename(os.path.dirname(stem) if os.path.basename(stem) == "config" else stem) or "config"
        key = re.sub(r"[^A-Za-z0-9._-]+", "_", key)
        while any(k == key for k, _ in CONFIG_CACHE.values()):
            key += "_"
        os.makedirs(f"{WORK}/configs", exist_ok=True)
        path = f"{WORK}/configs/{key}.json"
        text = json.dumps(cfg, indent=1) + "\n"
        if not os.path.exists(path) or open(path).read() != text:
            open(path, "w").write(text)
        heads = cfg["num_attention_heads"]
        shape = (cfg["vocab_size"], cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], heads,
                 cfg.get("num_key_value_heads", heads), cfg.get("head_dim", cfg["hidden_size"] // heads),
                 bool(cfg.get("tie_word_embeddings")), bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2")),
                 cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None)
        CONFIG_CACHE[name] = (key, json.dumps(shape))
    key, shape = CONFIG_CACHE[name]
    return f"{WORK}/configs/{key}.json", shape


# ---------------------------------------------------------------- htp packages and estimates
def precision(f):
    """A figure's "precision" as AI Hub names it: "w4a16" (the default: 4-bit weights, 16-bit
    integer activations) or "w4" (4-bit weights, fp16 activations and KV cache)."""
    p = f.get("precision", "w4a16")
    if p not in ("w4a16", "w4"):
        raise SystemExit(f"sim_validation: figure {f['model']}: precision '{p}' is not one we simulate (w4a16, w4)")
    return p


def label(f):
    """A figure's model as fits and the table name it: the model, with a precision other than
    w4a16 in brackets ("Llama-3.2-1B-Instruct (w4)")."""
    return f["model"] if precision(f) == "w4a16" else f"{f['model']} ({precision(f)})"


def kv_bits(f):
    """The KV cache width a figure's export stores: the figure's "kv_bits", else 8 (AIMET's LLM
    recipe, and the uint8 caches of AI Hub's qnn_context_binary input specs); 16 (fp16) at w4."""
    return 16 if precision(f) == "w4" else f.get("kv_bits", 8)


def published_share(f):
    """The share of a w4a16 export's 4-bit weights AI Hub keeps at int8, from the package size
    it publishes (the figures file's "model_sizes"; the precision reads "w4a16 + w8a16 (few
    layers)" and the 8-bit layers are not listed): the published size less what our w4a16
    costing stores (4-bit linears with their LPBQ block scales, the int8 LM head) and an int8
    embedding table, over the linears' 4-bit bytes. None without a published size."""
    size = DATA.get("model_sizes", {}).get(f["model"])
    if not size:
        return None
    vocab, hidden, inter, layers, heads, kv, hd = json.loads(config_of(f["config"])[1])[:7]
    linears = layers * (2 * hidden * heads * hd + 2 * hidden * kv * hd + 3 * hidden * inter)
    ours = linears / 2 + linears / 128 + 2 * vocab * hidden
    return round(min(max((size["gb"] * 1e9 - ours) / (linears / 2), 0.0), 1.0), 3)


@functools.cache
def median_published_share():
    """The median of the models' published int8 shares; 0 when none is published."""
    known = sorted({g["model"]: published_share(g) for g in FIGS if g["sim"] == "htp" and published_share(g) is not None}.values())
    return known[len(known) // 2] if known else 0.0


def int8_share(f):
    """The int8 share a w4a16 figure's package is costed with: its published one, else the
    median of the published ones (those exports are "few layers" at int8 too); 0 at w4."""
    if precision(f) != "w4a16":
        return 0.0
    share = published_share(f)
    return median_published_share() if share is None else share


def context(f):
    """The context length a figure's export was built for: its "context", else 4096."""
    return f.get("context", 4096)


def package_of(f):
    """The package directory a figure is costed on: models of the same shapes share one
    (costs depend on shapes and widths only), named after the first such config; a shape with
    two KV widths or two int8 shares gets one package per width or share, one at w4 (fp16
    activations) its own, and one at a context other than 4096 its own."""
    shape = config_of(f["config"])[1]
    same = [g for g in FIGS if g["sim"] == "htp" and config_of(g["config"])[1] == shape and precision(g) == precision(f)
            and context(g) == context(f)]
    name = min(os.path.basename(config_of(g["config"])[0])[:-len(".json")] for g in same)
    name = name if len({kv_bits(g) for g in same}) == 1 else f"{name}-kv{kv_bits(f)}"
    name = name if len({int8_share(g) for g in same}) == 1 else f"{name}-int8-{int8_share(f)}"
    name = name if precision(f) == "w4a16" else f"{name}-{precision(f)}"
    return name if context(f) == 4096 else f"{name}-cl{context(f)}"


def has_chip(f):
    return f["sim"] != "htp" or os.path.exists(f"{CHIPS_SRC}/{f['chip']}.json")


def build_htp_packages():
    chips_of, source_of = {}, {}
    for f in FIGS:
        if f["sim"] == "htp" and has_chip(f):
            chips_of.setdefault((package_of(f), kv_bits(f), precision(f), context(f), int8_share(f)), set()).add(f["chip"])
            source_of.setdefault(package_of(f), config_of(f["config"])[0])
    for (cfg, kv, prec, cl, share), chips in sorted(chips_of.items()):
        d = f"{WORK}/htp/{cfg}"
        if not os.path.exists(f"{d}/model.onnx"):
            log(f"synthesizing {cfg}")
            subprocess.run(["/usr/bin/python3", f"{ROOT}/tools/models/synth_model.py", source_of[cfg], d, "--zeros"],
                           check=True, stdout=subprocess.DEVNULL)
        # w4a16: activations timed as 16-bit integers, the cache at its width; w4: both stay
        # fp16 (no assumption), so HMX ops run at the fp16 rate over expanded 4-bit weights.
        widths = f"assume_activation_bw = 16\nassume_kv_bw = {kv}\n" if prec == "w4a16" else ""
        widths += f"assume_int8_share = {share}\n" if share else ""
        targets = "".join(f'''
[targets.{c}]
backend = "htp"
chipset = "{c}"
{widths}assume_weight_bw = 4
pack_weights = false
''' for c in sorted(chips))
        manifest = f'''[model]
onnx = "model.onnx"

[[transform]]
plugin = "arcl"
arn = [1, 128]
context_length = [{cl}]
{targets}'''
        path = f"{d}/validation.toml"
        if not os.path.exists(path) or open(path).read() != manifest or \
                any(not os.path.exists(f"{d}/out/{c}/package.json") for c in chips):
            open(path, "w").write(manifest)
            log(f"building {cfg} for {', '.join(sorted(chips))}")
            subprocess.run([NF, "build", path, "--no-cache", "--out", f"{d}/out", "-q"], check=True, stdout=sys.stderr)


def htp_estimate(chip, f):
    out = subprocess.run([NF, "estimate", f"{WORK}/htp/{package_of(f)}/out/{chip}", "--json", "--prompt-len", "128",
                          "--context-len", str(context(f))], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def predict(f):
    if f["sim"] == "htp":
        return htp_estimate(f["chip"], f)[f["metric"]]
    out = subprocess.run([SIM, "predict", config_of(f["config"])[0], DEVICE, "240", "245"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)[f["metric"]]


def try_predict(f):
    """(prediction, None), or (None, why) for a figure the simulators cannot cost: a chip
    without a chip file, or one whose file lacks a figure the estimate needs."""
    if not has_chip(f):
        return None, f"no chip file plugins/backends/htp/chips/{f['chip']}.json"
    try:
        return predict(f), None
    except subprocess.CalledProcessError as e:
        lines = (e.stderr or "").strip().splitlines()
        return None, lines[-1] if lines else f"exit {e.returncode}"


def fig(chip, model, metric):
    for f in FIGS:
        if f["chip"] == chip and label(f) == model and f["metric"] == metric:
            return f
    raise SystemExit(f"no figure {chip} {model} {metric} in sim_figures.json")


# ---------------------------------------------------------------- chip files
def load_chip(c):
    if not os.path.exists(f"{CHIPS_SRC}/{c}.json"):
        raise SystemExit(f"sim_validation: a fit names chip '{c}', which has no plugins/backends/htp/chips/{c}.json")
    return json.load(open(f"{CHIPS_SRC}/{c}.json"))


def save_chip(c, j):
    text = json.dumps(j, indent=2) + "\n"
    for d in (CHIPS_SRC, CHIPS_BUILD):
        open(f"{d}/{c}.json", "w").write(text)


def entry(j, path):
    """The documented figure at path, and the key inside its value when the value is a table
    ("hmx_macs_per_s.relative.fp16")."""
    keys = path.split(".")
    for i, k in enumerate(keys):
        j = j[k]
        if "value" in j:
            return j, ".".join(keys[i + 1:]) or None
    raise KeyError(path)


def get(j, path):
    e, key = entry(j, path)
    return e["value"][key] if key else e["value"]


def put(j, path, value):
    e, key = entry(j, path)
    if key:
        e["value"][key] = float(f"{value:.4g}")
    else:
        e["value"] = float(f"{value:.4g}")


def set_chip(c, values):
    """Writes {parameter path: value} into chip c's file (both copies)."""
    j = load_chip(c)
    for path, v in values.items():
        put(j, path, v)
    save_chip(c, j)


def set_speed(c, rate, ref=None):
    """The chip's a16w8 rate; its per-op cost, HVX rate and fp16 weight expansion follow the
    same NPU-speed ratio to the reference (sm8750, or the chip as it was when sm8750 itself is
    fitted), and its fp16 rate is the reference's ratio to a16w8."""
    ref = ref or load_chip("sm8750")
    ratio = rate / get(ref, "hmx_macs_per_s.a16w8")
    set_chip(c, {"hmx_macs_per_s.a16w8": rate, "overheads.per_op_us": get(ref, "overheads.per_op_us") / ratio,
                 "hvx_bytes_per_s": get(ref, "hvx_bytes_per_s") * ratio, EXPAND_KEY: get(ref, EXPAND_KEY) * ratio,
                 FP16_KEY: get(ref, FP16_KEY)})


def bisect(lo, hi, too_low, steps=18):
    """Geometric bisection: too_low(x) says the parameter must grow."""
    for _ in range(steps):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if too_low(mid) else (lo, mid)
    return (lo * hi) ** 0.5


def speed_error(chip, figs):
    """The mean log error of a chip's speeds (tokens/s, 1 / TTFT) over figures of either kind
    (< 0: estimates too slow)."""
    speed = lambda f, v: v if f["metric"] == "decode_tokens_per_s" else 1 / v
    return sum(math.log(speed(f, htp_estimate(chip, f)[f["metric"]]) / speed(f, f["published"])) for f in figs) / len(figs)


def fit_param(chip, figs, key, lo, hi):
    """One speed-like parameter (more is faster) on figures of either kind."""
    def too_low(x):
        set_chip(chip, {key: x})
        return speed_error(chip, figs) < 0
    x = bisect(lo, hi, too_low)
    too_low(x)
    return x


def fit_fp16_path(chip, figs):
    """The fp16 rate (relative to a16w8) and the weight expansion rate on fp16-activation
    figures: the expansion on the decodes (a decode's fp16 MACs are few), the rate on the
    TTFTs, alternated (a prefill pays both)."""
    decodes = [f for f in figs if f["metric"] == "decode_tokens_per_s"]
    ttfts = [f for f in figs if f["metric"] == "ttft_ms"]
    for _ in range(6):
        fit_param(chip, decodes, EXPAND_KEY, 1e9, 1e14)
        fit_param(chip, ttfts, FP16_KEY, 0.01, 4.0)


def fit_bw(chip, models):
    figs = [fig(chip, m, "decode_tokens_per_s") for m in models]
    return fit_param(chip, figs, "dram.npu_gb_per_s", 1.0, get(load_chip(chip), "dram.peak_gb_per_s"))


def fit_rate(chip, models, scale_overheads, key="hmx_macs_per_s.a16w8"):
    """A rate (HMX a16w8, or HVX bytes/s) on one or more TTFT figures; with scale_overheads
    the chip's per-op cost and HVX rate follow the a16w8 rate (one NPU-speed ratio to sm8750)."""
    figs = [fig(chip, m, "ttft_ms") for m in models]
    ref = load_chip(chip) if chip == "sm8750" else None  # sm8750 scales from itself as it was

    def too_low(rate):
        if scale_overheads:
            set_speed(chip, rate, ref)
        else:
            set_chip(chip, {key: rate})
        return speed_error(chip, figs) < 0
    rate = bisect(1e10, 1e15, too_low)
    too_low(rate)
    return rate


# Every parameter a fit may name, with its search bounds.
PARAMS = {
    "dram.npu_gb_per_s": (1.0, 1000.0),
    "hmx_macs_per_s.a16w8": (1e10, 1e15),
    "hvx_bytes_per_s": (1e9, 1e14),
    "overheads.per_op_us": (0.01, 1000.0),
    "hmx_macs_per_s.relative.fp16": (0.01, 4.0),
    "fp16_weight_expand_per_s": (1e9, 1e14),
}


def least_squares(chip, params, figs, bounds, set_param, predict_fn, rounds=5):
    """The parameters that minimise the summed squared log errors of the figures, one
    parameter at a time (golden section in log space within bounds[p]), a few rounds; any fit
    group without a solver of its own. Needs at least as many figures as parameters."""
    unknown = [p for p in params if p not in bounds]
    if unknown:
        raise SystemExit(f"sim_figures.json: {chip}: no parameter {unknown[0]}; fits name {', '.join(bounds)}")
    if len(figs) < len(params):
        raise SystemExit(f"sim_figures.json: {chip}: {len(params)} parameters need at least as many figures ({len(figs)} given)")

    def cost(p, x):
        set_param(p, x)
        return sum(math.log(predict_fn(f) / f["published"]) ** 2 for f in figs)
    phi = (math.sqrt(5) - 1) / 2
    for _ in range(rounds):
        for p in params:
            lo, hi = (math.log(b) for b in bounds[p])
            a, b = hi - phi * (hi - lo), lo + phi * (hi - lo)
            ca, cb = cost(p, math.exp(a)), cost(p, math.exp(b))
            for _ in range(28):
                if ca <= cb:
                    hi, b, cb = b, a, ca
                    a = hi - phi * (hi - lo)
                    ca = cost(p, math.exp(a))
                else:
                    lo, a, ca = a, b, cb
                    b = lo + phi * (hi - lo)
                    cb = cost(p, math.exp(b))
            cost(p, math.exp((lo + hi) / 2))


def fit_least_squares(chip, params, figs):
    """least_squares on a chip file's parameters (the NPU's ceiling at most the SoC's peak)."""
    bounds = dict(PARAMS, **{"dram.npu_gb_per_s": (1.0, get(load_chip(chip), "dram.peak_gb_per_s") or 1000.0)})
    least_squares(chip, params, figs, bounds, lambda p, x: set_chip(chip, {p: x}),
                  lambda f: htp_estimate(chip, f)[f["metric"]])


def fit_decode_pair(chip, small, big):
    """npu_gb_per_s and per_op_us from two decode figures: the step is (bytes, compute) at
    the bandwidth plus per_op x ops plus per_graph; for a trial bandwidth the small model
    gives per_op, and the bandwidth is bisected until the big model agrees."""
    fs, fb = fig(chip, small, "decode_tokens_per_s"), fig(chip, big, "decode_tokens_per_s")

    def at(bw):
        set_chip(chip, {"dram.npu_gb_per_s": bw, "overheads.per_op_us": 1.0})
        es, eb = htp_estimate(chip, fs), htp_estimate(chip, fb)
        pg = get(load_chip(chip), "overheads.per_graph_us") / 1000

        def parts(e):  # ms without the per-op part, and the op count (per_op_us = 1 here)
            ops = (e["breakdown"]["decode_overhead_ms"] - pg) * 1000
            return e["decode_ms_per_token"] - ops / 1000, ops
        xs, ns = parts(es)
        xb, nb = parts(eb)
        per_op_ms = (1000 / fs["published"] - xs) / ns
        return per_op_ms, xb + per_op_ms * nb - 1000 / fb["published"]
    # residual > 0: the big model too slow at this bandwidth -> more bandwidth
    bw = bisect(5.0, get(load_chip(chip), "dram.peak_gb_per_s"), lambda bw: at(bw)[1] > 0)
    per_op_ms, _ = at(bw)
    if per_op_ms < 0:
        raise SystemExit(f"{chip}: no physical fit (per-op cost {per_op_ms * 1000:.1f} us)")
    set_chip(chip, {"dram.npu_gb_per_s": bw, "overheads.per_op_us": per_op_ms * 1000})
    return bw, per_op_ms * 1000


def derive_from_sm8750():
    ref = load_chip("sm8750")
    for c, ratio in SPEED.items():
        set_speed(c, get(ref, "hmx_macs_per_s.a16w8") * ratio)


def share_v73_bandwidth():
    # sm8550 is the X Elite's NPU generation (v73)
    set_chip("sm8550", {"dram.npu_gb_per_s": get(load_chip("sc8380xp"), "dram.npu_gb_per_s")})


# The fits sim_figures.json can state, by the parameters a group fits:
#   npu_gb_per_s + per_op_us        two decode figures (smaller model first): fit_decode_pair
#   a16w8 + hvx_bytes_per_s         two TTFT figures: the HMX rate on the first, HVX on the
#                                   second, alternated
#   a16w8 + per_op_us + hvx_bytes_per_s
#                                   TTFT figures: one NPU speed (per-op and HVX follow the
#                                   a16w8 ratio to sm8750)
#   a16w8                           TTFT figures: the HMX rate alone, per-op and HVX kept at
#                                   the chip's published NPU speed-up (SPEED); a chip without
#                                   one has nothing to hold them, so this fits its NPU speed
#   npu_gb_per_s                    decode figures
#   relative.fp16 + fp16_weight_expand_per_s
#                                   fp16-activation ("w4") figures: the expansion on the
#                                   decodes, the fp16 rate on the TTFTs (fit_fp16_path)
#   fp16_weight_expand_per_s        fp16-activation figures of either kind
#   any other set of PARAMS         least squares of the log errors (fit_least_squares)
# A parameter fitted on several figures makes their mean log error zero (speed_error).
# sm8750's groups run first (every other chip is derived from it by SPEED), then each
# chip's rate groups, then its bandwidth groups (decode depends little on the rates).
DECODE_PAIR = {"dram.npu_gb_per_s", "overheads.per_op_us"}
RATES = {"hmx_macs_per_s.a16w8", "hvx_bytes_per_s"}
NPU_SPEED = {"hmx_macs_per_s.a16w8", "overheads.per_op_us", "hvx_bytes_per_s"}
HMX_ONLY = {"hmx_macs_per_s.a16w8"}
BANDWIDTH = {"dram.npu_gb_per_s"}
FP16_KEY, EXPAND_KEY = "hmx_macs_per_s.relative.fp16", "fp16_weight_expand_per_s"
FP16_PATH = {FP16_KEY, EXPAND_KEY}
EXPAND = {EXPAND_KEY}


def fit_group(g, subst):
    chip, params = g["chip"], set(g["params"])
    models = [subst.get((chip, m, k), m) for m, k in g["figures"]]
    if params == DECODE_PAIR and len(models) == 2:
        fit_decode_pair(chip, *models)
    elif params == RATES and len(models) == 2:
        for _ in range(4):  # the HMX and HVX rates share both TTFTs: alternate until settled
            fit_rate(chip, models[:1], scale_overheads=False)
            fit_rate(chip, models[1:], scale_overheads=False, key="hvx_bytes_per_s")
    elif params in (NPU_SPEED, HMX_ONLY):
        fit_rate(chip, models, scale_overheads=params == NPU_SPEED or chip not in SPEED)
    elif params == BANDWIDTH:
        fit_bw(chip, models)
    elif params == FP16_PATH and any(k == "decode_tokens_per_s" for _, k in g["figures"]) and \
            any(k == "ttft_ms" for _, k in g["figures"]):
        fit_fp16_path(chip, [fig(chip, m, k) for m, (_, k) in zip(models, g["figures"])])
    elif params == EXPAND:
        fit_param(chip, [fig(chip, m, k) for m, (_, k) in zip(models, g["figures"])], EXPAND_KEY, 1e9, 1e14)
    else:
        fit_least_squares(chip, g["params"], [fig(chip, m, k) for m, (_, k) in zip(models, g["figures"])])


def fit_htp(subst=None, only=None):
    """All htp fits of sim_figures.json's "fits", in dependency order; subst = {(chip, model,
    metric): other model} for leave-one-out, which refits `only` that chip (the others do
    not change its figures)."""
    s = subst or {}
    groups = [g for g in DATA["fits"] if g["chip"] != "aries-rb"]
    of = lambda chip, kinds: [g for g in groups if g["chip"] == chip and set(g["params"]) in kinds]
    known = [DECODE_PAIR, RATES, NPU_SPEED, HMX_ONLY, BANDWIDTH, FP16_PATH, EXPAND]
    other = lambda chip: [g for g in groups if g["chip"] == chip and set(g["params"]) not in known]
    if only in (None, "sm8750"):
        for _ in range(3):  # decode barely depends on the rates, TTFT on all: a few rounds
            for g in of("sm8750", known[:5]) + of("sm8750", [FP16_PATH, EXPAND]) + other("sm8750"):
                fit_group(g, s)
    # The chips without a speed of their own follow sm8750's as refitted here (none refitted:
    # every chip file's values stand, as a FIGURES file without fits asks).
    if only is None and of("sm8750", known):
        derive_from_sm8750()
    for chip in sorted({g["chip"] for g in groups} - {"sm8750"}):
        if only not in (None, chip):
            continue
        for _ in range(2):
            for g in (of(chip, [RATES, NPU_SPEED, HMX_ONLY]) + of(chip, [DECODE_PAIR, BANDWIDTH]) +
                      of(chip, [FP16_PATH, EXPAND]) + other(chip)):
                fit_group(g, s)
    if only is None and any("dram.npu_gb_per_s" in g["params"] for g in groups if g["chip"] == "sc8380xp"):
        share_v73_bandwidth()


# ---------------------------------------------------------------- aries
ARIES_PARAMS = ("dram_bandwidth_bytes_per_s", "mac_efficiency", "onchip_buffer_bytes")


ARIES_BOUNDS = {"dram_bandwidth_bytes_per_s": (1e9, 1e12), "mac_efficiency": (0.01, 1.0),
                "onchip_buffer_bytes": (16 << 10, 64 << 20)}
ARIES_PAIR, ARIES_BUFFER = {"dram_bandwidth_bytes_per_s", "mac_efficiency"}, {"onchip_buffer_bytes"}


def aries_fit_models(subst=None):
    """The models of sim_figures.json's aries fits that aries_sim fits jointly: bandwidth and
    MAC efficiency on one model's decode and TTFT, the on-chip buffer on another's TTFT (None
    for a group the file does not state: its parameters stay as the device file gives them);
    and the other aries groups, fitted after them by least squares."""
    s = subst or {}
    small = big = None
    other = []
    for g in DATA["fits"]:
        if g["chip"] != "aries-rb":
            continue
        models, kinds = {m for m, _ in g["figures"]}, sorted(k for _, k in g["figures"])
        if set(g["params"]) == ARIES_PAIR and len(models) == 1 and kinds == ["decode_tokens_per_s", "ttft_ms"]:
            m = models.pop()  # one model's decode and TTFT: a left-out one takes its substitute's pair
            small = s.get(("aries-rb", m, "decode_tokens_per_s")) or s.get(("aries-rb", m, "ttft_ms")) or m
        elif set(g["params"]) == ARIES_BUFFER and kinds == ["ttft_ms"]:
            big = s.get(("aries-rb", g["figures"][0][0], "ttft_ms"), g["figures"][0][0])
        else:
            other.append((g["params"], [fig("aries-rb", s.get(("aries-rb", m, k), m), k) for m, k in g["figures"]]))
    if big and not small:
        raise SystemExit("sim_figures.json: the aries onchip_buffer_bytes fit needs a bandwidth + mac_efficiency group "
                         "(the buffer is fitted with them)")
    return small, big, other


def set_aries_param(k, v):
    v = int(v) if k == "onchip_buffer_bytes" else float(f"{v:.4g}")
    text = re.sub(rf'("{k}": {{"value": )[^,]+', rf"\g<1>{v}", open(DEVICE).read())
    for path in (DEVICE, DEVICE_BUILD):
        open(path, "w").write(text)


def aries_device_params():
    text = open(DEVICE).read()
    return {k: float(re.search(rf'"{k}": {{"value": ([^,]+)', text).group(1)) for k in ARIES_PARAMS}


def fit_aries(subst=None):
    """The aries fits of sim_figures.json; subst = {(chip, model, metric): other model} for
    leave-one-out. Returns the device file's parameters after them."""
    small_model, big_model, other = aries_fit_models(subst)
    if small_model:
        fit_aries_jointly(small_model, big_model)
    elif not other:
        log("no aries fit stated: the device file's parameters as they are")
    for params, figs in other:
        least_squares("aries-rb", params, figs, ARIES_BOUNDS, set_aries_param, predict)
    return aries_device_params()


def fit_aries_jointly(small_model, big_model):
    """aries_sim fit: bandwidth and MAC efficiency on small_model's decode and TTFT, the
    on-chip buffer on big_model's TTFT (None: the buffer as the device file gives it)."""
    fd, ft = fig("aries-rb", small_model, "decode_tokens_per_s"), fig("aries-rb", small_model, "ttft_ms")
    args = [SIM, "fit", DEVICE, config_of(fd["config"])[0], str(fd["published"]), str(ft["published"]), "240", "245"]
    if big_model:
        fb = fig("aries-rb", big_model, "ttft_ms")
        args += [config_of(fb["config"])[0], str(fb["published"])]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    vals = dict(re.findall(r"^(\w+) ([0-9.e+]+)$", out, re.M))
    for k in ARIES_PARAMS:
        if k in vals:  # the buffer is not fitted without its group
            set_aries_param(k, float(vals[k]))


# ---------------------------------------------------------------- main
def fitted_set():
    s = set()
    for g in DATA["fits"]:
        for model, metric in g["figures"]:
            s.add((g["chip"], model, metric))
    return s


def main():
    os.makedirs(WORK, exist_ok=True)
    build_htp_packages()
    if any(f["sim"] == "htp" for f in FIGS):
        log("fitting htp chip files")
        fit_htp()
    aries = None
    if any(f["sim"] == "aries" for f in FIGS):
        log("fitting the aries device file")
        aries = fit_aries()
    fitted = fitted_set()
    rows = []
    for f in FIGS:
        p, why = try_predict(f)
        kind = "fitted" if (f["chip"], label(f), f["metric"]) in fitted else "predicted"
        rows.append(dict(f, predicted=p, error=None if p is None else p / f["published"] - 1,
                         kind=kind if p is not None else "not simulated", why=why))
    # Leave-one-out: refit without the figure (its group uses the stated substitute) and predict it.
    chips = [n[:-len(".json")] for n in os.listdir(CHIPS_SRC) if n.endswith(".json")]
    snapshot = {c: load_chip(c) for c in chips}
    device_text = open(DEVICE).read()
    loo = []
    for g in DATA["fits"] if "--no-loo" not in sys.argv else []:
        for model, metric in g["figures"]:
            f = fig(g["chip"], model, metric)
            sub = g["loo"].get(model)
            if not sub:
                loo.append(dict(f, loo=None, note="no other figure of this kind on this chip"))
                continue
            log(f"leave-one-out: {g['chip']} {model} {metric} (refit on {sub})")
            if g["chip"] == "aries-rb":
                fit_aries({(g["chip"], model, metric): sub})
            else:
                fit_htp({(g["chip"], model, metric): sub}, only=g["chip"])
            p = predict(f)
            loo.append(dict(f, loo=p, error=p / f["published"] - 1, note=f"refit on {sub}"))
            for c, j in snapshot.items():
                save_chip(c, j)
            for path in (DEVICE, DEVICE_BUILD):
                open(path, "w").write(device_text)
    params = {c: {k: get(j, k) for k in ("dram.npu_gb_per_s", "hmx_macs_per_s.a16w8", "overheads.per_op_us",
                                         "hvx_bytes_per_s", FP16_KEY, EXPAND_KEY)} for c, j in snapshot.items()}
    json.dump({"rows": rows, "loo": loo, "htp_params": params, "aries_params": aries},
              open(f"{WORK}/validation.json", "w"), indent=1)
    report(rows, loo, params, aries)


def report(rows, loo, params, aries):
    fmt = lambda m, v: f"{v:.1f} ms" if m == "ttft_ms" else f"{v:.2f} tok/s"
    name = lambda m: "TTFT" if m == "ttft_ms" else "decode"
    print("| simulator | chip | model | figure | published | simulated | error | |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["predicted"] is None:
            print(f"| {r['sim']} | {r['chip']} | {label(r)} | {name(r['metric'])} | {fmt(r['metric'], r['published'])} | "
                  f"— | n/a | not simulated: {r['why']} |")
            continue
        print(f"| {r['sim']} | {r['chip']} | {label(r)} | {name(r['metric'])} | {fmt(r['metric'], r['published'])} | "
              f"{fmt(r['metric'], r['predicted'])} | {100 * r['error']:+.1f}% | {r['kind']} |")
    pred = [abs(r["error"]) for r in rows if r["kind"] == "predicted"]
    n_fit = sum(r["kind"] == "fitted" for r in rows)
    n_out = sum(r["predicted"] is None for r in rows)
    summary = (f"mean |error| {100 * sum(pred) / len(pred):.1f}%, max {100 * max(pred):.1f}%, "
               f"{sum(e <= 0.2 for e in pred)} of {len(pred)} within 20%" if pred else "none to compare")
    print(f"\n{len(rows)} figures, {n_fit} fitted ({100 * n_fit / len(rows):.0f}%), {len(pred)} predicted: {summary}"
          f"{f'; {n_out} not simulated' if n_out else ''}.\n")
    print("| leave-one-out | chip | model | figure | published | predicted when left out | error |")
    print("|---|---|---|---|---|---|---|")
    for r in loo:
        if r["loo"] is None:
            print(f"| {r['sim']} | {r['chip']} | {label(r)} | {name(r['metric'])} | {fmt(r['metric'], r['published'])} | — | "
                  f"n/a: {r['note']} |")
        else:
            print(f"| {r['sim']} ({r['note']}) | {r['chip']} | {label(r)} | {name(r['metric'])} | "
                  f"{fmt(r['metric'], r['published'])} | {fmt(r['metric'], r['loo'])} | {100 * r['error']:+.1f}% |")
    print("\n| chip | NPU GB/s | a16w8 T MAC/s | per-op us | HVX GB/s | fp16 / a16w8 | fp16 weight expansion G/s |")
    print("|---|---|---|---|---|---|---|")
    for c, p in sorted(params.items()):
        bw = p["dram.npu_gb_per_s"]
        print(f"| {c} | {'—' if bw is None else f'{bw:.1f}'} | {p['hmx_macs_per_s.a16w8'] / 1e12:.2f} | "
              f"{p['overheads.per_op_us']:.2f} | {p['hvx_bytes_per_s'] / 1e9:.0f} | {p[FP16_KEY]:.3f} | {p[EXPAND_KEY] / 1e9:.0f} |")
    if aries:
        print(f"\naries-rb: DRAM {aries['dram_bandwidth_bytes_per_s'] / 1e9:.2f} GB/s, MAC efficiency "
              f"{aries['mac_efficiency']:.4f}, on-chip buffer {aries['onchip_buffer_bytes'] / 1024:.0f} KiB per core")
    sizes = DATA.get("model_sizes", {})
    shown = set()
    for r in rows:
        if r["model"] in sizes and r["sim"] == "htp" and precision(r) == "w4a16" and r["model"] not in shown:
            if not shown:
                print("\n| model | published size | int8 share of its 4-bit weights | source |")
                print("|---|---|---|---|")
            shown.add(r["model"])
            print(f"| {r['model']} | {sizes[r['model']]['gb']} GB | {int8_share(r):.3f} | {sizes[r['model']]['source']} |")
    if DATA.get("not_simulated"):
        print("\n| found, not simulated | source | why |")
        print("|---|---|---|")
        for n in DATA["not_simulated"]:
            print(f"| {n['what']} | {n['source']} | {n['why']} |")


if __name__ == "__main__":
    main()
