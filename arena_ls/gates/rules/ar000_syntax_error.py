"""AR000 syntax-error: the trainer does not parse, so no other gate can run.

What it checks
--------------
That the file is valid Python for the interpreter the server runs on. A
syntax error is reported once, at the error's position, with Python's own
message; every other rule is off until it is fixed. Null bytes and
expressions nested too deeply for the parser are reported the same way.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
A trainer that does not parse fails at once, which costs nothing on the
GPU, but none of the gates that keep a long run from losing its work can
check it either, so it cannot be approved to run.

Example that fires
------------------
```python
for step in range(100)
    loss.backward()
```

Write instead
-------------
```python
for step in range(100):
    loss.backward()
```
"""

from __future__ import annotations

from arena_ls.gates.model import Finding
from arena_ls.gates.rules.base import declare
from arena_ls.trainer_facts.source import SourceText

CODE = "AR000"
NAME = "syntax-error"
MESSAGE = "syntax error"


def syntax_error_finding(source: SourceText, error: BaseException) -> Finding:
    """One error-severity finding at the position Python reports."""
    if isinstance(error, SyntaxError) and error.lineno:
        line = max(error.lineno - 1, 0)
        shift = 1 if line == 0 and source.has_bom else 0
        col = max((error.offset or 1) - 1, 0) + shift
        text = source.line(line)
        col = min(col, len(text))
        end_line = (error.end_lineno or error.lineno) - 1
        end_col = (error.end_offset or 0) - 1 + shift
        if end_line < line or (end_line == line and end_col <= col):
            end_line, end_col = line, min(col + 1, len(text)) if col < len(text) else col
        detail = error.msg
    else:
        line, col = _null_byte(source)
        end_line, end_col = line, col + (1 if col < len(source.line(line)) else 0)
        detail = error.msg if isinstance(error, SyntaxError) else str(error)
        if isinstance(error, (RecursionError, MemoryError)):
            detail = "the code is nested too deeply to parse"
    return Finding(
        code=CODE,
        message=f"{MESSAGE}: {detail}",
        severity="error",
        line=line,
        col=col,
        end_line=end_line,
        end_col=end_col,
    )


def _null_byte(source: SourceText) -> tuple[int, int]:
    for index, text in enumerate(source.lines):
        col = text.find("\0")
        if col >= 0:
            return index, col
    return 0, 0


RULE = declare(__doc__, CODE, NAME, MESSAGE, "error", None)
