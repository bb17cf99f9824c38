#!/usr/bin/env bash
# tokenizer.json encode speed, gemmax against the `tokenizers` library (Rust, through its Python
# binding) on the same file with the same tokenizer.json, one thread each; the ids of both compared
# on the whole corpus; then `gemmax tokenize` on 1 and on every thread, whose shards must be equal.
# The tokenizer is Gemma-style: a SentencePiece BPE model (byte_fallback) trained on the corpus and
# converted by transformers' GemmaTokenizer, as Gemma's tokenizer.json was.
#   PY=/path/to/venv/bin/python bench/tokenizer_json.sh [build_dir] [corpus_mib] [vocab]
# PY needs tokenizers, transformers, sentencepiece, protobuf (default: python3).
# SP_MODEL=FILE: convert that SentencePiece model instead of training one (vocab is then its own):
# Gemma 4's, 262144 pieces, is the maxtext wheel's assets/tokenizers/tokenizer_gemma4.model.
set -euo pipefail
BUILD=${1:-build}
MIB=${2:-8}
VOCAB=${3:-16000}
PY=${PY:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${KEEP:-}" ]; then WORK=$KEEP; mkdir -p "$WORK"; else  # KEEP=DIR: leave the files there
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
fi
THREADS=$(nproc)

"$PY" - "$ROOT" "$WORK" "$MIB" "$VOCAB" "${SP_MODEL:-}" <<'PY' 2>&1 | grep -v PyTorch
import importlib.util, json, os, shutil, sys
root, work, mib, vocab, sp_model = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
spec = importlib.util.spec_from_file_location("fx", f"{root}/tests/data/fixtures/tokenizer_json/make_fixtures.py")
fx = importlib.util.module_from_spec(spec); spec.loader.exec_module(fx)
docs, size = [], 0
while size < mib << 20:  # documents of a few sentences, code and the fixtures' odd text
    d = "\n".join(fx.document(k) for k in range(len(docs) % 7, len(docs) % 7 + 12))
    for s in ("<bos>", "<eos>", "<pad>"): d = d.replace(s, "")  # a shard's document holds no eos
    docs.append(d); size += len(d.encode())
with open(f"{work}/corpus.jsonl", "w") as f:
    for d in docs: f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
import sentencepiece as spm
os.makedirs(f"{work}/tok", exist_ok=True)
if sp_model:
    shutil.copy(sp_model, f"{work}/tok/tokenizer.model")
else:
  spm.SentencePieceTrainer.train(
    sentence_iterator=iter(d.replace("\n", " ") for d in docs[: len(docs) // 2]),
    model_prefix=f"{work}/tok/tokenizer", vocab_size=vocab, model_type="bpe", byte_fallback=True,
    split_digits=True, character_coverage=0.99, pad_id=0, eos_id=1, bos_id=2, unk_id=3,
    pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>",
    user_defined_symbols=["<mask>", "<start_of_turn>", "<end_of_turn>"], add_dummy_prefix=False,
    remove_extra_whitespaces=False, normalization_rule_name="identity",
    allow_whitespace_only_pieces=True, hard_vocab_limit=False, minloglevel=2,
    input_sentence_size=200000, shuffle_input_sentence=True)
from transformers import GemmaTokenizer
from tokenizers import processors
tok = GemmaTokenizer.from_pretrained(f"{work}/tok")._tokenizer
tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
tok.save(f"{work}/tok/tokenizer.json")
json.dump({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}, open(f"{work}/tok/tokenizer_config.json", "w"))
print(f"corpus: {len(docs)} documents, {size / 2**20:.1f} MiB; vocabulary {tok.get_vocab_size()}")
PY

library() {  # threads -> tokens/s of encode_batch, best of 3; writes the ids
  RAYON_NUM_THREADS=$1 "$PY" - "$WORK" "$1" <<'PY'
import json, sys, time, array
work, threads = sys.argv[1], sys.argv[2]
from tokenizers import Tokenizer
tok = Tokenizer.from_file(f"{work}/tok/tokenizer.json")
texts = [json.loads(l)["text"] for l in open(f"{work}/corpus.jsonl")]
best = 1e9
for _ in range(3):
    t0 = time.perf_counter(); enc = tok.encode_batch(texts, add_special_tokens=False); best = min(best, time.perf_counter() - t0)
n = sum(len(e.ids) for e in enc)
if threads == "1":
    out = array.array("i")
    for e in enc: out.append(len(e.ids)); out.extend(e.ids)
    open(f"{work}/library.ids", "wb").write(out.tobytes())
print(f"tokenizers {__import__('tokenizers').__version__}, {threads} thread(s): {n} tokens, {best:.3f} s, {n / best:.0f} tokens/s")
PY
}
library 1
library "$THREADS"
"$BUILD/bin/tokenizer_json_bench" "$WORK/tok/tokenizer.json" "$WORK/corpus.jsonl" "$WORK/gemmax.ids" 3 | sed 's/^/gemmax encode, 1 thread: /'
cmp -s "$WORK/gemmax.ids" "$WORK/library.ids" && echo "ids: gemmax equals the library on every document" \
  || { echo "ids: gemmax DIFFERS from the library"; exit 1; }
"$BUILD/bin/tokenizer_json_bench" "$WORK/tok/tokenizer.model" "$WORK/corpus.jsonl" "$WORK/sp.ids" 3 | sed 's/^/sentencepiece encode, 1 thread: /'
secs() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
one=$(secs "$BUILD/bin/gemmax" tokenize --out "$WORK/one.bin" --tokenizer_path "$WORK/tok" --num_threads 1 "$WORK/corpus.jsonl")
all=$(secs "$BUILD/bin/gemmax" tokenize --out "$WORK/all.bin" --tokenizer_path "$WORK/tok" --num_threads "$THREADS" "$WORK/corpus.jsonl")
cmp -s "$WORK/one.bin" "$WORK/all.bin" && same=yes || same=NO
echo "gemmax tokenize (whole command): 1 thread ${one} s, $THREADS threads ${all} s, same shard: $same"
[ "$same" = yes ]
