"""Talking to the model hub through ``huggingface_hub``: repo listings and clear errors.

The endpoint is huggingface_hub's own (``HF_ENDPOINT``) unless a caller passes one; the token
is Sidelight's ``hf_token`` setting, else whatever huggingface_hub finds (``HF_TOKEN``, a
saved login). Every failure is turned into a :class:`~engine.store.errors.HubError` whose
message says what happened and what to do.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from pathlib import PurePath

from engine.store.errors import HubError

logger = logging.getLogger(__name__)

_ACCESS_HINT = "set SIDELIGHT_HF_TOKEN (or HF_TOKEN) to a token from your hub account settings"


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repo as the hub publishes it."""

    path: str
    size: int
    sha256: str | None  # LFS files
    git_oid: str | None  # git blob id (sha1 of "blob <size>\\0" + content)


@dataclass(frozen=True)
class RepoListing:
    """A repo pinned to one commit, with its files."""

    repo: str
    commit: str
    files: tuple[RemoteFile, ...]
    gated: bool

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)

    def has(self, name: str) -> bool:
        return any(f.path == name for f in self.files)


def list_repo(
    repo: str, revision: str = "main", *, endpoint: str | None = None, token: str | None = None
) -> RepoListing:
    """List a model repo's files with sizes and hashes, pinned to the revision's commit.

    Every listed path is relative and stays inside the repo, so callers may join it to a
    local folder.

    Raises:
        HubError: missing repo or revision, refused token, no network, an unsafe file name.
    """
    from huggingface_hub import HfApi

    try:
        info = HfApi(endpoint=endpoint, token=token).model_info(
            repo, revision=revision, files_metadata=True
        )
    except Exception as exc:
        raise hub_error(exc, repo, revision) from exc
    if not info.sha:
        raise HubError(f"the hub did not say which commit {repo}@{revision} is")
    files = []
    for sibling in info.siblings or []:
        name = PurePath(sibling.rfilename)
        if name.is_absolute() or ".." in name.parts:
            raise HubError(f"the hub listed a file with an unsafe name: {sibling.rfilename!r}")
        if sibling.size is None:
            raise HubError(f"the hub did not publish the size of {repo}/{sibling.rfilename}")
        files.append(
            RemoteFile(
                path=sibling.rfilename,
                size=int(sibling.size),
                sha256=sibling.lfs.sha256 if sibling.lfs else None,
                git_oid=sibling.blob_id,
            )
        )
    return RepoListing(repo=repo, commit=info.sha, files=tuple(files), gated=bool(info.gated))


def hub_error(exc: BaseException, repo: str, revision: str = "main") -> HubError:  # noqa: PLR0911
    """Translate a huggingface_hub / HTTP exception into a message a person can act on."""
    from huggingface_hub import errors

    if isinstance(exc, HubError):
        return exc
    if isinstance(exc, errors.GatedRepoError):
        if _status(exc) == 403:
            return HubError(
                f"{repo} is gated and your token has no access yet: accept the model's terms "
                "on its hub page with the same account, then try again"
            )
        return HubError(
            f"{repo} is gated: sign in on the hub, accept the model's terms, and {_ACCESS_HINT}"
        )
    if isinstance(exc, errors.RevisionNotFoundError):
        return HubError(f"{repo} has no revision '{revision}'")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return HubError(
            f"no model repo named '{repo}' on the hub: check the spelling "
            f"(private repos also need a token: {_ACCESS_HINT})"
        )
    if isinstance(exc, errors.RemoteEntryNotFoundError):
        return HubError(f"a file listed for {repo} is missing on the hub; try again later")
    if isinstance(exc, errors.HfHubHTTPError) and _status(exc) == 401:
        return HubError(
            "the hub refused the token (invalid or expired): check SIDELIGHT_HF_TOKEN / HF_TOKEN"
        )
    if isinstance(exc, errors.OfflineModeIsEnabled):
        return HubError("huggingface_hub is in offline mode (HF_HUB_OFFLINE); unset it to download")
    if isinstance(exc, errors.HfHubHTTPError):
        return HubError(f"the hub answered {_status(exc)} for {repo}: {exc}".splitlines()[0])
    if isinstance(exc, transport_errors()):
        return HubError(
            "cannot reach the model hub (no network?): check the connection, then run the same "
            "command again; finished bytes are kept and the download resumes"
        )
    return HubError(f"download of {repo} failed: {type(exc).__name__}: {exc}")


def transport_errors() -> tuple[type[BaseException], ...]:
    """Network-level exception types of whichever HTTP library huggingface_hub uses."""
    found: list[type[BaseException]] = []
    for name in ("httpx2", "httpx", "requests"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for attr in ("TransportError", "ConnectionError", "Timeout"):
            kind = getattr(module, attr, None)
            if isinstance(kind, type) and issubclass(kind, BaseException):
                found.append(kind)
    return tuple(found)


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return int(status) if status is not None else None
