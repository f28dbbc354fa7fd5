#!/usr/bin/env bash
# The test command: installs what is missing, builds the optimized and the
# sanitizer (ASan + UBSan) trees, and runs every test. Idempotent.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ensure_apt_packages
ensure_venv
mkdir -p "$QPU_BUILD_ROOT"

# Label "long": the >= 10^5-case runs of the machine's units (tens of minutes on two
# cores); their short slices run below. QPU_LONG_TESTS=1 runs them too.
# The long-only test binaries are built only when they run (QPU_UNBUILT_TEST_LABELS,
# cmake/warnings.cmake); the sanitizer preset leaves out every binary its run skips.
LONG_FILTER=(-LE long)
UNBUILT=long
[[ "${QPU_LONG_TESTS:-0}" == 1 ]] && { LONG_FILTER=(); UNBUILT=""; }

build_preset release -DQPU_UNBUILT_TEST_LABELS="$UNBUILT"
log "tests (optimized build, including stock transformers conformance)"
ctest --test-dir "$QPU_BUILD_ROOT/release" --output-on-failure -j "$JOBS" "${LONG_FILTER[@]}"

build_preset sanitize
log "tests (AddressSanitizer + UBSan build)"
ctest --test-dir "$QPU_BUILD_ROOT/sanitize" --output-on-failure -j "$JOBS" -LE "slow|transformers|long"
log "all tests passed"
