"""The README's Python examples run as written, and its first lines hold the two commands."""
import re
import runpy
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_blocks_run(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python examples"
    for k, code in enumerate(blocks):
        path = tmp_path / f"readme_block_{k}.py"  # a real file: torch.compile reads the source
        path.write_text(code)
        runpy.run_path(str(path), run_name="__main__")


def test_readme_starts_with_main_job_and_test_commands():
    head = README.read_text().split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert "main job" in head[0] and "pip install torch==2.13.0" in head[0]
    assert "python -m pytest tests" in head[1]
