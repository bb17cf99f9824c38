"""Helpers of maxtext_same_weights.sh, run in its virtual environment (MaxText's Python).

  model_args YML [KEY=VALUE...]
      the model of YML (maxtext_curve_check.py's gemma4_tiny.yml) as MaxText command-line keys
      under model_name=gemma4-26b (override_model_config=true: every model key is YML's), one
      a line: MaxText builds Gemma-4's partial RoPE only for a model_name starting with gemma4

  init DIR DATA SEED MAXTEXT_ARGS...      (MAXTEXT_ARGS: base.yml and keys, init_weights_seed=SEED)
      MaxText initialises the curve check's model exactly as its trainer does (its own
      train.initialize and train_utils.setup_train_loop, init_weights_seed=SEED) and this writes:
        DIR/hf/{config.json, model.safetensors}   its weights as a Hugging Face Gemma-4 folder
        DIR/tokens.bin                            8 unpacked rows of 257 tokens of the corpus
        DIR/maxtext_grads.safetensors             MaxText's d loss / d parameter on those rows,
                                                  under the HF names, in HF's units
        DIR/maxtext_loss.json                     its loss, lm loss, load-balance loss, norms
        DIR/maxtext_logits.npy                    its soft-capped logits on those rows
  init_fp32_head DIR DATA SEED MAXTEXT_ARGS...
      the same, with MaxText's tied head multiplying by the fp32 table instead of its bf16 copy
      (MaxText casts the table to bf16 there in every dtype): the attribution of the residual
  compare DIR GEMMAX_JSON GEMMAX_GRADS [LABEL]
      MaxText's loss and gradients (from init) against `gemmax grad`'s on the same rows.
  report DIR STEPS DTYPES
      the per-step table of both systems' training runs from these weights.
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np  # noqa: E402

ROWS, SEQ = 8, 256
EMBED = "token_embedder/embedding"


# ---------------------------------------------------------------- MaxText's layout -> HF's

def hf_config(cfg):
    """config.json of MaxText's model, in transformers' Gemma-4 keys (docs/MODEL.md §5)."""
    period = 6  # Gemma-4's attention pattern: 5 sliding layers, then a global one
    L = cfg.num_decoder_layers
    return {
        "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text",
        "attention_bias": False, "attention_dropout": 0.0,
        "attention_k_eq_v": bool(cfg.share_kv_projections), "bos_token_id": 2,
        "dtype": "float32", "enable_moe_block": cfg.num_experts > 1, "eos_token_id": 1,
        "final_logit_softcapping": cfg.final_logits_soft_cap,
        "global_head_dim": cfg.global_head_dim, "head_dim": cfg.head_dim,
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size": cfg.emb_dim,
        "hidden_size_per_layer_input": 0, "initializer_range": 0.02,
        "intermediate_size": cfg.mlp_dim,
        "layer_types": ["full_attention" if i % period == period - 1 else "sliding_attention"
                        for i in range(L)],
        "max_position_embeddings": 4096, "moe_intermediate_size": cfg.moe_mlp_dim,
        "num_attention_heads": cfg.num_query_heads, "num_experts": cfg.num_experts,
        "num_global_key_value_heads": cfg.global_num_kv_heads,
        "num_hidden_layers": L, "num_key_value_heads": cfg.num_kv_heads,
        "num_kv_shared_layers": 0, "pad_token_id": 0, "rms_norm_eps": cfg.normalization_layer_epsilon,
        "rope_parameters": {
            "full_attention": {"partial_rotary_factor": cfg.global_rope_proportion,
                               "rope_theta": float(cfg.global_rope_max_timescale),
                               "rope_type": "proportional"},
            "sliding_attention": {"rope_theta": float(cfg.local_rope_max_timescale),
                                  "rope_type": "default"},
        },
        "sliding_window": cfg.sliding_window_size, "tie_word_embeddings": True,
        "top_k_experts": cfg.num_experts_per_tok, "use_double_wide_mlp": False,
        "vocab_size": cfg.vocab_size, "vocab_size_per_layer_input": cfg.vocab_size,
    }


# MaxText's name under a decoder layer -> HF's name under model.layers.N. (MaxText's own
# converter, checkpoint_conversion/utils/param_mapping.py, GEMMA4_*: the same pairs.)
LAYER_NAMES = {
    "self_attention/query/kernel": "self_attn.q_proj.weight",
    "self_attention/key/kernel": "self_attn.k_proj.weight",
    "self_attention/value/kernel": "self_attn.v_proj.weight",
    "self_attention/out/kernel": "self_attn.o_proj.weight",
    "self_attention/query_norm/scale": "self_attn.q_norm.weight",
    "self_attention/key_norm/scale": "self_attn.k_norm.weight",
    "pre_self_attention_norm/scale": "input_layernorm.weight",
    "post_self_attention_norm/scale": "post_attention_layernorm.weight",
    "pre_ffw_norm/scale": "pre_feedforward_layernorm.weight",
    "post_ffw_norm/scale": "post_feedforward_layernorm.weight",
    "mlp/pre_feedforward_layernorm_2/scale": "pre_feedforward_layernorm_2.weight",
    "mlp/post_feedforward_layernorm_1/scale": "post_feedforward_layernorm_1.weight",
    "mlp/post_feedforward_layernorm_2/scale": "post_feedforward_layernorm_2.weight",
    "mlp/pre_forward_scale_2": "router.scale",
    "mlp/moe_block/MoeBlock_0/gate/kernel": "router.proj.weight",
    "mlp/moe_block/MoeBlock_0/per_expert_scale": "router.per_expert_scale",
    "mlp/moe_block/MoeBlock_0/wi_0": "experts.gate_up_proj",  # first half
    "mlp/moe_block/MoeBlock_0/wi_1": "experts.gate_up_proj",  # second half
    "mlp/moe_block/MoeBlock_0/wo": "experts.down_proj",
    "mlp/moe_block/shared_experts/wi_0/kernel": "mlp.gate_proj.weight",
    "mlp/moe_block/shared_experts/wi_1/kernel": "mlp.up_proj.weight",
    "mlp/moe_block/shared_experts/wo/kernel": "mlp.down_proj.weight",
    "layer_scalar": "layer_scalar",
}


def to_hf_layer(sub, a):
    """One layer's MaxText tensor -> HF's layout. Kernels are [in, ...out] in MaxText, [out, in]
    in HF: query [D, H, hd] -> [H*hd, D], out [H, hd, D] -> [D, H*hd]; the router [D, E] ->
    [E, D]; experts [E, D, F] (wi) -> [E, F, D], [E, F, D] (wo) -> [E, D, F]."""
    if sub == "self_attention/out/kernel":
        return a.reshape(-1, a.shape[-1]).T
    if sub.endswith("/kernel"):
        return a.reshape(a.shape[0], -1).T
    if sub.endswith(("wi_0", "wi_1", "MoeBlock_0/wo")):
        return a.transpose(0, 2, 1)
    if sub == "layer_scalar":
        return a.reshape(1)
    return a  # norm scales (Gemma-4's 1 + is folded into them), router scale, expert scales


def to_hf(params, cfg):
    """{MaxText path: array} -> {HF name: float32 array}. MaxText scans the layers in blocks of 6:
    `scanned_blocks/local_layers/*` stacks the 5 sliding layers [.., block, local, ..] and
    `scanned_blocks/global_layer/*` the global one [.., block, ..], both at param_scan_axis 1.
    Refuses anything it does not know, so that no tensor is silently dropped."""
    D = cfg.emb_dim
    out, gate_up = {}, {}
    for path, a in params.items():
        a = np.asarray(a, dtype=np.float32)
        if path == EMBED:  # MaxText holds the table times sqrt(D) (its converter divides)
            out["model.embed_tokens.weight"] = a / np.float32(math.sqrt(D))
            continue
        if path == "decoder/decoder_norm/scale":
            out["model.norm.weight"] = a
            continue
        parts = path.split("/")
        if parts[:2] != ["decoder", "scanned_blocks"] or parts[2] not in ("local_layers", "global_layer"):
            raise SystemExit(f"maxtext_same_weights: no Hugging Face name for MaxText's '{path}' "
                             f"{a.shape} (scan_layers=true with Gemma-4's 6-layer blocks expected)")
        sub = "/".join(parts[3:])
        if sub not in LAYER_NAMES:
            raise SystemExit(f"maxtext_same_weights: no Hugging Face name for MaxText's '{path}'")
        if parts[2] == "local_layers":  # [x, block, local, ...] -> [block, local, x, ...]
            a = np.moveaxis(a, (1, 2), (0, 1))
            layers = {(b * 6 + l): a[b, l] for b in range(a.shape[0]) for l in range(a.shape[1])}
        else:
            a = np.moveaxis(a, 1, 0)
            layers = {(b * 6 + 5): a[b] for b in range(a.shape[0])}
        for n, t in layers.items():
            name = f"model.layers.{n}.{LAYER_NAMES[sub]}"
            t = np.ascontiguousarray(to_hf_layer(sub, t))
            if sub.endswith(("wi_0", "wi_1")):
                gate_up.setdefault(name, {})[sub[-4:]] = t
            else:
                out[name] = t
    for name, halves in gate_up.items():  # HF fuses gate and up along the hidden axis
        out[name] = np.ascontiguousarray(np.concatenate([halves["wi_0"], halves["wi_1"]], axis=1))
    return out


# ---------------------------------------------------------------- MaxText's side

def flat_params(tree):
    import jax
    out = {}
    for path, v in jax.tree_util.tree_flatten_with_path(tree)[0]:
        keys = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
        if keys[-1] == "value":  # the nnx.Variable's attribute (not the `value` projection)
            keys.pop()
        out["/".join(keys)] = np.asarray(v)
    return out


def unpacked_rows(data_dir):
    """ROWS rows of SEQ+1 tokens: the corpus's documents, each as <bos> text <eos> (MaxText's
    add_bos, add_eos), concatenated and cut into rows; every target counts (one segment a row)."""
    import pyarrow.parquet as pq
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(data_dir, "spm.model"))
    ids = []
    for text in pq.read_table(os.path.join(data_dir, "corpus.parquet")).column("text").to_pylist():
        ids += [2] + sp.encode(text) + [1]
        if len(ids) >= ROWS * (SEQ + 1):
            break
    return np.array(ids[:ROWS * (SEQ + 1)], dtype=np.int32).reshape(ROWS, SEQ + 1)


def model_args(yml, *overrides):
    """YML's keys as MaxText command-line keys, under a Gemma-4 model_name. MaxText 0.2.5 picks
    Gemma-4's proportional RoPE for the global layers (layers/attentions.py,
    Gemma4PartialRotaryEmbedding: 1/4 of the pairs (i, i + hd/2) rotate, frequencies over the
    whole head) only when model_name starts with "gemma4"; under model_name=default it rotates
    the first hd/4 dimensions as a RoPE of their own (PartialRotaryEmbedding), another model."""
    keys = {}
    for line in open(yml):
        k, v = line.split(":", 1)
        keys[k.strip()] = json.loads(v)
    keys.pop("base_config", None)
    for o in overrides:
        k, v = o.split("=", 1)
        keys[k] = json.loads(v)
    print("model_name=gemma4-26b")
    print("override_model_config=true")
    for k, v in keys.items():
        v = "[" + ",".join(v) + "]" if isinstance(v, list) else str(v).lower() if isinstance(v, bool) else v
        print(f"{k}={v}")


def init_fp32_head(d, data_dir, seed, *maxtext_args):
    init(d, data_dir, seed, *maxtext_args, fp32_head=True)


def init(d, data_dir, seed, *maxtext_args, fp32_head=False):
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from flax.core.spmd import logical_axis_rules
    from absl import flags
    from maxtext.trainers.pre_train import train
    from maxtext.utils import train_utils

    flags.FLAGS(["maxtext_same_weights"])  # grain reads absl flags
    if fp32_head:
        # MaxText's tied head always multiplies by the table cast to bf16
        # (layers/embeddings.py, attend_on_embedding), in an fp32 run too. For attribution only:
        # the same product with the fp32 table, as gemmax computes it.
        from maxtext.layers import nnx_decoders

        def attend_fp32(query, table, attend_dtype, config, out_sharding=None):
            return jnp.dot(query, jnp.asarray(table).T, preferred_element_type=attend_dtype)
        nnx_decoders.attend_on_embedding = attend_fp32
    argv = ["train.py", *maxtext_args]  # init_weights_seed=SEED among them
    config, recorder = train.initialize(argv)
    setup = train_utils.setup_train_loop(config, recorder)
    mesh, state = setup[4], setup[-1]
    model = state.model
    params = flat_params(nnx.state(model, nnx.Param))
    param_norm = math.sqrt(sum(float(np.sum(a.astype(np.float64) ** 2)) for a in params.values()))

    hf = to_hf(params, config)
    os.makedirs(os.path.join(d, "hf"), exist_ok=True)
    safetensors_np.save_file(hf, os.path.join(d, "hf", "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "hf", "config.json"), "w") as f:
        json.dump(hf_config(config), f, indent=2)
    print(f"MaxText's initial weights (seed {seed}, param_norm {param_norm:.6f}) -> "
          f"{os.path.join(d, 'hf')}: {len(hf)} tensors")

    # MaxText's loss and gradients on unpacked rows, by its own loss_fn (train.py's train_step
    # differentiates the same function).
    rows = unpacked_rows(data_dir)
    rows.astype("<i4").tofile(os.path.join(d, "tokens.bin"))
    pos = np.broadcast_to(np.arange(SEQ, dtype=np.int32), (ROWS, SEQ))
    ones = np.ones((ROWS, SEQ), np.int32)
    batch = {"inputs": rows[:, :-1], "targets": rows[:, 1:], "inputs_position": pos,
             "targets_position": pos, "inputs_segmentation": ones, "targets_segmentation": ones}
    graphdef, p, rest = nnx.split(model, nnx.Param, ...)

    def loss(p, batch):
        m = nnx.merge(graphdef, p, rest, copy=True)
        total, aux = train.loss_fn(m, config, dict(batch), None, None, is_train=True)
        return total, (aux["xent_sum"] / aux["total_weights"], aux["moe_lb_loss"])

    with jax.set_mesh(mesh), logical_axis_rules(config.logical_axis_rules):
        (total, (lm, lb)), g = jax.jit(jax.value_and_grad(loss, has_aux=True))(
            p, {k: jnp.asarray(v) for k, v in batch.items()})
    grads = flat_params(g)
    raw_norm = math.sqrt(sum(float(np.sum(a.astype(np.float64) ** 2)) for a in grads.values()))
    # In HF's units the table is sqrt(D) smaller, so its gradient is sqrt(D) larger: times D
    # here, since to_hf divides the table by sqrt(D).
    grads[EMBED] = grads[EMBED] * np.float32(config.emb_dim)
    safetensors_np.save_file(to_hf(grads, config), os.path.join(d, "maxtext_grads.safetensors"))

    def forward(p, batch):  # the soft-capped logits, as loss_fn gets them
        m = nnx.merge(graphdef, p, rest, copy=True)
        return m(decoder_input_tokens=batch["inputs"], decoder_positions=batch["inputs_position"],
                 decoder_segment_ids=batch["inputs_segmentation"], enable_dropout=False,
                 decoder_target_tokens=batch["targets"], decoder_target_mask=batch["targets_segmentation"])

    with jax.set_mesh(mesh), logical_axis_rules(config.logical_axis_rules):
        logits = jax.jit(forward)(p, {k: jnp.asarray(v) for k, v in batch.items()})
    np.save(os.path.join(d, "maxtext_logits.npy"), np.asarray(logits, dtype=np.float32))
    res = {"total_loss": float(total), "ce_loss": float(lm), "lb_loss": float(lb),
           "raw_grad_norm": raw_norm, "param_norm": param_norm, "seed": int(seed),
           "dtype": config.dtype.name if hasattr(config.dtype, "name") else str(config.dtype)}
    with open(os.path.join(d, "maxtext_loss.json"), "w") as f:
        json.dump(res, f)
    print("MaxText on the unpacked rows:", json.dumps(res))


# ---------------------------------------------------------------- comparisons

def kind(name):
    """The parameter kind of an HF name: model.layers.3.self_attn.q_proj.weight -> q_proj."""
    parts = name.split(".")
    if parts[1] != "layers":
        return parts[1]
    rest = parts[3:-1] if parts[-1] == "weight" else parts[3:]
    leaf = rest[-1]
    return f"router.{leaf}" if rest[0] == "router" and leaf in ("proj", "scale") else leaf


def compare(d, gemmax_json, gemmax_grads, label="gemmax"):
    mt = json.load(open(os.path.join(d, "maxtext_loss.json")))
    gx = json.loads(open(gemmax_json).read().strip().splitlines()[-1])
    print(f"{label} against MaxText on the same weights and rows (relative difference):")
    for key in ("total_loss", "ce_loss", "lb_loss"):
        a, b = gx[key], mt[key]
        print(f"  {key:10} gemmax {a:.9g}  MaxText {b:.9g}  {a / b - 1:+.3e}  (ratio {a / b:.6f})")
    logits_mt = os.path.join(d, "maxtext_logits.npy")
    logits_gx = gemmax_grads.replace(".safetensors", "_logits.safetensors")
    if os.path.exists(logits_mt) and os.path.exists(logits_gx):
        a = safetensors_np.load_file(logits_gx)["logits"].astype(np.float64)
        b = np.load(logits_mt).astype(np.float64)
        scale = np.abs(b).max()
        quarters = [np.abs(a - b)[:, q * SEQ // 4:(q + 1) * SEQ // 4].max() / scale for q in range(4)]
        print(f"  logits: max |gemmax - MaxText| / max |MaxText| {np.abs(a - b).max() / scale:.3e}; "
              f"by position quarter " + " ".join(f"{x:.2e}" for x in quarters))
    g = safetensors_np.load_file(gemmax_grads)
    m = safetensors_np.load_file(os.path.join(d, "maxtext_grads.safetensors"))
    if set(g) != set(m):
        print(f"  names differ: only gemmax {sorted(set(g) - set(m))[:5]}, "
              f"only MaxText {sorted(set(m) - set(g))[:5]}")
    whole = math.sqrt(sum(float(np.sum(m[n].astype(np.float64) ** 2)) for n in m))
    per_kind = {}
    for n in sorted(set(g) & set(m)):
        a, b = g[n].astype(np.float64), m[n].astype(np.float64)
        if a.shape != b.shape:
            print(f"  {n}: shape {a.shape} against {b.shape}")
            continue
        k = per_kind.setdefault(kind(n), [0.0, 0.0, 0.0])
        k[0] += float(np.sum((a - b) ** 2))
        k[1] += float(np.sum(b ** 2))
        k[2] += float(np.sum(a ** 2))
    print(f"  gradient by parameter kind: ||gemmax - MaxText|| / ||MaxText||, norms "
          f"(MaxText's whole raw gradient norm {whole:.6g}, in HF's units)")
    worst = 0.0
    for k, (diff, ref, mine) in sorted(per_kind.items()):
        rel = math.sqrt(diff) / max(math.sqrt(ref), 1e-30)
        worst = max(worst, rel if math.sqrt(ref) > 1e-4 * whole else 0.0)
        print(f"    {k:30} {rel:10.3e}   gemmax {math.sqrt(mine):11.5g}   MaxText {math.sqrt(ref):11.5g}")
    print(f"  largest relative difference (kinds above 1e-4 of the whole norm): {worst:.3e}")


def read_metrics(path):
    rows = {}
    if os.path.exists(path):
        for line in open(path):
            r = json.loads(line)
            rows[int(r["step"])] = r
    return rows


def report(d, steps, dtypes):
    """Per step: loss, lm loss, load-balance loss, raw gradient norm of both systems."""
    keys = [("loss", "learning/loss"), ("lm_loss", "learning/lm_loss"),
            ("lb_loss", "learning/moe_lb_loss"), ("raw_grad_norm", "learning/raw_grad_norm")]
    for dtype in dtypes.split():
        g = read_metrics(os.path.join(d, f"gemmax_{dtype}", "metrics.jsonl"))
        m = read_metrics(os.path.join(d, f"maxtext_{dtype}", "metrics.txt"))
        print(f"{dtype}, from the same weights on the same rows; rel = gemmax / MaxText - 1")
        print("| step | " + " | ".join(f"{n} gemmax | {n} MaxText | rel" for n, _ in keys) + " |")
        print("|---:|" + "---:|" * (3 * len(keys)))
        for s in range(int(steps)):
            if s not in g or s not in m:
                print(f"| {s} | missing: {'gemmax' if s not in g else 'MaxText'} |")
                continue
            cells = []
            for n, k in keys:
                a, b = float(g[s][k]), float(m[s][k])
                cells.append(f"{a:.7g} | {b:.7g} | {a / b - 1:+.2e}" if b else f"{a:.7g} | {b:.7g} | -")
            print(f"| {s} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"model_args": lambda: model_args(*args), "init": lambda: init(*args),
     "init_fp32_head": lambda: init_fp32_head(*args), "compare": lambda: compare(*args),
     "report": lambda: report(*args)}[cmd]()
