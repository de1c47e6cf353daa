"""The local cluster's ports stay clear of the ports the kernel hands out itself."""

from __future__ import annotations

import socket

from harness.redis_cluster import BUS_OFFSET, _ephemeral_low, free_ports


def test_ports_and_their_bus_ports_are_distinct_free_and_below_the_kernels_range() -> None:
    ports = free_ports(40)
    assert len(set(ports)) == 40
    low = _ephemeral_low()
    for port in ports:
        assert port + BUS_OFFSET < low
        for p in (port, port + BUS_OFFSET):
            with socket.socket() as s:
                s.bind(("127.0.0.1", p))


def test_the_kernels_range_is_read_from_the_system() -> None:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        assert _ephemeral_low() == int(f.read().split()[0])
