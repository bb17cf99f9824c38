"""Helpers of maxtext_curve_check.sh, run in its virtual environment (MaxText's Python).

  corpus OUT.jsonl           English text from the docstrings of Python's standard library
  prepare DIR CORPUS VOCAB   DIR/corpus.parquet (MaxText's grain input), DIR/spm.model (a
                             SentencePiece BPE model both systems tokenize with)
  maxtext_config DIR VOCAB   DIR/gemma4_tiny.yml: gemmax's gemma4-tiny as a MaxText model
  report DIR STEPS SEEDS DTYPES WINDOWS [GEMMAX_RUNS [MAXTEXT_RUNS]]   the table: mean loss
                             per window, gaps (runs GEMMAX_RUNS_<dtype>_s<seed>, default gemmax,
                             and MAXTEXT_RUNS_<dtype>_s<seed>, default maxtext)
  rows DIR SEED BATCHES GEMMAX_BATCHES.jsonl   MaxText's first BATCHES packed batches (its own
                             grain pipeline functions) against `gemmax info --batches`: equal rows?
"""
import importlib
import json
import warnings
import os
import pkgutil
import sys
import sysconfig


def corpus(out):
    """One document per docstring of the standard library's modules, their classes and methods."""
    warnings.simplefilter("ignore")
    seen, docs = set(), []
    skip = ("antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "test", "lib2to3",
            "ensurepip", "venv", "pydoc_data", "site-packages")
    stdlib = sysconfig.get_paths()["stdlib"]
    names = sorted(m.name for m in pkgutil.walk_packages([stdlib], onerror=lambda _: None)
                   if not any(p.startswith(("_", "test")) or p in skip for p in m.name.split(".")))
    for mod in names:
        try:
            m = importlib.import_module(mod)
        except BaseException:  # a module that cannot be imported here is skipped
            continue
        objs = [m]
        for a in sorted(dir(m)):
            o = getattr(m, a, None)
            objs.append(o)
            if isinstance(o, type):  # and the methods of its classes
                objs += [getattr(o, b, None) for b in sorted(vars(o))]
        for obj in objs:
            doc = getattr(obj, "__doc__", None)
            if isinstance(doc, str) and len(doc) > 100 and doc not in seen:
                seen.add(doc)
                docs.append(doc.strip())
    with open(out, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    print(f"corpus: {len(docs)} documents, {sum(map(len, docs)) / 1e6:.1f} M characters -> {out}")


def prepare(d, corpus_path, vocab):
    import pyarrow as pa
    import pyarrow.parquet as pq
    import sentencepiece as spm

    texts = [json.loads(line)["text"] for line in open(corpus_path, encoding="utf-8") if line.strip()]
    pq.write_table(pa.table({"text": texts}), os.path.join(d, "corpus.parquet"))
    with open(os.path.join(d, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(t.replace("\n", " ") for t in texts))
    # gemmax's and Gemma's special ids: pad 0, eos 1, bos 2.
    spm.SentencePieceTrainer.train(
        input=os.path.join(d, "corpus.txt"), model_prefix=os.path.join(d, "spm"), vocab_size=vocab,
        model_type="bpe", pad_id=0, eos_id=1, bos_id=2, unk_id=3, byte_fallback=True,
        character_coverage=1.0, num_threads=2, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(d, "spm.model"))
    chars = sum(map(len, texts))
    tokens = sum(len(x) for x in sp.encode(texts))
    print(f"tokenizer: SentencePiece BPE, {vocab} pieces, {chars / tokens:.2f} characters a token")


def maxtext_config(d, vocab):
    """gemmax's gemma4-tiny preset (configs/models/gemma4-tiny.yml) in MaxText's keys."""
    keys = {
        "base_config": "base.yml", "decoder_block": "gemma4",
        "base_num_decoder_layers": 6, "base_emb_dim": 128, "base_num_query_heads": 4,
        "base_num_kv_heads": 2, "base_mlp_dim": 256, "base_moe_mlp_dim": 64, "head_dim": 32,
        "global_head_dim": 64, "global_num_kv_heads": 1, "vocab_size": vocab,
        "mlp_activations": ["gelu", "linear"], "normalization_layer_epsilon": 1e-6,
        "logits_via_embedding": True, "sliding_window_size": 64, "use_post_attn_norm": True,
        "use_post_ffw_norm": True, "share_kv_projections": True,
        "local_rope_max_timescale": 10000, "global_rope_max_timescale": 1000000,
        "rope_max_timescale": 1000000, "global_rope_proportion": 0.25,
        "local_rope_proportion": 1.0, "v_norm_with_scale": False, "final_logits_soft_cap": 30.0,
        "num_experts": 8, "num_experts_per_tok": 2, "shared_experts": 1, "norm_topk_prob": True,
        "load_balance_loss_weight": 0.001,
    }
    with open(os.path.join(d, "gemma4_tiny.yml"), "w") as f:
        for k, v in keys.items():
            f.write(f"{k}: {json.dumps(v)}\n")


def read_curve(path, key):
    curve = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            curve[int(r["step"])] = float(r[key])
    return curve


def report(d, steps, seeds, dtypes, windows, gemmax_runs="gemmax", maxtext_runs="maxtext"):
    wins = [tuple(int(x) for x in w.split(":")) for w in windows.split()]
    seeds, dtypes = seeds.split(), dtypes.split()
    systems = {"maxtext": maxtext_runs + "_{dtype}_s{seed}/metrics.txt",
               "gemmax": gemmax_runs + "_{dtype}_s{seed}/metrics.jsonl"}
    means = {}  # (system, dtype, window) -> mean over seeds of the window's mean loss
    for system, pattern in systems.items():
        for dtype in dtypes:
            for a, b in wins:
                vals = []
                for seed in seeds:
                    path = os.path.join(d, pattern.format(dtype=dtype, seed=seed))
                    if not os.path.exists(path):
                        continue
                    c = read_curve(path, "learning/loss")
                    v = [c[s] for s in range(a, b) if s in c]
                    if len(v) == b - a:
                        vals.append(sum(v) / len(v))
                if len(vals) == len(seeds):
                    means[system, dtype, (a, b)] = sum(vals) / len(vals)
    print(f"mean loss over steps [a, b), mean of seeds {' '.join(seeds)}; {steps} steps")
    print(f"{'dtype':9} {'window':>10} {'MaxText':>9} {'gemmax':>9} {'gemmax/MaxText':>15}")
    for dtype in dtypes:
        for w in wins:
            m, g = means.get(("maxtext", dtype, w)), means.get(("gemmax", dtype, w))
            fmt = lambda x: f"{x:9.4f}" if x is not None else f"{'-':>9}"
            rel = f"{100 * (g / m - 1):+14.2f}%" if m and g else f"{'-':>15}"
            print(f"{dtype:9} {f'[{w[0]},{w[1]})':>10} {fmt(m)} {fmt(g)} {rel}")
    if "float32" in dtypes and "bfloat16" in dtypes:
        print("bf16 gap: bf16 / fp32 - 1")
        print(f"{'window':>10} {'MaxText':>9} {'gemmax':>9}")
        for w in wins:
            row = []
            for system in systems:
                f, h = means.get((system, "float32", w)), means.get((system, "bfloat16", w))
                row.append(f"{100 * (h / f - 1):8.2f}%" if f and h else f"{'-':>9}")
            print(f"{f'[{w[0]},{w[1]})':>10} {row[0]} {row[1]}")


def rows(d, seed, batches, gemmax_jsonl):
    """MaxText's grain pipeline, built by MaxText's own functions with the curve check's settings,
    beside gemmax's batches. grain shuffles the rows of each packed batch with numpy's generator
    (shuffle_bins); gemmax keeps them in packing order, so each batch's rows are compared as a set
    and the order is reported apart."""
    from types import SimpleNamespace
    import numpy as np
    from maxtext.input_pipeline import grain_data_processing as gdp

    config = SimpleNamespace(
        grain_file_type="parquet", use_truncation=True, max_target_length=256, packing=True,
        max_segments_per_seq=-1, grain_packing_type="first_fit", grain_use_elastic_iterator=False,
        add_bos=True, add_eos=True, tokenizer_path=os.path.join(d, "spm.model"),
        tokenizer_type="sentencepiece", hf_access_token=None, elastic_enabled=False,
        global_batch_size_to_load=8, expansion_factor_real_data=-1, grain_ram_budget_mb=1024)
    ds = gdp.get_datasets(os.path.join(d, "corpus.parquet"), "parquet", True, int(seed), 100, 100,
                          0, 1, 1, 16, 500, 1)
    ds = gdp.pretrain_preprocessing_pipeline(ds, config, ["text"], True, 0, 1)
    it = iter(ds)
    ours = [json.loads(line) for line in open(gemmax_jsonl)]
    same_sets = same_order = 0
    for step in range(int(batches)):
        m = next(it)
        theirs = [(tuple(m["inputs"][r]), tuple(m["inputs_segmentation"][r]),
                   tuple(m["inputs_position"][r])) for r in range(m["inputs"].shape[0])]
        mine = [(tuple(r["inputs"]), tuple(r["segment_ids"]), tuple(r["positions"]))
                for r in ours[step]["rows"]]
        same_sets += sorted(theirs) == sorted(mine)
        same_order += theirs == mine
        if sorted(theirs) != sorted(mine) and step < 3:
            print(f"batch {step}: rows differ; MaxText's first row starts {theirs[0][0][:12]}, "
                  f"gemmax's {mine[0][0][:12]}")
    print(f"seed {seed}: {same_sets} of {batches} batches hold the same rows in both systems "
          f"({same_order} also in the same order)")
    return 0 if same_sets == int(batches) else 1


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"corpus": lambda: corpus(*args), "prepare": lambda: prepare(args[0], args[1], int(args[2])),
     "maxtext_config": lambda: maxtext_config(args[0], int(args[1])),
     "report": lambda: report(*args), "rows": lambda: sys.exit(rows(*args))}[cmd]()
