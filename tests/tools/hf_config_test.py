"""tools/models/hf_config.py: HF decoder configs of several families in the Llama key names."""
import glob
import json
import os
import re
import unittest

import hf_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Normalize(unittest.TestCase):
    def test_llama_keyed_configs_pass_through_unchanged(self):
        # What synth_model builds from the repo's configs must not move.
        paths = glob.glob(f"{ROOT}/tools/models/configs/*.json")
        self.assertTrue(paths)
        for p in paths:
            with open(p) as f:
                cfg = json.load(f)
            self.assertEqual(hf_config.normalize(cfg), cfg, p)

    def test_the_cpp_table_names_the_same_aliases(self):
        # sdk/include/npuforge/hf_config.hpp reads configs for the plugins: the same names.
        with open(f"{ROOT}/sdk/include/npuforge/hf_config.hpp") as f:
            text = f.read()
        cpp = {k: re.findall(r'"([a-z_]+)"', names)
               for k, names in re.findall(r'\{"([a-z_]+)", \{([^}]*)\}\}', text)}
        self.assertTrue(cpp)
        shapes = {k: v for k, v in hf_config.ALIASES.items() if k != "tie_word_embeddings"}
        self.assertEqual(cpp, shapes)

    def test_exaone_names_its_layers_num_layers(self):
        cfg = {"model_type": "exaone", "num_layers": 30, "hidden_size": 2560, "intermediate_size": 7168,
               "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 80, "vocab_size": 102400}
        self.assertEqual(hf_config.normalize(cfg)["num_hidden_layers"], 30)

    def test_chatglm_grouped_and_plain_attention(self):
        glm = {"model_type": "chatglm", "num_layers": 28, "hidden_size": 4096, "ffn_hidden_size": 13696,
               "num_attention_heads": 32, "multi_query_attention": True, "multi_query_group_num": 2,
               "kv_channels": 128, "padded_vocab_size": 151552}
        n = hf_config.normalize(glm)
        self.assertEqual((n["num_hidden_layers"], n["intermediate_size"], n["num_key_value_heads"], n["head_dim"],
                          n["vocab_size"]), (28, 13696, 2, 128, 151552))
        n = hf_config.normalize(dict(glm, multi_query_attention=False))
        self.assertEqual(n["num_key_value_heads"], 32)

    def test_gpt_style_names_and_falcon_multi_query(self):
        n = hf_config.normalize({"n_layer": 4, "n_embd": 256, "n_head": 8, "n_inner": 1024, "vocab_size": 1000,
                                 "multi_query": True})
        self.assertEqual((n["num_hidden_layers"], n["hidden_size"], n["num_attention_heads"], n["intermediate_size"],
                          n["num_key_value_heads"]), (4, 256, 8, 1024, 1))

    def test_null_means_the_default(self):
        n = hf_config.normalize({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                 "intermediate_size": 128, "vocab_size": 100, "head_dim": None,
                                 "num_key_value_heads": None})
        self.assertNotIn("head_dim", n)
        self.assertNotIn("num_key_value_heads", n)

    def test_multimodal_config_reads_its_text_config(self):
        n = hf_config.normalize({"architectures": ["Gemma3ForConditionalGeneration"], "vision_config": {},
                                 "text_config": {"num_hidden_layers": 34, "hidden_size": 2560, "head_dim": 256,
                                                 "num_attention_heads": 8, "num_key_value_heads": 4,
                                                 "intermediate_size": 10240, "vocab_size": 262208}})
        self.assertEqual((n["num_hidden_layers"], n["head_dim"]), (34, 256))

    def test_refuses_what_it_cannot_cost(self):
        base = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
                "vocab_size": 100}
        cases = [
            (dict(base, num_local_experts=8), "mixture-of-experts"),
            ({k: v for k, v in base.items() if k != "intermediate_size"}, "has no intermediate_size"),
            (dict(base, hidden_size=0), "hidden_size = 0 is not a positive integer"),
            (dict(base, num_hidden_layers=True), "num_hidden_layers = True"),
            (dict(base, num_key_value_heads=3), "not a multiple of num_key_value_heads 3"),
            ([1, 2], "JSON object"),
        ]
        for cfg, message in cases:
            with self.assertRaises(ValueError) as e:
                hf_config.normalize(cfg)
            self.assertIn(message, str(e.exception))


if __name__ == "__main__":
    unittest.main()
