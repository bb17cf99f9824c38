"""Records MaxText's HF-pipeline document order with the real numpy and `datasets`.

Writes numpy.json (raw numpy draws: SeedSequence states, PCG64 outputs, Generator.integers,
shuffle, permutation), order.json (the `id` column of small Parquet and JSON Lines datasets in
the order MaxText's hf_data_processing reads them on one data-loading host; order_datasets4.json
the same under datasets 4.8.5, whose buffer differs) and packing.json
(the batches grain's PackAndBatchOperation, the HF pipeline's packing, makes of documents of
given lengths). The C++ tests (tests/data/hf_order_test.cc) compare against these files; they
need no Python.

  python3 -m venv VENV && VENV/bin/pip install datasets==5.2.0 grain==0.2.18 numpy pyarrow
  VENV/bin/python tests/data/hf_order_fixtures/make_fixtures.py
  python3 -m venv VENV4 && VENV4/bin/pip install datasets==4.8.5 numpy pyarrow
  VENV4/bin/python tests/data/hf_order_fixtures/make_fixtures.py     # order_datasets4.json only
"""
import json
import os
import sys
import tempfile

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from datasets.distributed import split_dataset_by_node

# The buffer shuffle changed in datasets 5 (a permutation of the whole buffer, half of it kept,
# where 4 swapped each row in for a drawn one); the fixtures are of these versions.
ORDER_FILES = {"5.2.0": "order.json", "4.8.5": "order_datasets4.json"}
if datasets.__version__ not in ORDER_FILES:
  sys.exit(f"datasets {datasets.__version__} installed; the fixtures are of {list(ORDER_FILES)}")
OUT = os.path.dirname(os.path.abspath(__file__))


def numpy_cases():
  out = {"numpy_version": np.__version__, "seed_sequence": [], "pcg64": [], "integers": [],
         "shuffle": [], "permutation": []}
  for entropy in [0, 1, 42, 2**32 - 1, 2**32, 12345678901234567, 2**63 - 1]:
    ss = np.random.SeedSequence(entropy)
    out["seed_sequence"].append({"entropy": str(entropy),
                                 "state32": [int(x) for x in ss.generate_state(8, np.uint32)],
                                 "state64": [str(x) for x in ss.generate_state(4, np.uint64)]})
  for seed in [0, 7, 2**40 + 3]:
    bg = np.random.PCG64(seed)
    u64 = [str(x) for x in bg.random_raw(6)]
    out["pcg64"].append({"seed": str(seed), "next_uint64": u64})
  for seed, high, sizes in [(0, 1000, [5, 1000, 3]), (3, 7, [20]), (11, 2**32, [6]),
                            (12, 2**32 - 1, [6]), (5, 2**40 + 17, [6]), (9, 1, [3]),
                            (13, 2**63 - 1, [4]), (21, 3, [1, 1, 5])]:
    rng = np.random.default_rng(seed)
    draws = [[str(x) for x in rng.integers(0, high, size=k)] for k in sizes]
    out["integers"].append({"seed": seed, "high": str(high), "draws": draws,
                            "after_uint64": str(rng.bit_generator.random_raw())})
  for seed, n in [(0, 3), (0, 10), (5, 1), (17, 100), (2, 2)]:
    rng = np.random.default_rng(seed)
    x = list(range(n))
    rng.shuffle(x)
    out["shuffle"].append({"seed": seed, "n": n, "result": x,
                           "after_uint64": str(rng.bit_generator.random_raw())})
  for seed, n in [(0, 1000), (4, 500), (8, 1), (1, 70000)]:
    rng = np.random.default_rng(seed)
    p = rng.permutation(n)
    out["permutation"].append({"seed": seed, "n": n, "head": [int(v) for v in p[:50]],
                               "sum_i_times_p": str(sum(i * int(v) for i, v in enumerate(p)))})
  return out


def write_dataset(folder, kind, counts):
  os.makedirs(folder)
  base = 0
  names = []
  for i, n in enumerate(counts):
    ids = list(range(base, base + n))
    name = f"train-{i:05d}-of-{len(counts):05d}.{kind}"
    if kind == "parquet":
      # Small row groups: the shards are the files, however many row groups each holds.
      pq.write_table(pa.table({"id": ids, "text": [f"row {j}" for j in ids]}),
                     os.path.join(folder, name), row_group_size=128)
    else:
      with open(os.path.join(folder, name), "w") as f:
        for j in ids:
          f.write(json.dumps({"id": j, "text": f"row {j}"}) + "\n")
    names.append(name)
    base += n
  return names


def maxtext_order(ds, seed, num_epoch):
  """hf_data_processing.preprocessing_pipeline's shuffle, then HFDataSource's reads on host 0 of 1
  (one thread): shard after shard of the shuffled dataset, each through split_dataset_by_node."""
  if num_epoch > 1:
    ds = datasets.concatenate_datasets([ds.shuffle(seed=seed + i) for i in range(num_epoch)])
  else:
    ds = ds.shuffle(seed=seed)
  ds = ds.select_columns(["id"]).map(lambda batch: batch, batched=True)  # as the tokenization map
  n = ds.n_shards
  ids = []
  for rank in range(n):
    ids += [int(x["id"]) for x in split_dataset_by_node(ds, world_size=n, rank=rank)]
  return ids


def order_cases(tmp):
  cases = []
  for name, kind, counts, seeds, epochs in [
      ("parquet_3x700", "parquet", [700, 700, 700], [0, 1, 42], 1),
      ("jsonl_3x700", "jsonl", [700, 700, 700], [0, 7], 1),
      ("jsonl_300", "jsonl", [300], [0, 5], 1),
      ("parquet_uneven", "parquet", [2345, 17, 1000, 999, 1501], [3, 1234567], 1),
      ("jsonl_4_files_2_epochs", "jsonl", [1200, 5, 640, 333], [9], 2),
  ]:
    folder = os.path.join(tmp, name)
    files = write_dataset(folder, kind, counts)
    ds = datasets.load_dataset(folder, split="train", streaming=True)
    assert ds.n_shards == len(counts), (name, ds.n_shards)
    for seed in seeds:
      ids = maxtext_order(ds, seed, epochs)
      assert sorted(ids) == sorted(list(range(sum(counts))) * epochs), name
      cases.append({"name": name, "files": files, "rows": counts, "seed": seed,
                    "epochs": epochs, "ids": ids})
  return cases


EOS = 1


def packing_cases():
  """MaxText's hf packing: grain.experimental.PackAndBatchOperation over `inputs` and `targets`
  (the same tokens) of max_target_length each. Document d of length n is the tokens
  1000 d + 3, 1000 d + 4, ... and EOS last. The last, partial batch is left out."""
  import grain.python as grain  # pylint: disable=import-outside-toplevel
  from grain._src.python import record  # pylint: disable=import-outside-toplevel

  out = {"grain_version": getattr(grain, "__version__", "0.2.18"), "eos": EOS, "cases": []}
  for batch, seq, num_docs, seed in [(2, 8, 12, 0), (4, 16, 60, 1), (3, 16, 50, 2)]:
    rng = np.random.default_rng(seed)
    lengths = [int(n) for n in rng.integers(1, seq + 1, size=num_docs)]

    def records():
      for d, n in enumerate(lengths):
        a = np.array([1000 * d + 3 + i for i in range(n - 1)] + [EOS], dtype=np.int32)
        yield record.Record(metadata=record.RecordMetadata(index=d, record_key=d),
                            data={"inputs": a, "targets": a})

    op = grain.experimental.PackAndBatchOperation(
        batch_size=batch, length_struct={"inputs": seq, "targets": seq})
    batches = [{"inputs": b.data[0]["inputs"].tolist(),
                "segment_ids": b.data[1]["inputs"].tolist(),
                "positions": b.data[2]["inputs"].tolist()} for b in op(records())]
    out["cases"].append({"batch": batch, "seq": seq, "lengths": lengths,
                         "batches": batches[:-1]})
  return out


def main():
  with tempfile.TemporaryDirectory() as tmp:
    order = {"datasets_version": datasets.__version__, "numpy_version": np.__version__,
             "buffer_size": 1000, "cases": order_cases(tmp)}
  files = [(ORDER_FILES[datasets.__version__], order)]
  if datasets.__version__.startswith("5."):
    files += [("numpy.json", numpy_cases()), ("packing.json", packing_cases())]
  for name, obj in files:
    with open(os.path.join(OUT, name), "w") as f:
      json.dump(obj, f, separators=(",", ":"))
      f.write("\n")
  print("wrote", OUT)


if __name__ == "__main__":
  main()
