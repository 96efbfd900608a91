import subprocess
import sys


def test_import_and_cli_help():
    import loopnest  # noqa: F401

    out = subprocess.run([sys.executable, "-m", "loopnest.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "autotune" in out.stdout
