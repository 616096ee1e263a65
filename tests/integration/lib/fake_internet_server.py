#!/usr/bin/python3
"""The servers of the fake internet (lib/fake_internet.mjs), run inside its
"inet" network namespace. Standard library only: it runs on the host's
/usr/bin/python3, whatever else is installed.

  fake_internet_server.py wheel OUT_DIR TOKEN   build the probe wheel, print its file name
  fake_internet_server.py serve CONFIG.json     serve until stdin closes

Every accepted connection and every request is appended to the events file
as one JSON line, so the test can tell what reached the fake internet (and
what must never have reached it) without trusting the job or the proxy.
"""
import base64
import hashlib
import json
import os
import select
import shutil
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

WHEEL_PROJECT = "throwbox-probe"
WHEEL_MODULE = "throwbox_probe"


def build_wheel(out_dir, token):
    """A pure-python wheel pip 23 installs: the module, METADATA, WHEEL and
    a RECORD with every other file's sha256 and size. The module carries
    TOKEN, so an import in the job proves it got this wheel."""
    dist_info = f"{WHEEL_MODULE}-1.0.dist-info"
    files = {
        f"{WHEEL_MODULE}/__init__.py": f'TOKEN = "{token}"\n'.encode(),
        f"{dist_info}/METADATA": (
            "Metadata-Version: 2.1\n"
            f"Name: {WHEEL_PROJECT}\n"
            "Version: 1.0\n"
            "Summary: throwbox egress test probe\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            "Wheel-Version: 1.0\n"
            "Generator: throwbox-tests\n"
            "Root-Is-Purelib: true\n"
            "Tag: py3-none-any\n"
        ).encode(),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    name = f"{WHEEL_MODULE}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(out_dir, name), "w", zipfile.ZIP_DEFLATED) as z:
        for member, data in files.items():
            z.writestr(member, data)
    return name


EVENTS = None
EVENTS_LOCK = threading.Lock()


def event(**fields):
    fields["t"] = round(time.time(), 3)
    line = json.dumps(fields) + "\n"
    with EVENTS_LOCK:
        EVENTS.write(line)
        EVENTS.flush()


class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, service, handler):
        self.service = service
        self.tls = None
        if service.get("cert"):
            self.tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.tls.load_cert_chain(service["cert"], service["key"])
        super().__init__((service["addr"], service["port"]), handler)

    def get_request(self):
        sock, peer = self.socket.accept()
        event(svc=self.service["name"], event="accept", peer=peer[0])
        if self.tls:
            # The handshake happens in the connection's own thread (setup),
            # so a client that never finishes it cannot stall the accept loop.
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, peer

    def handle_error(self, request, client_address):
        event(svc=self.service["name"], event="error", peer=client_address[0], error=repr(sys.exc_info()[1]))


class Handler(BaseHTTPRequestHandler):
    """What the HTTP services share: the TLS handshake in the connection's
    own thread, no access log, the service's configuration as svc."""
    timeout = 30
    sys_version = ""

    def setup(self):
        super().setup()
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def log_message(self, *args):
        pass

    @property
    def svc(self):
        return self.server.service


class Web(Handler):
    server_version = "fake-internet"

    def send_body(self, status, body, content_type="text/plain"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        event(svc=self.svc["name"], event="request", method="GET", path=self.path,
              host=self.headers.get("Host", ""), peer=self.client_address[0])
        if "text" in self.svc:
            # internal / metadata: the same answer to everything.
            return self.send_body(200, self.svc["text"].encode())
        if url.path == "/hello":
            return self.send_body(200, self.svc["hello"].encode())
        if url.path == "/big":
            return self.big(int(query.get("n", ["0"])[0]))
        if url.path == "/slow":
            return self.slow()
        if self.svc.get("wheel") and url.path.startswith(("/simple/", "/files/")):
            return self.index(url.path)
        return self.send_body(404, b"not found\n")

    def big(self, n):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(n))
        self.send_header("Connection", "close")
        self.end_headers()
        sent = 0
        chunk = b"x" * 16384
        try:
            while sent < n:
                part = chunk[: n - sent]
                self.wfile.write(part)
                sent += len(part)
        except OSError as e:
            event(svc=self.svc["name"], event="big-aborted", path=self.path, sent=sent, error=type(e).__name__)
            return
        event(svc=self.svc["name"], event="big-done", path=self.path, sent=sent)

    def slow(self):
        """A byte a second for five minutes, watching for the peer's close:
        the slow-close event says when (and how) the connection ended."""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Connection", "close")
        self.end_headers()
        event(svc=self.svc["name"], event="slow-open", path=self.path, peer=self.client_address[0])
        sent, why = 0, "limit"
        try:
            for _ in range(300):
                self.wfile.write(b".")
                sent += 1
                readable, _, _ = select.select([self.connection], [], [], 1.0)
                if readable and not self.connection.recv(1):
                    why = "eof"
                    break
        except OSError as e:
            why = type(e).__name__
        event(svc=self.svc["name"], event="slow-close", path=self.path, sent=sent, why=why)

    def index(self, path):
        """A PEP 503 simple index of one project with one wheel."""
        wheel = self.svc["wheel"]
        name = os.path.basename(wheel)
        if path == "/simple/":
            body = f'<!DOCTYPE html><html><body><a href="{WHEEL_PROJECT}/">{WHEEL_PROJECT}</a></body></html>\n'
            return self.send_body(200, body.encode(), "text/html")
        if path in (f"/simple/{WHEEL_PROJECT}/", f"/simple/{WHEEL_MODULE}/"):
            with open(wheel, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            body = (f'<!DOCTYPE html><html><body><a href="/files/{name}#sha256={digest}">{name}</a>'
                    "</body></html>\n")
            return self.send_body(200, body.encode(), "text/html")
        if path == f"/files/{name}":
            with open(wheel, "rb") as f:
                return self.send_body(200, f.read(), "application/octet-stream")
        return self.send_body(404, b"not found\n")


class Api(Handler):
    """An authenticated HTTPS API (the credential proxy's tests): HTTP/1.1
    with keep-alive; every request is logged with all its headers and its
    body's size; only the service's key ("Bearer <key>") gets an answer.
      /v1/redirect   302 to https://elsewhere.test/v1/reports/stolen
      /v1/chunked    a chunked answer in three chunks
      anything else  200, JSON naming the method and path"""
    protocol_version = "HTTP/1.1"
    # Headers and body go in separate writes: without this the client's
    # delayed ACK holds the body 40 ms, which would hide what a proxy costs.
    disable_nagle_algorithm = True
    server_version = "fake-api"

    def answer(self, status, doc, extra=()):
        body = (json.dumps(doc) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self):
        svc = self.svc
        length = int(self.headers.get("Content-Length", "0") or "0")
        body = self.rfile.read(length) if length else b""
        event(svc=svc["name"], event="request", method=self.command, path=self.path,
              headers=[[k, v] for k, v in self.headers.items()], body_bytes=len(body),
              body_sha256=hashlib.sha256(body).hexdigest(), peer=self.client_address[0])
        if self.headers.get_all("Authorization") != ["Bearer " + svc["api_key"]]:
            return self.answer(401, {"error": "unauthorized"})
        url = urlsplit(self.path)
        if url.path == "/v1/redirect":
            return self.answer(302, {"moved": True}, [("Location", "https://elsewhere.test/v1/reports/stolen")])
        if url.path == "/v1/chunked":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"one,", b"two,", b"three\n"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
            return None
        return self.answer(200, {"ok": True, "method": self.command, "path": self.path, "body_bytes": len(body),
                                 "body_sha256": hashlib.sha256(body).hexdigest()})

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = handle_any


class Dns(socketserver.BaseRequestHandler):
    """A nameserver for the fake internet, over UDP: A records from the
    service's zone, an empty answer for any other type of a zone name, no
    answer at all for a name in `silent` (a server that never replies), and
    NXDOMAIN for the rest. Every query is an event, so a test sees exactly
    which names a resolver asked for."""

    def handle(self):
        data, sock = self.request
        if len(data) < 17:
            return
        qid, flags = data[0:2], int.from_bytes(data[2:4], "big")
        labels, i = [], 12
        while i < len(data) and data[i] != 0:
            n = data[i]
            labels.append(data[i + 1:i + 1 + n].decode("ascii", "replace"))
            i += 1 + n
        qtype = int.from_bytes(data[i + 1:i + 3], "big")
        question = data[12:i + 5]
        name = ".".join(labels).lower()
        svc = self.server.service
        event(svc=svc["name"], event="query", name=name, qtype=qtype, peer=self.client_address[0])
        if name in svc.get("silent", []):
            return
        zone = svc.get("zone", {})
        answers = []
        if name in zone and qtype == 1:
            for address in zone[name]:
                rdata = bytes(int(x) for x in address.split("."))
                answers.append(b"\xc0\x0c" + (1).to_bytes(2, "big") + (1).to_bytes(2, "big") +
                               (30).to_bytes(4, "big") + len(rdata).to_bytes(2, "big") + rdata)
        rcode = 0 if name in zone else 3
        reply_flags = 0x8000 | (flags & 0x0100) | 0x0080 | rcode  # QR, RD as asked, RA
        head = qid + reply_flags.to_bytes(2, "big") + (1).to_bytes(2, "big") + len(answers).to_bytes(2, "big") + bytes(4)
        sock.sendto(head + question + b"".join(answers), self.client_address)


class DnsServer(socketserver.ThreadingMixIn, socketserver.UDPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, service):
        self.service = service
        self.tls = None
        super().__init__((service["addr"], service["port"]), Dns)


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.settimeout(30)
        while True:
            data = self.request.recv(4096)
            if not data:
                return
            self.request.sendall(data)


def serve(config_file):
    global EVENTS
    with open(config_file) as f:
        config = json.load(f)
    EVENTS = open(config["events"], "a", encoding="utf-8")
    servers = [DnsServer(s) if s["kind"] == "dns" else Server(s, {"echo": Echo, "api": Api}.get(s["kind"], Web))
               for s in config["services"]]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print("ready", flush=True)
    # The test process holds the other end of stdin. At EOF it is gone
    # without having torn the fake internet down (killed, say): remove the
    # namespaces and the temp dir here, so nothing is left on the host.
    sys.stdin.buffer.read()
    for ns in config.get("netns", []):
        subprocess.run(["ip", "netns", "delete", ns], stderr=subprocess.DEVNULL, check=False)
    if config.get("dir"):
        shutil.rmtree(config["dir"], ignore_errors=True)
    os._exit(0)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "wheel":
        print(build_wheel(sys.argv[2], sys.argv[3]))
    elif len(sys.argv) == 3 and sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        sys.exit("usage: fake_internet_server.py wheel OUT_DIR TOKEN | serve CONFIG.json")
