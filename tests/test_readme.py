"""The README's Python examples run as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks
    for block in blocks:
        namespace: dict[str, object] = {}
        exec(compile(block, str(README), "exec"), namespace)
    assert namespace["outcome"].mistake in (True, False)
    assert namespace["state"]["kind"] == "balanced-winnow"
