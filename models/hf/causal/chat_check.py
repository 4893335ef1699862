"""A chat template tried once while planning: a broken or hostile one is refused before the run.

A model's chat template is a Jinja program shipped with its files. One that
does not compile, raises (``raise_exception('Only user and assistant roles
are supported')`` for a ``--system`` text), reaches outside Jinja's sandbox,
loops for ever or swells to gigabytes was found only inside the first shard,
or made every row a dead letter. :func:`check_chat_template` renders it the
way the generator does (transformers' ``render_jinja_template``, in its
immutable sandbox) over the messages a run's first row would give, with the
run's system text and prompt, in a forked child process bounded in time
(:data:`RENDER_S`) and memory (:data:`RENDER_BYTES` more than this process
holds), and refuses it in one line naming the problem and the fix.

The row's text is a stand-in (``"sample text"`` in every placeholder): a
template that fails on some texts only is still found row by row. Special
tokens the template names that the tokenizer's files do not declare render as
empty text, as no failure of the template's own.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shardwise.errors import ConfigError
from shardwise.models.hf.files import read_json

__all__ = [
    "RENDER_BYTES",
    "RENDER_S",
    "SAMPLE_TEXT",
    "chat_template_of",
    "check_chat_template",
    "specials_of",
]

RENDER_S = 5.0
"""Seconds the one render may take: real templates take milliseconds."""
RENDER_BYTES = 512 << 20
"""Memory the render may take beyond what the process held when it forked."""
MAX_RENDERED = 1 << 20
"""Characters a rendered sample prompt may hold: a real chat header adds a few hundred."""
SAMPLE_TEXT = "sample text"

_SPECIAL_KEYS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
    "additional_special_tokens",
)


def chat_template_of(root: Path) -> str | None:
    """The chat template transformers loads from a model directory: ``chat_template.jinja``, else the
    tokenizer config's ``chat_template`` (its ``default`` entry when it holds several), else None."""
    jinja = root / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8", errors="replace")
    found = read_json(root / "tokenizer_config.json").get("chat_template")
    if isinstance(found, list):
        named = {t.get("name"): t.get("template") for t in found if isinstance(t, Mapping)}
        found = named.get("default")
    return found if isinstance(found, str) and found else None


def specials_of(root: Path) -> dict[str, Any]:
    """The special tokens transformers hands a chat template, as the directory's files declare them."""
    found: dict[str, Any] = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        path = root / name
        config = read_json(path) if path.is_file() else {}
        for key in _SPECIAL_KEYS:
            value = config.get(key)
            if key not in found and value is not None:
                found[key] = _token_text(value)
    return found


def check_chat_template(
    where: str, template: str, messages: Sequence[Mapping[str, str]], specials: Mapping[str, Any]
) -> None:
    """Render ``template`` over ``messages`` as the generator would; a :class:`ConfigError` naming the
    problem and the fix if it cannot within the bounds."""
    from shardwise.models.hf.loaded import require_transformers

    require_transformers(where)
    from transformers.utils.chat_template_utils import render_jinja_template  # imported before the fork

    outcome = _in_child(lambda: _render(render_jinja_template, template, messages, specials))
    if outcome is not None:
        raise ConfigError(
            f"the chat template of {where!r} {outcome}; fix the model's chat template, or give --chat off "
            "to send plain prompts"
        )


def _render(
    render: Any, template: str, messages: Sequence[Mapping[str, str]], specials: Mapping[str, Any]
) -> str:
    """Run in the child: '' when the template renders within bounds, else what went wrong."""
    import jinja2.meta
    from transformers.utils.chat_template_utils import _compile_jinja_template

    try:
        compiled = _compile_jinja_template(template)
        named = jinja2.meta.find_undeclared_variables(compiled.environment.parse(template))
        given = {name: "" for name in named if name.endswith("_token")} | dict(specials)
        rendered = render(
            conversations=[list(messages)], chat_template=template, add_generation_prompt=True, **given
        )[0][0]
    except MemoryError:
        return f"took more than {RENDER_BYTES >> 20} MiB to render one prompt"
    except RecursionError:
        return "recurses without end when it renders one prompt"
    except Exception as exc:  # the template's own error, whatever it raised
        kind = type(exc).__name__
        return f"does not render one prompt ({kind}: {_short(str(exc))})"
    if len(rendered) > MAX_RENDERED:
        return f"renders {len(rendered):,} characters for one prompt, more than {MAX_RENDERED:,}"
    return ""


def _in_child(work: Any) -> str | None:
    """Run ``work`` in a forked child, bounded in time and memory; None if it returned '', else its text
    (or why the child did not answer)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing of the parent's exit handlers runs here (os._exit)
        os.close(read)
        code = 0
        try:
            _limit_memory()
            os.write(write, json.dumps(work()).encode())
        except BaseException:  # a child that fails says nothing: the parent reports it
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    try:
        return _answer(read, pid)
    finally:
        os.close(read)


def _answer(read: int, pid: int) -> str | None:
    """The child's answer, once it closed the pipe; the child killed when it has not within the time."""
    deadline, chunks, ended = time.monotonic() + RENDER_S, [], False
    while not ended and (left := deadline - time.monotonic()) > 0:
        if not select.select([read], [], [], left)[0]:
            break
        chunk = os.read(read, 1 << 16)
        chunks.append(chunk)
        ended = not chunk
    if not ended:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return f"did not render one prompt within {RENDER_S:g} s"
    _, status = os.waitpid(pid, 0)  # the pipe closed: the child is ending
    answer = b"".join(chunks)
    if not answer or not os.WIFEXITED(status) or os.WEXITSTATUS(status):
        return "did not render one prompt: the process rendering it ended without an answer"
    said = json.loads(answer)
    return str(said) if said else None


def _limit_memory() -> None:
    """Cap the child's address space at what it holds now plus :data:`RENDER_BYTES`."""
    held = 0
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmSize:"):
                held = int(line.split()[1]) * 1024
    if held:
        resource.setrlimit(resource.RLIMIT_AS, (held + RENDER_BYTES, held + RENDER_BYTES))


def _token_text(value: Any) -> Any:
    """A special token as text: tokenizer configs write some as ``{"content": "<s>", ...}``."""
    if isinstance(value, Mapping):
        return value.get("content", "")
    if isinstance(value, list):
        return [_token_text(item) for item in value]
    return value


def _short(message: str, limit: int = 160) -> str:
    line = " ".join(message.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
