"""Running a test file on Triton's CPU interpreter (TRITON_INTERPRET=1).

The interpreter is chosen when Triton is imported, so an interpreter test file runs itself in a
child pytest process with the variable set; that child sees `active()` true and runs the real
tests. The parent's one test passes when the child's suite does.
"""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def active() -> bool:
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    import triton.language.standard as standard
    from triton.runtime.interpreter import InterpretedFunction
    return isinstance(standard.zeros, InterpretedFunction)


def run_file_in_child(test_file: str) -> None:
    """Runs `test_file`'s tests under the interpreter in a child pytest; asserts they passed."""
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-W", "ignore::DeprecationWarning", str(Path(test_file))],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    print(proc.stdout[-6000:], proc.stderr[-3000:])
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout
