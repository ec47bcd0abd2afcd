"""Which network NCCL's collectives used, from its NCCL_DEBUG=INFO lines, and whether the
nodes had InfiniBand that it did not use: the first answer to "why are two nodes slower
than one". A GPU point over several nodes runs with NCCL_DEBUG=INFO written to its run
folder (dlscale.launch.launcher); its run table reads the files here.

The network: `Using network IB|Socket|...` (NCCL 2.x at init), or the channels' `via
NET/<name>/...`. InfiniBand on the nodes: `NET/IB : Using [0]mlx5_0...`, an IP over
InfiniBand interface (`ib...`) in `Bootstrap : Using` or `NET/Socket : Using`, an IB
plugin (`P2P plugin IB...`), a host named `*.ibnet`.
"""

from __future__ import annotations

import re

NETWORK = re.compile(r"NCCL INFO Using network (\w+)")
CHANNEL = re.compile(r"\bvia NET/(\w+)/")
IB_SIGNS = (
    (re.compile(r"NET/IB : Using \[\d+\](\S+)"), "NET/IB found {}"),
    (re.compile(r"(?:Bootstrap|NET/Socket) : Using (?:\[\d+\])?(ib\w*):"),
     "an IP over InfiniBand interface ({})"),
    (re.compile(r"P2P plugin (IB\w*)"), "the {} plugin"),
    (re.compile(r"\S+\.(ibnet)\b"), "hosts on an InfiniBand network (*.{})"),
)


def transport(text: str) -> dict | None:
    """{"network": what the collectives used, "infiniband": what says the nodes have it
    (or None), "fell_back": sockets where InfiniBand was there}, or None for a text with
    no NCCL line."""
    if "NCCL " not in text:
        return None
    used = NETWORK.findall(text) or CHANNEL.findall(text)
    network = max(set(used), key=used.count) if used else None
    signs = []
    for pattern, said in IB_SIGNS:
        if found := pattern.search(text):
            signs.append(said.format(found[1]))
    infiniband = "; ".join(signs) or None
    return {"network": network, "infiniband": infiniband,
            "fell_back": network == "Socket" and infiniband is not None}


def fallback_note(found: dict) -> str:
    """The one line the first page flags: sockets where the nodes have InfiniBand."""
    return (f"NCCL's collectives went over sockets (NET/Socket) though the nodes have "
            f"InfiniBand ({found['infiniband']}): check NCCL_IB_DISABLE, NCCL_SOCKET_IFNAME "
            "and the container's libibverbs")
