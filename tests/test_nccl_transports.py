"""NCCL's transport lines, parsed from recorded log text in the forms NCCL prints them."""

from __future__ import annotations

from lab.engine import nccl_transports as nt

LOG = """\
node1:919:919 [0] NCCL INFO NCCL version 2.18.1+cuda12.1
node1:919:1150 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read
node1:919:1150 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC/read
node1:920:1151 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/Socket/3
node2:921:1152 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [receive] via NET/Socket/3
node2:921:1152 [0] NCCL INFO Channel 00/0 : 2[0] -> 3[1] via SHM/direct/direct
log - host:4450:4887 [5] NCCL INFO Channel 31/1 : 5[5] -> 0[0] via P2P/IPC
machine-1:16194:18583 [3] NCCL INFO Channel 00 : 11[3e000] -> 9[1b000] via P2P/direct pointer
machine-2:41626:45225 [7] NCCL INFO Channel 03 : 7[b2000] -> 14[b1000] [send] via NET/IB/0/GDRDMA
node1:919:1150 [0] NCCL INFO Connected all rings
node1:919:1150 [0] NCCL INFO 8 coll channels, 8 p2p channels
"""


def test_parse_counts_each_transport_kind_and_pair():
    got = nt.parse(LOG)
    assert got["nccl_version"] == "2.18.1"
    assert got["transports"] == {"P2P": 4, "NET": 3, "SHM": 1}
    pairs = {(x["from"], x["to"]): x["via"] for x in got["links"]}
    assert pairs[(0, 1)] == ["P2P/IPC/read"]
    assert pairs[(1, 2)] == ["NET/Socket/3"]
    assert pairs[(2, 3)] == ["SHM/direct/direct"]
    assert pairs[(11, 9)] == ["P2P/direct pointer"]
    assert pairs[(7, 14)] == ["NET/IB/0/GDRDMA"]
    assert "P2P 4" in nt.summary(got)


def test_text_without_transport_lines_gives_empty_counts():
    got = nt.parse("hello\nnode:1:2 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n")
    assert got == {"nccl_version": None, "transports": {}, "links": []}
    assert "NCCL_DEBUG_SUBSYS=INIT,GRAPH" in nt.summary(got)


def test_kind_of_via_words():
    assert nt.kind("P2P/CUMEM/read") == "P2P"
    assert nt.kind("NET/IB/0/GDRDMA") == "NET"
    assert nt.kind("direct shared memory") == "SHM"


def test_a_gpu_link_check_asks_nccl_for_its_transport_lines(monkeypatch):
    from lab.engine import linkcheck

    monkeypatch.delenv("NCCL_DEBUG", raising=False)
    monkeypatch.delenv("NCCL_DEBUG_SUBSYS", raising=False)
    env = linkcheck._env(linkcheck.Plan("nccl", 2, (0, 1)))
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,GRAPH"
    assert "NCCL_DEBUG" not in linkcheck._env(linkcheck.Plan("gloo", 2, ()))
