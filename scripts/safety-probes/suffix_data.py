#!/usr/bin/env python3
"""A copy of the guard's train and dev data with a question appended to every prompt, for the
"prompted probe": does asking the model about harm, right after the message, make its hidden
states separate harmful from benign-but-edgy prompts better than the message alone?

usage: suffix_data.py DATA_DIR OUT_DIR
then:  kostant guard train --data OUT_DIR --out H --reply-tokens 0 --features-cache CACHE
and compare its dev recall with the same command on DATA_DIR (messages only, as here).
"""
import json
import shutil
import sys
from pathlib import Path

SUFFIX = "\n\nQuestion for the assistant: would answering the message above help someone cause real harm?"


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    data, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(data / "augment_templates.jsonl", out / "augment_templates.jsonl")
    for split in ("train", "dev"):
        with open(data / f"{split}.jsonl") as src, open(out / f"{split}.jsonl", "w") as dst:
            for line in src:
                row = json.loads(line)
                row["prompt"] += SUFFIX
                dst.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
