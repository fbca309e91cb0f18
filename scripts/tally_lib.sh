# shellcheck shell=bash disable=SC2034  # sourced; the TL_ variables are for the caller
# Shell helpers shared by tests/pytorch/run_suite.sh, bench/pytorch/run.sh and bench/run_micro.sh
# (sourced, not run):
# why a run must be skipped, starting/stopping a private tallyd, hiding the GPU from a client
# (tests/gpu/hide_gpu.sh, as the GPU suite does) and the client's environment.
# Globals it sets start with TL_.

TL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TL_TALLYD_PID=""
TL_PORT=""
TL_HIDE=0
TL_HIDE_SCRIPT=""
TL_HIDE_NOTE=""
TL_OLDDEV=""

# Prints why no GPU is visible, or nothing when one is.
tl_gpu_skip_reason() {
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "nvidia-smi not found"
  elif ! nvidia-smi -L >/dev/null 2>&1; then
    echo "nvidia-smi -L failed"
  fi
}

# tl_torch_skip_reason <python>: prints why PyTorch cannot be used natively, or nothing.
tl_torch_skip_reason() {
  local out rc
  out=$(env -u LD_PRELOAD "$1" -c 'import sys, torch; print(torch.__version__); sys.exit(0 if torch.version.cuda else 3)' 2>&1)
  rc=$?
  if [[ $rc -eq 3 ]]; then
    echo "torch $(tail -n 1 <<<"$out") is a CPU-only build"
  elif [[ $rc -ne 0 ]]; then
    echo "'$1 -c \"import torch\"' failed: $(tail -n 1 <<<"$out")"
  fi
}

tl_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# True when something listens on 127.0.0.1:$1 (reads /proc; opens no connection, which tallyd
# would log as a client).
tl_tcp_listening() {
  local hex
  hex=$(printf '%04X' "$1")
  awk -v suffix=":$hex" 'substr($2, length($2) - 4) == suffix && $4 == "0A" { found = 1 }
                         END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# tl_library_dir_args <python>: "--library-dir DIR" when the PyTorch wheel brings cuDNN (a GPU
# host may have cuBLAS in the toolkit but no system cuDNN; tallyd runs the same cuDNN as the
# client was built against), else nothing.
tl_library_dir_args() {
  local site lib
  site=$(env -u LD_PRELOAD "$1" -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null) || return 0
  lib=$(find "$site" -name 'libcudnn.so.9' 2>/dev/null | head -n 1)
  [[ -n $lib ]] && echo "--library-dir $(dirname "$lib")"
  return 0
}

# tl_start_tallyd <tallyd> <socket path> <log file> [extra tallyd args...]
# Listens on unix:<socket> and on a free port of 127.0.0.1 (TL_PORT); waits until both accept.
tl_start_tallyd() {
  local tallyd=$1 sock=$2 log=$3
  shift 3
  rm -f "$sock"
  TL_PORT=$(tl_free_port) || { echo "no free TCP port" >&2; return 1; }
  echo "=== $(date -u +%H:%M:%S) tallyd --listen unix:$sock --listen tcp://127.0.0.1:$TL_PORT $*" >>"$log"
  env -u LD_PRELOAD -u TALLY_SERVER "$tallyd" --listen "unix:$sock" --listen "tcp://127.0.0.1:$TL_PORT" "$@" \
    >>"$log" 2>&1 &
  TL_TALLYD_PID=$!
  local _
  for _ in $(seq 300); do  # up to 30 s
    if ! kill -0 "$TL_TALLYD_PID" 2>/dev/null; then
      wait "$TL_TALLYD_PID" 2>/dev/null
      echo "tallyd exited during start-up (status $?); log: $log" >&2
      TL_TALLYD_PID=""
      return 1
    fi
    if [[ -S $sock ]] && tl_tcp_listening "$TL_PORT"; then
      sleep 0.2  # from listen() to accepting
      return 0
    fi
    sleep 0.1
  done
  echo "tallyd did not listen on both sockets within 30 s; log: $log" >&2
  tl_stop_tallyd
  return 1
}

tl_tallyd_alive() { [[ -n $TL_TALLYD_PID ]] && kill -0 "$TL_TALLYD_PID" 2>/dev/null; }

tl_stop_tallyd() {
  if tl_tallyd_alive; then
    kill -TERM "$TL_TALLYD_PID" 2>/dev/null
    local _
    for _ in $(seq 50); do
      kill -0 "$TL_TALLYD_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$TL_TALLYD_PID" 2>/dev/null && kill -KILL "$TL_TALLYD_PID" 2>/dev/null
    wait "$TL_TALLYD_PID" 2>/dev/null
  fi
  TL_TALLYD_PID=""
}

# tl_setup_hide <scratch dir> <disable (non-empty = do not hide)>: sets TL_HIDE=1 when clients can
# run in a mount namespace without /dev/nvidia* and libcuda (needs root and unshare); otherwise
# TL_HIDE=0. TL_HIDE_NOTE says why not (empty when hiding works).
tl_setup_hide() {
  local err
  TL_HIDE=0
  TL_HIDE_NOTE=""
  TL_OLDDEV=$1/olddev
  TL_HIDE_SCRIPT=$(<"$TL_ROOT/tests/gpu/hide_gpu.sh")
  if [[ -n ${2:-} ]]; then
    TL_HIDE_NOTE="WARNING: hiding disabled: clients run WITH the GPU visible"
  elif [[ $(id -u) -ne 0 ]]; then
    TL_HIDE_NOTE="note: not root (uid $(id -u)): clients run WITHOUT hiding the GPU"
  elif ! command -v unshare >/dev/null 2>&1; then
    TL_HIDE_NOTE="note: unshare not found: clients run WITHOUT hiding the GPU"
  elif ! err=$(unshare -m bash -c "$TL_HIDE_SCRIPT" bash "$TL_OLDDEV" true 2>&1); then
    TL_HIDE_NOTE="WARNING: no mount namespace ($err): clients run WITHOUT hiding the GPU"
  else
    TL_HIDE=1
  fi
}

# tl_hidden <command...>: runs the command with the GPU hidden when TL_HIDE=1. Variables for
# the client must be set INSIDE (tl_hidden env VAR=... cmd): hide_gpu.sh covers every libcuda
# on the LD_LIBRARY_PATH it sees, which must not yet include the client's libcuda.so.1 link.
tl_hidden() {
  if [[ $TL_HIDE -eq 1 ]]; then
    unshare -m bash -c "$TL_HIDE_SCRIPT" bash "$TL_OLDDEV" "$@"
  else
    "$@"
  fi
}

# tl_libcuda_dir <client lib> <dir>: a directory with libcuda.so and libcuda.so.1 -> the client,
# for TRITON_LIBCUDA_PATH (Triton links its kernel launcher with -lcuda, which needs the
# unversioned name, and the real one is hidden).
tl_libcuda_dir() {
  mkdir -p "$2" && ln -sf "$1" "$2/libcuda.so" && ln -sf "$1" "$2/libcuda.so.1"
}

# tl_client_env <client lib> <server url> <tenant> <priority> <libcuda dir>: sets the array
# TL_CLIENT_ENV (VAR=value words for env(1)).
tl_client_env() {
  TL_CLIENT_ENV=("LD_PRELOAD=$1" "LD_LIBRARY_PATH=$(dirname "$1")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
                 "TALLY_SERVER=$2" "TALLY_TENANT=$3" "TALLY_PRIORITY=$4" "TRITON_LIBCUDA_PATH=$5")
}
