//! The CM MAD decoder (`CmMad::decode`) and the CM state machine
//! (`Cm::on_mad`, `Cm::poll`) on fuzz bytes: decoding never panics, a
//! decoded MAD re-encodes to one that decodes the same, and any sequence of
//! MADs (256-byte chunks, the first byte of each chunk pair also used as a
//! time step) leaves the CM consistent.
#![no_main]

use irdma::cm::mad::{CmMad, MAD_SIZE};
use irdma::cm::rdma_cm::PortSpace;
use irdma::cm::{
    AcceptParams, Cm, CmConfig, CmEvent, CmTiming, ConnectParams, MadAddr, MadTransport,
};
use irdma::verbs::IpAddr;
use libfuzzer_sys::fuzz_target;

struct Null;

impl MadTransport for Null {
    type Error = ();
    fn send(&mut self, _: &MadAddr, mad: &[u8; MAD_SIZE]) -> Result<(), ()> {
        // whatever the CM sends must decode
        assert!(CmMad::decode(mad).is_ok());
        Ok(())
    }
    fn recv(&mut self, _: &mut [u8; MAD_SIZE]) -> Option<MadAddr> {
        None
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = CmMad::decode(data) {
        let mut b = [0u8; MAD_SIZE];
        if m.encode(&mut b).is_ok() {
            assert_eq!(CmMad::decode(&b), Ok(m));
        }
    }
    let ip = IpAddr::V4([192, 0, 2, 2]);
    let mut cm: Cm<4, 2> = Cm::new(CmConfig {
        ca_guid: 1,
        hi_tid: 1,
        id_seed: 7,
        local_ips: [Some(ip), None, None, None],
        ca_ack_delay: 0,
        timing: CmTiming::default(),
    });
    let _ = cm.listen(PortSpace::Tcp, 4420, None);
    let src = MadAddr {
        peer_ip: IpAddr::V4([192, 0, 2, 1]),
        local_ip: ip,
        peer_mac: [2, 0, 0, 0, 0, 1],
        vlan: None,
        hop_limit: 64,
        traffic_class: 0,
    };
    let mut t = Null;
    let mut now = 0u64;
    // one active connection too (local id 1 ^ 7 = 6), for forged REP/REJ/MRA
    let cp = ConnectParams {
        src_port: 49152,
        private_data: b"x",
        ..ConnectParams::new(src, PortSpace::Tcp, 4420, 5, 3)
    };
    assert!(cm.connect(0, &cp, &mut t).is_ok());
    for chunk in data.chunks(MAD_SIZE) {
        now += u64::from(chunk[0]) * 97;
        let ev = cm.on_mad(now, &src, chunk, &mut t);
        if let Ok(Some(CmEvent::Connected { id, .. })) = ev {
            let _ = if chunk[0] & 1 == 0 {
                cm.ready_to_use(id, &mut t)
            } else {
                cm.reject(id, b"no", &mut t)
            };
        }
        if let Ok(Some(CmEvent::Disconnected { id, .. })) = ev {
            let _ = cm.disconnect(now, id, &mut t);
        }
        if let Ok(Some(CmEvent::ConnectRequest { id, .. })) = ev {
            if chunk[0] & 2 != 0 {
                let _ = cm.mra(id, 24, &mut t);
            }
            if chunk[0] & 4 != 0 {
                let _ = cm.reject(id, &[], &mut t);
                continue;
            }
            let a = AcceptParams {
                responder_resources: 1,
                initiator_depth: 1,
                ..AcceptParams::new(9, 1)
            };
            let _ = cm.accept(now, id, &a, &mut t);
        }
        while cm.poll(now, &mut t).is_some() {}
    }
    assert!(cm.active_connections() <= 4);
});
