#!/usr/bin/env python3
"""Structural checks of a built Kostant APK, since nothing here can run it on a device.

Usage: check-apk.py APK

Fails (exit 1, naming each problem) unless:
- the package is signed (apksigner verify) and requests no permission at all (aapt's view of the binary manifest: no
  uses-permission or uses-permission-sdk-23 element, whatever the source manifest says);
- lib/arm64-v8a/libkostant_app.so is there, stored uncompressed at a 16 KiB-aligned offset
  (android:extractNativeLibs="false" maps it from the APK), an ELF64 AArch64 shared object
  whose loadable segments are aligned to 16 KiB pages and which exports the NativeActivity's
  entry point (ANativeActivity_onCreate);
- it needs only public NDK libraries, and every symbol it leaves undefined is exported by
  that library set at the manifest's minSdkVersion on arm64 (platform/android/abi/api28-arm64.txt,
  written from Android's version scripts by abi/generate.py), with no glibc symbol version;
- the assets carry bundle.sha256 and every file it lists, with that size and sha256.
"""
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = "lib/arm64-v8a/libkostant_app.so"
PAGE = 16384
# glibc-only names a library built against glibc's headers might still import.
GLIBC_ONLY = re.compile(r"^(__errno_location|fcntl64|__libc_\w+|__isoc99_\w+|__xstat\w*|__fxstat\w*|__lxstat\w*|\w+64_r)$")


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def signature(apk, problems):
    r = subprocess.run(["apksigner", "verify", apk], capture_output=True, text=True)
    if r.returncode != 0:
        problems.append(f"the package's signature does not verify: {(r.stderr or r.stdout).strip()[:200]}")


def permissions(apk, problems):
    tree = run("aapt", "dump", "xmltree", apk, "AndroidManifest.xml")
    elements = re.findall(r"E: (uses-permission(?:-sdk-23|-sdk-m)?) ", tree)
    names = re.findall(r"uses-permission: name='([^']+)'", run("aapt", "dump", "permissions", apk))
    if elements or names:
        problems.append(f"the package requests permissions: {sorted(set(names)) or elements}")
    m = re.search(r"A: android:minSdkVersion\(0x[0-9a-f]+\)=\(type 0x10\)0x([0-9a-f]+)", tree)
    if not m:
        problems.append("the manifest names no minSdkVersion")
        return None
    return int(m.group(1), 16)


def library(apk, problems):
    with zipfile.ZipFile(apk) as z:
        try:
            info = z.getinfo(LIB)
        except KeyError:
            problems.append(f"{LIB} is not in the package")
            return None
        if info.compress_type != zipfile.ZIP_STORED:
            problems.append(f"{LIB} is compressed; it must be stored to be mapped from the APK")
        with open(apk, "rb") as f:
            f.seek(info.header_offset)
            header = f.read(30)
            name_len = int.from_bytes(header[26:28], "little")
            extra_len = int.from_bytes(header[28:30], "little")
        data_offset = info.header_offset + 30 + name_len + extra_len
        if data_offset % PAGE:
            problems.append(f"{LIB} starts at offset {data_offset}, not a multiple of {PAGE}")
        return z.read(LIB)


def elf(so, api, problems):
    header = run("readelf", "-h", so)
    if "ELF64" not in header or "AArch64" not in header or "DYN" not in header:
        problems.append(f"{LIB} is not an ELF64 AArch64 shared object")
    for line in run("readelf", "-W", "-l", so).splitlines():
        fields = line.split()
        if fields[:1] == ["LOAD"] and int(fields[-1], 16) < PAGE:
            problems.append(f"{LIB} has a LOAD segment aligned to {fields[-1]}, under 16 KiB")
    public = {}
    with open(os.path.join(HERE, "abi", f"api{api}-arm64.txt"), encoding="utf-8") as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                lib, sym = line.split()
                public.setdefault(sym, set()).add(lib)
    libs = set().union(*public.values())
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[lib(\w+)\.so\]", run("readelf", "-d", so))
    for n in needed:
        if "lib" + n not in libs:
            problems.append(f"{LIB} needs lib{n}.so, which is not a public library this check knows")
    undefined, exported = [], set()
    for line in run("readelf", "-W", "--dyn-syms", so).splitlines():
        f = line.split()
        if len(f) >= 8 and f[0].endswith(":") and f[7:]:
            if f[6] == "UND":
                undefined.append(f[7])
            elif f[4] == "GLOBAL" and f[5] == "DEFAULT":
                exported.add(f[7])
    if "ANativeActivity_onCreate" not in exported:
        problems.append(f"{LIB} does not export ANativeActivity_onCreate, which NativeActivity calls")
    for sym in undefined:
        base, _, version = sym.partition("@")
        if "GLIBC" in version:
            problems.append(f"{sym} carries a glibc symbol version")
        if base not in public:
            # Bionic exports some names of these shapes (readdir64_r): only the others are glibc's.
            if GLIBC_ONLY.match(base):
                problems.append(f"{base} exists only in glibc")
            else:
                problems.append(f"{base} is not exported by Android {api}'s public libraries on arm64")
        elif not public[base] & {"lib" + n for n in needed}:
            problems.append(f"{base} comes from {sorted(public[base])}, which the library does not link")
    return needed, len(undefined)


def assets(apk, problems):
    with zipfile.ZipFile(apk) as z:
        names = set(z.namelist())
        if "assets/bundle.sha256" not in names:
            problems.append("assets/bundle.sha256 is not in the package")
            return 0
        listed = z.read("assets/bundle.sha256").decode()
        count = 0
        for line in listed.splitlines():
            if not line.strip():
                continue
            sha, size, path = line.split()
            name = "assets/" + path
            if name not in names:
                problems.append(f"{name} is listed but not in the package")
                continue
            h = hashlib.sha256()
            n = 0
            with z.open(name) as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
                    n += len(block)
            if n != int(size) or h.hexdigest() != sha:
                problems.append(f"{name} does not match its line in bundle.sha256")
            count += 1
        return count


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    apk = sys.argv[1]
    problems = []
    signature(apk, problems)
    api = permissions(apk, problems)
    data = library(apk, problems)
    needed, undefined = ([], 0)
    if data and api:
        # The public symbol lists are written per API level; the nearest one at or under it.
        lists = sorted(int(m.group(1)) for m in (re.match(r"api(\d+)-arm64\.txt$", n) for n in os.listdir(os.path.join(HERE, "abi"))) if m)
        usable = [l for l in lists if l <= api]
        if not usable:
            problems.append(f"no public symbol list for API {api} or under in platform/android/abi/")
        else:
            with tempfile.TemporaryDirectory() as tmp:
                so = os.path.join(tmp, "libkostant_app.so")
                with open(so, "wb") as f:
                    f.write(data)
                needed, undefined = elf(so, usable[-1], problems)
    files = assets(apk, problems)
    if problems:
        print(f"check-apk: {apk}: {len(problems)} problem(s)")
        for p in problems:
            print(f"  - {p}")
        sys.exit(1)
    print(f"check-apk: {apk}: no permission requested; {LIB} stored, 16 KiB-aligned; "
          f"NEEDED {', '.join('lib' + n + '.so' for n in needed)}; {undefined} undefined symbols, "
          f"all public at API {api} on arm64; {files} bundled files match bundle.sha256")


if __name__ == "__main__":
    main()
