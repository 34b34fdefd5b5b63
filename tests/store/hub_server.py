"""A local HTTP server that speaks the model hub's file API, serving fixture repos from a folder.

The real hub cannot be reached from our machines, so download code is tested against this
server through the real ``huggingface_hub`` client (pointed here with ``HF_ENDPOINT`` or an
explicit ``endpoint``). It implements what ``HfApi.model_info``, ``list_repo_tree``,
``hf_hub_download``/``snapshot_download`` and ``get_hf_file_metadata``/``http_get`` use:

* ``GET /api/models?search=&filter=&sort=&limit=`` (``HfApi.list_models``): repos whose id
  contains ``search`` (case-insensitive) and whose tags hold every ``filter``, most
  downloaded (or liked) first, as the hub's short listing shows them; tags are ``openvino``
  for a repo with ``openvino_model.xml``, ``gguf`` for one with ``.gguf`` files, plus any in
  the repo's optional ``.hub.json`` (``downloads``, ``likes``, ``pipeline_tag``, ``tags``);
* ``GET /api/models/{repo}[/revision/{rev}]`` (``?blobs=true`` adds sizes, blob ids and LFS
  sha256 to ``siblings``);
* ``GET /api/models/{repo}/tree/{rev}`` (recursive listing);
* ``HEAD``/``GET /{repo}/resolve/{rev}/{path}`` with ``X-Repo-Commit``, ``ETag``, and for LFS
  files ``X-Linked-Etag`` (the sha256) and ``X-Linked-Size``; ``GET`` honours ``Range``;
* errors as the hub sends them: 404 ``X-Error-Code: RepoNotFound`` / ``RevisionNotFound`` /
  ``EntryNotFound``; 401 ``X-Error-Message: Invalid credentials in Authorization header`` for
  an unknown token; 401 (no token) or 403 (token without access) ``X-Error-Code: GatedRepo``
  for the files of a gated repo.

Repos are folders ``root/<org>/<name>``. Files of at least ``lfs_threshold`` bytes, and
``*.bin``/``*.gguf``/``*.safetensors``, are treated as LFS files. ``bytes_per_second`` slows
file bodies down so a test can cancel or kill a client mid-file.

Run it by hand: ``python tests/store/hub_server.py FOLDER [--port N] [--rate BYTES_PER_S]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".bin", ".gguf", ".safetensors")
_CHUNK = 16 * 1024


@dataclass(frozen=True)
class FileInfo:
    path: str
    size: int
    sha256: str
    git_oid: str
    lfs: bool


@dataclass
class HubConfig:
    """What the fake hub serves and how strict it is."""

    root: Path
    gated: set[str] = field(default_factory=set)  # repo ids whose files need a token
    tokens: dict[str, set[str]] = field(default_factory=dict)  # token -> gated repos it may read
    lfs_threshold: int = 10 * 1024
    bytes_per_second: float | None = None
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    search: bool = True  # False: a mirror that serves repos but has no model listing (404)


class HubServer:
    """The server on a free loopback port, run in a background thread (``with`` it)."""

    def __init__(self, config: HubConfig, port: int = 0) -> None:
        self.config = config
        handler = type("BoundHubHandler", (_HubHandler,), {"config": config, "cache": {}})
        self.httpd = _QuietServer(("127.0.0.1", port), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> HubServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def repo_files(config: HubConfig, repo: str, cache: dict[Any, Any] | None = None) -> list[FileInfo]:
    """Every file of a fixture repo with its hashes (hidden files left out)."""
    folder = config.root / repo
    infos = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        if cache is not None and key in cache:
            infos.append(cache[key])
            continue
        data = path.read_bytes()
        info = FileInfo(
            path=rel,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            git_oid=hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest(),
            lfs=len(data) >= config.lfs_threshold or rel.endswith(LFS_SUFFIXES),
        )
        if cache is not None:
            cache[key] = info
        infos.append(info)
    return infos


def repo_meta(config: HubConfig, repo: str) -> dict[str, Any]:
    """A fixture repo's listing figures from its optional ``.hub.json``."""
    path = config.root / repo / ".hub.json"
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return data if isinstance(data, dict) else {}


def repo_tags(config: HubConfig, repo: str, files: list[FileInfo]) -> list[str]:
    """The tags the hub would derive for a repo, plus the ones its ``.hub.json`` adds."""
    tags = []
    if any(f.path == "openvino_model.xml" for f in files):
        tags.append("openvino")
    if any(f.path.endswith(".gguf") for f in files):
        tags.append("gguf")
    extra = [str(t) for t in repo_meta(config, repo).get("tags", []) if str(t) not in tags]
    return tags + extra


def commit_of(files: list[FileInfo]) -> str:
    """A stable 40-hex "commit" for a repo's current contents."""
    digest = hashlib.sha1()
    for info in files:
        digest.update(f"{info.path}:{info.sha256}\n".encode())
    return digest.hexdigest()


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that are killed or cancelled mid-body are part of the tests.
        pass


class _HubHandler(BaseHTTPRequestHandler):
    config: HubConfig
    cache: dict[Any, Any]
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    # -- routing -------------------------------------------------------------------------

    def _route(self, *, head: bool) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        query = parse_qs(url.query)
        self.config.requests.append((self.command, path, self.headers.get("Range")))
        if self._bad_token():
            self._error(401, None, "Invalid credentials in Authorization header")
            return
        if path.rstrip("/") == "/api/models" and not self.config.search:
            self._error(404, None, "Not Found")
        elif path.rstrip("/") == "/api/models":
            self._search(query)
        elif match := re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(/.*)?", path):
            self._tree(match.group(1), match.group(2))
        elif match := re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path):
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            self._info(match.group(1), match.group(2) or "main", blobs)
        elif match := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
            self._resolve(match.group(1), match.group(2), match.group(3), head=head)
        else:
            self._error(404, None, "Not Found")

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    def _bad_token(self) -> bool:
        token = self._token()
        return token is not None and token not in self.config.tokens

    def _repo(self, repo: str, revision: str) -> tuple[list[FileInfo], str] | None:
        folder = self.config.root / repo
        if ".." in repo or not folder.is_dir():
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        files = repo_files(self.config, repo, self.cache)
        commit = commit_of(files)
        if revision not in {"main", commit}:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return None
        return files, commit

    # -- endpoints -----------------------------------------------------------------------

    def _info(self, repo: str, revision: str, blobs: bool) -> None:
        found = self._repo(repo, revision)
        if found is None:
            return
        files, commit = found
        siblings = []
        for info in files:
            sibling: dict[str, Any] = {"rfilename": info.path}
            if blobs:
                sibling["size"] = info.size
                sibling["blobId"] = info.git_oid
                if info.lfs:
                    sibling["lfs"] = {"size": info.size, "sha256": info.sha256, "pointerSize": 134}
            siblings.append(sibling)
        body = {
            "_id": commit[:24],
            "id": repo,
            "modelId": repo,
            "author": repo.split("/", maxsplit=1)[0],
            "sha": commit,
            "private": False,
            "disabled": False,
            "gated": "manual" if repo in self.config.gated else False,
            "downloads": 0,
            "likes": 0,
            "tags": repo_tags(self.config, repo, files),
            "siblings": siblings,
        }
        self._json(body)

    def _search(self, query: dict[str, list[str]]) -> None:
        words = query.get("search", [""])[0].lower()
        wanted = set(query.get("filter", []))
        sort = query.get("sort", ["downloads"])[0]
        limit = int(query.get("limit", ["1000"])[0])
        items = []
        for folder in sorted(p for p in self.config.root.glob("*/*") if p.is_dir()):
            repo = folder.relative_to(self.config.root).as_posix()
            if words not in repo.lower():
                continue
            files = repo_files(self.config, repo, self.cache)
            tags = repo_tags(self.config, repo, files)
            if not wanted <= set(tags):
                continue
            meta = repo_meta(self.config, repo)
            items.append(
                {
                    "_id": commit_of(files)[:24],
                    "id": repo,
                    "likes": int(meta.get("likes", 0)),
                    "trendingScore": 0,
                    "private": False,
                    "downloads": int(meta.get("downloads", 0)),
                    "tags": tags,
                    "pipeline_tag": meta.get("pipeline_tag", "text-generation"),
                    "library_name": "openvino" if "openvino" in tags else "gguf",
                    "createdAt": "2025-01-01T00:00:00.000Z",
                    "modelId": repo,
                }
            )
        if sort in {"downloads", "likes"}:
            items.sort(key=lambda item: item[sort], reverse=True)
        self._json(items[:limit])

    def _tree(self, repo: str, revision: str) -> None:
        found = self._repo(repo, revision)
        if found is None:
            return
        files, _ = found
        entries: list[dict[str, Any]] = []
        folders = sorted({str(Path(i.path).parent) for i in files} - {"."})
        for folder in folders:
            entries.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": folder})
        for info in files:
            entry: dict[str, Any] = {
                "type": "file",
                "oid": info.git_oid,
                "size": info.size,
                "path": info.path,
            }
            if info.lfs:
                entry["lfs"] = {"oid": info.sha256, "size": info.size, "pointerSize": 134}
            entries.append(entry)
        self._json(entries)

    def _resolve(self, repo: str, revision: str, filename: str, *, head: bool) -> None:
        found = self._repo(repo, revision)
        if found is None:
            return
        files, commit = found
        if repo in self.config.gated:
            token = self._token()
            if token is None:
                self._error(401, "GatedRepo", f"Access to model {repo} is restricted.")
                return
            if repo not in self.config.tokens.get(token, set()):
                self._error(403, "GatedRepo", f"Access to model {repo} is restricted.")
                return
        info = next((i for i in files if i.path == filename), None)
        if info is None:
            self._error(404, "EntryNotFound", f"{filename} does not exist", commit=commit)
            return
        start = 0
        status = 200
        if not head and (rng := re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))):
            start = int(rng.group(1))
            if start >= info.size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{info.size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        self.send_response(status)
        self.send_header("X-Repo-Commit", commit)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        if info.lfs:
            self.send_header("ETag", f'"{info.sha256}"')
            self.send_header("X-Linked-Etag", f'"{info.sha256}"')
            self.send_header("X-Linked-Size", str(info.size))
        else:
            self.send_header("ETag", f'"{info.git_oid}"')
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{info.size - 1}/{info.size}")
        self.send_header("Content-Length", str(info.size - start))
        self.end_headers()
        if head:
            return
        self._send_file(self.config.root / repo / filename, start)

    def _send_file(self, path: Path, start: int) -> None:
        rate = self.config.bytes_per_second
        with path.open("rb") as fh:
            fh.seek(start)
            began = time.monotonic()
            sent = 0
            while chunk := fh.read(_CHUNK):
                self.wfile.write(chunk)
                sent += len(chunk)
                if rate:
                    ahead = sent / rate - (time.monotonic() - began)
                    if ahead > 0:
                        time.sleep(ahead)

    # -- responses -----------------------------------------------------------------------

    def _json(self, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(
        self, status: int, code: str | None, message: str, commit: str | None = None
    ) -> None:
        data = json.dumps({"error": message}).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--rate", type=float, default=None, help="bytes per second per file")
    args = parser.parse_args()
    server = HubServer(HubConfig(root=args.root, bytes_per_second=args.rate), port=args.port)
    print(f"serving {args.root} at {server.url} (set HF_ENDPOINT to it)", flush=True)
    server.httpd.serve_forever()


if __name__ == "__main__":
    main()
