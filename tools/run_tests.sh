#!/usr/bin/env bash
# Install what is missing (a quick check when everything is there), then run the test suite.
# Extra arguments go to pytest, e.g. `bash tools/run_tests.sh -k vit5`.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
bash "$here/tools/install.sh"
bash "$here/tools/install_slurm.sh"  # the SLURM cluster tests skip without it
cd "$here"
set +e
"$PY" -m pytest -ra "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "[run_tests] pytest collected no tests: failing on purpose" >&2
  exit 1
fi
exit "$status"
