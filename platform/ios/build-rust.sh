#!/usr/bin/env bash
# Builds the app library as a static library for iOS devices into lib/ for Xcode to link.
# Needs macOS with Xcode (ring and the bundled SQLite are C, compiled with the iOS SDK):
#   rustup target add aarch64-apple-ios
# Then: platform/ios/build-rust.sh && (cd platform/ios && xcodegen generate && open Kostant.xcodeproj)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
cargo rustc --release -p kostant --lib --target aarch64-apple-ios --crate-type staticlib
mkdir -p "$here/lib"
cp target/aarch64-apple-ios/release/libkostant_app.a "$here/lib/"
