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
    learner = namespace["learner"]
    fresh = learner.clone()  # the README's learner before its one trial
    assert namespace["outcome"].mistake == (fresh.predict({12: 1.0, 9_999: 1.0}) != "spam")
    assert learner.counters()["trials"] == 1
    assert namespace["state"]["kind"] == "balanced-winnow"
