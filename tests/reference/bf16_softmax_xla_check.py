"""MaxText's dot_product softmax in bf16 on JAX's CPU backend, against its written-out rounding.

docs/TRAINING.md §1.2.1 describes where XLA on the CPU rounds MaxText's `apply_attention_dot`
(both float32 attention keys false) and its autodiff backward; gemmax's
reference/attention_rounded_softmax.h builds that description. This check runs the same ops as
MaxText 0.2.5 writes them (einsum, mask to a large negative bf16 value, max, exp, sum, einsum,
division) through jax.jit on the CPU, transcribes the description in NumPy, and counts the
values that differ: output o and gradients dq, dk, dv. With --fp32_autodiff_sums the two sums
autodiff adds are taken in fp32 instead of bf16 term by term, to show that the description's
bf16 sums are what XLA computes. Not part of CI; run with a Python that has JAX (the MaxText
venv of tests/reference/maxtext_curve_check.sh):

        VENV/bin/python tests/reference/bf16_softmax_xla_check.py [--fp32_autodiff_sums]
"""

import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16
MASK = -0.7 * float(np.finfo(np.float32).max)  # MaxText's DEFAULT_MASK_VALUE
T, G, D = 64, 2, 16  # causal queries = keys, query heads of one KV head, head_dim
CHUNK = 32  # XLA reduced the 64-key rows of the max's gradient as two chunks of 32


def attention(q, k, v):  # q [1, T, 1, G, D], k and v [1, T, 1, D], all bf16
    w = jnp.einsum("btkgd,bskd->bkgts", q, k)
    w = jnp.where(jnp.tril(jnp.ones((T, T), bool)), w, jnp.asarray(MASK, w.dtype))
    local_max = jnp.max(w, axis=-1, keepdims=True)
    local_exps = jnp.exp(w - local_max)
    local_sum = jnp.sum(local_exps, axis=-1, keepdims=True)
    out = jnp.einsum("bkgts,bskd->btkgd", local_exps, v)
    return out / jnp.transpose(local_sum, (0, 3, 1, 2, 4))


def b(x):  # rounded to bf16, held in fp32
    return np.asarray(np.asarray(x, np.float32).astype(BF16), np.float32)


def bf16_sum(values):  # term by term, each addition rounded to bf16
    acc = np.float32(0)
    for x in np.asarray(values, np.float32):
        acc = b(acc + x)
    return acc


def chunked_bf16_sum(values):
    return bf16_sum([bf16_sum(values[i:i + CHUNK]) for i in range(0, len(values), CHUNK)])


def transcription(q, k, v, do, fp32_sums):
    autodiff_sum = (lambda x: b(np.sum(x, dtype=np.float32))) if fp32_sums else bf16_sum
    o, dq = np.zeros((T, G, D), np.float32), np.zeros((T, G, D), np.float32)
    dk, dv = np.zeros((T, D)), np.zeros((T, D))
    for g in range(G):
        for i in range(T):
            s = b(k[:i + 1].astype(np.float64) @ q[i, g])
            m = s.max()
            e = np.exp(b(s - m))  # fp32, not rounded
            l = b(np.sum(e, dtype=np.float32))
            p = b(e)
            u = b(p.astype(np.float64) @ v[:i + 1])
            recip = np.float32(1) / l
            o[i, g] = b(u * recip)
            du = b(do[i, g] * recip)
            r2 = b(np.float32(1) / b(l * l))
            grad_l = autodiff_sum(b(b(do[i, g] * r2) * u))
            dx = b(b(b(v[:i + 1].astype(np.float64) @ du) - grad_l) * p)
            padded = np.concatenate([-dx, np.zeros(T - i - 1, np.float32)])
            dm = autodiff_sum(padded) if fp32_sums else chunked_bf16_sum(padded)
            ds = np.where(s == m, b(dx + b(dm / np.float32((s == m).sum()))), dx)
            dq[i, g] = b(ds.astype(np.float64) @ k[:i + 1])
            dk[:i + 1] += ds[:, None] * q[i, g][None, :]
            dv[:i + 1] += p[:, None] * du[None, :]
    return o, dq, b(dk), b(dv)


def main():
    fp32_sums = "--fp32_autodiff_sums" in sys.argv[1:]
    rng = np.random.default_rng(1)
    q = jnp.asarray(rng.normal(size=(1, T, 1, G, D)) * 1.5, jnp.bfloat16)
    k = jnp.asarray(rng.normal(size=(1, T, 1, D)) * 1.5, jnp.bfloat16)
    v = jnp.asarray(rng.normal(size=(1, T, 1, D)), jnp.bfloat16)
    do = jnp.asarray(rng.normal(size=(1, T, 1, G, D)), jnp.bfloat16)

    def loss(q, k, v):
        return jnp.sum((attention(q, k, v) * do).astype(jnp.float32))

    f32 = lambda x: np.asarray(jnp.asarray(x, jnp.float32))
    jax_values = [f32(jax.jit(attention)(q, k, v))[0, :, 0]]
    jax_values += [f32(g)[0, :, 0] for g in jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)]
    ours = transcription(f32(q)[0, :, 0], f32(k)[0, :, 0], f32(v)[0, :, 0], f32(do)[0, :, 0],
                         fp32_sums)
    print(f"jax {jax.__version__}, {T} queries, {G} heads, head_dim {D}, autodiff sums in "
                f"{'fp32' if fp32_sums else 'bf16 term by term'}")
    differ = 0
    for name, mine, theirs in zip(("o", "dq", "dk", "dv"), ours, jax_values):
        n = int(np.sum(mine.reshape(-1) != theirs.reshape(-1)))
        differ += n
        print(f"  {name}: {n} of {theirs.size} values differ from JAX's")
    sys.exit(1 if differ and not fp32_sums else 0)


if __name__ == "__main__":
    main()
