"""What the benchmark scripts share: a failed step and running a command."""

import subprocess


class Failure(Exception):
    """A step went wrong; the message says which."""


def sh(argv, timeout=60, check=True):
    """Runs argv; returns its stdout. Raises Failure with stderr when it fails or
    outlives timeout seconds."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise Failure(f"{' '.join(map(str, argv))}: timed out after {timeout} s") from e
    if check and p.returncode != 0:
        raise Failure(f"{' '.join(map(str, argv))}: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout
