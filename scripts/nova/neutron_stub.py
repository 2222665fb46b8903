#!/usr/bin/python3
"""A minimal stand-in for Neutron, for the real-Nova test cloud only.

Nova calls Neutron even for servers booted with networks "none" (listing the
instance's ports on delete, extensions, security groups). Running a real
neutron-server would need an ML2 agent and much more; the reaper's tests need
none of it. So this answers Nova's few calls with empty collections:

  GET /                   -> the version list
  GET /v2.0/extensions    -> {"extensions": []}
  GET /v2.0/<collection>  -> {"<collection>": []}   (ports, networks, ...)
  GET /v2.0/security-groups?name=N (or ?id=UUID)
                          -> one group of that name (id uuid5 of the name),
                             so a boot spec naming security groups passes
                             Nova's check; nothing is enforced
  GET /v2.0/<coll>/<id>   -> 404 NotFound
  anything else           -> 404 / 405 with a Neutron-style error body

Nova, keystone, placement and glance stay real. Every request is logged
(method and path only) so a test failure shows what Nova asked for.

Usage: neutron_stub.py PORT [HOST]   (binds HOST only, default 127.0.0.1)
"""
import json
import sys
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, code, kind, msg):
        self._send(code, {"NeutronError": {"type": kind, "message": msg, "detail": ""}})

    def _drain(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)

    def do_GET(self):
        path = urlsplit(self.path).path.rstrip("/")
        parts = [p for p in path.split("/") if p]
        if not parts:
            self._send(200, {"versions": [{"id": "v2.0", "status": "CURRENT", "links": [
                {"rel": "self", "href": "http://%s/v2.0/" % self.headers.get("Host", "")}]}]})
        elif parts == ["v2.0"]:
            self._send(200, {"resources": []})
        elif parts[0] == "v2.0" and len(parts) == 2:
            name = parts[1].removesuffix(".json").replace("-", "_")
            items = []
            if name == "security_groups":
                items = security_groups(parse_qs(urlsplit(self.path).query))
            self._send(200, {name: items})
        else:
            self._error(404, "NotFound", "not found in the neutron stand-in: %s" % path)

    def do_DELETE(self):
        self._drain()
        self._error(404, "NotFound", "not found in the neutron stand-in")

    def _unsupported(self):
        self._drain()
        self._error(405, "NotSupported", "the neutron stand-in only answers reads")

    do_POST = do_PUT = _unsupported

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (self.log_date_time_string(), fmt % args))
        sys.stderr.flush()


def security_groups(query):
    """Any security group asked for by name exists; by id, any UUID does."""
    groups = []
    for name in query.get("name", []):
        gid = str(uuid.uuid5(uuid.NAMESPACE_URL, "nova-e2e-sg:" + name))
        groups.append({"id": gid, "name": name})
    for gid in query.get("id", []):
        try:
            uuid.UUID(gid)
        except ValueError:
            continue
        groups.append({"id": gid, "name": gid})
    for g in groups:
        g.update({"description": "neutron stand-in", "security_group_rules": []})
        for key in ("tenant_id", "project_id"):
            if key in query:
                g[key] = query[key][0]
    return groups


def main():
    port = int(sys.argv[1])
    host = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
    srv = ThreadingHTTPServer((host, port), Handler)
    srv.daemon_threads = True
    srv.serve_forever()


if __name__ == "__main__":
    main()
