"""PEFT loads what gemmax writes: a LoRA run trained by gemmax on each fixture base, exported as a
PEFT folder, loaded by PeftModel.from_pretrained on transformers' Gemma-4, gives gemmax's logits.

The other direction (gemmax reads what PEFT wrote) is checked in CI from the committed fixtures
(tests/checkpoint/peft_adapter_test.cc); this one needs PEFT itself, so it runs outside CI:

    VENV=${TMPDIR:-/tmp}/gemmax-hf-venv
    $VENV/bin/python tests/reference/peft/peft_loads_gemmax.py --gemmax build/bin/gemmax

For each of the fixtures' base, dense and small_e2b models it trains a few steps of LoRA with
gemmax (fp32, the reference backend, adapters on every linear module and, on the MoE base, the
experts), exports the run (`gemmax export`), and compares the adapted model's logits on the
fixture's tokens: gemmax's (`gemmax grad --adapter --logits`) against PEFT's. Exits non-zero on a
difference above fp32 rounding. Prints one JSON line per model.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from peft import PeftModel
from safetensors.numpy import load_file
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")


def model_keys(config):
    """The fixture model's config.json as gemmax's keys (gemmax needs the shape spelt out)."""
    c = config
    types = c["layer_types"]
    pattern = 0
    for p in range(1, len(types) + 1):
        if all((t == "full_attention") == (i % p == p - 1) for i, t in enumerate(types)):
            pattern = p
            break
    keys = {
        "vocab_size": c["vocab_size"], "base_emb_dim": c["hidden_size"],
        "base_num_decoder_layers": c["num_hidden_layers"],
        "base_num_query_heads": c["num_attention_heads"],
        "base_num_kv_heads": c["num_key_value_heads"], "head_dim": c["head_dim"],
        "global_head_dim": c["global_head_dim"], "base_mlp_dim": c["intermediate_size"],
        "sliding_window_size": c["sliding_window"],
        "share_kv_projections": str(bool(c["attention_k_eq_v"])).lower(),
        "global_num_kv_heads": c.get("num_global_key_value_heads") or c["num_key_value_heads"],
        "num_experts": c.get("num_experts") or 1,
    }
    if pattern:
        keys["sliding_window_pattern"] = pattern
    else:
        keys["layer_types"] = ",".join(types)
    if c.get("enable_moe_block"):
        keys.update(num_experts_per_tok=c["top_k_experts"], base_moe_mlp_dim=c["moe_intermediate_size"])
    if c.get("hidden_size_per_layer_input"):
        keys.update(decoder_block="gemma4_small", hidden_size_per_layer_input=c["hidden_size_per_layer_input"],
                    vocab_size_per_layer_input=c["vocab_size_per_layer_input"],
                    num_kv_shared_layers=c["num_kv_shared_layers"],
                    use_double_wide_mlp=str(bool(c["use_double_wide_mlp"])).lower())
    rope = c["rope_parameters"]
    keys["global_rope_proportion"] = rope["full_attention"].get("partial_rotary_factor", 1.0)
    return [f"{k}={v}" for k, v in keys.items()]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def check(gemmax, preset, work):
    base = os.path.join(FIXTURES, preset, "model")
    config = json.load(open(os.path.join(base, "config.json")))
    out = os.path.join(work, preset)
    keys = model_keys(config)
    targets = ["lora_target_modules=all-linear"]
    if config.get("enable_moe_block"):
        targets.append("lora_target_parameters=experts.gate_up_proj,experts.down_proj")
    run([gemmax, "train", "model_name=gemma4-tiny", *keys, "backend=reference", "dtype=float32",
         "weight_dtype=float32", "dataset_type=synthetic", "steps=6", "learning_rate=3e-2",
         "per_device_batch_size=2", "max_target_length=16", "sample_max_new_tokens=0",
         "eval_interval=-1", "load_balance_loss_weight=0", f"load_parameters_path={base}",
         "enable_lora=true", "lora_rank=4", "lora_alpha=8", *targets,
         f"base_output_directory={work}", f"run_name={preset}"])
    adapter = os.path.join(work, preset + "_peft")
    run([gemmax, "export", "--checkpoint", out, "--out", adapter])
    tokens = os.path.join(base, "tokens.bin")
    batch = json.load(open(os.path.join(base, "tokens.json")))["batch"]
    logits_file = os.path.join(work, preset + "_logits.safetensors")
    run([gemmax, "grad", "--model", base, "--adapter", adapter, "--tokens", tokens, "--batch",
         str(batch), "--out", os.path.join(work, preset + "_grads.safetensors"), "--logits",
         logits_file, "--load_balance_loss_weight", "0"])
    ours = load_file(logits_file)["logits"]
    ids = np.fromfile(tokens, dtype="<i4").reshape(batch, -1)[:, :-1]
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(model, adapter)
    with torch.no_grad():
        theirs = peft_model(torch.from_numpy(ids.astype(np.int64))).logits.float().numpy()
        with peft_model.disable_adapter():
            plain = peft_model(torch.from_numpy(ids.astype(np.int64))).logits.float().numpy()
    rel = float(np.linalg.norm(ours - theirs) / np.linalg.norm(theirs))
    moved = float(np.linalg.norm(plain - theirs) / np.linalg.norm(theirs))
    result = {"model": preset, "relative_l2": rel, "max_abs": float(np.abs(ours - theirs).max()),
              "adapter_moved_logits": moved}
    print(json.dumps(result))
    return rel < 1e-5 and moved > 1e-3  # the adapters trained: the check compares something


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gemmax", default="build/bin/gemmax")
    ap.add_argument("--presets", nargs="*", default=["base", "dense", "small_e2b"])
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        ok = all([check(os.path.abspath(a.gemmax), p, work) for p in a.presets])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
