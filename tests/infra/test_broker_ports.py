"""infra.broker's ports: the last run's kept where free, new ones clear of the others."""

from __future__ import annotations

import socket
import threading

from infra import broker, daemons


def test_a_new_port_is_not_one_remembered_for_another_listener(monkeypatch) -> None:
    with socket.socket() as squatter:
        squatter.bind((broker.BIND_HOST, 0))
        squatter.listen(1)
        taken = squatter.getsockname()[1]
        remembered = daemons.free_ports(broker.BIND_HOST, 3, exclude=[taken])
        sasl_ssl, controller, fresh = remembered
        # The plaintext port of the last run is taken; the picker first offers the other
        # listeners' remembered ports (free now: the broker is stopped), then a fresh one.
        picks = iter([sasl_ssl, controller, fresh])
        monkeypatch.setattr(daemons._RANDOM, "choice", lambda _ports: next(picks))
        said: list[str] = []
        previous = {"plaintext": taken, "sasl_ssl": sasl_ssl, "controller": controller}
        ports = broker._choose_ports((None, None, None), previous, said.append, 0.3)
    assert ports == broker.Ports(plaintext=fresh, sasl_ssl=sasl_ssl, controller=controller)
    assert said == [
        f"plaintext port {taken} of the last run is taken by another process; using {fresh} "
        f"(clients configured with {taken} must change)"
    ]


def test_a_new_port_is_not_one_given_for_a_later_listener(monkeypatch) -> None:
    given, first, second = daemons.free_ports(broker.BIND_HOST, 3)
    # The picker first offers the port given for sasl_ssl; plaintext must not take it.
    picks = iter([given, first, given, second])
    monkeypatch.setattr(daemons._RANDOM, "choice", lambda _ports: next(picks))
    ports = broker._choose_ports((None, given, None), None, lambda _line: None)
    assert ports == broker.Ports(plaintext=first, sasl_ssl=given, controller=second)


def test_a_remembered_port_that_comes_free_in_time_is_kept() -> None:
    """A killed broker's port, busy a moment longer, is waited for, not replaced."""
    remembered = daemons.free_ports(broker.BIND_HOST, 3)
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind((broker.BIND_HOST, remembered[0]))
    squatter.listen(1)
    threading.Timer(0.5, squatter.close).start()
    said: list[str] = []
    previous = dict(zip(("plaintext", "sasl_ssl", "controller"), remembered, strict=True))
    ports = broker._choose_ports((None, None, None), previous, said.append, 5.0)
    assert ports == broker.Ports(*remembered)
    assert said == []
