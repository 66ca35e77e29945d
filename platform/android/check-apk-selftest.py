#!/usr/bin/env python3
"""Shows that check-apk.py fails where it should: from a good APK (one that passes), it makes
variants that each break one rule and runs check-apk.py on each, expecting a failure that
names the problem. Run by .ci/run after build-apk.sh.

Usage: check-apk-selftest.py GOOD_APK

Variants: the manifest as written in the source with its tools:node="remove" permissions
(which aapt would turn into requests), the library compressed, the library at an offset that
is not 16 KiB-aligned, a library importing glibc-only symbols and exporting no
ANativeActivity_onCreate (compiled here with clang for aarch64-linux-android), a bundled
file whose bytes changed, and an unsigned package.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "check-apk.py")
LIB = "lib/arm64-v8a/libkostant_app.so"
FRAMEWORK = "/usr/share/android-framework-res/framework-res.apk"


def check(apk):
    r = subprocess.run([sys.executable, CHECK, apk], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def rewrite(good, out, replace=None, compress=(), align=True):
    """Copies `good` to `out`, entry by entry, with `replace` {name: bytes} and the names in
    `compress` deflated. Stored entries are padded to 16 KiB unless `align` is False. The
    signature files are dropped (the copy is unsigned, like anything rewritten)."""
    replace = replace or {}
    with zipfile.ZipFile(good) as src, open(out, "wb") as raw:
        with zipfile.ZipFile(raw, "w") as dst:
            for info in src.infolist():
                if info.filename.startswith("META-INF/"):
                    continue
                data = replace.get(info.filename, src.read(info.filename))
                zi = zipfile.ZipInfo(info.filename, info.date_time)
                zi.compress_type = zipfile.ZIP_DEFLATED if info.filename in compress else info.compress_type
                if zi.compress_type == zipfile.ZIP_STORED:
                    # Pad the local header's extra field so the data starts where asked.
                    offset = raw.tell() + 30 + len(zi.filename.encode())
                    pad = (-offset) % 16384 if align else (1 if offset % 16384 == 0 else 0)
                    zi.extra = b"\0" * pad if pad < 4 else (0xD935).to_bytes(2, "little") + (pad - 4).to_bytes(2, "little") + b"\0" * (pad - 4)
                dst.writestr(zi, data)


def sign(apk):
    ks = os.path.expanduser("~/.android/debug.keystore")
    subprocess.run(["apksigner", "sign", "--ks", ks, "--ks-key-alias", "androiddebugkey", "--ks-pass", "pass:android",
                    "--key-pass", "pass:android", apk], check=True, capture_output=True)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    good = sys.argv[1]
    code, out = check(good)
    if code != 0:
        sys.exit(f"selftest: the good APK does not pass check-apk.py:\n{out}")
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        def expect(name, apk, *needles, signed=True):
            if signed:
                sign(apk)
            code, out = check(apk)
            missing = [n for n in needles if n not in out]
            if code == 0 or missing:
                failures.append(f"{name}: exit {code}, expected {missing} in:\n{out}")
            else:
                print(f"selftest: {name}: refused as expected")

        # The source manifest, tools:node="remove" elements and all, packaged by aapt as is.
        bare = os.path.join(tmp, "bare.apk")
        subprocess.run(["aapt", "package", "-f", "-M", os.path.join(HERE, "AndroidManifest.xml"), "-I", FRAMEWORK,
                        "-F", bare], check=True, capture_output=True)
        with zipfile.ZipFile(bare) as z:
            manifest = z.read("AndroidManifest.xml")
        perm = os.path.join(tmp, "permission.apk")
        rewrite(good, perm, replace={"AndroidManifest.xml": manifest})
        expect("permissions requested", perm, "requests permissions", "android.permission.INTERNET")

        deflated = os.path.join(tmp, "deflated.apk")
        rewrite(good, deflated, compress={LIB})
        expect("library compressed", deflated, "is compressed")

        misaligned = os.path.join(tmp, "misaligned.apk")
        rewrite(good, misaligned, align=False)
        expect("library misaligned", misaligned, "not a multiple of 16384")

        c = os.path.join(tmp, "glibc.c")
        with open(c, "w") as f:
            f.write("int *__errno_location(void); int fcntl64(int, int, ...); const char *gnu_get_libc_version(void);\n"
                    "int probe(void) { return *__errno_location() + fcntl64(0, 1) + (int)gnu_get_libc_version()[0]; }\n")
        so = os.path.join(tmp, "libglibc.so")
        subprocess.run(["clang-22", "--target=aarch64-linux-android28", "-shared", "-fPIC", "-nostdlib", "-fuse-ld=lld",
                        "-Wl,-z,max-page-size=16384", "-Wl,--unresolved-symbols=ignore-all", "-o", so, c],
                       check=True, capture_output=True)
        glibc = os.path.join(tmp, "glibc.apk")
        rewrite(good, glibc, replace={LIB: open(so, "rb").read()})
        expect("glibc symbols", glibc, "__errno_location exists only in glibc", "fcntl64 exists only in glibc",
               "gnu_get_libc_version is not exported", "does not export ANativeActivity_onCreate")

        with zipfile.ZipFile(good) as z:
            listed = z.read("assets/bundle.sha256").decode().split()
        small = "assets/" + listed[2]
        with zipfile.ZipFile(good) as z:
            data = bytearray(z.read(small))
        data[0] ^= 1
        tampered = os.path.join(tmp, "tampered.apk")
        rewrite(good, tampered, replace={small: bytes(data)})
        expect("bundled file changed", tampered, f"{small} does not match")

        unsigned = os.path.join(tmp, "unsigned.apk")
        rewrite(good, unsigned)
        expect("unsigned", unsigned, "signature does not verify", signed=False)
    if failures:
        print("selftest: check-apk.py let these through:")
        for f in failures:
            print(f"  - {f}")
        sys.exit(1)
    print("selftest: check-apk.py refused every broken variant")


if __name__ == "__main__":
    main()
