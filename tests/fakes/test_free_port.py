"""free_port: ports outside the ephemeral range, none twice, each bindable when handed out."""

import socket

from tests.fakes.cell import free_port


def test_ports_are_new_outside_the_ephemeral_range_and_bindable():
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(20000 <= port < 32768 for port in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))


def test_a_port_in_use_is_skipped():
    # Ports go out in turn: the one after the last handed out is the one to take first.
    after = free_port() + 1
    with socket.socket() as taken:
        try:
            taken.bind(("127.0.0.1", after))
        except OSError:
            return  # in use already, by something else: skipped all the same
        taken.listen()
        assert free_port() != after
