# Sourced by the other scripts: installs what is missing (idempotent) and
# defines where the heavy, cached things live (outside the clone).
set -euo pipefail

QPU_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QPU_CACHE="${QPU_CACHE:-$HOME/.cache/qpu}"
# One build tree per clone path, so several clones never share a CMake cache.
QPU_BUILD_ROOT="$QPU_CACHE/build/$(printf '%s' "$QPU_ROOT" | sha256sum | cut -c1-12)"
JOBS="${JOBS:-$(nproc)}"

log() { printf '[qpu] %s\n' "$*" >&2; }

APT_PACKAGES=(build-essential cmake pkg-config libgtest-dev libgmock-dev
  libbenchmark-dev nlohmann-json3-dev libcli11-dev libfmt-dev libsodium-dev
  libomp-dev clang-14 libclang-rt-14-dev python3-venv python3-pip
  libpcre2-dev libutf8proc-dev)

ensure_apt_packages() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing apt packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
}

# The virtualenv is keyed by the requirements' hash: changing a pin makes a new one.
ensure_venv() {
  local req="$QPU_ROOT/python/requirements.txt"
  local key
  key=$(sha256sum "$req" | cut -c1-12)
  QPU_VENV="$QPU_CACHE/venv-$key"
  if [ ! -f "$QPU_VENV/.complete" ]; then
    log "creating Python virtualenv $QPU_VENV (torch + transformers, a few minutes once)"
    rm -rf "$QPU_VENV"
    python3 -m venv "$QPU_VENV"
    "$QPU_VENV/bin/pip" install -q --upgrade pip
    "$QPU_VENV/bin/pip" install -q -r "$req"
    touch "$QPU_VENV/.complete"
  fi
  QPU_PYTHON="$QPU_VENV/bin/python"
  export QPU_PYTHON
}

# build_preset PRESET [-DVAR=VALUE...]: configure (once) and build one CMake preset in the
# cache; the -D arguments go to the configure step ($QPU_SHARED_DIR, when set, too).
build_preset() {
  local preset="$1" dir="$QPU_BUILD_ROOT/$1"
  shift  # the rest: extra cmake -D arguments
  log "building preset $preset in $dir"
  mkdir -p "$(dirname "$dir")"  # the configure log sits beside the build tree
  cmake --preset "$preset" -S "$QPU_ROOT" -B "$dir" \
    -DQPU_PYTHON="${QPU_PYTHON:-}" ${QPU_SHARED_DIR:+-DQPU_SHARED_DIR="$QPU_SHARED_DIR"} "$@" \
    > "$dir.configure.log" 2>&1 || {
      cat "$dir.configure.log" >&2; return 1; }
  cmake --build "$dir" -j "$JOBS"
}
