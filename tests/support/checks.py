"""Shared by the Python test scripts: where the source tree is, and a list of
failed checks that lets a script report every failure, not just the first."""
import os

SRC = os.environ.get("SF_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
failures = []


def check(cond, what):
    """Records what as a failure unless cond holds; returns cond."""
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond
