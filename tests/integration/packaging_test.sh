#!/usr/bin/env bash
# Packaging checks (CTest label "operations"): the sample configuration passes tallyd's own
# check, and the systemd unit passes systemd-analyze (with ExecStart pointing at this build).
#   packaging_test.sh CASE TALLYD SOURCE_DIR
set -uo pipefail
CASE=$1 TALLYD=$2 SRC=$3
case $CASE in
  sample_config)
    out=$("$TALLYD" --config "$SRC/systemd/tallyd.toml" --check-config 2>&1) || { echo "FAIL: $out"; exit 1; }
    grep -q "configuration OK" <<<"$out" || { echo "FAIL: no 'configuration OK' in: $out"; exit 1; }
    echo "ok: $out"
    printf 'listen = ["unix:/tmp/x.sock"]\nno_such_key = 1\n' >"${TMPDIR:-/tmp}/tally-bad-$$.toml"
    if "$TALLYD" --config "${TMPDIR:-/tmp}/tally-bad-$$.toml" --check-config >/dev/null 2>&1; then
      echo "FAIL: a configuration with an unknown key passed the check"; exit 1
    fi
    rm -f "${TMPDIR:-/tmp}/tally-bad-$$.toml"
    echo "ok: an unknown key fails the check"
    ;;
  systemd_unit)
    command -v systemd-analyze >/dev/null || { echo "SKIP: systemd-analyze is not installed"; exit 77; }
    unit=${TMPDIR:-/tmp}/tally-unit-$$/tallyd.service
    mkdir -p "$(dirname "$unit")"
    sed "s#/opt/tally/bin/tallyd#$TALLYD#; /ConditionPathExists/d" "$SRC/systemd/tallyd.service" >"$unit"
    out=$(systemd-analyze verify "$unit" 2>&1); rc=$?
    rm -rf "$(dirname "$unit")"
    [[ $rc -eq 0 && -z $out ]] || { echo "FAIL: systemd-analyze verify (exit $rc): $out"; exit 1; }
    echo "ok: systemd-analyze verify accepts systemd/tallyd.service"
    ;;
  *) echo "unknown case $CASE"; exit 2 ;;
esac
