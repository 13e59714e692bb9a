#!/usr/bin/env python3
"""Golden references for hearth's CPU engine, made by Hugging Face transformers itself.

For each architecture variant hearth supports, builds a tiny seeded model, saves it with
transformers' own save_pretrained (in the variant's storage dtype), reloads it in float32 and
records:
  * the fp32 logits at the last position of a fixed prompt;
  * a 40-token greedy continuation, with the top-1/top-2 logit margin at every step.
The hearth test (tests/worker/engine/hf_golden_test.cc) loads the same directories and must match the
logits to 1e-3 x (max - min) and the greedy tokens wherever the margin exceeds that tolerance.

Run where transformers is installed (hearth used transformers 5.17, torch 2.11, CPU):
    python3 tools/golden/make_hf_golden.py --out tests/golden/hf
"""
import argparse
import json
import os
import shutil

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

VOCAB = 320
PROMPT_LEN = 24
GREEDY_STEPS = 40

BASE = {
    "hidden_size": 64,
    "intermediate_size": 176,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": VOCAB,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "bos_token_id": 1,
    "eos_token_id": 2,
}

# name -> (config overrides, storage dtype)
VARIANTS = {
    "llama2-mha-f32": ({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                        "rope_theta": 10000.0, "tie_word_embeddings": False}, torch.float32),
    "llama3-gqa-tied-bf16": ({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                              "num_key_value_heads": 2, "rope_theta": 500000.0,
                              "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                               "original_max_position_embeddings": 64},
                              "tie_word_embeddings": True}, torch.bfloat16),
    "llama-linear-rope-f16": ({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                               "num_key_value_heads": 1, "rope_theta": 10000.0,
                               "rope_scaling": {"rope_type": "linear", "factor": 4.0},
                               "tie_word_embeddings": False}, torch.float16),
    "mistral-gqa-f16": ({"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                         "num_attention_heads": 4, "num_key_value_heads": 2,
                         "sliding_window": 256, "rope_theta": 1000000.0,
                         "tie_word_embeddings": False}, torch.float16),
    "qwen2-bias-tied-bf16": ({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                              "num_key_value_heads": 2, "rope_theta": 1000000.0,
                              "use_sliding_window": False, "tie_word_embeddings": True},
                             torch.bfloat16),
    "qwen3-qknorm-bf16": ({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                           "num_key_value_heads": 2, "head_dim": 32, "rope_theta": 1000000.0,
                           "tie_word_embeddings": False, "use_sliding_window": False},
                          torch.bfloat16),
}


def reinitialise(model, generator, tied):
    """Unit-variance activations instead of HF's std=0.02 init, so logits have real margins.
    A tied embedding doubles as the head, so it gets the head's scale."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                std = 1.0 if "embed_tokens" in name and not tied else p.shape[1] ** -0.5
                p.copy_(torch.randn(p.shape, generator=generator) * std)
            elif "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=generator))
            else:  # biases
                p.copy_(0.1 * torch.randn(p.shape, generator=generator))


def make_variant(out_dir, name, overrides, storage_dtype, seed):
    work = os.path.join(out_dir, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cfg = dict(BASE)
    cfg.update(overrides)
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(cfg, f)
    config = AutoConfig.from_pretrained(work)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).float()
    reinitialise(model, torch.Generator().manual_seed(seed), cfg.get("tie_word_embeddings", False))
    model.to(storage_dtype).save_pretrained(work)

    ref = AutoModelForCausalLM.from_pretrained(work, dtype=torch.float32,
                                               attn_implementation="eager").float()
    ref.eval()
    prompt = torch.randint(3, VOCAB, (PROMPT_LEN,), generator=torch.Generator().manual_seed(seed + 1))
    ids = prompt.tolist()
    tokens, margins = [], []
    with torch.no_grad():
        last_logits = ref(torch.tensor([ids])).logits[0, -1].float()
        logits = last_logits
        for _ in range(GREEDY_STEPS):
            top = torch.topk(logits, 2)
            tokens.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            ids.append(tokens[-1])
            logits = ref(torch.tensor([ids])).logits[0, -1].float()
    golden = {
        "variant": name,
        "storage_dtype": str(storage_dtype).replace("torch.", ""),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "prompt": prompt.tolist(),
        "logits": [float(x) for x in last_logits],
        "greedy": tokens,
        "margins": margins,
    }
    with open(os.path.join(work, "golden.json"), "w") as f:
        json.dump(golden, f)
    spread = float(last_logits.max() - last_logits.min())
    print(f"{name}: {sum(p.numel() for p in ref.parameters())} params, logit range {spread:.2f}, "
          f"min margin {min(margins):.4f}, greedy {tokens[:8]}...")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()
    torch.set_num_threads(4)
    for i, (name, (overrides, dtype)) in enumerate(VARIANTS.items()):
        make_variant(args.out, name, overrides, dtype, args.seed + 17 * i)


if __name__ == "__main__":
    main()
