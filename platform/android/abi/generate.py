#!/usr/bin/env python3
"""Writes the list of symbols an arm64 app may import from Android's public system libraries
at a given API level, from the platform's version scripts (bionic's libc.map.txt, libm.map.txt,
libdl.map.txt; liblog's and libandroid's map files), in the format check-apk.py reads:
one "library symbol" per line.

Usage: generate.py --api 28 libc=PATH libm=PATH libdl=PATH liblog=PATH libandroid=PATH > api28-arm64.txt

Rules, as the NDK's stub generator applies them: a symbol is public unless its block is
*_PRIVATE or *_PLATFORM or it is tagged only for the platform (llndk, apex, systemapi,
platform-only); a symbol tagged with architectures exists only on those; "introduced=N" (or
"introduced-arm64=N") on the symbol, else on its block, is the first API level that has it, and
a codename (Tiramisu, UpsideDownCake, ...) means a level above every number we target.
"""
import re
import sys

ARCHES = {"arm", "arm64", "x86", "x86_64", "riscv64", "mips", "mips64"}
PLATFORM_ONLY = {"llndk", "apex", "systemapi", "platform-only"}


def level(value):
    return int(value) if value.isdigit() else 10_000


def introduced(tags):
    for t in tags:
        if t.startswith("introduced-arm64="):
            return level(t.split("=", 1)[1])
    for t in tags:
        if t.startswith("introduced="):
            return level(t.split("=", 1)[1])
    return None


def symbols(text, api):
    out, block_tags, block, cxx = [], [], None, False
    for raw in text.splitlines():
        line, _, comment = raw.partition("#")
        tags = comment.split()
        line = line.strip()
        m = re.match(r"^(\w+)\s*\{$", line)
        if m:
            block, block_tags = m.group(1), tags
            continue
        if line.startswith('extern "C++"'):
            cxx = True
            continue
        if line.startswith("}"):
            if cxx:
                cxx = False
            else:
                block = None
            continue
        if not line.endswith(";") or block is None or cxx or line in ("global:", "local:"):
            continue
        name = line[:-1].strip()
        if name == "*" or block.endswith(("_PRIVATE", "_PLATFORM", "_DEPRECATED")):
            continue
        if PLATFORM_ONLY & set(tags):
            continue
        arches = ARCHES & set(tags)
        if arches and "arm64" not in arches:
            continue
        first = introduced(tags)
        if first is None:
            first = introduced(block_tags) or 0
        if first <= api:
            out.append(name)
    return out


def main(argv):
    if len(argv) < 3 or argv[0] != "--api":
        sys.exit(__doc__)
    api = int(argv[1])
    lines = set()
    for arg in argv[2:]:
        lib, _, path = arg.partition("=")
        for name in symbols(open(path, encoding="utf-8").read(), api):
            lines.add(f"{lib} {name}")
    sys.stdout.write("".join(f"{l}\n" for l in sorted(lines)))


if __name__ == "__main__":
    main(sys.argv[1:])
