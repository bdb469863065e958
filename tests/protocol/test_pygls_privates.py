"""Every pygls private that ``arena_ls/protocol/rpc/`` overrides or touches, pinned to pygls's code.

``ArenaProtocol`` (``rpc/transport.py``) and ``PreEncodedResults`` (``rpc/preencoded.py``) override
methods pygls keeps private and reset attributes its ``__init__`` sets. A pygls release may change
any of them without notice; this test fails then, naming the private, so that the override is read
again against the new code (and its fingerprint here updated) before it ships.
"""

from __future__ import annotations

import hashlib
import inspect
import re
from pathlib import Path

import pytest
from pygls.protocol import JsonRPCProtocol, LanguageServerProtocol

RPC = Path(__file__).resolve().parents[2] / "arena_ls" / "protocol" / "rpc"

OVERRIDDEN_METHODS = {
    # name: sha256 (first 16 hex) of pygls's own source of the method we override
    "_send_data": "40e0a5bb70951777",
    "_send_response": "b799bb966ca7ebb1",
}
"""Methods of pygls's ``JsonRPCProtocol`` that arena-ls overrides (and calls through ``super()``)."""

RESET_ATTRIBUTES = (
    "_converter",
    "_include_headers",
    "_request_futures",
    "_result_types",
    "_shutdown",
    "_workspace",
)
"""Attributes pygls's protocols set in ``__init__`` that arena-ls reads or resets between clients
(``_converter``: read by ``ArenaProtocol.warm_structuring``)."""

PUBLIC_ENTRY = {"handle_message": "d46f22474082c0cf"}
"""pygls's public entry our frame reader hands each message to (its behaviour is what we rely on)."""


def fingerprint(cls: type, name: str) -> str:
    return hashlib.sha256(inspect.getsource(getattr(cls, name)).encode()).hexdigest()[:16]


def init_sources() -> str:
    return inspect.getsource(JsonRPCProtocol.__init__) + inspect.getsource(LanguageServerProtocol.__init__)


@pytest.mark.parametrize("name", sorted({**OVERRIDDEN_METHODS, **PUBLIC_ENTRY}))
def test_the_pygls_methods_we_override_are_the_ones_we_read(name: str) -> None:
    pinned = {**OVERRIDDEN_METHODS, **PUBLIC_ENTRY}[name]
    assert hasattr(JsonRPCProtocol, name), f"pygls no longer has JsonRPCProtocol.{name}: rpc/ overrides it"
    assert fingerprint(JsonRPCProtocol, name) == pinned, (
        f"pygls changed JsonRPCProtocol.{name}: read arena_ls/protocol/rpc/ against its new code, "
        "then update its fingerprint here"
    )


@pytest.mark.parametrize("name", RESET_ATTRIBUTES)
def test_the_attributes_we_reset_are_still_set_by_pygls(name: str) -> None:
    assert re.search(rf"self\.{name}\b", init_sources()), (
        f"pygls's protocols no longer set self.{name} in __init__: rpc/transport.py resets it"
    )


def test_no_other_pygls_private_is_touched_from_rpc() -> None:
    """A new use of a pygls private in ``rpc/`` must be listed above (and so pinned)."""
    listed = {*OVERRIDDEN_METHODS, *RESET_ATTRIBUTES, *PUBLIC_ENTRY}
    used = set()
    for path in RPC.glob("*.py"):
        for name in re.findall(r"\.(_[a-z][a-z0-9_]*)\b", path.read_text(encoding="utf-8")):
            if (
                hasattr(JsonRPCProtocol, name)
                or hasattr(LanguageServerProtocol, name)
                or re.search(rf"self\.{name}\b", init_sources())
            ):
                used.add(name)
    assert used <= listed, f"pygls privates used in rpc/ but not pinned here: {sorted(used - listed)}"


def test_the_plumbing_lives_in_rpc_only() -> None:
    """Outside ``rpc/`` no module of ``protocol/`` overrides a pygls private."""
    protocol = RPC.parent
    for path in protocol.rglob("*.py"):
        if RPC in path.parents:
            continue
        text = path.read_text(encoding="utf-8")
        for name in OVERRIDDEN_METHODS:
            assert f"def {name}(" not in text, f"{path} overrides pygls's {name}: it belongs in rpc/"
