"""How ``ioprobe run`` passes the signals it gets on to the script it watches.

The relay is driven here as the signal handler is, with a real child: ``sleep``, which any
SIGINT, SIGTERM or SIGKILL ends with that signal in its return code. A signal the relay did
not pass on is told apart from one it did by sending SIGTERM afterwards: pending signals are
delivered lowest number first, so a SIGINT passed on always wins."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator

import pytest

from ioprobe.cli.run import _Relay


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
            child.wait()


def relay_for(children: list[subprocess.Popen[bytes]], own_group: bool) -> _Relay:
    child = subprocess.Popen(["sleep", "60"], process_group=0 if own_group else None)
    children.append(child)
    relay = _Relay()
    relay.start(child)
    return relay


def ended_by(relay: _Relay) -> int:
    """The signal that ended the script: SIGTERM unless the relay sent it something first."""
    assert relay.child is not None
    if relay.child.poll() is None:
        relay.child.terminate()
    return -relay.wait()


def test_sigint_is_passed_on_to_a_script_in_a_group_of_its_own(
    children: list[subprocess.Popen[bytes]],
) -> None:
    relay = relay_for(children, own_group=True)
    relay.handle(signal.SIGINT, None)
    assert ended_by(relay) == signal.SIGINT


def test_sigint_is_not_sent_again_to_a_script_the_terminal_already_reached(
    children: list[subprocess.Popen[bytes]],
) -> None:
    # the script shares ioprobe's process group: a terminal's Ctrl-C went to both
    relay = relay_for(children, own_group=False)
    relay.handle(signal.SIGINT, None)
    assert ended_by(relay) == signal.SIGTERM


def test_sigterm_is_passed_on_in_either_group(children: list[subprocess.Popen[bytes]]) -> None:
    for own_group in (True, False):
        relay = relay_for(children, own_group)
        relay.handle(signal.SIGTERM, None)
        assert relay.wait() == -signal.SIGTERM


def test_a_second_sigint_kills_the_script_and_stops_waiting(
    children: list[subprocess.Popen[bytes]],
) -> None:
    relay = relay_for(children, own_group=False)
    relay.handle(signal.SIGINT, None)
    with pytest.raises(KeyboardInterrupt):
        relay.handle(signal.SIGINT, None)
    assert relay.wait() == -signal.SIGKILL


def test_a_signal_before_the_script_started_reaches_it_once_it_has(
    children: list[subprocess.Popen[bytes]],
) -> None:
    relay = _Relay()
    relay.handle(signal.SIGTERM, None)
    child = subprocess.Popen(["sleep", "60"])
    children.append(child)
    relay.start(child)
    assert relay.wait() == -signal.SIGTERM
