//! Outside judge for the CM's MADs (issue #18 part 2, step 5): the MADs two
//! CM instances exchange (connect, disconnect, and a REQ to an unlistened
//! port) are wrapped in RoCEv2 UD SEND-only frames to QP1 (BTH opcode 0x64,
//! DETH Q_Key 0x80010000 and source QP 1, ICRC; shared/spec/ib-cm-rocev2.md
//! §1.1) with the model's frame builder (`mock_bar::wire`, used read-only),
//! plus one IPv6 REQ carried over IPv6, written to a pcap and decoded by
//! tshark: every frame must be InfiniBand CM with no malformed or expert
//! item, and the `infiniband.cm.*` fields must equal what the two sides
//! used. scapy verifies every ICRC
//! (`tests/wire/check_icrc.py`).
//!
//! Without tshark/scapy the tool checks are skipped with a message, unless
//! `CM_WIRE_REQUIRED` is set (the `wire` leg of `cargo xtask test` sets it
//! and installs the tools).

mod cm_common;

use cm_common::*;
use irdma::cm::ConnId;
use irdma::cm::mad::{CmMad, MAD_SIZE, QP1_QKEY};
use irdma::verbs::IpAddr;
use mock_bar::wire::{self, Capture, Packet, Path};

const UD_SEND_ONLY: u8 = 0x64;
const V6A: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const V6B: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

fn words(ip: [u8; 4]) -> [u32; 4] {
    [0, 0, 0, u32::from_be_bytes(ip)]
}

fn path(from: char) -> Path {
    let (sm, dm, si, di) =
        if from == 'a' { (MAC_A, MAC_B, IP_A, IP_B) } else { (MAC_B, MAC_A, IP_B, IP_A) };
    Path {
        src_mac: sm,
        dst_mac: dm,
        vlan: None,
        ipv4: true,
        tos: 0,
        ttl: 64,
        flow_label: 0,
        src_ip: words(si),
        dst_ip: words(di),
        sport: 0xD159,
        dport: 4791,
        pkey: 0xFFFF,
        tver: 0,
    }
}

/// One RoCEv2 frame: UD SEND only to QP1, DETH (Q_Key, source QP 1), MAD.
fn frame(from: char, psn: u32, mad: &[u8; MAD_SIZE], ip_id: u16) -> Vec<u8> {
    frame_on(&path(from), psn, mad, ip_id)
}

/// [`frame`] on any path.
fn frame_on(path: &Path, psn: u32, mad: &[u8; MAD_SIZE], ip_id: u16) -> Vec<u8> {
    let p = Packet {
        opcode: UD_SEND_ONLY,
        dest_qp: 1,
        psn,
        deth: Some((QP1_QKEY, 1)), // Q_Key, reserved byte 0, SrcQP 1
        payload: mad.to_vec(),
        ..Packet::default()
    };
    wire::build(path, &p, ip_id)
}

#[test]
fn worked_example_frame_has_the_spec_icrc() {
    // §7.3: the 322-byte frame of the §7.2 REQ, PSN 0, IP id 0, ICRC 0a b0 56 ee
    let mut p = Pair::new();
    p.set_drop(|_, _| true);
    p.a.connect(0, &connect_params(b""), &mut p.ta).unwrap();
    let f = frame('a', 0, &p.sent()[0].mad, 0);
    assert_eq!(f.len(), 322);
    assert_eq!(&f[14..26], &[0x45, 0, 0x01, 0x34, 0, 0, 0x40, 0, 0x40, 0x11, 0xb5, 0xb5]);
    assert_eq!(
        &f[0x2a..0x3e],
        &[0x64, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 0, 0x80, 1, 0, 0, 0, 0, 0, 1]
    );
    assert_eq!(&f[f.len() - 4..], &[0x0a, 0xb0, 0x56, 0xee]);
}

struct Run {
    cap: Capture,
    /// Expected tshark values per frame, by field.
    exp: Vec<Vec<(&'static str, String)>>,
}

fn scenario() -> Run {
    let mut p = Pair::new();
    let ida = p.connect();
    p.settle();
    let idb = p.request_id().expect("connect request");
    p.a.disconnect(p.now, ida, &mut p.ta).unwrap();
    p.settle();
    p.run_until(5000);
    assert_eq!(p.a.active_connections() + p.b.active_connections(), 0);
    // a REQ to a port nobody listens on: REJ 8
    let mut cp = connect_params(b"");
    cp.dst_port = 5000;
    cp.qpn = 0x43;
    let idr = p.a.connect(p.now, &cp, &mut p.ta).unwrap();
    p.settle();

    // what the two sides used
    let hex = |v: u64| format!("{v:#x}");
    let (a_ip, b_ip) = ("192.0.2.1".to_string(), "192.0.2.2".to_string());
    let cap = Capture::new();
    let mut exp = Vec::new();
    let mut psn = [0u32; 2];
    for (i, s) in p.sent().iter().enumerate() {
        assert!(!s.dropped);
        let k = usize::from(s.from == 'b');
        cap.push(frame(s.from, psn[k], &s.mad, i as u16));
        let mut e: Vec<(&'static str, String)> = vec![
            ("infiniband.bth.opcode", "100".into()),
            ("infiniband.bth.destqp", "1".into()),
            ("infiniband.bth.psn", psn[k].to_string()),
            ("infiniband.deth.q_key", hex(QP1_QKEY.into())),
            ("infiniband.deth.srcqp", "1".into()),
            ("infiniband.mad.mgmtclass", "7".into()),
            ("infiniband.mad.classversion", "2".into()),
            ("infiniband.mad.method", "3".into()),
        ];
        psn[k] += 1;
        let m = CmMad::decode(&s.mad).unwrap();
        let attr = m.msg.attr_id() as u64;
        e.push(("infiniband.mad.attributeid", attr.to_string()));
        let (own, peer) = if s.from == 'a' { (ida, idb) } else { (idb, ida) };
        let tid_a = |id: ConnId| (1u64 << 32 | u64::from(id.0)).to_string();
        match attr {
            0x10 if i == 0 => {
                e.push(("infiniband.mad.transactionid", tid_a(ida)));
                e.push(("infiniband.cm.req", ida.0.to_string()));
                e.push(("infiniband.cm.req.serviceid.dport", "4420".into()));
                e.push(("infiniband.cm.req.serviceid.protocol", "6".into()));
                e.push(("infiniband.cm.req.localqpn", "66".into()));
                e.push(("infiniband.cm.req.localcaguid", hex(0xB696_91FF_FEAA_BB01)));
                e.push(("infiniband.cm.req.responderres", "8".into()));
                e.push(("infiniband.cm.req.initdepth", "8".into()));
                e.push(("infiniband.cm.req.startpsn", hex(0x123456)));
                e.push(("infiniband.cm.req.retrcount", "7".into()));
                e.push(("infiniband.cm.req.rnrretrcount", "7".into()));
                e.push(("infiniband.cm.req.pppmtu", "3".into()));
                e.push(("infiniband.cm.req.transpsvctype", "0".into()));
                e.push(("infiniband.cm.req.pkey", hex(0xFFFF)));
                e.push(("infiniband.cm.req.prim_localgid_ipv4", a_ip.clone()));
                e.push(("infiniband.cm.req.prim_remotegid_ipv4", b_ip.clone()));
                e.push(("infiniband.cm.req.prim_hoplim", "64".into()));
                e.push(("infiniband.cm.req.ip_cm.majv", "0".into()));
                e.push(("infiniband.cm.req.ip_cm.ipv", "4".into()));
                e.push(("infiniband.cm.req.ip_cm.sport", "49152".into()));
                e.push(("infiniband.cm.req.ip_cm.sip4", a_ip.clone()));
                e.push(("infiniband.cm.req.ip_cm.dip4", b_ip.clone()));
            }
            0x10 => {
                e.push(("infiniband.mad.transactionid", tid_a(idr)));
                e.push(("infiniband.cm.req", idr.0.to_string()));
                e.push(("infiniband.cm.req.serviceid.dport", "5000".into()));
                e.push(("infiniband.cm.req.localqpn", "67".into()));
            }
            0x13 => {
                e.push(("infiniband.mad.transactionid", tid_a(ida)));
                e.push(("infiniband.cm.rep", idb.0.to_string()));
                e.push(("infiniband.cm.rep.remotecommid", ida.0.to_string()));
                e.push(("infiniband.cm.rep.localqpn", "119".into()));
                e.push(("infiniband.cm.rep.startpsn", hex(0xABCDE)));
                e.push(("infiniband.cm.rep.respres", "4".into()));
                e.push(("infiniband.cm.rep.initdepth", "6".into()));
                e.push(("infiniband.cm.rep.rnrretrcount", "5".into()));
                e.push(("infiniband.cm.rep.localcaguid", hex(0xB696_91FF_FEAA_BB02)));
            }
            0x14 => {
                e.push(("infiniband.mad.transactionid", tid_a(ida)));
                e.push(("infiniband.cm.rtu.localcommid", ida.0.to_string()));
                e.push(("infiniband.cm.rtu.remotecommid", idb.0.to_string()));
            }
            0x15 => {
                e.push(("infiniband.cm.dreq.localcommid", own.0.to_string()));
                e.push(("infiniband.cm.dreq.remotecommid", peer.0.to_string()));
                // (sic) tshark's name for the DREQ's remote QPN (spec §7.4)
                e.push(("infiniband.cm.req.remoteqpneecn", "119".into()));
            }
            0x16 => {
                e.push(("infiniband.cm.drsp.localcommid", own.0.to_string()));
                e.push(("infiniband.cm.drsp.remotecommid", peer.0.to_string()));
            }
            0x12 => {
                e.push(("infiniband.mad.transactionid", tid_a(idr)));
                e.push(("infiniband.cm.rej.localcommid", "0".into()));
                e.push(("infiniband.cm.rej.remotecommid", idr.0.to_string()));
                e.push(("infiniband.cm.rej.msgrej", "0".into()));
                e.push(("infiniband.cm.rej.reason", "8".into()));
            }
            a => panic!("unexpected attribute {a:#x}"),
        }
        exp.push(e);
    }
    let kinds: Vec<u16> =
        p.sent().iter().map(|s| CmMad::decode(&s.mad).unwrap().msg.attr_id() as u16).collect();
    assert_eq!(kinds, [0x10, 0x13, 0x14, 0x15, 0x16, 0x10, 0x12]);

    // an IPv6 REQ (2001:db8::1 port 40000 → 2001:db8::2 port 4791 of the
    // TCP space), carried over IPv6
    let (v6a, v6b) = (V6A, V6B);
    let mut cp = connect_params(b"six");
    cp.peer.local_ip = IpAddr::V6(v6a);
    cp.peer.peer_ip = IpAddr::V6(v6b);
    cp.src_port = 40000;
    cp.dst_port = 4791;
    let n = p.sent().len();
    let id6 = p.a.connect(p.now, &cp, &mut p.ta).unwrap();
    let req6 = p.sent()[n].mad;
    let w = |a: [u8; 16]| {
        let mut o = [0u32; 4];
        for (i, c) in a.chunks(4).enumerate() {
            o[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        o
    };
    let p6 = Path { ipv4: false, src_ip: w(v6a), dst_ip: w(v6b), ..path('a') };
    cap.push(frame_on(&p6, psn[0], &req6, 0));
    exp.push(vec![
        ("infiniband.bth.opcode", "100".into()),
        ("infiniband.bth.destqp", "1".into()),
        ("infiniband.deth.q_key", hex(QP1_QKEY.into())),
        ("infiniband.deth.srcqp", "1".into()),
        ("infiniband.mad.attributeid", "16".into()),
        ("infiniband.mad.transactionid", (1u64 << 32 | u64::from(id6.0)).to_string()),
        ("infiniband.cm.req", id6.0.to_string()),
        ("infiniband.cm.req.serviceid.dport", "4791".into()),
        ("infiniband.cm.req.prim_localgid", "2001:db8::1".into()),
        ("infiniband.cm.req.prim_remotegid", "2001:db8::2".into()),
        ("infiniband.cm.req.ip_cm.ipv", "6".into()),
        ("infiniband.cm.req.ip_cm.sport", "40000".into()),
        ("infiniband.cm.req.ip_cm.sip6", "2001:db8::1".into()),
        ("infiniband.cm.req.ip_cm.dip6", "2001:db8::2".into()),
    ]);
    Run { cap, exp }
}

#[test]
fn cm_frames_decode_as_infiniband_cm_in_tshark() {
    let run = scenario();
    // lengths and the ICRC the builder stored
    for f in run.cap.frames() {
        // IPv4: 322 bytes; IPv6: 20 more
        assert!(f.len() == 322 || f.len() == 342, "{}", f.len());
        let n = f.len();
        assert_eq!(
            wire::icrc(&f).map(u32::to_le_bytes).as_ref().map(|b| &b[..]),
            Some(&f[n - 4..])
        );
    }
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let file = dir.join("cm_wire.pcap");
    run.cap.write_pcap(&file).unwrap();
    let f = file.to_str().unwrap();
    if !tshark_or_skip("cm_wire", f) {
        return;
    }
    let tshark = |extra: &[&str]| tshark(f, &[], extra);
    let bad = tshark(&["-Y", "_ws.malformed || _ws.expert || !infiniband || !infiniband.mad"]);
    assert!(bad.trim().is_empty(), "tshark flags frames:\n{bad}");
    let info = tshark(&["-T", "fields", "-e", "_ws.col.Info"]);
    let want_info = [
        "ConnectRequest",
        "ConnectReply",
        "ReadyToUse",
        "DisconnectRequest",
        "DisconnectReply",
        "ConnectRequest",
        "ConnectReject",
        "ConnectRequest",
    ];
    let lines: Vec<&str> = info.lines().collect();
    assert_eq!(lines.len(), want_info.len());
    for (l, w) in lines.iter().zip(want_info) {
        assert!(l.contains(w), "tshark Info {l:?}, expected {w}");
    }
    // fields, frame by frame
    let mut checked = 0;
    for (i, exp) in run.exp.iter().enumerate() {
        let mut args = vec!["-T", "fields", "-E", "separator=/t", "-E", "occurrence=f"];
        let filter = format!("frame.number == {}", i + 1);
        args.extend(["-Y", filter.as_str()]);
        for (name, _) in exp {
            args.extend(["-e", name]);
        }
        let out = tshark(&args);
        let got: Vec<&str> = out.trim_end_matches('\n').split('\t').collect();
        assert_eq!(got.len(), exp.len(), "frame {}: {out:?}", i + 1);
        for ((name, want), g) in exp.iter().zip(&got) {
            let same = match (num(want), num(g)) {
                (Some(a), Some(b)) => a == b,
                _ => g == want,
            };
            assert!(same, "frame {}: tshark {name} = {g:?}, the CM used {want:?}", i + 1);
            checked += 1;
        }
    }
    assert!(checked > 80, "{checked} fields checked");
    // scapy: every ICRC
    let Some(out) = scapy_icrc("cm_wire", f, 8) else { return };
    eprintln!("cm_wire: tshark checked {checked} fields of 8 frames; scapy: {}", out.trim());
}
