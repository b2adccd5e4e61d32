"""A TCP proxy for the tests that breaks a connection at a chosen moment:
armed with a byte pattern, it cuts the connection whose client sends it,
either before forwarding it (the server never sees the statement) or after
the server's reply to it (the statement ran; the client never hears), or
replacing that reply with one of the test's (a forged error: the statement
ran, the client hears that it failed)."""

import socket
import threading
from typing import Optional

from conftest import free_addr


class Proxy:
    def __init__(self, upstream_host: str, upstream_port: int):
        self.upstream = (upstream_host, upstream_port)
        host, port = free_addr().split(":")
        self.host, self.port = host, int(port)
        self.listener = socket.create_server((host, self.port))
        self.pattern: Optional[bytes] = None
        self.mode = ""
        self.reply: Optional[bytes] = None
        self.cut = threading.Event()
        self._closing = False
        self._socks = []
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, pattern: bytes, mode: str, reply: Optional[bytes] = None) -> None:
        """mode "before": cut before forwarding the packet that holds
        pattern; "after": forward it, wait for the server's reply, drop the
        reply and cut; "replace": as "after", but send reply to the client
        instead of the server's before cutting; "hold": never forward it
        nor anything after it, and keep the connection open (a server that
        went silent)."""
        self.pattern, self.mode, self.reply = pattern, mode, reply

    def close(self) -> None:
        self._closing = True
        self.listener.close()

    def cut_all(self) -> None:
        """Ends every proxied connection now."""
        for c, s in list(self._socks):
            self._shut(c, s)

    def _accept(self):
        while not self._closing:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            s = socket.create_connection(self.upstream)
            self._socks.append((c, s))
            threading.Thread(target=self._client_to_server, args=(c, s), daemon=True).start()
            threading.Thread(target=self._server_to_client, args=(c, s), daemon=True).start()

    @staticmethod
    def _shut(*socks):
        for x in socks:
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            x.close()

    def _client_to_server(self, c, s):
        while True:
            try:
                data = c.recv(65536)
            except OSError:
                return
            if not data:
                self._shut(c, s)
                return
            if self.pattern is not None and self.pattern in data and not self.cut.is_set():
                self.pattern = None
                if self.mode == "before":
                    self.cut.set()
                    self._shut(c, s)
                    return
                if self.mode == "hold":
                    self.cut.set()
                    self._hold(c)
                    return
                self.cut.set()  # the server-to-client pump drops the reply, then cuts
                s.sendall(data)
                continue
            try:
                s.sendall(data)
            except OSError:
                return

    def _hold(self, c):
        """Reads and drops what the client sends until it hangs up."""
        while True:
            try:
                if not c.recv(65536):
                    return
            except OSError:
                return

    def _server_to_client(self, c, s):
        while True:
            try:
                data = s.recv(65536)
            except OSError:
                return
            if not data:
                self._shut(c, s)
                return
            if self.cut.is_set() and self.mode in ("after", "replace"):
                if self.mode == "replace" and self.reply:
                    try:
                        c.sendall(self.reply)
                    except OSError:
                        pass
                self._shut(c, s)  # the reply to the statement: dropped
                return
            try:
                c.sendall(data)
            except OSError:
                return
