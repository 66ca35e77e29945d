#!/usr/bin/env python3
"""Probe: does fine-tuning the guard model's own layers separate harmful prompts from benign but
edgy ones better than the frozen hidden states the shipped head reads?

The frozen model runs up to layer LAYER once, in Rust (safety/examples/dump_layer_states.rs).
Here, the next K layers of the same GGUF file run on those states with rank-R LoRA adapters on
all seven projections, and a head (standardize, 256 GELU units, one logit) reads the mean over
the message's tokens and the last token's state, before and after the K layers. Adapters and
head train together on train.jsonl (binary safe/unsafe, safe examples weighted 1.5 as the
shipped head's are); every epoch reports dev recall at the 8%-false-positive threshold (the
shipped head's rule) and dev false positives at 95% recall. K = 0 trains the head alone on the
frozen states: the baseline.

Nothing here ships: it is an experiment, kept so its numbers can be rerun.

setup (a scratch directory; nothing of this is a project dependency):
  pip install --target /tmp/probe-py jax jaxlib gguf numpy
  cargo build --release -p kostant-safety --example dump_layer_states
  D=target/release/examples/dump_layer_states; M=models/SmolLM2-135M-Instruct.Q4_1.gguf
  $D $M assets/safety/train.jsonl 16 /tmp/probe/train16
  $D $M assets/safety/dev.jsonl 16 /tmp/probe/dev16
run:
  PYTHONPATH=/tmp/probe-py python3 scripts/safety-probes/lora_probe.py /tmp/probe 16 K RANK EPOCHS
"""
import sys
import time

import numpy as np

if len(sys.argv) != 6:
    sys.exit(__doc__)
import jax
import jax.numpy as jnp
import gguf
from gguf.quants import dequantize

DIR, LAYER, K, RANK, EPOCHS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
LR_HEAD, LR_LORA, SAFE_WEIGHT, SEED = 1e-3, 1e-3, 1.5, 7

reader = gguf.GGUFReader(MODEL)
FIELDS = {k: v.parts[v.data[0]][0] for k, v in reader.fields.items() if k.startswith("llama.")}
E = int(FIELDS["llama.embedding_length"])
N_HEAD, N_KV = int(FIELDS["llama.attention.head_count"]), int(FIELDS["llama.attention.head_count_kv"])
HD, EPS, THETA = E // N_HEAD, float(FIELDS["llama.attention.layer_norm_rms_epsilon"]), float(FIELDS["llama.rope.freq_base"])
TENSORS = {t.name: t for t in reader.tensors}
LINEAR = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


def weight(name):
    t = TENSORS[name]
    shape = tuple(int(x) for x in t.shape[::-1])  # GGUF lists the row length first
    return jnp.asarray(dequantize(t.data, t.tensor_type).reshape(shape), jnp.float32)


BASE = [{k: weight(f"blk.{LAYER + i}.{k}.weight") for k in LINEAR + ["attn_norm", "ffn_norm"]} for i in range(K)]


def load(name):
    meta = [line.rstrip("\n").split("\t") for line in open(f"{DIR}/{name}.meta")]
    raw = np.fromfile(f"{DIR}/{name}.f16", dtype=np.float16)
    states, off = [], 0
    for m in meta:
        n = int(m[1])
        states.append(raw[off:off + n * E].reshape(n, E))
        off += n * E
    assert off == raw.size, "meta and states disagree"
    return states, [int(m[2]) for m in meta], np.array([m[3] == "unsafe" for m in meta])


def rms_norm(x, w):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + EPS) * w


def rope(x, cos, sin):
    # Adjacent pairs, as the engine rotates Llama-layout files.
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :, None], sin[None, :, None]
    return jnp.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).reshape(x.shape)


def linear(base, lora, name, x):
    y = x @ base[name].T
    if lora is not None:
        a, b = lora[name]
        y = y + (x @ a.T) @ b.T
    return y


def block(base, lora, x, cos, sin):
    n_batch, n, _ = x.shape
    h = rms_norm(x, base["attn_norm"])
    q = rope(linear(base, lora, "attn_q", h).reshape(n_batch, n, N_HEAD, HD), cos, sin)
    k = rope(linear(base, lora, "attn_k", h).reshape(n_batch, n, N_KV, HD), cos, sin)
    v = linear(base, lora, "attn_v", h).reshape(n_batch, n, N_KV, HD)
    k, v = jnp.repeat(k, N_HEAD // N_KV, 2), jnp.repeat(v, N_HEAD // N_KV, 2)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(HD)
    scores = jnp.where(np.tril(np.ones((n, n), bool))[None, None], scores, -1e30)
    attended = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, -1), v).reshape(n_batch, n, E)
    x = x + linear(base, lora, "attn_output", attended)
    h = rms_norm(x, base["ffn_norm"])
    gated = jax.nn.silu(linear(base, lora, "ffn_gate", h)) * linear(base, lora, "ffn_up", h)
    return x + linear(base, lora, "ffn_down", gated)


def pool(x, mask, last):
    mean = (x * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    return jnp.concatenate([mean, jnp.take_along_axis(x, last[:, None, None], 1)[:, 0]], -1)


def features(params, x, mask, last, cos, sin):
    out = [pool(x, mask, last)]
    for i in range(K):
        x = block(BASE[i], params["lora"][i], x, cos, sin)
    if K:
        out.append(pool(x, mask, last))
    return jnp.concatenate(out, -1)


def logit(params, stats, x, mask, last, cos, sin):
    f = (features(params, x, mask, last, cos, sin) - stats[0]) / stats[1]
    return (jax.nn.gelu(f @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"])[:, 0]


def loss(params, stats, x, mask, last, y, cos, sin):
    z = logit(params, stats, x, mask, last, cos, sin)
    weight_ = jnp.where(y > 0, 1.0, SAFE_WEIGHT)
    return jnp.mean(weight_ * (jax.nn.softplus(z) - y * z)) + 1e-4 * (jnp.sum(params["w1"] ** 2) + jnp.sum(params["w2"] ** 2))


def init(rng):
    d = 2 * E * (2 if K else 1)
    lora = [{n: (jnp.asarray(rng.normal(0, 1 / np.sqrt(BASE[i][n].shape[1]), (RANK, BASE[i][n].shape[1])), jnp.float32),
                 jnp.zeros((BASE[i][n].shape[0], RANK))) for n in LINEAR} for i in range(K)]
    return {"w1": jnp.asarray(rng.normal(0, 1 / np.sqrt(d), (d, 256)), jnp.float32), "b1": jnp.zeros(256),
            "w2": jnp.asarray(rng.normal(0, 1 / 16, (256, 1)), jnp.float32), "b2": jnp.zeros(1), "lora": lora}


def batches(data, size, rng=None):
    """Prompts of similar length together, padded to a multiple of 16 (fewer compilations)."""
    states, starts, y = data
    order = np.argsort([len(s) for s in states], kind="stable")
    groups = [order[i:i + size] for i in range(0, len(order), size)]
    if rng is not None:
        rng.shuffle(groups)
    for g in groups:
        n = (max(len(states[i]) for i in g) + 15) // 16 * 16
        x, mask, last = np.zeros((len(g), n, E), np.float32), np.zeros((len(g), n), np.float32), np.zeros(len(g), np.int32)
        for j, i in enumerate(g):
            x[j, :len(states[i])], mask[j, starts[i]:len(states[i])], last[j] = states[i], 1, len(states[i]) - 1
        inv = THETA ** (-np.arange(0, HD, 2) / HD)
        angles = np.arange(n)[:, None] * inv[None]
        yield g, jnp.asarray(x), jnp.asarray(mask), jnp.asarray(last), jnp.asarray(y[g].astype(np.float32)), \
            jnp.asarray(np.cos(angles), jnp.float32), jnp.asarray(np.sin(angles), jnp.float32)


def report(z, y, tag):
    safe = np.sort(z[~y])
    threshold = safe[int(np.floor(0.92 * len(safe)))]  # flags at most 8% of safe dev prompts
    unsafe = np.sort(z[y])
    at95 = unsafe[int(np.ceil(0.05 * len(unsafe))) - 1]
    print(f"{tag}: dev recall {np.mean(z[y] > threshold):.3f} at {np.mean(z[~y] > threshold):.3f} false positives; "
          f"false positives at 95% recall {np.mean(z[~y] >= at95):.3f}", flush=True)


def main():
    train, dev = load(f"train{LAYER}"), load(f"dev{LAYER}")
    print(f"train {len(train[0])}, dev {len(dev[0])}; layers {LAYER}..{LAYER + K}, rank {RANK}", flush=True)
    rng = np.random.default_rng(SEED)
    params = init(rng)
    feats = jax.jit(features)
    rows = np.concatenate([np.asarray(feats(params, x, m, l, c, s)) for _, x, m, l, _, c, s in batches(train, 64)])
    stats = (jnp.asarray(rows.mean(0)), jnp.asarray(rows.std(0) + 1e-3))  # adapters start at zero
    step = jax.jit(jax.value_and_grad(loss))
    predict = jax.jit(logit)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    moments, t = (zeros, zeros), 0
    for epoch in range(EPOCHS):
        began, total = time.time(), 0.0
        for g, x, m, l, y, c, s in batches(train, 32, rng):
            value, grads = step(params, stats, x, m, l, y, c, s)
            t += 1
            total += float(value) * len(g)
            params, moments = adam(params, grads, moments, t)
        z = np.zeros(len(dev[0]))
        for g, x, m, l, _, c, s in batches(dev, 64):
            z[g] = np.asarray(predict(params, stats, x, m, l, c, s))
        print(f"epoch {epoch}: loss {total / len(train[0]):.4f}, {time.time() - began:.0f} s", flush=True)
        report(z, dev[2], f"  epoch {epoch}")


def adam(params, grads, moments, t, b1=0.9, b2=0.999):
    """One Adam step; the adapters and the head each at their own learning rate."""
    first, second = moments
    flat, tree = jax.tree_util.tree_flatten_with_path(params)
    leaves = jax.tree_util.tree_leaves
    new_p, new_m, new_v = [], [], []
    for (path, p), g, m, v in zip(flat, leaves(grads), leaves(first), leaves(second)):
        lr = LR_LORA if "lora" in jax.tree_util.keystr(path) else LR_HEAD
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        new_p.append(p - lr * (m / (1 - b1 ** t)) / (jnp.sqrt(v / (1 - b2 ** t)) + 1e-8))
        new_m.append(m)
        new_v.append(v)
    rebuild = jax.tree_util.tree_unflatten
    return rebuild(tree, new_p), (rebuild(tree, new_m), rebuild(tree, new_v))


if __name__ == "__main__":
    main()
