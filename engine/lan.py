"""The addresses other machines reach this server at, when it serves beyond loopback.

The desktop's server view shows them ("On your network: http://192.168.1.20:11680/v1"): a
server bound to every interface (``0.0.0.0``, ``::``) is reached at each of this machine's
non-loopback IPv4 addresses, one bound to a single address at that address alone, and a
loopback server at none. Reads the interfaces (psutil); any thread.
"""

from __future__ import annotations

import ipaddress
import socket

import psutil

from engine.settings import is_loopback_host

_ANY = ("0.0.0.0", "::", "[::]", "")


def lan_addresses(host: str) -> list[str]:
    """The IP addresses a server bound to ``host`` answers on from other machines."""
    host = host.strip()
    if is_loopback_host(host):
        return []
    if host not in _ANY:
        return [host]
    found: list[str] = []
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family != socket.AF_INET:
                continue
            ip = ipaddress.ip_address(address.address)
            if not (ip.is_loopback or ip.is_link_local) and address.address not in found:
                found.append(address.address)
    return found


def lan_urls(host: str, port: int) -> list[str]:
    """The ``/v1`` base URLs of :func:`lan_addresses` on ``port``."""
    urls = []
    for address in lan_addresses(host):
        shown = f"[{address}]" if ":" in address and not address.startswith("[") else address
        urls.append(f"http://{shown}:{port}/v1")
    return urls
