#!/usr/bin/env python3
"""tokenizer.json pipelines against the `tokenizers` library, outside CI: 71 variants (Split in every
behavior, inverted or not, over six regex and string patterns; Metaspace in every prepend scheme,
split or not; BPE without byte fallback, without an unknown token, with a word suffix and subword
prefix, with ignore_merges and byte fallback; a normalizer regex that matches empty strings;
added tokens with every flag), each trained on 4000 short random texts and then encoding them:
gemmax's ids (bench/tokenizer_json.cc) must equal the library's for every text.
  VENV/bin/python bench/tokenizer_json_variants.py build/bin/tokenizer_json_bench
Needs tokenizers in the Python that runs it. Prints one line a variant; exits 1 on any difference.
"""
import array, json, os, random, subprocess, sys, tempfile
from tokenizers import Tokenizer, Regex, AddedToken, normalizers as N, pre_tokenizers as P, decoders as D
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer
BENCH = sys.argv[1]
WORK = tempfile.mkdtemp()
FAILED = []
rng = random.Random(7)
FR = ["a", "b", "ab", " ", "  ", "<a>", "<a><b>", "<", ">", "x", "xx", "\n", "\t", "é", "e\u0301", "ﬁ", "1", "12", "٣", "_", "▁", "😀", "cat", "Cat", "\u3000", "\u00a0", ".", "!?", "##", "</w>", "日本"]
texts = ["".join(rng.choice(FR) for _ in range(rng.randint(0, 14))) for _ in range(4000)]
train = texts * 2
def variant(name, model_kw, normalizer, pre, decoder, added, specials, trainer_kw={}, bytes_=False):
    tok = Tokenizer(BPE(**model_kw))
    if normalizer: tok.normalizer = normalizer
    if pre: tok.pre_tokenizer = pre
    if decoder: tok.decoder = decoder
    tr = BpeTrainer(vocab_size=300, special_tokens=specials, show_progress=False, **trainer_kw)
    tok.train_from_iterator(train, tr)
    tok.add_tokens(added)
    j = json.loads(tok.to_str())
    if bytes_:
        v = j["model"]["vocab"]
        for b in range(256): v.setdefault(f"<0x{b:02X}>", len(v))
        n = len(v)
        for t in j["added_tokens"]:
            if t["content"] not in v: t["id"] = n; n += 1
    for k, val in model_kw.items():
        if k in ("unk_token",) and val is None: j["model"]["unk_token"] = None
    d = f"{WORK}/{name}"; os.makedirs(d, exist_ok=True)
    json.dump(j, open(f"{d}/tokenizer.json", "w"), ensure_ascii=False)
    json.dump({"eos_token": specials[0] if specials else None}, open(f"{d}/tokenizer_config.json", "w"))
    tok = Tokenizer.from_file(f"{d}/tokenizer.json")
    out = array.array("i"); dec = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        out.append(len(ids)); out.extend(ids)
        dec.append(tok.decode(ids, skip_special_tokens=True))
    open(f"{d}/lib.ids", "wb").write(out.tobytes())
    with open(f"{d}/corpus.jsonl", "w") as f:
        for t in texts: f.write(json.dumps({"text": t}) + "\n")
    r = subprocess.run([BENCH, f"{d}/tokenizer.json", f"{d}/corpus.jsonl", f"{d}/gx.ids", "1"], capture_output=True, text=True)
    if r.returncode: print(name, "ERROR", r.stderr); FAILED.append(name); return
    a = open(f"{d}/gx.ids", "rb").read(); b = open(f"{d}/lib.ids", "rb").read()
    if a == b: print(name, "ids equal"); return
    ga = array.array("i"); ga.frombytes(a); la = array.array("i"); la.frombytes(b)
    gi = li = 0; shown = 0; FAILED.append(name)
    for t in texts:
        ng = ga[gi]; nl = la[li]
        g = list(ga[gi+1:gi+1+ng]); l = list(la[li+1:li+1+nl]); gi += 1+ng; li += 1+nl
        if g != l and shown < 4:
            shown += 1; print(name, "DIFF", repr(t), "\n   lib", l, [tok.id_to_token(i) for i in l], "\n   gx ", g, [tok.id_to_token(i) for i in g])
specials = ["<eos>", "<bos>"]
added = [AddedToken("<a>", lstrip=True), AddedToken("<a><b>", rstrip=True, normalized=False), AddedToken("cat", single_word=True), AddedToken("Cat", single_word=True, normalized=False, lstrip=True, rstrip=True), AddedToken("<", special=True, normalized=False)]
for beh in ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]:
    for inv in [False, True]:
        for k, pat in enumerate([Regex(r"x*"), Regex(r"\s+|\p{N}"), " ", Regex(r"(?=a)|b"), Regex(r"\w+|\b"), Regex(r"[^\w\s]+")]):
            variant(f"split_{beh}_{'inverted' if inv else 'plain'}_pattern{k}", dict(unk_token="<eos>", fuse_unk=True), N.NFKC(), P.Split(pat, beh, invert=inv), D.Fuse(), added, specials)
for scheme in ["always", "first", "never"]:
    for split in [True, False]:
        variant(f"meta_{scheme}_{split}", dict(unk_token="<eos>"), N.Sequence([N.NFC(), N.Prepend("▁")]) if split else None,
                P.Metaspace(prepend_scheme=scheme, split=split), D.Metaspace(prepend_scheme=scheme), added, specials)
variant("bpe_nofuse_nobytes", dict(unk_token="<eos>", fuse_unk=False), N.Replace(Regex(r"\s+"), "_"), None, D.Sequence([D.Strip(content="_", left=2, right=0)]), added, specials)
variant("bpe_unk_none", dict(unk_token=None), None, P.Split(Regex(r"\w+"), "isolated"), None, added, specials)
variant("bpe_suffix", dict(unk_token="<eos>", end_of_word_suffix="</w>", continuing_subword_prefix="##"), None, P.Split(" ", "removed"), D.Replace(Regex("##|</w>"), ""), added, specials, dict(end_of_word_suffix="</w>", continuing_subword_prefix="##"))
variant("bpe_ignore_merges_bytes", dict(unk_token="<eos>", byte_fallback=True, ignore_merges=True), N.Sequence([N.NFKC(), N.Replace(" ", "▁")]), None, D.Sequence([D.Replace("▁", " "), D.ByteFallback(), D.Fuse()]), added, specials, bytes_=True)
variant("norm_empty_regex", dict(unk_token="<eos>"), N.Replace(Regex(r"a*"), "-"), None, None, added, specials)
print(f"{len(FAILED)} variant(s) differ from the library" if FAILED else "every variant equals the library")
sys.exit(1 if FAILED else 0)
