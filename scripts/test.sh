#!/usr/bin/env bash
# The README's test command: installs the default model (verified) if needed, then runs every
# test in the workspace, real-model tests included. --no-fail-fast: a failing test binary does
# not hide the ones after it (cargo test otherwise stops at the first).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test-models
cargo test --workspace --no-fail-fast "$@"
