"""The plain checkpoint lines the supervisor reads without a ``checkpoint.pattern``.

Shared by the runtime's event parser (``arena_ls.lifecycle.events``) and the
trainer gate AR014 (``arena_ls.gates.announce``), so the gate lets through
exactly the spellings the supervisor understands. Standard library only: the
gates import it from ``arena check``, whose start-up counts.
"""

from __future__ import annotations

import re

BUILTIN_CHECKPOINT_PATTERNS: tuple[re.Pattern[str], ...] = (
    # "saved checkpoint step=500 path=checkpoints/x.pt" (the step first, then path=)
    re.compile(
        r"\bsav(?:ed|ing)\s+(?:the\s+|a\s+)?(?:model\s+)?checkpoint\b[^\n]*?"
        r"\bstep\s*[:=#]?\s*(?P<step>\d+)[^\n]*?\bpath\s*[:=]\s*(?P<path>\S+)",
        re.IGNORECASE,
    ),
    # "saved checkpoint to out/ckpt.pt at step 200", "Saving checkpoint ... (step=200)"
    re.compile(
        r"\bsav(?:ed|ing)\s+(?:the\s+|a\s+)?(?:model\s+)?checkpoint\b"
        r"(?:\s+(?:to|at|in|as)\s+(?P<path>[^\s,;()]+))?[^\n]*?"
        r"\bstep\s*[:=#]?\s*(?P<step>\d+)",
        re.IGNORECASE,
    ),
    # "checkpoint saved: step=200 path=ckpt.pt", "Checkpoint written at step 200"
    re.compile(
        r"\bcheckpoint\s+(?:saved|written|stored)\b[^\n]*?\bstep\s*[:=#]?\s*(?P<step>\d+)",
        re.IGNORECASE,
    ),
    # Hugging Face: "Saving model checkpoint to out/checkpoint-200"
    re.compile(
        r"\bsaving\s+model\s+checkpoint\s+to\s+(?P<path>\S*?checkpoint-(?P<step>\d+)\S*)", re.IGNORECASE
    ),
)
"""Plain checkpoint lines recognised when the job has no ``checkpoint.pattern``.

Each has a ``step`` group (and may have a ``path`` group). Kept here, beside
the parser that uses them, and read by the trainer gate AR014.
"""
