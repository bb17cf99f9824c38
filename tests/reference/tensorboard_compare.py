"""Compares a gemmax run's TensorBoard events with its metrics.jsonl, read by TensorBoard.

    python tensorboard_compare.py --run OUT/RUN --steps N [--no-server]

Readers, all from the `tensorboard` package:
  1. EventFileLoader, file by file: every record (TensorBoard checks each CRC-32C), the
     file_version event first, then one event per step.
  2. EventAccumulator on the folder, as TensorBoard's Python loader sees the run.
  3. Unless --no-server: `tensorboard --logdir` (its Rust data server) over HTTP, the scalars
     the TensorBoard UI plots.
Each must give, for every tag in metrics.jsonl, steps 0..N-1 once each, with the value of
metrics.jsonl as a float32. Exits 1 on any difference.
"""

import argparse
import glob
import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import numpy as np
from tensorboard.backend.event_processing import event_accumulator, event_file_loader

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def expected_from_jsonl(path, steps):
    by_tag = {}
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    check([j["step"] for j in lines] == list(range(steps)),
          f"metrics.jsonl holds steps {[j['step'] for j in lines]}, expected 0..{steps - 1}")
    for j in lines:
        for tag, value in j.items():
            if tag != "step":
                by_tag.setdefault(tag, []).append((j["step"], np.float32(value)))
    return by_tag


def compare(reader, got, expected):
    """got: {tag: [(step, float value)]} from one reader."""
    check(sorted(got) == sorted(expected),
          f"{reader}: tags {sorted(got)} differ from metrics.jsonl's {sorted(expected)}")
    for tag, want in expected.items():
        have = sorted(got.get(tag, []))
        check([s for s, _ in have] == [s for s, _ in want],
              f"{reader}: {tag} has steps {[s for s, _ in have]}")
        for (s, v), (_, w) in zip(have, want):
            check(np.float32(v) == w, f"{reader}: {tag} step {s}: {v!r} vs metrics.jsonl {w!r}")


def read_files(run_dir):
    files = sorted(glob.glob(os.path.join(run_dir, "tensorboard", "events.out.tfevents.*")))
    check(len(files) == 2, f"expected 2 event files (the run and its resume), found {files}")
    got = {}
    for path in files:
        events = list(event_file_loader.EventFileLoader(path).Load())
        check(len(events) > 1 and events[0].file_version == "brain.Event:2",
              f"{path}: does not start with file_version brain.Event:2")
        for e in events[1:]:
            for v in e.summary.value:
                # The loader migrates simple_value scalars to the scalars plugin's tensor form.
                check(v.metadata.plugin_data.plugin_name == "scalars",
                      f"{path}: {v.tag} step {e.step} is not read as a scalar")
                value = v.tensor.float_val[0] if v.HasField("tensor") else v.simple_value
                got.setdefault(v.tag, []).append((e.step, value))
    print(f"EventFileLoader: {len(files)} files,",
          ", ".join(f"{os.path.basename(f)}" for f in files))
    return got


def read_accumulator(run_dir):
    acc = event_accumulator.EventAccumulator(
        os.path.join(run_dir, "tensorboard"), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def read_server(run_dir, tags):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tb = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    proc = subprocess.Popen(
        [tb, "--logdir", os.path.join(run_dir, "tensorboard"), "--port", str(port),
         "--host", "127.0.0.1", "--load_fast", "true", "--reload_interval", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?run=.&tag="
    got = {}
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                got = {}
                for tag in tags:
                    with urllib.request.urlopen(base + urllib.parse.quote(tag, safe=""),
                                                timeout=5) as r:
                        got[tag] = [(step, value) for _, step, value in json.load(r)]
                if all(got.values()):
                    break
            except OSError:
                pass
            time.sleep(1)
    finally:
        proc.terminate()
        proc.wait()
    print(f"tensorboard server (--load_fast true): {sum(len(v) for v in got.values())} points")
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True, help="base_output_directory/run_name")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--no-server", action="store_true")
    a = ap.parse_args()
    expected = expected_from_jsonl(os.path.join(a.run, "metrics.jsonl"), a.steps)
    print(f"metrics.jsonl: {a.steps} steps, {len(expected)} tags")
    compare("EventFileLoader", read_files(a.run), expected)
    compare("EventAccumulator", read_accumulator(a.run), expected)
    if not a.no_server:
        compare("tensorboard server", read_server(a.run, sorted(expected)), expected)
    readers = "EventFileLoader, EventAccumulator" + ("" if a.no_server else ", tensorboard server")
    if failures:
        print(f"tensorboard_check: FAILED ({len(failures)} differences)")
        return 1
    print(f"tensorboard_check: PASSED: {readers} agree with metrics.jsonl "
          f"({len(expected)} tags x {a.steps} steps, float32-exact)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
