#!/usr/bin/env bash
# The README's test command: installs the default model (verified) if needed, then runs every
# test in the workspace, real-model tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo test --workspace "$@"
