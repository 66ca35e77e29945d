#!/usr/bin/env bash
# One command from a fresh clone to a signed APK of the app:
#   platform/android/build-apk.sh [--out PATH]     (default target/android/kostant.apk)
# It fetches the default model if it is missing (scripts/setup.sh), stages the APK's assets
# (the model and the eval suites, with bundle.sha256 listing each file's sha256 and size; the
# app installs them into its private files directory on first start and checks each line),
# builds the kostant_app cdylib for aarch64-linux-android and packages it with
# ../shared/tools/android-apk (no NDK: that tool installs its Debian packages, links against
# stubs of the NDK's system libraries, and signs with a debug key), then runs the structural
# checks of platform/android/check-apk.py on the result. Nothing of this runs on a device here.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
out="target/android/kostant.apk"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="${2:?--out needs a path}"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-apk: unknown argument '$1' (the only option is --out PATH)" >&2; exit 2 ;;
  esac
done
tool="$root/../shared/tools/android-apk"
[ -x "$tool" ] || { echo "build-apk: $tool is missing (the workplace's shared tools sit beside the clone)" >&2; exit 1; }

scripts/setup.sh
model="$(python3 -c 'import json; m = json.load(open("assets/models/manifest.json")); print(next(e["file"] for e in m["models"] if e["id"] == m["default"]))')"

# The APK's assets: the same bytes the desktop uses, hard-linked where the disk allows.
stage="target/android/assets"
rm -rf "$stage"
mkdir -p "$stage/models" "$stage/evals/suites"
cp -l "models/$model" "$stage/models/" 2>/dev/null || cp "models/$model" "$stage/models/"
cp assets/evals/manifest.json assets/evals/perplexity.txt "$stage/evals/"
cp assets/evals/suites/*.jsonl "$stage/evals/suites/"
(cd "$stage" && find . -type f | sed 's|^\./||' | LC_ALL=C sort | while read -r f; do
  printf '%s  %s  %s\n' "$(sha256sum "$f" | cut -d' ' -f1)" "$(stat -c %s "$f")" "$f"
done > "$root/target/android/bundle.sha256")
mv target/android/bundle.sha256 "$stage/bundle.sha256"

# Debian's rustc builds the library (the shared tool's choice); its artifacts get a target
# directory of their own, apart from the desktop build's.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/android/cargo}"
api="$(sed -n 's/.*android:minSdkVersion="\([0-9]*\)".*/\1/p' platform/android/AndroidManifest.xml)"
# Release, without the line tables the desktop profile keeps (they would triple the library).
"$tool" --lib app -p kostant --api "${api:?no minSdkVersion in the manifest}" \
  --manifest platform/android/AndroidManifest.xml --assets "$stage" --out "$out" \
  -- --config profile.release.debug=false --config profile.release.strip=true
python3 platform/android/check-apk.py "$out"
