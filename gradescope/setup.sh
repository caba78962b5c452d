#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image: the zip's contents
# (this repository, with gradescope/run_autograder at its top as Gradescope requires) are in
# /autograder/source. It installs what the grader needs into the image's python3.
set -euo pipefail
cd "${AUTOGRADER_ROOT:-/autograder}/source"
apt-get install -y -qq python3 python3-pip python3-venv >/dev/null
python3 -m pip install --quiet --break-system-packages -r requirements.txt 2>/dev/null \
    || python3 -m pip install --quiet -r requirements.txt
python3 -c "import torch, triton; print('grader image: torch', torch.__version__, 'triton', triton.__version__)"
