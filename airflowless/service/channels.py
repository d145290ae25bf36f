"""Where notifications go: a webhook, email over SMTP, or a Python function of the pipeline's module.

A channel is written ``KIND:WHAT`` after the event (``--notify on_failure=...``):

- ``webhook:env:VARIABLE`` / ``webhook:file:PATH``: POST the message as JSON to
  the URL held there (the URL carries a token: only the variable's or file's name
  is recorded);
- ``email:ADDRESS[,ADDRESS...]``: mail it through the server of
  ``AIRFLOWLESS_SMTP`` (its password from ``AIRFLOWLESS_SMTP_PASSWORD`` or
  ``..._FILE``; :mod:`airflowless.settings`);
- ``python:FUNCTION``: call ``FUNCTION(message)`` of the deployment's pipeline
  module, in a child process of its own with a time limit (a function that
  hangs or crashes takes only that process down).

:func:`deliver` raises :class:`ConfigError` when trying again cannot help (no
URL here, no mail server configured), anything else for a failure worth a retry.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["parse_channel", "label", "deliver", "TIMEOUT_S", "CALL_TIMEOUT_S"]

TIMEOUT_S = 10.0
"""How long a webhook or mail server may take to answer."""

CALL_TIMEOUT_S = 60.0
"""How long a Python notification function may run."""

_ADDRESS = re.compile(r"[^@\s,;<>]+@[^@\s,;<>]+\.[^@\s,;<>]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_channel(target: str, spec: str) -> dict[str, str]:
    """``webhook:env:HOOK``, ``email:ops@example.com`` or ``python:alert`` as a notify rule's channel fields.

    >>> parse_channel("email:ops@example.com,ml@example.com", "on_failure=...")
    {'channel': 'email', 'to': 'ops@example.com,ml@example.com'}
    """
    kind, _, rest = target.partition(":")
    if kind == "webhook":
        where, _, name = rest.partition(":")
        if where not in ("env", "file") or not name:
            raise ConfigError(f"a webhook's URL is a secret: name the environment variable or file that holds it, "
                              f"webhook:env:VARIABLE or webhook:file:PATH; got {spec!r}")
        if where == "env" and os.environ.get(name):
            _check_url(os.environ[name], name)
        return {"channel": "webhook", "secret": rest}
    if kind == "email":
        addresses = [a.strip() for a in rest.split(",") if a.strip()]
        bad = [a for a in addresses if not _ADDRESS.fullmatch(a)]
        if not addresses or bad:
            raise ConfigError(f"email:ADDRESS[,ADDRESS...] takes mail addresses, e.g. email:ops@example.com; "
                              f"got {bad or rest!r} in {spec!r}")
        return {"channel": "email", "to": ",".join(addresses)}
    if kind == "python":
        if not _NAME.fullmatch(rest):
            raise ConfigError(f"python:FUNCTION names a function of the pipeline's module, e.g. python:alert_ops; "
                              f"got {spec!r}")
        return {"channel": "python", "function": rest}
    raise ConfigError(f"unknown notification channel {kind!r} in {spec!r}; a channel is webhook:env:VARIABLE, "
                      "webhook:file:PATH, email:ADDRESS or python:FUNCTION")


def label(rule: dict[str, str]) -> str:
    """How a rule's channel is named in the record and on the pages (a webhook by its secret's name only)."""
    what = rule.get("secret") or rule.get("to") or rule.get("function") or ""
    return f"{rule['channel']}:{what}"


def resolve_url(secret: str) -> str:
    """The URL behind ``env:VAR`` or ``file:PATH``, in this process; ConfigError naming what is missing."""
    kind, _, name = secret.partition(":")
    if kind == "env":
        url = os.environ.get(name, "")
        if not url:
            raise ConfigError(f"the environment variable {name} (a webhook's URL) is not set where the service runs")
    else:
        try:
            url = Path(name).read_text().strip().splitlines()[0]
        except (OSError, IndexError):
            raise ConfigError(f"cannot read a webhook's URL from {name}") from None
    _check_url(url, name)
    return url


def _check_url(url: str, where: str) -> None:
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"the webhook URL in {where} is not http(s): it starts {url[:8]!r}")


def deliver(rule: dict[str, str], message: dict[str, Any], target: str | None) -> None:
    """Send ``message`` through ``rule``'s channel (``target``: the deployment's, for ``python:``)."""
    if rule["channel"] == "webhook":
        _post(resolve_url(rule["secret"]), message)
    elif rule["channel"] == "email":
        _mail(rule["to"].split(","), message)
    elif rule["channel"] == "python":
        _call(target, rule["function"], message)
    else:
        raise ConfigError(f"unknown notification channel {rule['channel']!r}")


def _post(url: str, message: dict[str, Any]) -> None:
    request = urllib.request.Request(url, data=json.dumps(message).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310 (http(s) only)
        answer.read()


def _mail(to: list[str], message: dict[str, Any]) -> None:
    import smtplib
    import socket
    import ssl
    from email.message import EmailMessage
    from urllib.parse import urlsplit

    from ..settings import get_settings

    settings = get_settings()
    if not settings.smtp:
        raise ConfigError("email notifications need a mail server: set AIRFLOWLESS_SMTP (e.g. smtp://mail.example:587) "
                          "where the service runs")
    url = urlsplit(settings.smtp)
    if url.scheme not in ("smtp", "smtps", "smtp+plain") or not url.hostname:
        raise ConfigError(f"AIRFLOWLESS_SMTP is smtp://[USER@]HOST[:PORT], smtps://... or smtp+plain://...; "
                          f"got scheme {url.scheme!r}")
    mail = EmailMessage()
    mail["Subject"] = message["text"][:200]
    mail["From"] = settings.smtp_from or f"airflowless@{socket.gethostname()}"
    mail["To"] = ", ".join(to)
    mail.set_content(message["text"] + "\n\n" + json.dumps(message, indent=2) + "\n")
    context = ssl.create_default_context()
    if url.scheme == "smtps":
        server: smtplib.SMTP = smtplib.SMTP_SSL(url.hostname, url.port or 465, timeout=TIMEOUT_S, context=context)
    else:
        server = smtplib.SMTP(url.hostname, url.port or 25, timeout=TIMEOUT_S)
    with server:
        server.ehlo()
        if url.scheme == "smtp" and server.has_extn("starttls"):
            server.starttls(context=context)
            server.ehlo()
        if url.username:
            server.login(url.username, settings.smtp_password or "")
        server.send_message(mail)


def _call(target: str | None, function: str, message: dict[str, Any]) -> None:
    if not target:
        raise ConfigError(f"python:{function} needs the deployment's module, and this run has none")
    done = subprocess.run([sys.executable, "-m", "airflowless.service.channels", target, function],
                          input=json.dumps(message), capture_output=True, text=True, timeout=CALL_TIMEOUT_S)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{function}(message) failed (exit {done.returncode}): {' / '.join(tail)}")


def _main(argv: list[str]) -> int:
    """``python -m airflowless.service.channels TARGET FUNCTION``: call it with the JSON message on stdin."""
    from ..dag.loader import load_module
    from .upload import local_target

    target, function = argv
    module_part = local_target(target).rpartition(":")[0] or target
    fn = getattr(load_module(module_part), function, None)
    if not callable(fn):
        print(f"{module_part} has no function {function!r}", file=sys.stderr)
        return 2
    fn(json.loads(sys.stdin.read()))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
