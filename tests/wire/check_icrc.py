#!/usr/bin/env python3
"""Verifies the ICRC of every frame of a pcap with scapy's RoCE layer.

Independent check for `cargo xtask wire` (issue #15): scapy
(`scapy.contrib.roce`, PyPI `scapy`) computes the ICRC of each frame and the
result must equal the frame's last four bytes (shared/spec/rocev2-wire.md
§3.4, method a); the frame rebuilt with the ICRC left to scapy must also be
byte-identical to the original (method b).

usage: check_icrc.py FILE.pcap   -> prints "N frames, ICRC ok"; exit 1 on
any mismatch or on a frame that is not Ethernet/[802.1Q]/IP/UDP 4791/BTH.
"""
import sys

from scapy.all import Ether, rdpcap, raw
from scapy.contrib.roce import BTH


def main(path):
    bad = 0
    frames = rdpcap(path)
    for i, pkt in enumerate(frames, 1):
        data = raw(pkt)
        eth = Ether(data)
        if BTH not in eth:
            print(f"frame {i}: no BTH layer (not RoCEv2 on UDP 4791)")
            bad += 1
            continue
        bth = eth[BTH]
        want = bth.compute_icrc(None)
        got = raw(eth["UDP"].payload)[-4:]
        if want != got:
            print(f"frame {i}: ICRC {got.hex()} on the wire, scapy computes {want.hex()}")
            bad += 1
            continue
        again = Ether(data)
        again[BTH].icrc = None
        if raw(again) != data:
            print(f"frame {i}: rebuilt with scapy's ICRC, the frame differs")
            bad += 1
    if bad:
        print(f"{bad} of {len(frames)} frames failed the ICRC check")
        return 1
    if not frames:
        print("no frames")
        return 1
    print(f"{len(frames)} frames, ICRC ok")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
