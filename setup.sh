#!/usr/bin/env bash
# Set up a machine for lmlab's development and tests: Debian's Chromium (for the browser tests
# of `lmlab serve`) when it is missing, installed with apt-get as root (through sudo for anyone
# else), then lmlab with its development tools.
set -euo pipefail

# Another package manager (unattended-upgrades, cloud-init) may hold apt's lock for minutes.
LOCK_WAIT_SECONDS=300
LOCK_RETRY_SECONDS=5

# apt-get "$@", quiet, waiting up to LOCK_WAIT_SECONDS for a lock another process holds and
# saying so. `install` waits for dpkg's lock itself (DPkg::Lock::Timeout), silently under -qq;
# `update` fails at once on its lists lock whatever that option says: so a try that failed on a
# lock is made again until the time is up.
apt_get() {
    local deadline=$((SECONDS + LOCK_WAIT_SECONDS)) said="" output held sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    until output=$($sudo apt-get -qq -o DPkg::Lock::Timeout=$LOCK_RETRY_SECONDS "$@" 2>&1); do
        held=$(grep -m1 "Could not get lock" <<<"$output" || true)
        if [ -z "$held" ] || ((SECONDS >= deadline)); then
            printf '%s\n' "$output" >&2
            return 1
        fi
        [ -n "$said" ] || echo "setup.sh: waiting up to ${LOCK_WAIT_SECONDS} s for apt's lock" \
                               "(${held#E: })" >&2
        said=1
        sleep "$LOCK_RETRY_SECONDS"
    done
    [ -z "$output" ] || printf '%s\n' "$output"
}

main() {
    cd "$(dirname "$0")"
    if [ ! -x /usr/bin/chromium ]; then
        apt_get update
        apt_get install -y chromium
    fi
    python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
}

# Run when executed; sourced (by the tests), only the functions are defined.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    main
fi
