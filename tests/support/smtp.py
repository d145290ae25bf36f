"""A real SMTP server on loopback (aiosmtpd) that keeps what it is sent: ``with Mailbox() as box: box.url``."""

from __future__ import annotations

import socket
from email import message_from_bytes
from email.message import Message
from typing import Any

from tests.conftest import require_module

__all__ = ["Mailbox"]


class Mailbox:
    """An SMTP server on 127.0.0.1; ``messages`` holds each mail received (parsed), ``url`` is for AIRFLOWLESS_SMTP."""

    def __init__(self) -> None:
        require_module("aiosmtpd")
        from aiosmtpd.controller import Controller

        self.messages: list[Message] = []
        self.recipients: list[list[str]] = []
        box = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 (aiosmtpd's)
                box.messages.append(message_from_bytes(envelope.original_content or envelope.content))
                box.recipients.append(list(envelope.rcpt_tos))
                return "250 OK"

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=port)
        self.url = f"smtp://127.0.0.1:{port}"

    def __enter__(self) -> Mailbox:
        self.controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.controller.stop()
