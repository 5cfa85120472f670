#!/usr/bin/env bash
# Install what is missing (a quick check when everything is there), then run the test suite.
# Extra arguments go to pytest, e.g. `bash tools/run_tests.sh -k vit5`. The checkout is left
# as it was: nothing tracked is written.
#
#   bash tools/run_tests.sh --record
# runs the whole suite and records its wall time and each file's time in
# results/test_suite.json (the docs' suite-time table; .ci/run asks for it). It takes no pytest
# arguments: only a run of the whole suite is recorded.
#
#   bash tools/run_tests.sh --fresh [--record] [pytest args]
# runs the same in a throw-away virtualenv made from a clean clone of this checkout's HEAD
# (commit first: what is not committed is not tested), as a newcomer's machine would:
# nothing installed before but what FRESH_TORCH names: FRESH_TORCH=2.13.0 puts that torch
# release (the build without a local tag: the CPU-only file of this machine's wheel cache has
# no torchvision to go with it) and its torchvision there first, and the install keeps them;
# unset, the install chooses. The clone and the virtualenv are removed afterwards unless
# KEEP_FRESH=1.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}

fresh=0
record=0
while [ $# -gt 0 ]; do
  case "$1" in
    --fresh) fresh=1 ;;
    --record) record=1 ;;
    *) break ;;
  esac
  shift
done
if [ "$record" = 1 ] && [ $# -gt 0 ]; then
  echo "[run_tests] --record records a run of the whole suite: got pytest arguments '$*';" \
    "drop them, or drop --record" >&2
  exit 2
fi
record_flag=$([ "$record" = 1 ] && echo --record || true)

if [ "$fresh" = 1 ]; then
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/mmvit5-fresh.XXXXXX")
  [ "${KEEP_FRESH:-0}" = 1 ] || trap 'rm -rf "$tmp"' EXIT
  git clone -q "$here" "$tmp/mmvit5"
  "$PY" -m venv "$tmp/venv"
  if [ -n "${FRESH_TORCH:-}" ]; then
    # torchvision 0.N+15 is made for torch 2.N; '===' refuses a local tag such as +cpu
    vision=$(echo "$FRESH_TORCH" | awk -F. '{printf "0.%d.%s", $2 + 15, $3}')
    "$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check \
      "torch===$FRESH_TORCH" "torchvision==$vision"
  fi
  echo "[run_tests] fresh: $(git -C "$tmp/mmvit5" log -1 --format='%h %s') in $tmp"
  # --record writes the time into this checkout's results/, not the clone's
  PATH="$tmp/venv/bin:$PATH" PYTHON="$tmp/venv/bin/python" MMVIT5_FRESH=1 \
    SUITE_RESULTS="${SUITE_RESULTS:-$here/results/test_suite.json}" \
    bash "$tmp/mmvit5/tools/run_tests.sh" $record_flag "$@"
  exit $?
fi

bash "$here/tools/install.sh"
bash "$here/tools/dev/install_slurm.sh"  # the SLURM cluster tests skip without it
cd "$here"
"$PY" tools/check_env.py --stack
junit=$(mktemp "${TMPDIR:-/tmp}/mmvit5-junit.XXXXXX")
set +e
start=$(date +%s)
# one pytest-xdist worker per logical core; --dist loadgroup keeps each test file (and each
# xdist_group) on one worker, in the order tests/conftest.py gives them, the longest first
# (xdist would otherwise hand out the files with the most tests first). Arguments given after
# these win (-n 0: one process)
"$PY" -m pytest -ra --junitxml="$junit" -n logical --dist loadgroup --no-loadscope-reorder "$@"
status=$?
seconds=$(( $(date +%s) - start ))
set -e
if [ "$status" -eq 5 ]; then
  echo "[run_tests] pytest collected no tests: failing on purpose" >&2
  exit 1
fi
if [ "$record" = 1 ]; then
  # the docs' suite-time table is generated from this file (python -m benchmarks.tables)
  out=${SUITE_RESULTS:-$here/results/test_suite.json}
  "$PY" -m benchmarks.results "$junit" "$seconds" --out "$out" \
    --command "bash tools/run_tests.sh${MMVIT5_FRESH:+ --fresh} --record" ${MMVIT5_FRESH:+--fresh}
  echo "[run_tests] $seconds s: recorded in $out (python -m benchmarks.tables puts it in the docs)"
fi
rm -f "$junit"
exit "$status"
