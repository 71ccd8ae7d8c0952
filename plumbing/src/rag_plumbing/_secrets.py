"""The one masking rule for secrets, used by every file the toolkit writes (manifests, cards, ``partition.json``,
``eval_config.json``, ``summary.json``, work directories' ``run.json`` / ``backend.json``, ``train_config.yaml``,
``train_plan.json``) and by the command line recorded in them.

**The rule.** An option is a secret when its name, normalised (``--hf-token``, ``hfToken`` and ``HF_TOKEN`` all read
``hf_token``), ends in one of the words ``key``, ``api_key`` / ``apikey``, ``token``, ``secret``, ``password``,
``passwd``, ``credential(s)``, ``auth``, ``authorization``, ``sig``, ``signature``, ``session`` or ``sessionid``
(``api_key``, ``hf_token``, ``hub_token``, ``password``, ``aws_secret_access_key``, ``Authorization``, and the
signed-URL parameters ``sig``, ``X-Amz-Signature``, ``X-Amz-Security-Token``, ``X-Amz-Credential``,
``X-Goog-Signature``, ``session``; not ``tokenizer``, ``max_tokens``, ``keep_completions``).
A secret's value is written as ``***``, wherever it is: a top-level option, a key nested in a JSON value
(``extra_body={"api_key": ...}``), a ``--flag VALUE`` / ``--flag=VALUE`` of a command line, a ``KEY=VALUE``
argument (``--backend-arg hf_token=...``, a Hydra override ``grpo.hub_token=...``). Credentials inside a URL
(``https://user:pass@host``, also a password holding ``#``, ``/`` or ``?``), secret query parameters
(``?api_key=...``, also a percent-encoded name: ``?X%2DAmz%2DSignature=...``) and secret fragment parameters
(``#access_token=...``) are masked too.

>>> [is_secret("api_key"), is_secret("hf_token"), is_secret("--hf-token"), is_secret("password"),
...  is_secret("hubToken"), is_secret("tokenizer"), is_secret("max_tokens"), is_secret("keep_completions")]
[True, True, True, True, True, False, False, False]
>>> mask_secrets({"hf_token": "hf_x", "extra_body": {"api_key": "k", "top_k": 5}, "base_url": "http://u:p@h/v1"})
{'hf_token': '***', 'extra_body': {'api_key': '***', 'top_k': 5}, 'base_url': 'http://***@h/v1'}
>>> redact_command("curriculum partition --api-key sk-1 --backend-arg hf_token=hf_x --backend-arg password=pw -k 8")
"curriculum partition --api-key '***' --backend-arg 'hf_token=***' --backend-arg 'password=***' -k 8"
>>> redact_command("curriculum partition --base-url http://u:pw@host:8000/v1?x=1 --input=https://u:pw@h/d.json#f")
"curriculum partition --base-url 'http://***@host:8000/v1?x=1' '--input=https://***@h/d.json#f'"
>>> mask_secrets(["http://alice:SEC@RETPW@host/v1", "https://b.s3.amazonaws.com/f?X-Amz-Signature=ab12&X-Amz-Date=1",
...               "https://h/c?sig=x1&sv=2&session=s9"])
['http://***@host/v1', 'https://b.s3.amazonaws.com/f?X-Amz-Signature=***&X-Amz-Date=1', 'https://h/c?sig=***&sv=2&session=***']
"""

from __future__ import annotations

import json
import logging
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote_plus

__all__ = ["MASK", "MaskingFilter", "MaskingStream", "is_secret", "mask_lines", "mask_output", "mask_secrets",
           "redact_command", "redact_overrides"]

MASK = "***"
_WORDS = (r"api_?key|apikey|key|token|secret|password|passwd|credentials?|auth|authorization|sig|signature|session|"
          r"sessionid")
_SECRET_RE = re.compile(rf"(^|_)({_WORDS})$")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
#: ``scheme://USERINFO@``: the userinfo ends at the *last* ``@`` of the authority (before the path, query or
#: fragment, whichever comes first), as ``requests`` and urllib3 read it: ``http://alice:SEC@RETPW@host`` is user
#: ``alice`` with the password ``SEC@RETPW``, masked whole. So ``http://u:pw@host/v1?x=1``, ``http://u:pw@host:8000?x=1``
#: and ``http://u:pw@host#f`` are all masked, and an ``@`` inside a query (``?to=a@b``) is not read as credentials.
#: One slash is enough (``http:/u:pw@host``): a URL given where a path is expected comes back from ``pathlib`` with one.
#: A password holding ``#``, ``/`` or ``?`` (``http://alice:pa55#SECRET@host/v1``, which a URL parser reads as host
#: ``alice``) is masked too: when the authority holds a ``:``, the userinfo runs to the first later ``@`` that a host
#: follows (a name, an optional port, then the path, query, fragment or the end). Where the ``:`` is followed by a
#: port number, an ``@`` just after a ``/`` is taken for a path (``http://host:8000/@scope/pkg``); otherwise a URL
#: with a port whose path or query holds ``@host`` is masked up to it: the two cannot be told apart, and a password
#: shown is worse than a path hidden.
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*:/{1,2})(?P<rest>[^\s\"<>`]*)")
_AT_HOST = re.compile(r"@(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~%-]*[A-Za-z0-9])(?::\d*)?(?=[/?#'),;]|$)")
#: What the left of ``KEY=VALUE`` looks like when it is a key (a keyword, a dotted Hydra override, ``+``/``~``
#: prefixed); anything else holding ``=`` (a URL with a query string) is masked as text.
_KEY = re.compile(r"[+~]{0,2}[A-Za-z0-9_][A-Za-z0-9_.\-/@\[\]]*")
#: A query or fragment parameter (``?api_key=...``, ``#access_token=...``); its name may be percent-encoded
#: (``?X%2DAmz%2DSignature=...`` is ``X-Amz-Signature``).
_QUERY = re.compile(r"(?P<name>[?&;#][A-Za-z0-9_.%+-]+)=(?P<value>[^&;#\s\"]*)")


def _normal(name: str) -> str:
    name = str(name).strip().lstrip("-+~").rsplit(".", 1)[-1]  # --hf-token, ++grpo.hub_token
    name = _CAMEL.sub("_", name)
    return re.sub(r"[^A-Za-z0-9]+", "_", name).lower().strip("_")


def is_secret(name: str) -> bool:
    """Whether an option (a keyword argument, a flag, a JSON key, a dotted override key) holds a secret."""
    return bool(_SECRET_RE.search(_normal(name)))


def _userinfo(m: re.Match[str]) -> str:
    scheme, rest = m["scheme"], m["rest"]
    end = next((i for i, c in enumerate(rest) if c in "/?#"), len(rest))
    authority, cut = rest[:end], None
    if "@" in authority:
        cut = authority.rindex("@")
    elif ":" in authority and "@" in rest:
        port = authority.split(":", 1)[1].isdigit()
        cut = next((at.start() for at in _AT_HOST.finditer(rest, end)
                    if not (port and rest[at.start() - 1] == "/")), None)
    if cut is None:
        return scheme + _URL.sub(_userinfo, rest)  # a URL inside this one's query (``?next=http://u:pw@h``)
    return f"{scheme}{MASK}" + _URL.sub(_userinfo, rest[cut:])


#: Punctuation that ends a sentence around a URL (``...?token=T: no such file``, ``(see ...?sig=x).``): kept after
#: the mask, not taken for the secret's last characters.
_TRAILING = re.compile(r"[:),.']+$")


def _secret_parameter(m: re.Match[str]) -> str:
    if not is_secret(unquote_plus(m["name"][1:])):
        return m[0]
    tail = _TRAILING.search(m["value"])
    return f"{m['name']}={MASK}{tail[0] if tail else ''}"


def _mask_text(text: str) -> str:
    """Credentials inside URLs and secret query and fragment parameters of a string value."""
    if ":/" not in text and "=" not in text:
        return text
    if ":/" in text:
        text = _URL.sub(_userinfo, text)
    if ":/" in text or "?" in text or "#" in text:  # a URL, or its path and query (urllib3 logs "/retrieve?key=...")
        text = _QUERY.sub(_secret_parameter, text)
    return text


def mask_secrets(obj: Any) -> Any:
    """A copy of ``obj`` (mappings, lists, strings) with every secret's value masked (see the module docstring);
    a string that holds a JSON object is masked inside and kept a string."""
    if isinstance(obj, Mapping):
        return {k: (MASK if is_secret(k) and v is not None else mask_secrets(v)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [mask_secrets(v) for v in obj]
    if isinstance(obj, str):
        return _mask_json_text(obj)
    return obj


def _mask_json_text(text: str) -> str:
    s = text.strip()
    if s.startswith("{") and s.endswith("}"):
        try:
            value = json.loads(s)
        except ValueError:
            return _mask_text(text)
        masked = mask_secrets(value)
        return text if masked == value else json.dumps(masked)
    return _mask_text(text)


def _mask_assignment(arg: str) -> str:
    """``KEY=VALUE`` with a secret KEY -> ``KEY=***``; otherwise the value with nested secrets masked."""
    key, sep, value = arg.partition("=")
    if not sep or not _KEY.fullmatch(key):  # not an assignment: a URL with a query string, a sentence
        return _mask_text(arg)
    if is_secret(key):
        return f"{key}={MASK}"
    return f"{key}={_mask_json_text(value)}"


def redact_overrides(overrides: Sequence[str]) -> list[str]:
    """Hydra overrides (``key=value``) with the values of secret keys masked."""
    return [_mask_assignment(str(o)) for o in overrides]


def redact_command(command: str | None) -> str | None:
    """The command line as recorded in manifests, cards and summaries: the value of every secret flag
    (``--api-key``, ``--hf-token``, ...) and of every secret ``KEY=VALUE`` argument (``--backend-arg``, Hydra
    overrides) masked, and credentials in URLs masked."""
    if command is None:
        return None
    try:
        parts = shlex.split(command)
    except ValueError:  # unbalanced quotes: mask what the words look like
        parts = command.split()
    out: list[str] = []
    mask_next = False
    for p in parts:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        if p.startswith("-") and not p.startswith("---"):
            flag, sep, value = p.partition("=")
            if is_secret(flag):
                if sep:
                    out.append(f"{flag}={MASK}")
                else:
                    out.append(p)
                    mask_next = True
                continue
            out.append(f"{flag}={_mask_assignment(value)}" if sep else p)
            continue
        out.append(_mask_assignment(p))
    return shlex.join(out)


def mask_lines(text: str) -> str:
    """``text`` as it is printed, masked line by line (:func:`mask_secrets` on each line, its line end kept)."""
    if ":/" not in text and "=" not in text:
        return text
    out = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        out.append(mask_secrets(body) + line[len(body):])
    return "".join(out)


class MaskingStream:
    """A text stream (``sys.stdout``, ``sys.stderr``) that masks secrets in every line written to it
    (:func:`mask_lines`): what a command prints, its log lines, its errors, a library's own lines. Everything
    else is the stream's own (``isatty``, ``encoding``, ``buffer``)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    @property
    def masked_stream(self) -> Any:
        """The stream written to."""
        return self._stream

    def write(self, text: str) -> int:
        self._stream.write(mask_lines(text) if isinstance(text, str) else text)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def mask_output() -> None:
    """Mask secrets in everything this process prints from now on: ``sys.stdout`` and ``sys.stderr`` each wrapped
    in a :class:`MaskingStream` (once: a stream already wrapped is left as it is). A command line's entry point
    calls it first, so that no line it or a library prints shows a password or a token."""
    import sys

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, MaskingStream):
            setattr(sys, name, MaskingStream(stream))


class MaskingFilter(logging.Filter):
    """A logging filter that masks, by the same rule, credentials in URLs and secret query parameters in every
    message it passes (a library's ``HTTP Request: POST http://user:pw@host/...`` line, a path that is a URL):
    put on the handlers, it covers the records of every logger that reach them."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # a malformed record: logging reports it itself
            return True
        masked = _mask_text(text)
        if masked != text:
            record.msg, record.args = masked, None
        return True
