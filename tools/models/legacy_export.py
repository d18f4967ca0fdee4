"""What the makers of tests/models/legacy share: the folder's config.json and golden.json from
the torch model, and ONNX Runtime's check that the file decodes the golden's greedy tokens
(tools/models/ort_greedy.mjs over bench/node_modules: `cd bench && npm install --ignore-scripts`)."""
import json
import os
import subprocess

import torch

import make_family_zoo as zoo

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def folder(name):
    """tests/models/legacy/<name>: where a maker writes by default."""
    return os.path.join(REPO, "tests", "models", "legacy", name)


def zoo_model(name, out):
    """The zoo's model `name` (its weights) and config, for an export into `out` (made)."""
    torch.set_num_threads(1)
    os.makedirs(out, exist_ok=True)
    return zoo.build(name), zoo.MODELS[name]


def ort_greedy(path, prompt, n_new, cache_branch_first=False):
    """Greedy decoding in ONNX Runtime from an empty cache. A merged decoder's first pass takes
    its else-branch (no cache), or with cache_branch_first its then-branch; the rest the
    then-branch."""
    script = os.path.join(REPO, "tools", "models", "ort_greedy.mjs")
    r = subprocess.run(["node", script, os.path.join(REPO, "bench"), path, json.dumps(prompt), str(n_new),
                        "1" if cache_branch_first else "0"], check=True, capture_output=True, text=True)
    return json.loads(r.stdout)


def write_files(out, cfg, golden):
    """config.json and golden.json into `out`."""
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f)


def write_golden(out, name, model, cfg, padded_batch=True):
    """config.json and the zoo's golden.json of `model` (zoo entry `name`) into `out`; without
    padded_batch for exports that number rows from the cache (no position_ids)."""
    golden = zoo.make_golden(name, model, zoo.prompt_for(name, cfg))
    if not padded_batch:
        del golden["padded_batch"]  # a left-padded row is numbered from the cache, pads included
    write_files(out, cfg, golden)
    return golden


def check_in_ort(path, golden, cache_branch_first=False):
    """ONNX Runtime's greedy tokens of `path` equal the golden's; returns them."""
    got = ort_greedy(path, golden["prompt_ids"], len(golden["generated_ids"]), cache_branch_first)
    assert got == golden["generated_ids"], (path, cache_branch_first, got, golden["generated_ids"])
    return got
