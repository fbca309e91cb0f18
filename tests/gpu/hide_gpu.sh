#!/usr/bin/env bash
# Runs a command with the GPU hidden, as a client container without a GPU or driver sees the
# host: run as root inside a fresh mount namespace,
#   unshare -m bash tests/gpu/hide_gpu.sh <scratch dir> <command...>
# The device nodes are replaced by a tmpfs (keeping null, zero, random, tty) and every libcuda
# the loader could find is covered by /dev/null. Exit 97 when the namespace cannot be set up.

olddev=$1; shift
die() { echo "run_hidden: $*" >&2; exit 97; }
mkdir -p "$olddev" || die "mkdir $olddev"
mount --bind /dev "$olddev" || die "bind /dev"
mount -t tmpfs tmpfs /dev || die "tmpfs on /dev"
for f in null zero urandom random tty; do
  [ -e "$olddev/$f" ] || continue
  touch "/dev/$f" && mount --bind "$olddev/$f" "/dev/$f" || die "bind /dev/$f"
done
mkdir -p /dev/shm /dev/pts
mount -t tmpfs tmpfs /dev/shm || die "tmpfs on /dev/shm"
libs=$(ldconfig -p | grep -oE "/[^ ]*libcuda\.so[^ ]*" | sort -u)
IFS=: ; for d in ${LD_LIBRARY_PATH:-}; do unset IFS; for l in "$d"/libcuda.so*; do [ -e "$l" ] && libs="$libs $l"; done; done; unset IFS
for l in $libs; do mount --bind /dev/null "$l" || die "hide $l"; done
exec "$@"
