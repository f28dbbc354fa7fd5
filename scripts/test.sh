#!/usr/bin/env bash
# The test command: installs what is missing, builds the optimized and the
# sanitizer (ASan + UBSan) trees, and runs every test. Idempotent.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ensure_apt_packages
ensure_venv
mkdir -p "$QPU_BUILD_ROOT"

build_preset release
log "tests (optimized build, including stock transformers conformance)"
ctest --test-dir "$QPU_BUILD_ROOT/release" --output-on-failure -j "$JOBS"

build_preset sanitize
log "tests (AddressSanitizer + UBSan build)"
ctest --test-dir "$QPU_BUILD_ROOT/sanitize" --output-on-failure -j "$JOBS" -LE "slow|transformers"
log "all tests passed"
