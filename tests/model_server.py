"""A real HTTP server on 127.0.0.1 that stands in for the network in the fetch tests: fair-esm's
download site, the Hugging Face Hub, and plain files by URL.

For the Hub it answers what huggingface_hub's client (2.x) asks for `snapshot_download` and
`model_info(files_metadata=True)`:
- GET /api/models/{repo}/revision/{revision}[?blobs=True]: the commit ("sha") and the files
  ("siblings"; with blobs, their size, git blob id and, for LFS files, the LFS SHA-256);
- GET /api/models/{repo}/tree/{commit}?recursive=True: the same per file ("oid", "size", "lfs");
- HEAD and GET /{repo}/resolve/{commit}/{file}: X-Repo-Commit, ETag (git blob id) or, for LFS
  files, X-Linked-Etag (SHA-256) and X-Linked-Size, and Content-Length.
"""

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")  # what the Hub keeps in LFS


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class ModelServer:
    """`files`: URL path -> content; `repos`: Hub repo id -> {file name: content}. `damaged`: URL
    path -> other bytes sent in place of the content (what the metadata declares stays the
    same); `cut`: URL path -> bytes sent before the connection drops. `requests`: (method, path)."""

    def __init__(self):
        self.files, self.repos, self.damaged, self.cut, self.requests = {}, {}, {}, {}, []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> "ModelServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()

    def commit(self, repo: str) -> str:
        return hashlib.sha1(
            json.dumps(sorted((n, git_blob_id(d)) for n, d in self.repos[repo].items())).encode()
        ).hexdigest()

    def file_info(self, repo: str, name: str, tree: bool) -> dict:
        data = self.repos[repo][name]
        info = {"size": len(data), ("oid" if tree else "blobId"): git_blob_id(data)}
        if name.endswith(LFS_SUFFIXES):
            sha256 = hashlib.sha256(data).hexdigest()
            info["lfs"] = {("oid" if tree else "sha256"): sha256, "size": len(data), "pointerSize": 134}
        return {"type": "file", "path": name, **info} if tree else {"rfilename": name, **info}


def _handler(server: ModelServer):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_HEAD(self) -> None:
            self.respond()

        def do_GET(self) -> None:
            self.respond()

        def respond(self) -> None:
            url = urlsplit(self.path)
            path, query = unquote(url.path), parse_qs(url.query)
            server.requests.append((self.command, path))
            if match := re.fullmatch(r"/api/models/([^/]+/[^/]+)/(revision|tree)/([^/]+)", path):
                repo, kind, revision = match.groups()
                if repo not in server.repos or revision not in ("main", server.commit(repo)):
                    return self.send(404, b'{"error": "Repository or revision not found"}')
                names = sorted(server.repos[repo])
                if kind == "tree":
                    body = [server.file_info(repo, name, tree=True) for name in names]
                else:
                    blobs = query.get("blobs", ["false"])[0].lower() == "true"
                    siblings = [server.file_info(repo, n, tree=False) if blobs else {"rfilename": n} for n in names]
                    body = {"id": repo, "modelId": repo, "sha": server.commit(repo), "siblings": siblings}
                return self.send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})
            if match := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
                repo, revision, name = match.groups()
                if repo not in server.repos or name not in server.repos[repo]:
                    return self.send(404, b"Entry not found", {"X-Error-Code": "EntryNotFound"})
                data, commit = server.repos[repo][name], server.commit(repo)
                headers = {"X-Repo-Commit": commit, "ETag": f'"{git_blob_id(data)}"'}
                if name.endswith(LFS_SUFFIXES):
                    headers |= {
                        "X-Linked-Etag": f'"{hashlib.sha256(data).hexdigest()}"',
                        "X-Linked-Size": str(len(data)),
                    }
                return self.send(200, server.damaged.get(path, data), headers, path)
            if path in server.files:
                return self.send(200, server.damaged.get(path, server.files[path]), {}, path)
            self.send(404, b"Not found")

        def send(self, status: int, body: bytes, headers: dict | None = None, path: str = "") -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(body[: server.cut.get(path, len(body))])  # HTTP/1.0: the connection closes after

    return Handler
