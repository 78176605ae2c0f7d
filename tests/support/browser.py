"""Open a local HTML file in real headless Chromium and report what the page did.

Talks the Chrome DevTools Protocol over a websocket with aiohttp: no selenium, no playwright.
Each call launches a fresh browser with a throwaway profile and tears both down afterwards,
even when the page hangs or Chromium fails to start; nothing is left running or on disk.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from PIL import Image

__all__ = ["PageResult", "chromium_path", "non_blank_fraction", "open_page"]

_DEVTOOLS_RE = re.compile(r"DevTools listening on (ws://\S+)")

# How long to wait after the load event for late requests (images, fetches started on load).
SETTLE_S = 0.3

# How long Chromium gets to exit on its own after Browser.close before the group is killed.
CLOSE_GRACE_S = 2.0


@dataclass
class PageResult:
    requests: list[str]  # every URL requested (Network.requestWillBeSent), in order, page included
    texts: dict[str, str | None]  # selector -> document.querySelector(sel)?.textContent
    screenshot_png: bytes  # Page.captureScreenshot of the viewport
    console_errors: list[str]  # uncaught exceptions and console.error / console.assert output
    title: str


def chromium_path() -> str | None:
    """Return the Chromium executable: /usr/bin/chromium, else `chromium` on PATH, else None."""
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    return shutil.which("chromium")


def open_page(
    path: Path,
    selectors: list[str],
    width: int = 1280,
    height: int = 900,
    timeout_s: float = 30,
) -> PageResult:
    """Load `path` in headless Chromium and return its requests, texts, screenshot and errors.

    Synchronous (runs its own event loop), so plain pytest tests can call it. Raises
    RuntimeError when Chromium is missing or fails to start, TimeoutError past `timeout_s`.
    """
    exe = chromium_path()
    if exe is None:
        raise RuntimeError(
            "Chromium not found (looked for /usr/bin/chromium and `chromium` on PATH); "
            "`make chromium` installs it, or run `apt-get install chromium`"
        )
    return asyncio.run(_open_page(exe, path, selectors, width, height, timeout_s))


def non_blank_fraction(png: bytes) -> float:
    """Fraction of pixels whose colour differs from the most common colour in the image."""
    with Image.open(io.BytesIO(png)) as img:
        rgba = img.convert("RGBA")
    total = rgba.width * rgba.height
    if total == 0:
        return 0.0
    # getcolors returns None only when there are more colours than maxcolors: never here.
    colours = rgba.getcolors(maxcolors=total) or []
    most = max(count for count, _ in colours)
    return 1.0 - most / total


def _launch_args(exe: str, profile: str, width: int, height: int) -> list[str]:
    return [
        exe,
        "--headless",
        "--no-sandbox",  # Chromium refuses to run as root with its sandbox; CI runs as root
        "--disable-gpu",
        # Debian's launcher adds this itself only when its /dev/shm size check parses, and that
        # check breaks when /dev/shm is mounted twice; containers often give /dev/shm 64 MiB.
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        "--disable-default-apps",
        f"--user-data-dir={profile}",
        "--remote-debugging-port=0",
        f"--window-size={width},{height}",
        "about:blank",
    ]


class _CDP:
    """A minimal CDP client: numbered commands with awaited replies, and an event log."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self._event_seen = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        error: BaseException = ConnectionError("DevTools websocket closed")
        try:
            async for msg in self._ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                data: dict[str, Any] = json.loads(msg.data)
                fut = self._pending.pop(data["id"], None) if "id" in data else None
                if fut is not None:
                    if not fut.done():
                        fut.set_result(data)
                elif "method" in data:
                    self.events.append(data)
                    self._event_seen.set()
        except Exception as exc:
            error = exc
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(error)
            self._pending.clear()

    async def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[self._next_id] = fut
        if self._reader.done():
            raise ConnectionError(f"DevTools websocket closed before {method}")
        await self._ws.send_str(json.dumps(msg))
        reply = await fut
        if "error" in reply:
            raise RuntimeError(f"CDP {method} failed: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    async def wait_for(self, method: str, session: str, start: int = 0) -> dict[str, Any]:
        """Wait for an event logged at index `start` or later and return its params."""
        while True:
            for ev in self.events[start:]:
                if ev["method"] == method and ev.get("sessionId") == session:
                    params: dict[str, Any] = ev.get("params", {})
                    return params
            start = len(self.events)
            if self._reader.done():
                raise ConnectionError(f"DevTools websocket closed while waiting for {method}")
            self._event_seen.clear()
            await self._event_seen.wait()

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


async def _devtools_url(stderr: asyncio.StreamReader, log: list[str]) -> str:
    """Read Chromium's stderr until it names its DevTools websocket; keep lines in `log`."""
    while True:
        raw = await stderr.readline()
        if not raw:
            raise RuntimeError("Chromium exited before DevTools started:\n" + "".join(log[-30:]))
        line = raw.decode(errors="replace")
        log.append(line)
        match = _DEVTOOLS_RE.search(line)
        if match:
            return match.group(1)


async def _drain(stderr: asyncio.StreamReader, log: list[str]) -> None:
    # Keep reading so a chatty Chromium never blocks on a full stderr pipe.
    while raw := await stderr.readline():
        log.append(raw.decode(errors="replace"))


async def _open_page(
    exe: str, path: Path, selectors: list[str], width: int, height: int, timeout_s: float
) -> PageResult:
    url = path.resolve().as_uri()
    profile = tempfile.mkdtemp(prefix="ioprobe-chromium-")
    proc: asyncio.subprocess.Process | None = None
    drain: asyncio.Task[None] | None = None
    log: list[str] = []
    try:
        proc = await asyncio.create_subprocess_exec(
            *_launch_args(exe, profile, width, height),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert proc.stderr is not None
        try:
            async with asyncio.timeout(timeout_s):
                ws_url = await _devtools_url(proc.stderr, log)
                drain = asyncio.create_task(_drain(proc.stderr, log))
                result = await _drive(ws_url, url, selectors, width, height)
                # After Browser.close Chromium exits by itself; give it a moment to do so.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), CLOSE_GRACE_S)
                return result
        except TimeoutError:
            raise TimeoutError(
                f"headless Chromium did not finish {url} within {timeout_s} s; its stderr:\n"
                + "".join(log[-30:])
            ) from None
    finally:
        if proc is not None:
            await _stop(proc)
        if drain is not None:
            drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drain
        _remove_tree(profile)


async def _drive(
    ws_url: str, url: str, selectors: list[str], width: int, height: int
) -> PageResult:
    # No proxy from the environment, no size cap (screenshots are megabytes of base64).
    async with (
        aiohttp.ClientSession(trust_env=False) as http,
        http.ws_connect(ws_url, max_msg_size=0) as ws,
    ):
        cdp = _CDP(ws)
        try:
            result = await _load(cdp, url, selectors, width, height)
            # A polite close lets Chromium flush and exit; the process group is killed anyway.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(cdp.send("Browser.close"), 2)
            return result
        finally:
            await cdp.close()


async def _load(cdp: _CDP, url: str, selectors: list[str], width: int, height: int) -> PageResult:
    # A fresh tab, attached in flat mode so its events arrive tagged with our session id.
    target = await cdp.send("Target.createTarget", {"url": "about:blank"})
    attached = await cdp.send(
        "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
    )
    sid: str = attached["sessionId"]
    for domain in ("Network", "Page", "Runtime"):
        await cdp.send(f"{domain}.enable", session=sid)
    # --window-size sizes the first window only; pin the viewport of this tab explicitly.
    await cdp.send(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        session=sid,
    )
    # Events from enabling the domains on about:blank are not the page's; start clean.
    start = len(cdp.events)
    nav = await cdp.send("Page.navigate", {"url": url}, session=sid)
    if nav.get("errorText"):
        raise RuntimeError(f"navigating to {url} failed: {nav['errorText']}")
    await cdp.wait_for("Page.loadEventFired", sid, start)
    await asyncio.sleep(SETTLE_S)

    texts: dict[str, str | None] = {}
    for sel in selectors:
        texts[sel] = await _evaluate_text(cdp, sid, sel)
    title = await _evaluate(cdp, sid, "document.title")
    shot = await cdp.send("Page.captureScreenshot", {"format": "png"}, session=sid)

    requests: list[str] = []
    errors: list[str] = []
    for ev in cdp.events[start:]:
        if ev.get("sessionId") != sid:
            continue
        params: dict[str, Any] = ev.get("params", {})
        method = ev["method"]
        if method == "Network.requestWillBeSent":
            requests.append(params["request"]["url"])
        elif method == "Runtime.exceptionThrown":
            errors.append(_exception_text(params["exceptionDetails"]))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            errors.append(" ".join(_remote_text(arg) for arg in params.get("args", [])))
    return PageResult(
        requests=requests,
        texts=texts,
        screenshot_png=base64.b64decode(shot["data"]),
        console_errors=errors,
        title=str(title or ""),
    )


async def _evaluate(cdp: _CDP, sid: str, expression: str) -> Any:
    reply = await cdp.send(
        "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=sid
    )
    if "exceptionDetails" in reply:
        raise RuntimeError(f"{expression!r} threw: {_exception_text(reply['exceptionDetails'])}")
    return reply["result"].get("value")


async def _evaluate_text(cdp: _CDP, sid: str, selector: str) -> str | None:
    value = await _evaluate(
        cdp, sid, f"document.querySelector({json.dumps(selector)})?.textContent ?? null"
    )
    return None if value is None else str(value)


def _exception_text(details: dict[str, Any]) -> str:
    exc = details.get("exception") or {}
    return str(exc.get("description") or details.get("text") or "exception")


def _remote_text(arg: dict[str, Any]) -> str:
    if "value" in arg:
        return str(arg["value"])
    return str(arg.get("description") or arg.get("type", ""))


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """End Chromium and every helper it forked (renderer, GPU, zygote): its whole group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()
    # Helpers are reparented once the browser dies; wait (briefly) until none is still running.
    deadline = time.monotonic() + CLOSE_GRACE_S
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


def _group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` still runs; zombies count as gone.

    Killed helpers are reparented to PID 1, which may reap them only seconds later, and
    kill(-pgid, 0) still succeeds on zombies, so look at each process's state in /proc.
    """
    try:
        entries = os.listdir("/proc")
    except OSError:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # Fields after the parenthesised command: state, ppid, pgrp, ...
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def _remove_tree(path: str) -> None:
    # A dying helper can still write into the profile for a moment; retry until it is gone.
    for _ in range(50):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            return
        time.sleep(0.02)
    shutil.rmtree(path)
