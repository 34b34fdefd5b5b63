"""The remotes registry (engine/remotes/registry.py): names, URLs, keys, the file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine.remotes import (
    Remote,
    RemoteError,
    add_remote,
    check_name,
    check_url,
    load_remotes,
    remove_remote,
    split_model,
)


@pytest.mark.parametrize("name", ["", "a@b", "has space", "-lead", "x" * 41, "ü", "a/b"])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(RemoteError):
        check_name(name)


def test_names_are_stored_lowercase() -> None:
    assert check_name(" GPU-Box.2 ") == "gpu-box.2"


@pytest.mark.parametrize(
    "url",
    ["ftp://x", "file:///etc/passwd", "http://", "x:1", "http://u:p@host", "http://h?q=1",
     "http://h#f", "http://h:99999", "javascript:alert(1)"],
)  # fmt: skip
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(RemoteError):
        check_url(url)


def test_a_url_keeps_its_path_and_the_api_base_gains_v1() -> None:
    assert check_url("https://ovms.example:8000/") == "https://ovms.example:8000"
    assert Remote("a", "http://h:8000").api_base == "http://h:8000/v1"
    assert Remote("a", "http://h:8000/v1").api_base == "http://h:8000/v1"


def test_the_key_is_in_no_repr_and_no_public_view() -> None:
    remote = Remote("a", "http://h", "s3cret-key")
    assert "s3cret" not in repr(remote) and "s3cret" not in json.dumps(remote.public())
    assert remote.headers() == {"Authorization": "Bearer s3cret-key"}
    assert Remote("b", "http://h").headers() == {}


def test_model_ids_split_at_the_last_at() -> None:
    assert split_model("qwen@box") == ("qwen", "box")
    assert split_model("a@b@BOX") == ("a@b", "box")
    assert split_model("qwen") is None
    assert split_model("@box") is None
    assert split_model("qwen@bad name") is None


def test_the_file_is_private_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "config" / "remotes.json"
    add_remote(path, "box", "http://10.0.0.2:11680", "k3y")
    add_remote(path, "ovms", "http://10.0.0.3:8000")
    add_remote(path, "BOX", "http://10.0.0.9:11680")  # replaces box (and drops its key)
    if os.name != "nt":
        assert path.stat().st_mode & 0o777 == 0o600
    assert load_remotes(path) == [
        Remote("ovms", "http://10.0.0.3:8000"),
        Remote("box", "http://10.0.0.9:11680"),
    ]
    assert remove_remote(path, "ovms") and not remove_remote(path, "ovms")


@pytest.mark.parametrize(
    "text", ["{", "[]", '{"remotes": 3}', '{"remotes": [{"name": "a@b", "url": "http://h"}]}']
)
def test_a_damaged_file_is_an_error_naming_it(tmp_path: Path, text: str) -> None:
    path = tmp_path / "remotes.json"
    path.write_text(text)
    with pytest.raises(RemoteError):
        load_remotes(path)
