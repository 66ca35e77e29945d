#!/usr/bin/env bash
# Builds the app library (kostant_app, crate-type cdylib) for arm64 Android into jniLibs/, for
# Gradle to package. Needs the Android NDK (ring and the bundled SQLite are C) and cargo-ndk:
#   rustup target add aarch64-linux-android
#   cargo install cargo-ndk
#   export ANDROID_NDK_HOME=/path/to/ndk/27.2.12479018
# Then: platform/android/build-rust.sh && (cd platform/android && gradle assembleRelease)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
cargo ndk -t arm64-v8a --platform 28 -o "$here/jniLibs" build --release -p kostant --lib
ls -l "$here/jniLibs/arm64-v8a/libkostant_app.so"
