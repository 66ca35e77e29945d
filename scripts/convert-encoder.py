#!/usr/bin/env python3
"""Converts a sentence-transformers BERT encoder (model.safetensors in f32, tokenizer.json,
config.json, optionally modules.json and the pooling module's config.json) into a GGUF in
llama.cpp's `bert` layout, so that both Kostant's engine and llama.cpp's `llama-embedding` load it.

Usage: convert-encoder.py MODEL_DIR OUT.gguf [--name NAME]

Standard library only (a fresh machine has python3 and pip, nothing else). The output is a
function of the inputs alone: no timestamps, tensors and keys in a fixed order, f32 -> f16 by
struct's round-half-to-even, as numpy's astype(float16) rounds.

What follows llama.cpp's converter (convert_hf_to_gguf.py, class BertModel; gguf-py's constants,
tensor_mapping and SpecialVocab):
- hyper-parameters under `bert.`: context_length (max_position_embeddings), embedding_length,
  feed_forward_length, block_count, attention.head_count, attention.layer_norm_epsilon,
  attention.causal = false, pooling_type (1 mean, 2 cls) from the sentence-transformers pooling;
- the vocabulary as llama.cpp's WordPiece reader wants it ("phantom space"): a token starting
  "##" loses that prefix, any other non-control token gets a leading U+2581, control tokens
  (the tokenizer's special added tokens) stay as they are; token types 3 (control) / 1 (normal);
- special ids as SpecialVocab derives them from tokenizer_config.json and the post-processor:
  bos = cls, eos = sep, unk, sep, pad, cls, mask, add_bos/add_eos true, add_sep false;
- tensor names token_embd, token_types, position_embd, token_embd_norm, blk.N.attn_q/k/v,
  attn_output, attn_output_norm, ffn_up, ffn_down, layer_output_norm (.weight / .bias);
- types: 2-D weights f16, except position_embd and token_types, which stay f32 as do 1-D
  tensors (norms, biases).
"""
import argparse
import array
import json
import os
import struct
import sys

ALIGNMENT = 32
GGML_F32, GGML_F16 = 0, 1
# GGUF metadata value types
T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_UNUSED = 1, 3, 5
POOLING_MEAN, POOLING_CLS = 1, 2
# The pre-tokenizer name llama.cpp's converter gives the uncased BERT WordPiece vocabulary.
TOKENIZER_PRE = "bert-bge"
# Rows converted per step, so a 30k x 384 embedding never sits in memory as Python floats.
CHUNK = 1 << 20


def fail(msg):
    sys.exit(f"convert-encoder: {msg}")


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class SafeTensors:
    """The header of a safetensors file and its tensors' raw bytes."""

    def __init__(self, path):
        self.f = open(path, "rb")
        (n,) = struct.unpack("<Q", self.f.read(8))
        if n > 100 << 20:
            fail(f"{path}: header of {n} bytes is implausible")
        self.header = json.loads(self.f.read(n))
        self.header.pop("__metadata__", None)
        self.base = 8 + n

    def shape(self, name):
        if name not in self.header:
            fail(f"tensor {name} is missing from the safetensors file")
        return self.header[name]["shape"]

    def f32(self, name):
        info = self.header.get(name) or fail(f"tensor {name} is missing")
        if info["dtype"] != "F32":
            fail(f"tensor {name} is {info['dtype']}, expected F32")
        start, end = info["data_offsets"]
        self.f.seek(self.base + start)
        data = self.f.read(end - start)
        if len(data) != end - start:
            fail(f"tensor {name}: data is truncated")
        return data


def to_f16(raw):
    """Little-endian f32 bytes to little-endian f16 bytes, round half to even."""
    values = array.array("f")
    values.frombytes(raw)
    if sys.byteorder != "little":
        values.byteswap()
    out = bytearray()
    for i in range(0, len(values), CHUNK):
        chunk = values[i : i + CHUNK]
        out += struct.pack(f"<{len(chunk)}e", *chunk)
    return bytes(out)


def hparams(config):
    need = ["max_position_embeddings", "hidden_size", "intermediate_size",
            "num_hidden_layers", "num_attention_heads", "layer_norm_eps", "vocab_size"]
    for k in need:
        if k not in config:
            fail(f"config.json has no {k}")
    if config.get("model_type") != "bert":
        fail(f"config.json: model_type {config.get('model_type')!r} is not bert")
    return config


def pooling_type(model_dir):
    """The sentence-transformers pooling mode as llama.cpp numbers it (mean if none is named)."""
    modules = os.path.join(model_dir, "modules.json")
    if not os.path.exists(modules):
        return POOLING_MEAN
    for mod in read_json(modules):
        if mod.get("type") == "sentence_transformers.models.Pooling":
            cfg = read_json(os.path.join(model_dir, mod["path"], "config.json"))
            if cfg.get("pooling_mode_mean_tokens"):
                return POOLING_MEAN
            if cfg.get("pooling_mode_cls_token"):
                return POOLING_CLS
            fail("only mean and cls pooling are supported")
    return POOLING_MEAN


def vocabulary(tokenizer, n_vocab):
    """Tokens in llama.cpp's phantom-space spelling and their types, by id."""
    model = tokenizer.get("model", {})
    if model.get("type") != "WordPiece":
        fail(f"tokenizer.json: model {model.get('type')!r} is not WordPiece")
    by_id = {i: t for t, i in model["vocab"].items()}
    control = {a["id"] for a in tokenizer.get("added_tokens", []) if a.get("special")}
    tokens, types = [], []
    for i in range(n_vocab):
        if i not in by_id:
            tokens.append(f"\u2581[PAD{i}]")
            types.append(TOKEN_UNUSED)
            continue
        tok = by_id[i]
        if i in control:
            tokens.append(tok)
            types.append(TOKEN_CONTROL)
        elif tok.startswith("##"):
            tokens.append(tok[2:])
            types.append(TOKEN_NORMAL)
        else:
            tokens.append("\u2581" + tok)
            types.append(TOKEN_NORMAL)
    return tokens, types


def special_ids(tokenizer, tokenizer_config):
    """bos/eos/unk/sep/pad/cls/mask ids, in the order llama.cpp's SpecialVocab writes them."""
    added = {a["content"]: a["id"] for a in tokenizer.get("added_tokens", [])}
    names = {
        "bos": tokenizer_config.get("bos_token") or tokenizer_config.get("cls_token"),
        "eos": tokenizer_config.get("eos_token") or tokenizer_config.get("sep_token"),
        "unknown": tokenizer_config.get("unk_token"),
        "seperator": tokenizer_config.get("sep_token"),
        "padding": tokenizer_config.get("pad_token"),
        "cls": tokenizer_config.get("cls_token"),
        "mask": tokenizer_config.get("mask_token"),
    }
    ids = []
    for key, name in names.items():
        if isinstance(name, dict):
            name = name.get("content")
        if name in added:
            ids.append((f"tokenizer.ggml.{key}_token_id", added[name]))
    return ids


def tensor_plan(st, n_layer):
    """(gguf name, safetensors name, ggml type) in file order."""
    plan = [
        ("token_embd.weight", "embeddings.word_embeddings.weight", GGML_F16),
        ("token_types.weight", "embeddings.token_type_embeddings.weight", GGML_F32),
        ("position_embd.weight", "embeddings.position_embeddings.weight", GGML_F32),
        ("token_embd_norm.weight", "embeddings.LayerNorm.weight", GGML_F32),
        ("token_embd_norm.bias", "embeddings.LayerNorm.bias", GGML_F32),
    ]
    per_layer = [
        ("attn_q", "attention.self.query"),
        ("attn_k", "attention.self.key"),
        ("attn_v", "attention.self.value"),
        ("attn_output", "attention.output.dense"),
        ("attn_output_norm", "attention.output.LayerNorm"),
        ("ffn_up", "intermediate.dense"),
        ("ffn_down", "output.dense"),
        ("layer_output_norm", "output.LayerNorm"),
    ]
    for i in range(n_layer):
        for ours, theirs in per_layer:
            for suffix in ("weight", "bias"):
                src = f"encoder.layer.{i}.{theirs}.{suffix}"
                two_d = len(st.shape(src)) == 2
                ty = GGML_F16 if two_d and suffix == "weight" else GGML_F32
                plan.append((f"blk.{i}.{ours}.{suffix}", src, ty))
    return plan


class Writer:
    def __init__(self):
        self.kv = bytearray()
        self.n_kv = 0

    @staticmethod
    def string(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def add(self, key, ty, value):
        self.kv += self.string(key) + struct.pack("<I", ty)
        self.kv += self.value(ty, value)
        self.n_kv += 1

    def value(self, ty, v):
        if ty == T_U32:
            return struct.pack("<I", v)
        if ty == T_I32:
            return struct.pack("<i", v)
        if ty == T_F32:
            return struct.pack("<f", v)
        if ty == T_BOOL:
            return struct.pack("<B", 1 if v else 0)
        if ty == T_STRING:
            return self.string(v)
        fail(f"no encoding for metadata type {ty}")

    def add_array(self, key, elem, values):
        self.kv += self.string(key) + struct.pack("<IIQ", T_ARRAY, elem, len(values))
        self.kv += b"".join(self.value(elem, v) for v in values)
        self.n_kv += 1


def metadata(w, cfg, pooling, tokens, types, specials, name):
    w.add("general.architecture", T_STRING, "bert")
    w.add("general.type", T_STRING, "model")
    w.add("general.name", T_STRING, name)
    w.add("general.license", T_STRING, "apache-2.0")
    w.add("bert.block_count", T_U32, cfg["num_hidden_layers"])
    w.add("bert.context_length", T_U32, cfg["max_position_embeddings"])
    w.add("bert.embedding_length", T_U32, cfg["hidden_size"])
    w.add("bert.feed_forward_length", T_U32, cfg["intermediate_size"])
    w.add("bert.attention.head_count", T_U32, cfg["num_attention_heads"])
    w.add("bert.attention.layer_norm_epsilon", T_F32, cfg["layer_norm_eps"])
    w.add("general.file_type", T_U32, 1)  # mostly f16
    w.add("bert.attention.causal", T_BOOL, False)
    w.add("bert.pooling_type", T_U32, pooling)
    w.add("tokenizer.ggml.token_type_count", T_U32, cfg.get("type_vocab_size", 1))
    w.add("tokenizer.ggml.model", T_STRING, "bert")
    w.add("tokenizer.ggml.pre", T_STRING, TOKENIZER_PRE)
    w.add_array("tokenizer.ggml.tokens", T_STRING, tokens)
    w.add_array("tokenizer.ggml.token_type", T_I32, types)
    for key, tid in specials:
        w.add(key, T_U32, tid)
    w.add("tokenizer.ggml.add_bos_token", T_BOOL, True)
    w.add("tokenizer.ggml.add_eos_token", T_BOOL, True)
    w.add("tokenizer.ggml.add_sep_token", T_BOOL, False)
    w.add("tokenizer.ggml.normalizer.lowercase", T_BOOL, True)


def write(out_path, w, st, plan):
    infos = bytearray()
    offset = 0
    sizes = []
    for gname, src, ty in plan:
        shape = st.shape(src)
        n = 1
        for d in shape:
            n *= d
        size = n * (2 if ty == GGML_F16 else 4)
        infos += Writer.string(gname) + struct.pack("<I", len(shape))
        for d in reversed(shape):  # ggml order: the row length first
            infos += struct.pack("<Q", d)
        infos += struct.pack("<IQ", ty, offset)
        sizes.append(size)
        offset += (size + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
    header = b"GGUF" + struct.pack("<IQQ", 3, len(plan), w.n_kv) + bytes(w.kv) + bytes(infos)
    pad = lambda n: b"\0" * ((ALIGNMENT - n % ALIGNMENT) % ALIGNMENT)
    with open(out_path, "wb") as out:
        out.write(header + pad(len(header)))
        for (gname, src, ty), size in zip(plan, sizes):
            raw = st.f32(src)
            data = to_f16(raw) if ty == GGML_F16 else raw
            if len(data) != size:
                fail(f"tensor {gname}: {len(data)} bytes, expected {size}")
            out.write(data + pad(size))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--name", default="all-MiniLM-L6-v2")
    args = ap.parse_args()
    d = args.model_dir
    cfg = hparams(read_json(os.path.join(d, "config.json")))
    tokenizer = read_json(os.path.join(d, "tokenizer.json"))
    tc_path = os.path.join(d, "tokenizer_config.json")
    tokenizer_config = read_json(tc_path) if os.path.exists(tc_path) else {
        "cls_token": "[CLS]", "sep_token": "[SEP]", "unk_token": "[UNK]",
        "pad_token": "[PAD]", "mask_token": "[MASK]"}
    tokens, types = vocabulary(tokenizer, cfg["vocab_size"])
    st = SafeTensors(os.path.join(d, "model.safetensors"))
    plan = tensor_plan(st, cfg["num_hidden_layers"])
    w = Writer()
    metadata(w, cfg, pooling_type(d), tokens, types, special_ids(tokenizer, tokenizer_config),
             args.name)
    write(args.out, w, st, plan)


if __name__ == "__main__":
    main()
