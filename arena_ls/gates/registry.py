"""The one map from rule codes to rules; the docs and the engine both read it."""

from __future__ import annotations

from types import MappingProxyType

from arena_ls.gates.rules import (
    ar000_syntax_error,
    ar001_oom_retry,
    ar002_empty_cache,
    ar003_empty_cache_cadence,
    ar004_checkpoint_in_loop,
    ar005_checkpoint_cadence,
    ar006_checkpoint_contents,
    ar007_resume_option,
    ar008_start_step_option,
    ar009_cooperative_stop,
    ar010_dataloader_workers,
    ar011_mixed_precision,
    ar012_eval_cadence,
    ar014_checkpoint_announce,
    ar015_checkpoint_atomic,
)
from arena_ls.gates.rules.base import Rule

_MODULES = (
    ar000_syntax_error,
    ar001_oom_retry,
    ar002_empty_cache,
    ar003_empty_cache_cadence,
    ar004_checkpoint_in_loop,
    ar005_checkpoint_cadence,
    ar006_checkpoint_contents,
    ar007_resume_option,
    ar008_start_step_option,
    ar009_cooperative_stop,
    ar010_dataloader_workers,
    ar011_mixed_precision,
    ar012_eval_cadence,
    ar014_checkpoint_announce,
    ar015_checkpoint_atomic,
)

RULES: MappingProxyType[str, Rule] = MappingProxyType({module.RULE.code: module.RULE for module in _MODULES})
"""Every trainer rule by code, AR000 (the syntax error) included, in code order."""
