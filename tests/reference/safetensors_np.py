"""Minimal safetensors reader/writer on numpy (no `safetensors` package needed).

File layout: u64 little-endian header length N, then N bytes of UTF-8 JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
then the raw little-endian tensor bytes; offsets are relative to the end of the header.
The writer pads the header with spaces to a multiple of 8 bytes, as the reference
implementation does, so the data section stays aligned.
"""
import json
import os
import struct

import numpy as np

# safetensors dtype tag -> numpy dtype of the stored bytes. BF16 is kept as raw uint16
# and widened to float32 on read (numpy has no bfloat16).
_NP = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"), "I64": np.dtype("<i8"), "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"), "I8": np.dtype("i1"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
_TAG = {np.dtype("float64"): "F64", np.dtype("float32"): "F32", np.dtype("float16"): "F16",
        np.dtype("int64"): "I64", np.dtype("int32"): "I32", np.dtype("int16"): "I16",
        np.dtype("int8"): "I8", np.dtype("uint8"): "U8", np.dtype("bool"): "BOOL"}


def bf16_to_f32(raw_u16):
    """bfloat16 bits are the top half of a float32: widen by shifting into the high 16 bits."""
    return (raw_u16.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (used only to make test files)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    return header, 8 + n


def load_file(path, names=None):
    """Returns {name: np.ndarray}; BF16 becomes float32, other dtypes keep their type."""
    header, base = read_header(path)
    out = {}
    with open(path, "rb") as f:
        for name, info in header.items():
            if name == "__metadata__" or (names is not None and name not in names):
                continue
            tag = info["dtype"]
            if tag not in _NP:
                raise ValueError("%s: unsupported safetensors dtype %s for %s" % (path, tag, name))
            begin, end = info["data_offsets"]
            f.seek(base + begin)
            buf = f.read(end - begin)
            arr = np.frombuffer(buf, dtype=_NP[tag]).reshape(info["shape"])
            if tag == "BF16":
                arr = bf16_to_f32(arr)
            out[name] = arr.copy()  # own, writable, native-endian memory
    return out


def save_file(tensors, path, metadata=None, bf16=()):
    """Writes {name: array}. Names listed in `bf16` are stored as BF16 (rounded)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        if name in bf16:
            tag, raw = "BF16", f32_to_bf16_bits(a).tobytes()
        else:
            if a.dtype not in _TAG:
                raise ValueError("cannot store dtype %s (%s)" % (a.dtype, name))
            tag = _TAG[a.dtype]
            raw = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": tag, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for raw in blobs:
            f.write(raw)


def load_folder(model_dir):
    """All tensors of a HF folder: sharded via model.safetensors.index.json, or one file."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        shards = {}
        for name, shard in weight_map.items():
            shards.setdefault(shard, set()).add(name)
        out = {}
        for shard, names in sorted(shards.items()):
            got = load_file(os.path.join(model_dir, shard), names)
            missing = names - set(got)
            if missing:
                raise ValueError("%s lacks %s listed in the index" % (shard, sorted(missing)[:3]))
            out.update(got)
        return out
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return load_file(single)
    raise FileNotFoundError("no model.safetensors or model.safetensors.index.json in " + model_dir)
