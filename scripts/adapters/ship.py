#!/usr/bin/env python3
"""Converts trained PEFT adapters to the GGUF files Kostant ships and writes their manifest.

  python3 scripts/adapters/ship.py [--peft-root DIR] [--kostant BIN] FEATURE...

For each FEATURE: `kostant adapter import DIR/FEATURE/peft --name FEATURE --type F16 --out
assets/adapters/FEATURE/FEATURE.gguf` (DIR defaults to target/adapters), then its entry in
assets/adapters/manifest.json (size, sha256, rank, alpha, adapted layers, the base model and its
fingerprint from `kostant models --json`). Entries of features not named are kept.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import FEATURES, MODEL, ROOT  # noqa: E402

MANIFEST = os.path.join(ROOT, "assets/adapters/manifest.json")
# What each adapter's data is (its MANIFEST.md says how it was made).
LICENSE = {
    "*": "Apache-2.0 (trained by this project on its own CC0 data, over the Apache-2.0 base)",
    "chat": "Apache-2.0 (trained by this project on its own Apache-2.0 messages and the "
            "Apache-2.0 base model's own replies, over that base)",
}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("features", nargs="+", choices=FEATURES)
    p.add_argument("--peft-root", default=os.path.join(ROOT, "target/adapters"))
    p.add_argument("--kostant", default=os.path.join(ROOT, "target/release/kostant"))
    args = p.parse_args()

    rows = subprocess.run([args.kostant, "models", "--json"], check=True, capture_output=True,
                          text=True, env={**os.environ, "KOSTANT_MODELS_DIR": os.path.dirname(MODEL)}).stdout
    base = next(json.loads(line) for line in rows.splitlines()
                if json.loads(line).get("file") == os.path.basename(MODEL))
    manifest = json.load(open(MANIFEST)) if os.path.exists(MANIFEST) else {"adapters": []}
    kept = [e for e in manifest["adapters"] if e["feature"] not in args.features]
    for f in args.features:
        peft = os.path.join(args.peft_root, f, "peft")
        out = os.path.join(ROOT, "assets/adapters", f, f"{f}.gguf")
        subprocess.run([args.kostant, "adapter", "import", peft, "--model", MODEL, "--name", f,
                        "--type", "F16", "--out", out], check=True)
        config = json.load(open(os.path.join(peft, "adapter_config.json")))
        layers = config["layers_to_transform"]
        data = open(out, "rb").read()
        kept.append({
            "feature": f,
            "file": f"{f}/{f}.gguf",
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "rank": config["r"],
            "alpha": config["lora_alpha"],
            "layers": [min(layers), max(layers)],
            "base": f"{base['name']} ({base['file']})",
            "base_fingerprint": base["fingerprint"],
            "license": LICENSE.get(f, LICENSE["*"]),
            "made_by": f"python3 scripts/adapters/train.py {f}; python3 scripts/adapters/ship.py {f}",
        })
    kept.sort(key=lambda e: FEATURES.index(e["feature"]))
    with open(MANIFEST, "w") as fh:
        json.dump({"adapters": kept}, fh, indent=2)
        fh.write("\n")
    print(f"wrote {MANIFEST}: {', '.join(e['feature'] for e in kept)}")


if __name__ == "__main__":
    main()
