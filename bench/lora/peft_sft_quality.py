"""The PyTorch + PEFT peer of a gemmax LoRA fine-tune: trains a LoRA adapter with Hugging Face
PEFT on a Gemma-4 HF folder and a tokenized dataset, with gemmax's optimizer, schedule and data
layout, and prints the held-out loss as one JSON object, to set beside gemmax's eval/avg_loss.

  VENV=${TMPDIR:-/tmp}/gemmax-hf-venv   # torch, transformers >= 5.5, peft
  $VENV/bin/python bench/lora/peft_sft_quality.py --model HF_DIR --train DATA --eval DATA \
      [--rank 16] [--alpha 32] [--targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj] \
      [--lr 1e-4] [--steps 100] [--batch 4] [--seq 512] [--completion-only] \
      [--packing sequential|none] [--eval-batches -1] [--save-adapter DIR] [--log-every 10]

DATA is either a token shard of `gemmax tokenize` (versions 1 and 2, docs/DATA.md "Token shard
format": 64-byte header `GMXTOKEN`, uint32 tokens, version 2 then one loss-mask byte per token;
several shards as a comma list), or a JSONL file with one document per line,
{"input_ids": [...], "loss_mask": [...]} (loss_mask optional: all 1; the ids are used as they
are, bos/eos included by whoever wrote them).

What it matches in gemmax (the keys are gemmax's, with their defaults):
- rows (`grain_packing_type=sequential enable_data_shuffling=false use_truncation=false`):
  documents in order, cut into pieces of --seq tokens, packed greedily into rows of --seq tokens;
  each piece gets the row's next segment and positions from 0; a piece that does not fit ends the
  row (the rest is pad, position 0, segment 0); the stream wraps to the first document at its end.
  `--packing none` (gemmax `packing=false`): one document or piece per row, padded.
  transformers separates the packed documents by their restarting position_ids (attention within
  a document, windows per document, RoPE by those positions).
- targets: inputs[c + 1] within the row; counted where the target's segment is not 0, the target
  is not the pad id and, with --completion-only (`sft_train_on_completion_only=true`), the
  target's loss-mask byte is 1. The last column and targets in padding never count; a document's
  last token predicting the next document's first one in the same row counts, as in gemmax.
- loss: the sum of cross-entropy over counted targets / (their number + 1e-8), per batch.
- AdamW (`adam_b1` 0.9, `adam_b2` 0.95, `adam_eps` 1e-8, `adam_weight_decay` 0.1 decoupled and
  scaled by the rate, on every trained tensor), global-norm clipping (`gradient_clipping_threshold`
  1.0: gradients times min(1, 1/norm)), rate at step s (from 0) as gemmax's schedule:
  linear from 0 over int(0.1 x steps) warm-up steps, then cosine from --lr to 0.1 x --lr over the
  remaining steps, landing on it at the last (`warmup_steps_fraction`,
  `cosine_learning_rate_final_fraction`).
- evaluation: the eval set once, in order, packed the same way (no wrap; the last row padded),
  --eval-batch rows a batch (default --batch), --eval-batches of them (-1: all); loss = summed
  cross-entropy of all counted targets / (their number + 1e-8) (gemmax's eval/avg_loss). The same
  counting rule as training (so --completion-only applies to both).

Not matched: the adapter's random initialisation (PEFT's: A Kaiming-uniform, B zero), and
gemmax's load-balance loss (this script trains on the cross-entropy alone; on an MoE model, run
gemmax with load_balance_loss_weight=0 to compare like with like).
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch

SHARD_MAGIC = b"GMXTOKEN"
NO_ID = 0xFFFFFFFF


# ----------------------------------------------------------------------------- data

def read_shard(path):
    """[(ids uint32 array, mask uint8 array)] per document, and the header's pad id (or None)."""
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 64 or head[:8] != SHARD_MAGIC:
            raise ValueError("%s: not a gemmax token shard" % path)
        version, dtype, n, ndocs, vocab, eos, bos, pad = struct.unpack("<IIQQIIII", head[8:48])
        if version not in (1, 2) or dtype != 1:
            raise ValueError("%s: version %d dtype %d not readable" % (path, version, dtype))
        toks = np.frombuffer(f.read(4 * n), dtype="<u4")
        mask = (np.frombuffer(f.read(n), dtype=np.uint8) if version == 2
                else np.ones(n, dtype=np.uint8))
    if len(toks) != n or len(mask) != n:
        raise ValueError("%s: truncated" % path)
    ends = np.flatnonzero(toks == eos) + 1
    if len(ends) != ndocs:
        raise ValueError("%s: %d eos tokens, header says %d documents" % (path, len(ends), ndocs))
    starts = np.concatenate([[0], ends[:-1]])
    docs = [(toks[s:e].astype(np.int64), mask[s:e]) for s, e in zip(starts, ends)]
    return docs, (None if pad == NO_ID else int(pad))


def read_jsonl(path):
    docs = []
    with open(path) as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            row = json.loads(line)
            ids = np.asarray(row["input_ids"], dtype=np.int64)
            mask = np.asarray(row.get("loss_mask", [1] * len(ids)), dtype=np.uint8)
            if len(mask) != len(ids):
                raise ValueError("%s line %d: loss_mask and input_ids differ in length"
                                 % (path, i + 1))
            if len(ids):
                docs.append((ids, mask))
    return docs


def read_data(spec):
    docs, pad = [], None
    for path in spec.split(","):
        with open(path, "rb") as f:
            magic = f.read(8)
        if magic == SHARD_MAGIC:
            d, p = read_shard(path)
            pad = p if p is not None else pad
        else:
            d = read_jsonl(path)
        docs += d
    if not docs:
        raise ValueError("%s: no documents" % spec)
    return docs, pad


def pieces(docs, seq, wrap):
    """Documents cut into pieces of at most seq tokens, in order; forever when wrap."""
    while True:
        for ids, mask in docs:
            for s in range(0, len(ids), seq):
                yield ids[s:s + seq], mask[s:s + seq]
        if not wrap:
            return


class Packer:
    """Rows of seq tokens as gemmax's sequential packing (or one piece per row)."""

    def __init__(self, docs, seq, pad_id, packing, wrap):
        self.it = pieces(docs, seq, wrap)
        self.seq, self.pad, self.packing = seq, pad_id, packing
        self.held = None
        self.done = False

    def row(self):
        S = self.seq
        ids = np.full(S, self.pad, np.int64)
        mask = np.zeros(S, np.uint8)
        seg = np.zeros(S, np.int64)
        pos = np.zeros(S, np.int64)
        at, n = 0, 0
        while True:
            p = self.held
            self.held = None
            if p is None:
                p = next(self.it, None)
                if p is None:
                    self.done = True
                    break
            k = len(p[0])
            if at + k > S or (self.packing == "none" and n > 0):
                self.held = p
                break
            n += 1
            ids[at:at + k], mask[at:at + k] = p
            seg[at:at + k], pos[at:at + k] = n, np.arange(k)
            at += k
            if at == S:
                break
        return (ids, mask, seg, pos) if n else None

    def batch(self, rows):
        out = [r for r in (self.row() for _ in range(rows)) if r is not None]
        if not out:
            return None
        while len(out) < rows:  # after the end of a one-pass set: rows of padding
            S = self.seq
            out.append((np.full(S, self.pad, np.int64), np.zeros(S, np.uint8),
                        np.zeros(S, np.int64), np.zeros(S, np.int64)))
        ids, mask, seg, pos = (torch.from_numpy(np.stack(x)) for x in zip(*out))
        return ids, mask, seg, pos


def targets_and_weights(ids, mask, seg, pad_id, completion_only):
    tgt = torch.full_like(ids, pad_id)
    tgt[:, :-1] = ids[:, 1:]
    tseg = torch.zeros_like(seg)
    tseg[:, :-1] = seg[:, 1:]
    w = (tseg != 0) & (tgt != pad_id)
    if completion_only:
        tm = torch.zeros_like(mask)
        tm[:, :-1] = mask[:, 1:]
        w &= tm != 0
    return tgt, w


# ----------------------------------------------------------------------------- training

def lr_at(step, peak, total, warmup_fraction, final_fraction):
    """gemmax's LrSchedule::at (src/gemmax/train/schedule.cc)."""
    warmup = int(warmup_fraction * total)
    if step < warmup:
        return peak * step / warmup
    if step >= total:
        return 0.0
    n = total - warmup
    a = 0.5 * (1 + math.cos(math.pi * (step - warmup) / (n - 1))) if n > 1 else 1.0
    return peak * a + final_fraction * peak * (1 - a)


def batch_loss(model, batch, pad_id, completion_only, bf16):
    ids, mask, seg, pos = batch
    tgt, w = targets_and_weights(ids, mask, seg, pad_id, completion_only)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits
    xent = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                             tgt.reshape(-1), reduction="none")
    wf = w.reshape(-1).float()
    total = (xent * wf).sum()
    return total, float(wf.sum())


def evaluate(model, docs, pad_id, a):
    packer = Packer(docs, a.seq, pad_id, a.packing, wrap=False)
    model.eval()
    tot, cnt, nb = 0.0, 0.0, 0
    with torch.no_grad():
        while a.eval_batches < 0 or nb < a.eval_batches:
            b = packer.batch(a.eval_batch or a.batch)
            if b is None:
                break
            t, c = batch_loss(model, b, pad_id, a.completion_only, a.bf16)
            tot, cnt, nb = tot + float(t), cnt + c, nb + 1
            if packer.done:
                break
    model.train()
    return tot / (cnt + 1e-8), cnt, nb


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="Gemma-4 HF folder (config.json + safetensors)")
    ap.add_argument("--train", required=True, help="token shard(s) or JSONL")
    ap.add_argument("--eval", required=True, help="token shard(s) or JSONL")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    ap.add_argument("--rslora", action="store_true")
    ap.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
                    help="PEFT target_modules (module-name suffixes), comma list")
    ap.add_argument("--target-parameters", default="",
                    help="PEFT target_parameters, e.g. experts.gate_up_proj,experts.down_proj")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--warmup-fraction", type=float, default=0.1)
    ap.add_argument("--final-fraction", type=float, default=0.1)
    ap.add_argument("--b1", type=float, default=0.9)
    ap.add_argument("--b2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0, help="global-norm clip; 0: none")
    ap.add_argument("--completion-only", action="store_true",
                    help="count only targets whose loss-mask byte is 1")
    ap.add_argument("--packing", choices=["sequential", "none"], default="sequential")
    ap.add_argument("--pad-id", type=int, default=None,
                    help="pad id (default: the shard header's, else 0)")
    ap.add_argument("--eval-batch", type=int, default=0, help="eval rows a batch (0: --batch)")
    ap.add_argument("--eval-batches", type=int, default=-1, help="-1: the whole eval set")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast over fp32 weights")
    ap.add_argument("--threads", type=int, default=0, help="0: torch's default")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=0, help="a JSON line to stderr every N steps")
    ap.add_argument("--save-adapter", default="", help="save the trained adapter here")
    ap.add_argument("--save-initial-adapter", default="",
                    help="save the adapter as PEFT initialised it, before training (so that "
                         "another engine can start from the same draw)")
    a = ap.parse_args()

    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    import peft
    import transformers
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    train_docs, pad_train = read_data(a.train)
    eval_docs, pad_eval = read_data(a.eval)
    pad_id = a.pad_id if a.pad_id is not None else (
        pad_train if pad_train is not None else (pad_eval if pad_eval is not None else 0))

    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32,
                                                 attn_implementation="sdpa")
    vocab = model.config.get_text_config().vocab_size
    top = max(int(max(d[0].max() for d in train_docs)), int(max(d[0].max() for d in eval_docs)))
    if top >= vocab:
        raise SystemExit("peft_sft_quality: token id %d >= the model's vocab_size %d"
                         % (top, vocab))
    cfg = LoraConfig(r=a.rank, lora_alpha=a.alpha, lora_dropout=0.0, use_rslora=a.rslora,
                     target_modules=[t for t in a.targets.split(",") if t],
                     target_parameters=[t for t in a.target_parameters.split(",") if t] or None,
                     task_type="CAUSAL_LM")
    pm = get_peft_model(model, cfg)
    if a.save_initial_adapter:
        pm.save_pretrained(a.save_initial_adapter)
    pm.train()
    params = [p for p in pm.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(a.b1, a.b2), eps=a.eps,
                            weight_decay=a.weight_decay)

    eval_before, _, _ = evaluate(pm, eval_docs, pad_id, a)
    packer = Packer(train_docs, a.seq, pad_id, a.packing, wrap=True)
    losses, t0 = [], time.perf_counter()
    targets_seen = 0.0
    for step in range(a.steps):
        lr = lr_at(step, a.lr, a.steps, a.warmup_fraction, a.final_fraction)
        for g in opt.param_groups:
            g["lr"] = lr
        b = packer.batch(a.batch)
        total, count = batch_loss(pm, b, pad_id, a.completion_only, a.bf16)
        loss = total / (count + 1e-8)
        loss.backward()
        norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params if p.grad is not None))
        if a.clip > 0 and float(norm) > a.clip:
            for p in params:
                if p.grad is not None:
                    p.grad.mul_(a.clip / float(norm))
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        targets_seen += count
        if a.log_every and (step % a.log_every == 0 or step == a.steps - 1):
            print(json.dumps({"step": step, "loss": losses[-1], "lr": lr,
                              "grad_norm": float(norm), "targets": count}),
                  file=sys.stderr, flush=True)
    train_s = time.perf_counter() - t0
    eval_after, eval_targets, eval_nb = evaluate(pm, eval_docs, pad_id, a)
    if a.save_adapter:
        pm.save_pretrained(a.save_adapter)

    tail = losses[-max(1, len(losses) // 10):] if losses else [float("nan")]
    print(json.dumps({
        "eval_loss": eval_after, "eval_loss_before": eval_before,
        "eval_perplexity": math.exp(min(eval_after, 700)), "eval_targets": int(eval_targets),
        "eval_batches": eval_nb, "train_loss_first": losses[0] if losses else None,
        "train_loss_last": losses[-1] if losses else None,
        "train_loss_last_10pct_mean": sum(tail) / len(tail), "steps": a.steps,
        "train_targets": int(targets_seen), "train_s": train_s,
        "tokens_per_sec": a.steps * a.batch * a.seq / train_s if train_s > 0 else None,
        "trainable_params": sum(p.numel() for p in params), "rank": a.rank, "alpha": a.alpha,
        "rslora": a.rslora, "targets": cfg.target_modules and sorted(cfg.target_modules),
        "target_parameters": sorted(cfg.target_parameters) if cfg.target_parameters else None,
        "lr": a.lr, "batch": a.batch, "seq": a.seq, "packing": a.packing,
        "completion_only": a.completion_only, "bf16": a.bf16, "pad_id": pad_id,
        "train_documents": len(train_docs), "eval_documents": len(eval_docs),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "peft": peft.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
