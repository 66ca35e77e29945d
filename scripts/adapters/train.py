#!/usr/bin/env python3
"""Trains one feature's rank-16 LoRA adapter over SmolLM2-135M-Instruct and writes it as a PEFT
adapter directory (adapter_config.json + adapter_model.safetensors), which
`kostant adapter import DIR --out FILE.gguf` (or llama.cpp's convert_lora_to_gguf.py) turns
into a GGUF LoRA. Dev-time only: nothing here ships.

  PYTHONPATH=/tmp/adapters-py python3 scripts/adapters/train.py FEATURE [--steps N] ...
  (see --help and scripts/adapters/README.md)

Base weights: models/SmolLM2-135M-Instruct.Q4_1.gguf (the default model the app embeds),
dequantized to f32 with the `gguf` package; they stay frozen. The forward pass is the llama
architecture as llama.cpp/the engine run it on that file: RMSNorm, GQA attention (9 query heads,
3 KV heads, head size 64), RoPE theta 1e5, SwiGLU, tied output embedding. Each of the seven
projections of layers --first-layer..29 (q, k, v, o, gate, up, down) gets
y += (alpha/r) * (x A^T) B^T, with A [r, in] (normal, std 1/sqrt(in)) and B [out, r] (zeros), as
PEFT's LoRA does.

WHY ONLY THE TOP LAYERS (--first-layer, default 21)
The guard rides on the chat model's own pass and reads the residual stream at layers 16 and 20
(`kostant guard info`: taps). An adapter that starts above the deepest tap leaves every state
the guard reads as the base computes it, so the guard keeps riding (safety's Guard::rides_on)
at no extra cost; one that starts lower sends the guard to a second, unadapted pass. The
frozen layers below the adapter are run once per example before training, and their output
is cached, so each step runs only the adapted layers.

Examples are rendered with the model's ChatML template under the feature's exact system prompt
(common.py, checked against safety/src/features.rs); the loss is the mean cross-entropy over the
assistant reply's tokens and its closing <|im_end|> only.

Q/K ROW ORDER (why lora_B of q_proj/k_proj is un-permuted before it is written)
----------------------------------------------------------------------------
convert_hf_to_gguf.py's LlamaModel.modify_tensors stores HF q_proj/k_proj weights permuted:
    permute(W, n_head, n_head_kv): W.reshape(n_head, 2, W.shape[0] // n_head // 2, *rest)
                                    .swapaxes(1, 2).reshape(W.shape)
applied as permute(q_proj, n_head, n_head) and permute(k_proj, n_head, n_kv_head) (so for k the
head count used is n_kv_head = 3). Within each head of size 64 this maps GGUF row 2j+s to HF
row s*32+j: HF's rotate-half RoPE pairs rows (j, j+32), GGUF/llama.cpp's normal RoPE pairs
adjacent rows (2j, 2j+1). The trainer runs on the GGUF matrices with adjacent-pair RoPE, so the
lora_B it learns for attn_q/attn_k is in GGUF row order.

convert_lora_to_gguf.py reuses the same LlamaModel.modify_tensors on a LoraTorchTensor whose
reshape/swapaxes touch only B (LoraTorchTensor.permute: when the last dim stays put, only
_lora_B is permuted; A [r, in] is unchanged), i.e. it writes B_gguf = permute(B_hf). PEFT
directories hold HF order. So this script writes
    q_proj.lora_B = unpermute(B_gguf, n_head=9),  k_proj.lora_B = unpermute(B_gguf, n_head=3)
with unpermute = reshape(n, d/2, 2, r).swapaxes(1, 2).reshape, the exact inverse; lora_A and
every other projection's B are written as trained (those rows/columns are never permuted).
A converter that follows llama.cpp's therefore reproduces B_gguf bit for bit; `--self-check`
verifies permute(unpermute(B)) == B and that HF rotate-half RoPE on the un-permuted q/k weights
gives the same attention scores as adjacent-pair RoPE on the GGUF ones.
(Reference: ggml-org/llama.cpp convert_hf_to_gguf.py LlamaModel.permute / modify_tensors, and
convert_lora_to_gguf.py LoraTorchTensor.permute / reshape, LoraModel.modify_tensors.)

Determinism: --seed (default 0) fixes A's init and the batch order; versions are pinned in
requirements.txt. JAX runs on CPU in float32.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import BASE_MODEL_ID, FEATURES, MODEL, ROOT, Tokenizer, check_prompts, render, user_message  # noqa: E402

LINEAR = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
PEFT_NAME = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj"}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("feature", choices=FEATURES)
    p.add_argument("--data", help="data directory (default assets/adapters/FEATURE)")
    p.add_argument("--out", help="output PEFT directory (default target/adapters/FEATURE/peft)")
    p.add_argument("--model", default=MODEL)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32.0)
    p.add_argument("--first-layer", type=int, default=21,
                   help="lowest adapted layer (default 21: above the guard's deepest tap, 20, so the guard still rides)")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--warmup", type=int, default=10, help="linear warm-up steps")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--epochs", type=float, default=3.0, help="passes over train.jsonl (ignored with --steps)")
    p.add_argument("--steps", type=int, help="stop after this many optimizer steps")
    p.add_argument("--max-len", type=int, default=512, help="longer examples are skipped")
    p.add_argument("--dev-n", type=int, default=0, help="dev examples to score before and after (0: all)")
    p.add_argument("--no-dev", action="store_true", help="skip the dev loss")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--self-check", action="store_true", help="check the q/k permutation and the forward pass, then exit")
    return p.parse_args()


ARGS = parse_args()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import gguf  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

jax.config.update("jax_default_matmul_precision", "float32")

reader = gguf.GGUFReader(ARGS.model)
FIELDS = {k: v.parts[v.data[0]][0] for k, v in reader.fields.items() if k.startswith("llama.")}
E = int(FIELDS["llama.embedding_length"])
N_LAYER = int(FIELDS["llama.block_count"])
N_HEAD, N_KV = int(FIELDS["llama.attention.head_count"]), int(FIELDS["llama.attention.head_count_kv"])
HD, EPS, THETA = E // N_HEAD, float(FIELDS["llama.attention.layer_norm_rms_epsilon"]), float(FIELDS["llama.rope.freq_base"])
TENSORS = {t.name: t for t in reader.tensors}


def weight(name):
    t = TENSORS[name]
    shape = tuple(int(x) for x in t.shape[::-1])  # GGUF lists the row length first
    return np.asarray(dequantize(t.data, t.tensor_type), np.float32).reshape(shape)


def load_base():
    layers = {k: np.stack([weight(f"blk.{i}.{k}.weight") for i in range(N_LAYER)])
              for k in LINEAR + ["attn_norm", "ffn_norm"]}
    emb = weight("token_embd.weight")
    out = weight("output.weight") if "output.weight" in TENSORS else emb  # SmolLM2 ties them
    return {"layers": {k: jnp.asarray(v) for k, v in layers.items()}, "emb": jnp.asarray(emb),
            "out": jnp.asarray(out), "norm": jnp.asarray(weight("output_norm.weight"))}


# ---- q/k row order ----------------------------------------------------------------------

def permute(w, n_head):
    """convert_hf_to_gguf.py LlamaModel.permute: HF row order -> GGUF row order."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head):
    """The inverse of permute: GGUF row order -> HF row order."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ---- the model --------------------------------------------------------------------------

def rms_norm(x, w):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + EPS) * w


def rope_tables(n):
    inv = THETA ** (-np.arange(0, HD, 2) / HD)
    angles = np.arange(n)[:, None] * inv[None]
    return jnp.asarray(np.cos(angles), jnp.float32), jnp.asarray(np.sin(angles), jnp.float32)


def rope(x, cos, sin):
    """llama.cpp's normal (adjacent-pair) RoPE, the one GGUF llama files are laid out for."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :, None], sin[None, :, None]
    return jnp.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).reshape(x.shape)


def run_layers(layers, lora, x, scale):
    """x [batch, n, E] through the stacked `layers` (each with its LoRA pair, or none)."""
    b, n, _ = x.shape
    cos, sin = rope_tables(n)
    causal = jnp.asarray(np.tril(np.ones((n, n), bool)))[None, None]

    def lin(w, ab, h):
        y = h @ w.T
        if ab is not None:
            y = y + scale * ((h @ ab[0].T) @ ab[1].T)
        return y

    def layer(x, p):
        w, ab = p
        get = (lambda k: (ab[k][0], ab[k][1])) if ab is not None else (lambda k: None)
        h = rms_norm(x, w["attn_norm"])
        q = rope(lin(w["attn_q"], get("attn_q"), h).reshape(b, n, N_HEAD, HD), cos, sin)
        k = rope(lin(w["attn_k"], get("attn_k"), h).reshape(b, n, N_KV, HD), cos, sin)
        v = lin(w["attn_v"], get("attn_v"), h).reshape(b, n, N_KV, HD)
        k, v = jnp.repeat(k, N_HEAD // N_KV, 2), jnp.repeat(v, N_HEAD // N_KV, 2)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(HD)
        s = jnp.where(causal, s, -1e30)
        att = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v).reshape(b, n, E)
        x = x + lin(w["attn_output"], get("attn_output"), att)
        h = rms_norm(x, w["ffn_norm"])
        g = jax.nn.silu(lin(w["ffn_gate"], get("ffn_gate"), h)) * lin(w["ffn_up"], get("ffn_up"), h)
        return x + lin(w["ffn_down"], get("ffn_down"), g), None

    x, _ = jax.lax.scan(layer, x, (layers, lora))
    return x


def split_layers(base, first):
    """The frozen layers below `first` and the adapted ones from it up."""
    lower = {k: v[:first] for k, v in base["layers"].items()}
    upper = {k: v[first:] for k, v in base["layers"].items()}
    return lower, upper


def forward(base, lora, ids, scale):
    """Final hidden states [batch, n, E] (before the output norm), LoRA on every layer."""
    return run_layers(base["layers"], lora, base["emb"][ids], scale)


def loss_fn(lora, upper, head, x, pos, targets, mask, scale):
    """Mean cross-entropy at the reply positions `pos` [batch, m] (mask 0 on padding), given
    the cached output `x` of the frozen layers below the adapter."""
    x = run_layers(upper, lora, x, scale)
    x = jnp.take_along_axis(x, pos[..., None], 1)  # only the scored positions reach the head
    logits = rms_norm(x, head["norm"]) @ head["out"].T
    lp = jax.nn.log_softmax(logits, -1)
    nll = -jnp.take_along_axis(lp, targets[..., None], -1)[..., 0]
    return jnp.sum(nll * mask) / jnp.maximum(jnp.sum(mask), 1.0)


# ---- data -------------------------------------------------------------------------------

def load_split(tok, path):
    rows, skipped = [], 0
    for line in open(path):
        ex = json.loads(line)
        prompt, target = render(ARGS.feature, user_message(ARGS.feature, ex), ex["output"])
        p, t = tok.encode(prompt), tok.encode(target)
        if len(p) + len(t) > ARGS.max_len:
            skipped += 1
            continue
        rows.append((p, t))
    if skipped:
        print(f"{path}: skipped {skipped} examples longer than {ARGS.max_len} tokens", flush=True)
    return rows


def batches(rows, size, rng=None):
    """Example indices of similar length together (few compilations), in shuffled groups."""
    order = np.argsort([len(p) + len(t) for p, t in rows], kind="stable")
    groups = [order[i:i + size] for i in range(0, len(order), size)]
    if rng is not None:
        rng.shuffle(groups)
    return groups


def pad32(n):
    return (n + 31) // 32 * 32


def lower_states(rows, lower_fn):
    """The frozen layers' output for every example's sequence (all but its last token), once."""
    cached = [None] * len(rows)
    for g in batches(rows, 8):
        n = pad32(max(len(rows[i][0]) + len(rows[i][1]) for i in g) - 1)
        ids = np.zeros((len(g), n), np.int32)
        for j, i in enumerate(g):
            seq = rows[i][0] + rows[i][1]
            ids[j, :len(seq) - 1] = seq[:-1]
        x = np.asarray(lower_fn(jnp.asarray(ids)))
        for j, i in enumerate(g):
            cached[i] = x[j, :len(rows[i][0]) + len(rows[i][1]) - 1].copy()
    return cached


def batch_arrays(rows, cached, g):
    """Padded cached states, the scored positions (the reply and <|im_end|>: position t predicts
    seq[t+1]), their targets and mask."""
    n = pad32(max(len(cached[i]) for i in g))
    m = pad32(max(len(rows[i][1]) for i in g))
    x = np.zeros((len(g), n, E), np.float32)
    pos, tgt, mask = (np.zeros((len(g), m), np.int32), np.zeros((len(g), m), np.int32),
                      np.zeros((len(g), m), np.float32))
    for j, i in enumerate(g):
        p, t = rows[i]
        x[j, :len(cached[i])] = cached[i]
        pos[j, :len(t)] = np.arange(len(p) - 1, len(p) + len(t) - 1)
        tgt[j, :len(t)] = t
        mask[j, :len(t)] = 1
    return jnp.asarray(x), jnp.asarray(pos), jnp.asarray(tgt), jnp.asarray(mask)


# ---- output -----------------------------------------------------------------------------

def write_peft(lora, out):
    from safetensors.numpy import save_file
    os.makedirs(out, exist_ok=True)
    tensors = {}
    first = ARGS.first_layer
    for k in LINEAR:
        a, b = np.asarray(lora[k][0]), np.asarray(lora[k][1])
        for i in range(first, N_LAYER):
            ai, bi = a[i - first], b[i - first]
            if k == "attn_q":
                bi = unpermute(bi, N_HEAD)
            elif k == "attn_k":
                bi = unpermute(bi, N_KV)
            pre = f"base_model.model.model.layers.{i}.{PEFT_NAME[k]}"
            tensors[f"{pre}.lora_A.weight"] = np.ascontiguousarray(ai, np.float32)  # [r, in]
            tensors[f"{pre}.lora_B.weight"] = np.ascontiguousarray(bi, np.float32)  # [out, r]
    save_file(tensors, os.path.join(out, "adapter_model.safetensors"), metadata={"format": "pt"})
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": BASE_MODEL_ID,
        "r": ARGS.rank, "lora_alpha": ARGS.alpha, "lora_dropout": 0.0, "bias": "none",
        "fan_in_fan_out": False, "inference_mode": True, "use_rslora": False, "use_dora": False,
        "init_lora_weights": True, "modules_to_save": None,
        "layers_to_transform": list(range(first, N_LAYER)),
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    }
    with open(os.path.join(out, "adapter_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def init_lora(base, rng, layers):
    lora = {}
    for k in LINEAR:
        _, out_dim, in_dim = base["layers"][k].shape
        a = rng.normal(0, 1 / np.sqrt(in_dim), (layers, ARGS.rank, in_dim)).astype(np.float32)
        lora[k] = (jnp.asarray(a), jnp.zeros((layers, out_dim, ARGS.rank), jnp.float32))
    return lora


def adam(params, grads, state, t, lr, b1=0.9, b2=0.999, wd=0.0):
    m, v = state
    m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    params = jax.tree_util.tree_map(
        lambda p, m, v: p - lr * ((m / (1 - b1 ** t)) / (jnp.sqrt(v / (1 - b2 ** t)) + 1e-8) + wd * p), params, m, v)
    return params, (m, v)


# ---- checks -----------------------------------------------------------------------------

def self_check(base, tok):
    rng = np.random.default_rng(1)
    for k, n in (("attn_q", N_HEAD), ("attn_k", N_KV)):
        w_gguf = np.asarray(base["layers"][k][0])
        b = rng.normal(size=(w_gguf.shape[0], ARGS.rank)).astype(np.float32)
        assert np.array_equal(permute(unpermute(b, n), n), b)
        assert np.array_equal(unpermute(permute(b, n), n), b)
        w_hf = unpermute(w_gguf, n)
        x = rng.normal(size=(5, E)).astype(np.float32)
        cos, sin = (np.asarray(t) for t in rope_tables(5))
        # GGUF side: adjacent-pair RoPE on x W_gguf^T
        y = np.asarray(rope(jnp.asarray((x @ w_gguf.T).reshape(1, 5, n, HD)), jnp.asarray(cos), jnp.asarray(sin)))[0]
        # HF side: rotate-half RoPE on x W_hf^T
        z = (x @ w_hf.T).reshape(5, n, HD)
        c, s = np.concatenate([cos, cos], -1)[:, None], np.concatenate([sin, sin], -1)[:, None]
        rot = np.concatenate([-z[..., HD // 2:], z[..., :HD // 2]], -1)
        z = z * c + rot * s
        # same vectors up to the within-head row order, so the same dot products
        assert np.allclose(unpermute(y.reshape(5, n * HD).T, n).T.reshape(5, n, HD), z, atol=1e-4)
        print(f"self-check: {k}: permute/unpermute are inverses; HF rope on unpermute(W) == GGUF rope on W", flush=True)
    # forward pass vs llama.cpp's first-position top-5 logits (generation_golden.json). llama.cpp
    # quantizes activations to Q8_1 for Q4_1 matmuls and this f32 pass does not, so logits differ
    # by up to ~1; the check is that the same tokens lead.
    worst = 0.0
    for g in json.load(open(os.path.join(ROOT, "engine/tests/fixtures/generation_golden.json")))["cases"]:
        assert tok.encode(g["prompt"]) == g["prompt_ids"]
        x = rms_norm(forward(base, None, jnp.asarray([g["prompt_ids"]], jnp.int32), 1.0), base["norm"])[0, -1]
        logits = np.asarray(x @ base["out"].T)
        top = [int(i) for i in np.argsort(-logits)[:5]]
        ref = [int(i) for i, _ in g["first_position_top5_logits"]]
        diff = max(abs(logits[i] - v) for i, v in g["first_position_top5_logits"])
        worst = max(worst, diff)
        print(f"self-check: {g['question'][:40]!r}: ours {top}, llama.cpp {ref}, max |diff| {diff:.3f}", flush=True)
        assert ref[0] in top[:2] and len(set(top) & set(ref)) >= 4 and diff < 1.5, "forward disagrees with llama.cpp"
    print(f"self-check: forward agrees with llama.cpp (top tokens; max |logit diff| {worst:.3f})", flush=True)


def main():
    check_prompts()
    tok = Tokenizer(ARGS.model)
    t0 = time.time()
    base = load_base()
    print(f"base: {N_LAYER} layers, E {E}, heads {N_HEAD}/{N_KV}, dequantized in {time.time() - t0:.1f} s", flush=True)
    if ARGS.self_check:
        self_check(base, tok)
        return
    data = ARGS.data or os.path.join(ROOT, "assets/adapters", ARGS.feature)
    out = ARGS.out or os.path.join(ROOT, "target/adapters", ARGS.feature, "peft")
    train = load_split(tok, os.path.join(data, "train.jsonl"))
    dev = [] if ARGS.no_dev else load_split(tok, os.path.join(data, "dev.jsonl"))
    if ARGS.dev_n:
        dev = dev[:ARGS.dev_n]
    first = ARGS.first_layer
    if not 0 <= first < N_LAYER:
        sys.exit(f"--first-layer {first}: the model has layers 0 to {N_LAYER - 1}")
    rng = np.random.default_rng(ARGS.seed)
    lora = init_lora(base, rng, N_LAYER - first)
    scale = ARGS.alpha / ARGS.rank
    n_train_tok = sum(len(t) for _, t in train)
    print(f"{ARGS.feature}: train {len(train)} examples ({n_train_tok} target tokens), dev {len(dev)}; "
          f"rank {ARGS.rank}, alpha {ARGS.alpha}, layers {first}..{N_LAYER - 1}, lr {ARGS.lr}, "
          f"batch {ARGS.batch}, seed {ARGS.seed}", flush=True)

    lower, upper = split_layers(base, first)
    head = {"norm": base["norm"], "out": base["out"]}
    run_lower = jax.jit(lambda layers, emb, ids: run_layers(layers, None, emb[ids], scale))
    lower_fn = lambda ids: run_lower(lower, base["emb"], ids)  # noqa: E731
    t = time.time()
    train_x = lower_states(train, lower_fn)
    dev_x = lower_states(dev, lower_fn)
    print(f"frozen layers 0..{first - 1} read once in {time.time() - t:.0f} s", flush=True)

    step_fn = jax.jit(jax.value_and_grad(loss_fn), static_argnums=(7,))
    eval_fn = jax.jit(loss_fn, static_argnums=(7,))
    update = jax.jit(adam)

    def dev_loss():
        tot, n = 0.0, 0
        for g in batches(dev, 8):
            x, pos, tgt, mask = batch_arrays(dev, dev_x, g)
            tot += float(eval_fn(lora, upper, head, x, pos, tgt, mask, scale)) * float(mask.sum())
            n += float(mask.sum())
        return tot / max(n, 1)

    if dev:
        t = time.time()
        print(f"dev loss before: {dev_loss():.4f} ({time.time() - t:.0f} s)", flush=True)
    per_epoch = (len(train) + ARGS.batch - 1) // ARGS.batch
    total = ARGS.steps or int(np.ceil(ARGS.epochs * per_epoch))
    state = (jax.tree_util.tree_map(jnp.zeros_like, lora), jax.tree_util.tree_map(jnp.zeros_like, lora))
    step, began, times = 0, time.time(), []
    while step < total:
        for g in batches(train, ARGS.batch, rng):
            t = time.time()
            x, pos, tgt, mask = batch_arrays(train, train_x, g)
            value, grads = step_fn(lora, upper, head, x, pos, tgt, mask, scale)
            step += 1
            lr = ARGS.lr * min(1.0, step / max(ARGS.warmup, 1)) * (0.1 + 0.9 * (1 - step / total) if total > ARGS.warmup else 1.0)
            lora, state = update(lora, grads, state, step, lr)
            value = float(value)
            times.append(time.time() - t)
            print(f"step {step}/{total}: loss {value:.4f}, {x.shape[0]}x{x.shape[1]} tokens, "
                  f"{times[-1]:.1f} s", flush=True)
            if step >= total:
                break
    print(f"trained {step} steps in {time.time() - began:.0f} s; median step {np.median(times):.1f} s", flush=True)
    if dev:
        t = time.time()
        print(f"dev loss after: {dev_loss():.4f} ({time.time() - t:.0f} s)", flush=True)
    write_peft(lora, out)
    print(f"wrote {out}/adapter_config.json and adapter_model.safetensors", flush=True)


if __name__ == "__main__":
    main()
