import subprocess
import sys


def test_import_and_cli_help():
    import loopnest  # noqa: F401

    out = subprocess.run([sys.executable, "-m", "loopnest.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "autotune" in out.stdout


def test_a_placeholder_has_its_operators_straight_after_import():
    code = "import loopnest as ln; x = ln.placeholder('x', (2,), ln.float32); print(type(x + 1).__name__, x.sum(0).dtype)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.split() == ["Tensor", "ln.float32"], out.stderr[-2000:]
