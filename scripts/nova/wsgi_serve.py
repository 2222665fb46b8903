#!/usr/bin/python3
"""Serves a WSGI application (keystone, placement) on one address.

keystone and placement ship WSGI applications, not servers. The stdlib's
wsgiref server is single-threaded with a listen backlog of 5; this one is
threaded with a backlog of 128, enough for Nova's services and the tests.

Usage: wsgi_serve.py MODULE:FACTORY PORT [HOST]   (HOST: default 127.0.0.1)
  keystone:  keystone.server.wsgi:initialize_public_application
  placement: placement.wsgi:init_application
"""
import importlib
import socketserver
import sys
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    request_queue_size = 128


class QuietHandler(WSGIRequestHandler):
    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (self.log_date_time_string(), fmt % args))


def main():
    target, port = sys.argv[1], int(sys.argv[2])
    host = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1"
    # keystone parses sys.argv as its own command line: leave it nothing.
    del sys.argv[1:]
    mod, func = target.split(":")
    app = getattr(importlib.import_module(mod), func)()
    srv = make_server(host, port, app, server_class=ThreadingWSGIServer,
                      handler_class=QuietHandler)
    srv.serve_forever()


if __name__ == "__main__":
    main()
