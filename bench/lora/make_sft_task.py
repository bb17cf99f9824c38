"""Writes a small supervised fine-tuning task as TRL's prompt-completion JSONL: numbers spelt out
in English words ("Spell 347:" -> " three hundred forty-seven."), a deterministic mapping a byte-
level model learns from a few thousand pairs. bench/lora/sft_quality.sh fine-tunes the same base
on it with gemmax and with PEFT and compares their eval losses.

    python3 bench/lora/make_sft_task.py --out DIR [--train 4000] [--eval 400] [--seed 0]

Writes DIR/train.jsonl and DIR/eval.jsonl (disjoint numbers).
"""
import argparse
import json
import os
import random

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
        "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def words(n):
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else "-" + ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + words(rest))
    rest = n % 1000
    return words(n // 1000) + " thousand" + ("" if rest == 0 else " " + words(rest))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--train", type=int, default=4000)
    ap.add_argument("--eval", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    numbers = random.Random(a.seed).sample(range(1, 100000), a.train + a.eval)
    os.makedirs(a.out, exist_ok=True)
    for name, part in (("train", numbers[:a.train]), ("eval", numbers[a.train:])):
        with open(os.path.join(a.out, name + ".jsonl"), "w") as f:
            for n in part:
                f.write(json.dumps({"prompt": "Spell %d:" % n, "completion": " %s." % words(n)}) + "\n")


if __name__ == "__main__":
    main()
