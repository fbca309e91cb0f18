#!/usr/bin/env bash
# Builds a relocatable Tally tree and packs it as tally-bundle.tar.gz.
#
# Usage: scripts/bundle.sh PREFIX [TARBALL]
#   PREFIX   where the tree is made, e.g. /opt/tally (emptied first if it holds a bundle)
#   TARBALL  output file, default ./tally-bundle.tar.gz (relative to the current directory)
#
# PREFIX/bin/tallyd                  RUNPATH $ORIGIN/../lib
# PREFIX/lib/libtally_client.so      RUNPATH $ORIGIN/../lib
# PREFIX/lib/driver/libcuda.so.1  -> ../libtally_client.so (for apps that dlopen libcuda.so.1)
# PREFIX/lib/libtally_cufft.so       soname libcufft.so.12, loaded by the client (client/entry/library_sonames.cc)
# PREFIX/lib/lib{capnp,kj,uv,spdlog,fmt,zstd,lz4,tomlplusplus,nvJitLink}*.so*  copied from this
#                                    machine (found with ldd), debug info stripped
# The tarball holds one directory, basename(PREFIX): untar it anywhere and run
# <dir>/bin/tallyd; clients use LD_PRELOAD=<dir>/lib/libtally_client.so. The target host
# needs glibc and libstdc++ at least as new as this machine's, and the NVIDIA driver for
# tallyd; nothing else.
#
# It (re)configures build/ only if it was never configured, builds tallyd and the client,
# and runs `cmake --install build --prefix PREFIX` (the build's own CMAKE_INSTALL_PREFIX is
# left alone). `ninja bundle` runs it on its own build tree (TALLY_BUNDLE_BUILD_DIR,
# TALLY_BUNDLE_NO_BUILD=1): BUILD/tally-bundle.tar.gz. The tree also holds tallyctl,
# tally-ptx, share/tally/systemd/tallyd.service, share/tally/tallyd.toml and the docs.
set -euo pipefail

[[ $# -ge 1 && $# -le 2 ]] || { echo "usage: $0 PREFIX [TARBALL]" >&2; exit 2; }
TARBALL=$(realpath -m -- "${2:-tally-bundle.tar.gz}")
PREFIX=$(realpath -m -- "$1")
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${TALLY_BUNDLE_BUILD_DIR:-build}
BUNDLED_LIBS='^lib(capnp|kj|uv|spdlog|fmt|zstd|lz4|tomlplusplus|nvJitLink)[-.]'

say() { printf 'bundle: %s\n' "$*"; }
die() { printf 'bundle: error: %s\n' "$*" >&2; exit 1; }

[[ $PREFIX != / && $PREFIX != /usr && $PREFIX != /usr/local ]] ||
  die "PREFIX must be a directory of its own (the tree is emptied first), not $PREFIX"
if [[ -e $PREFIX ]] && [[ -n $(ls -A "$PREFIX") ]] && [[ ! -x $PREFIX/bin/tallyd ]]; then
  die "$PREFIX exists, is not empty and holds no earlier bundle: refusing to empty it"
fi

# Under `ninja bundle` (TALLY_BUNDLE_NO_BUILD=1) the build is ninja's own business.
if [[ -z ${TALLY_BUNDLE_NO_BUILD:-} ]]; then
  if [[ ! -f $BUILD/CMakeCache.txt ]]; then
    cmake -S . -B "$BUILD" -G Ninja
  fi
  cmake --build "$BUILD" -j "$(nproc)" --target tallyd tallyctl tally_client tally_cufft tally-ptx
fi

rm -rf "$PREFIX"
cmake --install "$BUILD" --prefix "$PREFIX"

TALLYD=$PREFIX/bin/tallyd
CLIENT=$PREFIX/lib/libtally_client.so
[[ -x $TALLYD && -f $CLIENT ]] || die "cmake --install did not install bin/tallyd and lib/libtally_client.so"
for f in "$TALLYD" "$CLIENT"; do
  runpath=$(readelf -d "$f" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p')
  [[ $runpath == *'$ORIGIN/../lib'* ]] || die "$f has RUNPATH '$runpath', expected \$ORIGIN/../lib"
  say "${f#"$PREFIX"/}: RUNPATH $runpath"
done

# The driver shim: a relative link, so the tree can move.
mkdir -p "$PREFIX/lib/driver"
ln -sfn ../libtally_client.so "$PREFIX/lib/driver/libcuda.so.1"

# Non-system libraries, as ldd resolves them here (ldd lists indirect dependencies too).
copied=()
while read -r soname path; do
  [[ $soname =~ $BUNDLED_LIBS ]] || continue
  [[ -e $PREFIX/lib/$soname ]] && continue
  cp -L -- "$path" "$PREFIX/lib/$soname"
  chmod 0644 "$PREFIX/lib/$soname"
  copied+=("$soname")
done < <(ldd "$TALLYD" "$CLIENT" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u)
[[ ${#copied[@]} -gt 0 ]] || die "ldd found none of the libraries to bundle"
say "bundled: ${copied[*]}"

# Every dependency must now come from the tree or from the system's base libraries.
unresolved=$(ldd "$TALLYD" "$CLIENT" | grep 'not found' || true)
[[ -z $unresolved ]] || die "unresolved libraries: $unresolved"
strays=""
while read -r soname path; do
  [[ $soname =~ $BUNDLED_LIBS ]] || continue
  [[ $(realpath -m -- "$path") == "$PREFIX/lib/$soname" ]] || strays+=" $soname=>$path"
done < <(env -i /usr/bin/ldd "$TALLYD" "$CLIENT" | awk '$2 == "=>" {print $1, $3}' | sort -u)
[[ -z $strays ]] || die "with an empty environment these would not be loaded from $PREFIX/lib:$strays"
say "with an empty environment every bundled library resolves into $PREFIX/lib"

if command -v strip >/dev/null 2>&1; then
  strip --strip-debug "$TALLYD" "$CLIENT" "${copied[@]/#/$PREFIX/lib/}" 2>/dev/null || say "note: strip failed; shipping with debug info"
fi

mkdir -p "$(dirname "$TARBALL")"
tar -C "$(dirname "$PREFIX")" -czf "$TARBALL" "$(basename "$PREFIX")"
say "tree:    $PREFIX ($(du -sh "$PREFIX" | cut -f1))"
say "tarball: $TARBALL ($(du -h "$TARBALL" | cut -f1)): tar -C <dir> -xzf $(basename "$TARBALL") gives <dir>/$(basename "$PREFIX")"
