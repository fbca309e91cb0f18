#!/usr/bin/env bash
# Installs the Debian 12 packages Tally builds against, with apt. Idempotent: when every
# package is installed already it only says so (no apt, no root needed). Otherwise it runs
# `apt-get update`, checks that each missing package exists (apt-cache policy), and
# installs the missing ones with --no-install-recommends, as root or through `sudo -n`.
#
# The CUDA toolkit is not a Debian package: it must be at /usr/local/cuda (CUDA_HOME
# overrides); the script fails with a clear message when nvcc is not there.
#
# Usage: scripts/install-deps.sh
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  capnproto libcapnp-dev libuv1-dev libssl-dev openssl libspdlog-dev libfmt-dev libgtest-dev
  libzstd-dev liblz4-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev
  python3
)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

say() { printf 'install-deps: %s\n' "$*"; }
die() { printf 'install-deps: error: %s\n' "$*" >&2; exit 1; }

check_cuda() {
  [[ -x $CUDA_HOME/bin/nvcc ]] ||
    die "the CUDA toolkit is not at $CUDA_HOME (no $CUDA_HOME/bin/nvcc); install CUDA 13 (e.g. NVIDIA's cuda-toolkit-13-0 package) or set CUDA_HOME"
  say "CUDA toolkit: $("$CUDA_HOME/bin/nvcc" --version | sed -n 's/^.*release \([0-9.]*\).*$/\1/p' | head -n 1) at $CUDA_HOME"
}

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  say "not a Debian/Ubuntu system (no dpkg-query/apt-get); make sure these (or equivalents) are installed:"
  say "  ${PACKAGES[*]}"
  check_cuda
  exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  say "all ${#PACKAGES[@]} packages are installed"
  check_cuda
  exit 0
fi
say "missing: ${missing[*]}"

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    die "not root and no password-less sudo: install as root: apt-get install --no-install-recommends ${missing[*]}"
  fi
fi
APT=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Retries=3 -o DPkg::Lock::Timeout=120)

"${APT[@]}" update </dev/null

unavailable=()
for p in "${missing[@]}"; do
  candidate=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2; exit}')
  if [[ -z $candidate || $candidate == "(none)" ]]; then
    unavailable+=("$p")
  else
    say "$p: candidate $candidate"
  fi
done
[[ ${#unavailable[@]} -eq 0 ]] ||
  die "apt knows no installable version of: ${unavailable[*]} (is this Debian 12 with the main component enabled?)"

"${APT[@]}" install -y --no-install-recommends "${missing[@]}" </dev/null
say "installed: ${missing[*]}"
check_cuda
