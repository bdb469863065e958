"""file URIs through pygls's conversion, with the Windows flavour faked (``pygls.uris.IS_WIN``)."""

from __future__ import annotations

from pathlib import Path, PureWindowsPath

import pytest
from pygls import uris as pygls_uris

from arena_ls.uris import fs_path_to_uri, path_to_uri, uri_to_path


@pytest.fixture
def windows_flavour(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pygls_uris, "IS_WIN", True)


@pytest.mark.usefixtures("windows_flavour")
def test_a_vscode_drive_uri_becomes_a_drive_path() -> None:
    path = uri_to_path("file:///c%3A/Users/me/My%20Project/train.py")
    assert path is not None
    assert str(path) == "c:\\Users\\me\\My Project\\train.py"
    assert PureWindowsPath(str(path)) == PureWindowsPath(r"C:\Users\me\My Project\train.py")


@pytest.mark.usefixtures("windows_flavour")
def test_a_unc_uri_becomes_a_share_path() -> None:
    path = uri_to_path("file://server/share/proj/train.py")
    assert path is not None and str(path) == "\\\\server\\share\\proj\\train.py"


@pytest.mark.usefixtures("windows_flavour")
def test_a_drive_path_becomes_the_uri_the_editor_matches() -> None:
    uri = fs_path_to_uri(r"C:\Users\me\My Project\train.py")
    assert uri == "file:///c:/Users/me/My%20Project/train.py"
    back = uri_to_path(uri)
    assert back is not None
    assert PureWindowsPath(str(back)) == PureWindowsPath(r"C:\Users\me\My Project\train.py")


def test_posix_paths_round_trip(tmp_path: Path) -> None:
    target = tmp_path / "a dir" / "train#1.py"
    uri = path_to_uri(target)
    assert uri.startswith("file:///") and "%20" in uri and "%23" in uri
    assert uri_to_path(uri) == target


def test_other_schemes_are_not_paths() -> None:
    assert uri_to_path("untitled:Untitled-1") is None
