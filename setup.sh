#!/usr/bin/env bash
# Set up a machine for lmlab's development and tests: Debian's Chromium (for the browser tests
# of `lmlab serve`) when it is missing, then lmlab with its development tools.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x /usr/bin/chromium ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq chromium
fi
python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
