"""setup.sh's apt-get waits for a lock another package manager holds, and says so, instead of
failing at once (apt-get update does not wait for its lists lock by itself). Run against a fake
apt-get that is locked for its first tries; sleeping is skipped."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCKED = ("E: Could not get lock /var/lib/apt/lists/lock. It is held by process 42 "
          "(unattended-upgr)\nE: Unable to lock directory /var/lib/apt/lists/")


def apt_get(tmp_path: Path, locked_tries: int, *, fails_otherwise: bool = False,
            wait_seconds: int = 300) -> tuple[subprocess.CompletedProcess, list[str]]:
    """setup.sh's apt_get update, against an apt-get locked for `locked_tries` calls; returns
    the result and each call's arguments."""
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    calls = tmp_path / "calls"
    (bin_folder / "apt-get").write_text(f"""#!/usr/bin/env bash
echo "$*" >> {calls}
if [ "$(wc -l < {calls})" -le {locked_tries} ]; then echo '{LOCKED}' >&2; exit 100; fi
{"echo 'E: Unable to locate package chromium' >&2; exit 100" if fails_otherwise else ""}
""")
    (bin_folder / "sudo").write_text('#!/usr/bin/env bash\nexec "$@"\n')
    for script in bin_folder.iterdir():
        script.chmod(0o755)
    shell = (f'source {ROOT / "setup.sh"}; LOCK_WAIT_SECONDS={wait_seconds}; '
             'sleep() { SECONDS=$((SECONDS + $1)); }; apt_get update')
    result = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60,
                            env={"PATH": f"{bin_folder}:/usr/bin:/bin"})
    return result, calls.read_text().splitlines()


def test_a_held_lock_is_waited_for_and_said_once(tmp_path):
    result, calls = apt_get(tmp_path, locked_tries=3)
    assert result.returncode == 0, result.stderr
    assert calls == ["-qq -o DPkg::Lock::Timeout=5 update"] * 4
    assert result.stderr == ("setup.sh: waiting up to 300 s for apt's lock (Could not get lock "
                             "/var/lib/apt/lists/lock. It is held by process 42 "
                             "(unattended-upgr))\n")


def test_a_lock_held_past_the_wait_fails_with_apts_message(tmp_path):
    result, calls = apt_get(tmp_path, locked_tries=100, wait_seconds=12)
    assert result.returncode == 1
    assert len(calls) == 4  # at 0, 5 and 10 s, then the last at 15 s past the 12 s allowed
    assert result.stderr.endswith(LOCKED + "\n")


def test_any_other_failure_is_not_tried_again(tmp_path):
    result, calls = apt_get(tmp_path, locked_tries=0, fails_otherwise=True)
    assert result.returncode == 1 and len(calls) == 1
    assert result.stderr == "E: Unable to locate package chromium\n"
