#!/usr/bin/env bash
# Create or reuse the kit's virtual environment (.venv) and install the kit into it.
#  - keeps a torch that is already there (a GPU user's CUDA build): if the system
#    python has torch, the venv sees it through --system-site-packages;
#  - otherwise installs $TORCH_SPEC (default torch==2.13.0) *before* the kit, so the
#    kit's `torch>=2.4` never pulls a multi-GB CUDA build onto a CPU machine.
#    Elsewhere, a CPU wheel index can be named: TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

if [ ! -x "$VENV/bin/python" ]; then
  if "$PYTHON" -c "import torch" 2>/dev/null; then
    echo "setup: using the system torch ($("$PYTHON" -c 'import torch; print(torch.__version__)')) via --system-site-packages"
    "$PYTHON" -m venv --system-site-packages "$VENV"
  else
    "$PYTHON" -m venv "$VENV"
  fi
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "setup: installing $TORCH_SPEC"
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    "${PIP[@]}" install "$TORCH_SPEC" --index-url "$TORCH_INDEX_URL"
  else
    "${PIP[@]}" install "$TORCH_SPEC"
  fi
fi
echo "setup: installing studykit with notebook and test extras"
"${PIP[@]}" install -e ".[notebooks,test]"
"$VENV/bin/python" -c "import torch, studykit; print(f'setup: ok (torch {torch.__version__}, studykit {studykit.__version__})')"
