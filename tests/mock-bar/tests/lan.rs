//! The LAN firmware side (admin queue) of the model: registers, rings,
//! commands, errors, reset and faults (spec ice-lan-for-rdma.md).

use mock_bar::lan::{self, LanConfig, flag, opc, rc, reg};
use mock_bar::{Config, Device, Event, TestMemory};

const ATQ: u64 = 0x10_0000;
const ARQ: u64 = 0x11_0000;
const ATQ_BUFS: u64 = 0x20_0000;
const ARQ_BUFS: u64 = 0x30_0000;
const N: u32 = 16;

struct Aq {
    dev: Device,
    mem: TestMemory,
    next: u32,
    arq_next: u32,
}

/// A completed command: descriptor and the buffer's first datalen bytes.
#[derive(Debug)]
struct Resp {
    d: [u8; 32],
    buf: Vec<u8>,
}

impl Resp {
    fn flags(&self) -> u16 {
        u16::from_le_bytes([self.d[0], self.d[1]])
    }
    fn retval(&self) -> u16 {
        u16::from_le_bytes([self.d[6], self.d[7]])
    }
    fn datalen(&self) -> usize {
        u16::from_le_bytes([self.d[4], self.d[5]]) as usize
    }
    fn p16(&self, o: usize) -> u16 {
        u16::from_le_bytes([self.d[o], self.d[o + 1]])
    }
    fn p32(&self, o: usize) -> u32 {
        u32::from_le_bytes(self.d[o..o + 4].try_into().unwrap())
    }
}

fn le16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

impl Aq {
    fn with(cfg: LanConfig) -> Self {
        let mem = TestMemory::new();
        mem.map(ATQ, 32 * N as usize);
        mem.map(ARQ, 32 * N as usize);
        mem.map(ATQ_BUFS, 4096 * N as usize);
        mem.map(ARQ_BUFS, 4096 * N as usize);
        let dev = Device::new(Config { lan: cfg, ..Config::default() }, Box::new(mem.clone()));
        let mut aq = Aq { dev, mem, next: 0, arq_next: 0 };
        aq.init();
        aq
    }
    fn new() -> Self {
        Self::with(LanConfig::default())
    }
    fn wr(&mut self, off: u32, v: u32) {
        self.dev.mmio_write32(off, v)
    }
    fn rd(&mut self, off: u32) -> u32 {
        self.dev.mmio_read32(off)
    }
    /// Linux's order (spec §1.6): per ring HEAD, TAIL, LEN|ENABLE, BAL,
    /// BAH; ATQ first; ARQ slots pre-posted, then ARQT = N − 1.
    fn init(&mut self) {
        self.next = 0;
        self.arq_next = 0;
        self.wr(reg::ATQH, 0);
        self.wr(reg::ATQT, 0);
        self.wr(reg::ATQLEN, N | reg::LEN_ENABLE);
        self.wr(reg::ATQBAL, ATQ as u32);
        self.wr(reg::ATQBAH, (ATQ >> 32) as u32);
        for i in 0..N {
            self.post_arq(i);
        }
        self.wr(reg::ARQH, 0);
        self.wr(reg::ARQT, 0);
        self.wr(reg::ARQLEN, N | reg::LEN_ENABLE);
        self.wr(reg::ARQBAL, ARQ as u32);
        self.wr(reg::ARQBAH, 0);
        self.wr(reg::ARQT, N - 1);
    }
    fn post_arq(&mut self, i: u32) {
        let mut d = [0u8; 32];
        d[0..2].copy_from_slice(&(flag::BUF | flag::LB).to_le_bytes());
        d[4..6].copy_from_slice(&4096u16.to_le_bytes());
        let a = ARQ_BUFS + 4096 * i as u64;
        d[24..28].copy_from_slice(&((a >> 32) as u32).to_le_bytes());
        d[28..32].copy_from_slice(&(a as u32).to_le_bytes());
        self.mem.fill(ARQ + 32 * i as u64, &d);
    }
    /// Posts one descriptor (flags SI + extra, params = bytes 16..24) with
    /// an optional buffer of `len` bytes holding `data`; rings the tail and
    /// returns the completion if ATQH moved past the slot.
    fn try_cmd(
        &mut self,
        op: u16,
        extra: u16,
        params: &[u8],
        data: Option<(&[u8], usize)>,
    ) -> Option<Resp> {
        let slot = self.next;
        let mut d = [0u8; 32];
        let mut f = flag::SI | extra;
        let a = ATQ_BUFS + 4096 * slot as u64;
        if let Some((bytes, len)) = data {
            f |= flag::BUF;
            if len > 512 {
                f |= flag::LB;
            }
            d[4..6].copy_from_slice(&(len as u16).to_le_bytes());
            let mut b = vec![0u8; len];
            b[..bytes.len()].copy_from_slice(bytes);
            self.mem.fill(a, &b);
            d[24..28].copy_from_slice(&((a >> 32) as u32).to_le_bytes());
            d[28..32].copy_from_slice(&(a as u32).to_le_bytes());
        }
        d[0..2].copy_from_slice(&f.to_le_bytes());
        d[2..4].copy_from_slice(&op.to_le_bytes());
        d[8..16].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        d[16..16 + params.len()].copy_from_slice(params);
        self.mem.fill(ATQ + 32 * slot as u64, &d);
        self.next = (slot + 1) % N;
        self.wr(reg::ATQT, self.next);
        if self.rd(reg::ATQH) != self.next {
            return None;
        }
        let d: [u8; 32] = self.mem.bytes(ATQ + 32 * slot as u64, 32).try_into().unwrap();
        let dl = u16::from_le_bytes([d[4], d[5]]) as usize;
        let buf = if data.is_some() { self.mem.bytes(a, dl) } else { Vec::new() };
        Some(Resp { d, buf })
    }
    fn cmd(&mut self, op: u16, extra: u16, params: &[u8], data: Option<(&[u8], usize)>) -> Resp {
        self.try_cmd(op, extra, params, data).expect("command completed")
    }
    fn ok(&mut self, op: u16, extra: u16, params: &[u8], data: Option<(&[u8], usize)>) -> Resp {
        let r = self.cmd(op, extra, params, data);
        assert_eq!(r.retval(), rc::OK, "opcode {op:#06x}: {r:x?}");
        r
    }
    /// Takes the next ARQ event (descriptor, buffer) if ARQH moved.
    fn event(&mut self) -> Option<([u8; 32], Vec<u8>)> {
        if self.rd(reg::ARQH) == self.arq_next {
            return None;
        }
        let i = self.arq_next;
        let d: [u8; 32] = self.mem.bytes(ARQ + 32 * i as u64, 32).try_into().unwrap();
        let dl = u16::from_le_bytes([d[4], d[5]]) as usize;
        let b = self.mem.bytes(ARQ_BUFS + 4096 * i as u64, dl);
        self.post_arq(i);
        self.wr(reg::ARQT, i);
        self.arq_next = (i + 1) % N;
        Some((d, b))
    }
}

// ---------------------------------------------------------------------
// registers and rings
// ---------------------------------------------------------------------

#[test]
fn registers_read_back_and_get_version_completes_with_dd_cmp() {
    let mut aq = Aq::new();
    assert_eq!(aq.rd(reg::ATQBAL), ATQ as u32, "BAL reads back (Linux verifies it)");
    assert_eq!(aq.rd(reg::ATQLEN), N | reg::LEN_ENABLE, "alive: entries | ENABLE");
    assert_eq!(aq.rd(reg::ARQT), N - 1);
    let r = aq.ok(opc::GET_VER, 0, &[], None);
    assert_eq!(r.flags(), flag::SI | flag::DD | flag::CMP);
    assert_eq!(r.p32(8), 0x5566_7788, "cookie_high unchanged");
    assert_eq!(r.p32(12), 0x1122_3344, "cookie_low unchanged");
    assert_eq!(&r.d[28..32], &[0, 1, 5, 0], "API 1.5.0");
    assert_eq!(r.p32(20), LanConfig::default().fw_build);
    assert_eq!(aq.rd(reg::ATQH), 1);
    assert!(aq.dev.trace().any(|e| matches!(e, Event::AqCmd { opcode: 1, retval: 0, .. })));
    assert_eq!(aq.dev.counters().aq_commands, 1);
}

#[test]
fn several_descriptors_in_one_tail_write_and_ring_wrap() {
    let mut aq = Aq::new();
    for _ in 0..(N + 3) {
        aq.ok(opc::GET_VER, 0, &[], None);
    }
    assert_eq!(aq.rd(reg::ATQH), 3, "wrapped");
    // two at once
    for slot in [3u64, 4] {
        let mut d = [0u8; 32];
        d[0..2].copy_from_slice(&flag::SI.to_le_bytes());
        d[2..4].copy_from_slice(&opc::GET_VER.to_le_bytes());
        aq.mem.fill(ATQ + 32 * slot, &d);
    }
    aq.wr(reg::ATQT, 5);
    assert_eq!(aq.rd(reg::ATQH), 5);
    for slot in [3u64, 4] {
        assert_eq!(aq.mem.bytes(ATQ + 32 * slot, 2), [0x03, 0x20]);
    }
}

#[test]
fn disabled_unaligned_or_overrun_rings_are_not_processed() {
    let mut aq = Aq::new();
    aq.wr(reg::ATQLEN, N); // no ENABLE
    aq.wr(reg::ATQT, 1);
    assert_eq!(aq.rd(reg::ATQH), 0, "disabled ring: nothing consumed");
    assert_eq!(aq.dev.counters().aq_bad_ring, 1);
    aq.wr(reg::ATQT, 0);
    aq.wr(reg::ATQLEN, N | reg::LEN_ENABLE);
    aq.wr(reg::ATQBAL, ATQ as u32 + 0x20); // not 64-byte aligned
    aq.wr(reg::ATQT, 1);
    assert_eq!(aq.rd(reg::ATQH), 0, "unaligned base: nothing consumed");
    assert_eq!(aq.dev.counters().aq_bad_ring, 2);
    aq.wr(reg::ATQBAL, ATQ as u32);
    aq.wr(reg::ATQT, N); // tail ≥ LEN
    assert_eq!(aq.rd(reg::ATQH), 0);
    assert_eq!(aq.dev.counters().aq_bad_ring, 3);
    aq.wr(reg::ATQT, 0);
    aq.next = 0;
    aq.ok(opc::GET_VER, 0, &[], None);
}

#[test]
fn len_firmware_bits_are_not_writable() {
    let mut aq = Aq::new();
    aq.wr(reg::ATQLEN, N | reg::LEN_ENABLE | reg::LEN_CRIT | reg::LEN_OVFL);
    assert_eq!(aq.rd(reg::ATQLEN), N | reg::LEN_ENABLE);
}

#[test]
fn buffer_flag_rules() {
    let mut aq = Aq::new();
    // a command that needs a buffer, sent without one
    let r = aq.cmd(opc::LIST_FUNC_CAPS, 0, &[], None);
    assert_eq!((r.retval(), r.flags() & flag::ERR), (rc::EINVAL, flag::ERR));
    // a write command without RD
    let r = aq.cmd(opc::ADD_VSI, 0, &[], Some((&[], 128)));
    assert_eq!(r.retval(), rc::EINVAL, "firmware must read: RD required");
    // datalen without BUF
    let slot = aq.next;
    let mut d = [0u8; 32];
    d[0..2].copy_from_slice(&flag::SI.to_le_bytes());
    d[2..4].copy_from_slice(&opc::GET_VER.to_le_bytes());
    d[4..6].copy_from_slice(&16u16.to_le_bytes());
    aq.mem.fill(ATQ + 32 * slot as u64, &d);
    aq.next += 1;
    aq.wr(reg::ATQT, aq.next);
    assert_eq!(le16(&aq.mem.bytes(ATQ + 32 * slot as u64, 8), 6), rc::EINVAL);
    // over 4096 bytes
    let r = aq.cmd(opc::QUERY_SCHED_RES, 0, &[], Some((&[], 4097)));
    assert_eq!(r.retval(), rc::EINVAL);
    // LB is not enforced (iPXE sends 4 KiB without it, spec §6 item 8)
    let slot = aq.next;
    let a = ATQ_BUFS + 4096 * slot as u64;
    let mut d = [0u8; 32];
    d[0..2].copy_from_slice(&flag::BUF.to_le_bytes());
    d[2..4].copy_from_slice(&opc::LIST_DEV_CAPS.to_le_bytes());
    d[4..6].copy_from_slice(&4096u16.to_le_bytes());
    d[28..32].copy_from_slice(&(a as u32).to_le_bytes());
    aq.mem.fill(ATQ + 32 * slot as u64, &d);
    aq.next += 1;
    aq.wr(reg::ATQT, aq.next);
    assert_eq!(le16(&aq.mem.bytes(ATQ + 32 * slot as u64, 8), 6), rc::OK);
}

#[test]
fn buffer_dma_fault_is_bad_addr_and_unknown_opcode_is_esrch() {
    let mut aq = Aq::new();
    let slot = aq.next;
    let mut d = [0u8; 32];
    d[0..2].copy_from_slice(&(flag::SI | flag::BUF).to_le_bytes());
    d[2..4].copy_from_slice(&opc::QUERY_SCHED_RES.to_le_bytes());
    d[4..6].copy_from_slice(&320u16.to_le_bytes());
    d[24..28].copy_from_slice(&0x77u32.to_le_bytes()); // unmapped: the response write faults
    aq.mem.fill(ATQ, &d);
    aq.next = slot + 1;
    aq.wr(reg::ATQT, 1);
    assert_eq!(le16(&aq.mem.bytes(ATQ, 8), 6), rc::BAD_ADDR);
    assert_eq!(aq.dev.counters().dma_faults, 1);
    let dump = aq.dev.trace_dump();
    let hit =
        aq.dev.trace().any(|e| matches!(e, Event::DmaFault(f) if f.addr == 0x77 << 32 && f.write));
    assert!(hit, "{dump}");
    let r = aq.cmd(0x0999, 0, &[], None);
    assert_eq!(r.retval(), rc::ESRCH);
    // a buffer the firmware must read (RD) that faults: not executed
    let slot = aq.next as u64;
    let mut d = [0u8; 32];
    d[0..2].copy_from_slice(&(flag::SI | flag::BUF | flag::RD).to_le_bytes());
    d[2..4].copy_from_slice(&opc::ADD_VSI.to_le_bytes());
    d[4..6].copy_from_slice(&128u16.to_le_bytes());
    d[24..28].copy_from_slice(&0x66u32.to_le_bytes());
    aq.mem.fill(ATQ + 32 * slot, &d);
    aq.next += 1;
    aq.wr(reg::ATQT, aq.next);
    assert_eq!(le16(&aq.mem.bytes(ATQ + 32 * slot, 8), 6), rc::BAD_ADDR);
    let hit =
        aq.dev.trace().any(|e| matches!(e, Event::DmaFault(f) if f.addr == 0x66 << 32 && !f.write));
    assert!(hit, "the read fault is in the trace");
    assert!(aq.dev.lan().vsis().is_empty());
}

// ---------------------------------------------------------------------
// commands
// ---------------------------------------------------------------------

#[test]
fn clear_pxe_then_eexist_and_magic_checked() {
    let mut aq = Aq::new();
    assert_eq!(aq.cmd(opc::CLEAR_PXE, 0, &[1], None).retval(), rc::EINVAL);
    aq.ok(opc::CLEAR_PXE, 0, &[2], None);
    assert!(!aq.dev.lan().pxe_mode());
    assert_eq!(aq.cmd(opc::CLEAR_PXE, 0, &[2], None).retval(), rc::EEXIST);
}

#[test]
fn caps_carry_rdma_msix_and_report_count_when_too_small() {
    let cfg = LanConfig { msix: (128, 257), valid_functions: 0xF, ..LanConfig::default() };
    let mut aq = Aq::with(cfg);
    let r = aq.ok(opc::LIST_FUNC_CAPS, 0, &[], Some((&[], 4096)));
    let n = r.p32(20) as usize;
    assert_eq!(r.datalen(), 32 * n);
    let caps: Vec<(u16, u32, u32)> = (0..n)
        .map(|i| (le16(&r.buf, 32 * i), le32(&r.buf, 32 * i + 4), le32(&r.buf, 32 * i + 12)))
        .collect();
    assert!(caps.contains(&(0x0051, 1, 0)), "RDMA capability: {caps:x?}");
    assert!(caps.contains(&(0x0043, 128, 257)), "MSI-X count and first");
    assert!(caps.contains(&(0x0005, 0xF, 0)));
    let r = aq.cmd(opc::LIST_DEV_CAPS, 0, &[], Some((&[], 64)));
    assert_eq!(r.retval(), rc::ENOMEM);
    assert_eq!(r.p32(20) as usize, n, "count written even with ENOMEM");
    let mut aq = Aq::with(LanConfig { rdma: false, ..LanConfig::default() });
    let r = aq.ok(opc::LIST_FUNC_CAPS, 0, &[], Some((&[], 4096)));
    let rdma = (0..r.p32(20) as usize).find(|&i| le16(&r.buf, 32 * i) == 0x51).unwrap();
    assert_eq!(le32(&r.buf, 32 * rdma + 4), 0);
    assert_eq!(aq.rd(reg::GLNVM_ULD) & reg::ULD_PE_DONE, 0, "no PE_DONE without RDMA");
}

#[test]
fn switch_config_pages_and_mac_read() {
    let mut aq = Aq::new();
    let r = aq.ok(opc::GET_SW_CFG, 0, &[], Some((&[], 2048)));
    assert_eq!(r.p16(20), 1, "only the port before any VSI");
    assert_eq!(le16(&r.buf, 0) >> 14, 0, "physical port");
    assert_eq!(le16(&r.buf, 2), LanConfig::default().sw_id);
    add_pf_vsi(&mut aq);
    add_pf_vsi(&mut aq);
    // 12-byte buffer: two elements, then continue from element 2
    let r = aq.ok(opc::GET_SW_CFG, 0, &[], Some((&[], 12)));
    assert_eq!((r.p16(18), r.p16(20)), (2, 2));
    let r = aq.ok(opc::GET_SW_CFG, 0, &[0, 0, 2, 0], Some((&[], 12)));
    assert_eq!((r.p16(18), r.p16(20)), (0, 1));
    assert_eq!(le16(&r.buf, 0) >> 14, 2, "a VSI element");
    let r = aq.ok(opc::MANAGE_MAC_READ, 0, &[], Some((&[], 16)));
    assert_eq!(r.p16(16) & 0x10, 0x10, "LAN address valid");
    assert_eq!(r.d[20], 1);
    assert_eq!(&r.buf[2..8], &LanConfig::default().mac);
}

fn pf_ctx(sw_id: u8) -> [u8; 128] {
    let mut c = [0u8; 128];
    c[0] = 1 << 1; // SECURITY
    c[2] = sw_id;
    c[3] = 1 << 7;
    c[4] = 1 << 4; // LAN_ENA
    c
}

fn add_pf_vsi(aq: &mut Aq) -> u16 {
    let ctx = pf_ctx(LanConfig::default().sw_id as u8);
    let r = aq.ok(opc::ADD_VSI, flag::RD, &[0, 0, 0, 0, 0, 0, 2, 0], Some((&ctx, 128)));
    r.p16(16) & 0x3FF
}

#[test]
fn vsi_add_update_pe_filter_free() {
    let mut aq = Aq::new();
    let bad = pf_ctx(0x7F);
    let r = aq.cmd(opc::ADD_VSI, flag::RD, &[0, 0, 0, 0, 0, 0, 2, 0], Some((&bad, 128)));
    assert_eq!(r.retval(), rc::EINVAL, "wrong sw_id");
    let v = add_pf_vsi(&mut aq);
    assert_eq!(v, LanConfig::default().vsi_base);
    let vsi = aq.dev.lan().vsis()[&v].clone();
    assert_eq!(vsi.vsi_type, 2);
    assert!(!vsi.pe_filter());
    let num = (v | 0x8000).to_le_bytes();
    // PE filter: Q_OPT only, q_opt_flags bit 0
    let mut upd = [0u8; 128];
    upd[0] = 1 << 7;
    upd[80] = 1;
    aq.ok(opc::UPDATE_VSI, flag::RD, &num, Some((&upd, 128)));
    assert!(aq.dev.lan().vsis()[&v].pe_filter());
    assert!(aq.dev.lan().pe_filter_on());
    assert_eq!(aq.dev.lan().vsis()[&v].ctx[4], 1 << 4, "other sections kept");
    // without the valid bit nothing changes
    upd[0] = 0;
    upd[80] = 0;
    aq.ok(opc::UPDATE_VSI, flag::RD, &num, Some((&upd, 128)));
    assert!(aq.dev.lan().vsis()[&v].pe_filter());
    let r = aq.cmd(opc::UPDATE_VSI, flag::RD, &(0x8123u16).to_le_bytes(), Some((&upd, 128)));
    assert_eq!(r.retval(), rc::ENOENT);
    aq.ok(opc::FREE_VSI, 0, &num, None);
    assert!(aq.dev.lan().vsis().is_empty());
    assert_eq!(aq.cmd(opc::FREE_VSI, 0, &num, None).retval(), rc::ENOENT);
}

#[test]
fn clear_pf_cfg_removes_vsis_and_rules() {
    let mut aq = Aq::new();
    let v = add_pf_vsi(&mut aq);
    aq.ok(opc::ADD_SW_RULES, flag::RD, &[1, 0], Some((&mac_rule(v, [0xFF; 6]), 32)));
    assert_eq!(aq.dev.lan().rules().len(), 1);
    aq.ok(opc::CLEAR_PF_CFG, 0, &[], None);
    assert!(aq.dev.lan().vsis().is_empty());
    assert!(aq.dev.lan().rules().is_empty());
}

fn mac_rule(vsi: u16, mac: [u8; 6]) -> [u8; 32] {
    let mut r = [0u8; 32];
    r[0] = 1; // LKUP_TX
    r[4] = 1; // recipe MAC
    r[6..8].copy_from_slice(&vsi.to_le_bytes());
    let act = (vsi as u32) << 4 | 1 << 17 | 1 << 2;
    r[8..12].copy_from_slice(&act.to_le_bytes());
    r[14] = 16;
    r[16..22].copy_from_slice(&mac);
    r[22] = 2;
    r[28] = 0x81;
    r
}

#[test]
fn switch_rules_get_indices_and_refuse_duplicates_and_unknown_vsis() {
    let mut aq = Aq::new();
    let v = add_pf_vsi(&mut aq);
    let r = aq.ok(opc::ADD_SW_RULES, flag::RD, &[1, 0], Some((&mac_rule(v, [0xFF; 6]), 32)));
    assert_eq!(le16(&r.buf, 12), LanConfig::default().rule_base, "index written back");
    let r = aq.cmd(opc::ADD_SW_RULES, flag::RD, &[1, 0], Some((&mac_rule(v, [0xFF; 6]), 32)));
    assert_eq!(r.retval(), rc::EEXIST);
    let r = aq.cmd(opc::ADD_SW_RULES, flag::RD, &[1, 0], Some((&mac_rule(0x155, [2; 6]), 32)));
    assert_eq!(r.retval(), rc::ENOENT);
    let rule = aq.dev.lan().rules().values().next().unwrap().clone();
    assert_eq!(rule.fwd_vsi(), Some(v));
    assert_eq!(rule.dst_mac, [0xFF; 6]);
}

/// The scheduler: resources, default topology, a branch down to an RDMA
/// queue group, qsets, their removal.
fn sched_walk(layers: u8) {
    let mut aq = Aq::with(LanConfig { sched_layers: layers, ..LanConfig::default() });
    let n = layers as usize;
    let r = aq.ok(opc::QUERY_SCHED_RES, 0, &[], Some((&[], 320)));
    assert_eq!((le16(&r.buf, 0), le16(&r.buf, 2)), (n as u16, n as u16));
    let r = aq.ok(opc::GET_DFLT_TOPO, 0, &[0], Some((&[], 4096)));
    assert_eq!(r.d[17], 1, "one branch (TC0)");
    let count = le16(&r.buf, 4) as usize;
    assert_eq!(count, n, "root .. leaf");
    let elem = |i: usize| (le32(&r.buf, 8 + 24 * i), le32(&r.buf, 12 + 24 * i), r.buf[16 + 24 * i]);
    assert_eq!(elem(0).2, lan::elem::ROOT);
    assert_eq!(elem(1).2, lan::elem::TC);
    assert_eq!(elem(2).2, lan::elem::ENTRY_POINT);
    assert_eq!(elem(n - 1).2, lan::elem::LEAF);
    let tc = elem(1).1;
    // delete the default leaf and generic nodes below the entry point
    for i in (3..n).rev() {
        let (parent, teid, _) = elem(i);
        let mut b = [0u8; 12];
        b[0..4].copy_from_slice(&parent.to_le_bytes());
        b[4] = 1;
        b[8..12].copy_from_slice(&teid.to_le_bytes());
        let r = aq.ok(opc::DELETE_SCHED_ELEMS, flag::RD, &[1, 0], Some((&b, 12)));
        assert_eq!(r.p16(18), 1);
    }
    // add generic SEs one layer at a time from the entry point down to the
    // queue-group layer N − 2
    let mut parent = elem(2).1;
    for _layer in 3..=(n - 2) {
        let mut b = [0u8; 32];
        b[0..4].copy_from_slice(&parent.to_le_bytes());
        b[4] = 1;
        b[8..12].copy_from_slice(&parent.to_le_bytes());
        b[16] = lan::elem::GENERIC;
        b[17] = 7;
        b[22] = 4;
        b[26] = 4;
        let r = aq.ok(opc::ADD_SCHED_ELEMS, flag::RD, &[1, 0], Some((&b, 32)));
        assert_eq!(r.p16(18), 1, "groups added");
        parent = le32(&r.buf, 12);
        // the firmware knows it
        let mut q = [0u8; 24];
        q[4..8].copy_from_slice(&parent.to_le_bytes());
        let r = aq.ok(opc::QUERY_SCHED_ELEMS, flag::RD, &[1, 0], Some((&q, 24)));
        assert_eq!(r.buf[8], lan::elem::GENERIC);
    }
    if n == 5 {
        // the entry point is already at layer 2 = N − 3; its child is at
        // the queue-group layer
        assert_eq!(aq.dev.lan().sched_nodes()[&parent].layer as usize, n - 2);
    }
    // a generic SE at the leaf layer is refused
    let mut b = [0u8; 32];
    b[0..4].copy_from_slice(&parent.to_le_bytes());
    b[4] = 1;
    b[16] = lan::elem::GENERIC;
    assert_eq!(
        aq.cmd(opc::ADD_SCHED_ELEMS, flag::RD, &[1, 0], Some((&b, 32))).retval(),
        rc::EINVAL
    );
    // qsets hang off the queue group; not off a TC
    let qset = |parent: u32, h: u16| {
        let mut b = [0u8; 32];
        b[0..4].copy_from_slice(&parent.to_le_bytes());
        b[4] = 1;
        b[8..10].copy_from_slice(&h.to_le_bytes());
        b[17] = 7;
        b
    };
    let r = aq.cmd(opc::ADD_RDMA_QSET, flag::RD, &[1], Some((&qset(tc, 0x12), 32)));
    assert_eq!(r.retval(), rc::EINVAL, "a TC node is not a queue group");
    let r = aq.ok(opc::ADD_RDMA_QSET, flag::RD, &[1], Some((&qset(parent, 0x12), 32)));
    let teid = le32(&r.buf, 12);
    let leaf = aq.dev.lan().qset(0x12).unwrap().clone();
    assert_eq!((leaf.teid, leaf.parent, leaf.layer as usize), (teid, parent, n - 1));
    let r = aq.cmd(opc::ADD_RDMA_QSET, flag::RD, &[1], Some((&qset(parent, 0x12), 32)));
    assert_eq!(r.retval(), rc::EEXIST);
    let r = aq.cmd(opc::ADD_RDMA_QSET, flag::RD, &[1], Some((&qset(parent, 0x13), 40)));
    assert_eq!(r.retval(), rc::EINVAL, "length must equal the groups' sum");
    // disable: q_id = handle | bit 15
    let mut b = [0u8; 8];
    b[0..4].copy_from_slice(&parent.to_le_bytes());
    b[4] = 1;
    b[6..8].copy_from_slice(&(0x12u16 | 0x8000).to_le_bytes());
    aq.ok(opc::DIS_TXQS, flag::RD, &[0x08, 1, 0, 0x14], Some((&b, 8)));
    assert!(aq.dev.lan().qset(0x12).is_none());
    let r = aq.cmd(opc::DIS_TXQS, flag::RD, &[0x08, 1, 0, 0x14], Some((&b, 8)));
    assert_eq!(r.retval(), rc::ENOENT);
}

#[test]
fn scheduler_nine_layers() {
    sched_walk(9);
}

#[test]
fn scheduler_five_layers() {
    sched_walk(5);
}

#[test]
fn scheduler_child_limit_is_enospc() {
    let mut cfg = LanConfig::default();
    cfg.max_sibl[3] = 1;
    let mut aq = Aq::with(cfg);
    let ep = aq.dev.lan().sched_nodes().values().find(|n| n.layer == 2).unwrap().teid;
    let mut b = [0u8; 32];
    b[0..4].copy_from_slice(&ep.to_le_bytes());
    b[4] = 1;
    b[16] = lan::elem::GENERIC;
    let r = aq.cmd(opc::ADD_SCHED_ELEMS, flag::RD, &[1, 0], Some((&b, 32)));
    assert_eq!(r.retval(), rc::ENOSPC, "the default chain already fills the entry point");
}

#[test]
fn link_restart_an_posts_an_arq_event_when_enabled() {
    let mut aq = Aq::new();
    aq.ok(opc::SET_MAC_CFG, 0, &[0x00, 0x26], None);
    assert_eq!(aq.cmd(opc::SET_MAC_CFG, 0, &[0x01, 0x26], None).retval(), rc::EINVAL);
    let r = aq.ok(opc::GET_LINK_STATUS, 0, &[0, 0, 3, 0], Some((&[], 32)));
    assert_eq!(r.buf[2] & 1, 0, "down before AN");
    assert_eq!(le16(&r.buf, 6), 9728);
    assert!(aq.event().is_none());
    aq.ok(opc::RESTART_AN, 0, &[0, 0, 6], None);
    let (d, b) = aq.event().expect("link event");
    assert_eq!(le16(&d, 2), opc::GET_LINK_STATUS);
    assert_eq!(le16(&d, 0) & (flag::DD | flag::CMP | flag::BUF), flag::DD | flag::CMP | flag::BUF);
    assert_eq!(b[2] & 1, 1, "up");
    assert_eq!(le16(&b, 10), 1 << 10, "100G");
    // masked: no event
    let mut p = [0u8; 10];
    p[8] = 1 << 1;
    aq.ok(opc::SET_EVENT_MASK, 0, &p, None);
    aq.dev.set_link(false);
    assert!(aq.event().is_none());
    assert!(!aq.dev.lan().link().up);
    aq.ok(opc::SET_EVENT_MASK, 0, &[0; 10], None);
    aq.dev.set_link(true);
    assert!(aq.event().is_some());
}

#[test]
fn arq_full_drops_and_sets_ovfl() {
    let mut aq = Aq::new();
    aq.ok(opc::GET_LINK_STATUS, 0, &[0, 0, 3, 0], Some((&[], 32)));
    for i in 0..N {
        aq.dev.set_link(i % 2 == 0);
    }
    assert_eq!(aq.dev.counters().arq_events, (N - 1) as u64, "one slot stays free");
    assert_eq!(aq.dev.counters().arq_dropped, 1);
    assert_ne!(aq.rd(reg::ARQLEN) & reg::LEN_OVFL, 0);
}

#[test]
fn ddp_lock_download_unlock() {
    let mut aq = Aq::with(LanConfig { package: None, ..LanConfig::default() });
    let r = aq.ok(opc::GET_PKG_INFO_LIST, 0, &[], Some((&[], 512)));
    assert_eq!(le32(&r.buf, 0), 0, "no package");
    let pkg = lan::synthetic_package([1, 3, 40, 0], "MOCK PKG", 0xC0DE, &[0xAB; 6000]);
    // without the lock
    let r = aq.cmd(opc::DOWNLOAD_PKG, flag::RD, &[1], Some((&pkg[..4096], 4096)));
    assert_eq!(r.retval(), rc::EACCES);
    let r = aq.ok(opc::REQ_RES, 0, &[4, 0, 2, 0], None);
    assert_eq!((r.p32(20), r.p16(28)), (3000, 0));
    assert_eq!(aq.cmd(opc::REQ_RES, 0, &[4, 0, 2, 0], None).retval(), rc::EBUSY);
    aq.ok(opc::DOWNLOAD_PKG, flag::RD, &[0], Some((&pkg[..4096], 4096)));
    let rest = &pkg[4096..];
    aq.ok(opc::DOWNLOAD_PKG, flag::RD, &[1], Some((rest, rest.len())));
    aq.ok(opc::REL_RES, 0, &[4, 0], None);
    let r = aq.ok(opc::GET_PKG_INFO_LIST, 0, &[], Some((&[], 512)));
    assert_eq!(le32(&r.buf, 0), 1);
    assert_eq!(&r.buf[4..8], &[1, 3, 40, 0]);
    assert_eq!(&r.buf[8..16], b"MOCK PKG");
    assert_eq!(le32(&r.buf, 36), 0xC0DE);
    assert_eq!(r.buf[41], 1, "active");
    // a second lock request: already done
    let r = aq.ok(opc::REQ_RES, 0, &[4, 0, 2, 0], None);
    assert_eq!(r.p16(28), 2);
    // survives a PF reset, not a global one
    aq.dev.pf_reset();
    assert!(aq.dev.lan().package().is_some());
    aq.dev.global_reset();
    assert!(aq.dev.lan().package().is_none());
}

#[test]
fn ddp_bad_package_reports_offset() {
    let mut aq = Aq::with(LanConfig { package: None, ..LanConfig::default() });
    aq.ok(opc::REQ_RES, 0, &[4, 0, 2, 0], None);
    let r = aq.cmd(opc::DOWNLOAD_PKG, flag::RD, &[1], Some((b"NOTAPKG!", 64)));
    assert_eq!(r.retval(), rc::EINVAL);
    assert_eq!(r.datalen(), 8);
    assert_eq!((le32(&r.buf, 0), le32(&r.buf, 4)), (0, 1));
    let mut pkg = lan::synthetic_package([1, 0, 0, 0], "x", 1, &[0; 10]);
    pkg[40] = 0xFF;
    let r = aq.cmd(opc::DOWNLOAD_PKG, flag::RD, &[1], Some((&pkg, pkg.len())));
    assert_eq!((r.retval(), le32(&r.buf, 0), le32(&r.buf, 4)), (rc::EINVAL, 40, 2));
    assert!(aq.dev.lan().package().is_none());
}

// ---------------------------------------------------------------------
// reset and modes
// ---------------------------------------------------------------------

#[test]
fn pf_reset_tears_down_the_aq_and_keeps_pxe_cleared() {
    let mut aq = Aq::with(LanConfig { reset_reads: 3, ..LanConfig::default() });
    aq.ok(opc::CLEAR_PXE, 0, &[2], None);
    add_pf_vsi(&mut aq);
    aq.wr(reg::PFGEN_CTRL, 1);
    for _ in 0..3 {
        assert_eq!(aq.rd(reg::PFGEN_CTRL) & 1, 1, "PFSWR set while resetting");
    }
    assert_eq!(aq.rd(reg::PFGEN_CTRL) & 1, 0);
    assert_eq!(aq.rd(reg::GLGEN_RSTAT) & 3, 0);
    assert_eq!(aq.rd(reg::GLNVM_ULD), reg::ULD_DONE | reg::ULD_PE_DONE);
    assert_eq!(aq.rd(reg::ATQLEN), 0, "AQ disabled by the reset");
    assert!(aq.dev.lan().vsis().is_empty());
    assert!(aq.dev.trace().any(|e| *e == Event::Reset));
    aq.init();
    assert_eq!(aq.cmd(opc::CLEAR_PXE, 0, &[2], None).retval(), rc::EEXIST, "PFR keeps PXE cleared");
    aq.dev.global_reset();
    assert_ne!(aq.rd(reg::GL_MNG_FWSM) & reg::FWSM_FW_LOADING, 0, "firmware loading");
    assert_ne!(aq.rd(reg::GLGEN_RSTAT) & 3, 0, "DEVSTATE busy");
    assert_eq!(aq.rd(reg::GLNVM_ULD), 0, "done bits clear");
    assert_eq!(aq.rd(reg::GL_MNG_FWSM) & reg::FWSM_FW_LOADING, 0, "loaded");
    aq.init();
    aq.ok(opc::CLEAR_PXE, 0, &[2], None);
}

#[test]
fn recovery_mode_answers_only_version() {
    let mut aq = Aq::with(LanConfig { recovery_mode: true, ..LanConfig::default() });
    assert_eq!(aq.rd(reg::GL_MNG_FWSM) & 7, reg::FWSM_RECOVERY);
    aq.ok(opc::GET_VER, 0, &[], None);
    assert_eq!(aq.cmd(opc::CLEAR_PF_CFG, 0, &[], None).retval(), rc::EMODE);
    assert_eq!(aq.cmd(opc::LIST_FUNC_CAPS, 0, &[], Some((&[], 4096))).retval(), rc::EMODE);
}

// ---------------------------------------------------------------------
// faults
// ---------------------------------------------------------------------

#[test]
fn hang_never_completes_until_reset() {
    let mut aq = Aq::new();
    aq.dev.faults().aq_hang_at = Some(1);
    aq.ok(opc::GET_VER, 0, &[], None);
    assert!(aq.try_cmd(opc::GET_VER, 0, &[], None).is_none());
    assert!(aq.try_cmd(opc::GET_VER, 0, &[], None).is_none(), "stays hung");
    assert_eq!(aq.rd(reg::ATQH), 1);
    aq.dev.pf_reset();
    for _ in 0..4 {
        aq.rd(reg::PFGEN_CTRL);
    }
    aq.init();
    aq.ok(opc::GET_VER, 0, &[], None);
}

#[test]
fn crit_is_visible_in_both_len_registers() {
    let mut aq = Aq::new();
    aq.dev.faults().aq_crit = true;
    assert!(aq.try_cmd(opc::GET_VER, 0, &[], None).is_none());
    assert_ne!(aq.rd(reg::ATQLEN) & reg::LEN_CRIT, 0);
    assert_ne!(aq.rd(reg::ARQLEN) & reg::LEN_CRIT, 0);
    aq.dev.faults().aq_crit = false;
    assert_eq!(aq.rd(reg::ATQLEN) & reg::LEN_CRIT, 0);
}

#[test]
fn error_per_opcode_hits_only_that_opcode_once() {
    let mut aq = Aq::new();
    aq.dev.faults().aq_fail_opcode = Some((opc::CLEAR_PF_CFG, rc::EBUSY));
    aq.ok(opc::GET_VER, 0, &[], None);
    let v = add_pf_vsi(&mut aq);
    let r = aq.cmd(opc::CLEAR_PF_CFG, 0, &[], None);
    assert_eq!((r.retval(), r.flags() & flag::ERR), (rc::EBUSY, flag::ERR));
    assert!(aq.dev.lan().vsis().contains_key(&v), "not executed");
    aq.ok(opc::CLEAR_PF_CFG, 0, &[], None);
    assert_eq!(aq.dev.counters().aq_errors, 1);
}

#[test]
fn reset_in_the_middle_of_bring_up() {
    let mut aq = Aq::with(LanConfig { reset_reads: 10, ..LanConfig::default() });
    aq.dev.faults().aq_reset_at = Some(2);
    aq.ok(opc::GET_VER, 0, &[], None);
    aq.ok(opc::CLEAR_PF_CFG, 0, &[], None);
    assert!(aq.try_cmd(opc::CLEAR_PXE, 0, &[2], None).is_none(), "never completes");
    assert_eq!(aq.rd(reg::ATQLEN), 0, "AQ torn down");
    assert_ne!(aq.rd(reg::GLGEN_RSTAT) & 3, 0);
    while aq.rd(reg::GLNVM_ULD) & reg::ULD_DONE != reg::ULD_DONE {}
    aq.init();
    aq.ok(opc::GET_VER, 0, &[], None);
    aq.ok(opc::CLEAR_PXE, 0, &[2], None);
}

#[test]
fn vsi_lists_alloc_set_forward_and_free() {
    let mut aq = Aq::new();
    let v1 = add_pf_vsi(&mut aq);
    let v2 = add_pf_vsi(&mut aq);
    // 0x0208: one VSI_LIST_REP (type 3) id
    let r = aq.ok(opc::ALLOC_RES, flag::RD, &[1, 0], Some((&[3, 0, 1, 0, 0, 0], 6)));
    let list = le16(&r.buf, 4);
    assert_eq!(list, LanConfig::default().res_base);
    // VSI_LIST_SET rule: type 3, index = list, 2 VSIs
    let mut set = [0u8; 12];
    set[0] = 3;
    set[4..6].copy_from_slice(&list.to_le_bytes());
    set[6] = 2;
    set[8..10].copy_from_slice(&v1.to_le_bytes());
    set[10..12].copy_from_slice(&v2.to_le_bytes());
    aq.ok(opc::ADD_SW_RULES, flag::RD, &[1, 0], Some((&set, 12)));
    assert_eq!(aq.dev.lan().vsi_list(list), Some(&[v1, v2][..]));
    // a lookup rule forwarding to the list (VSI_LIST bit 14)
    let mut rule = mac_rule(0, [0xFF; 6]);
    let act = (list as u32) << 4 | 1 << 14 | 1 << 17;
    rule[8..12].copy_from_slice(&act.to_le_bytes());
    aq.ok(opc::ADD_SW_RULES, flag::RD, &[1, 0], Some((&rule, 32)));
    assert_eq!(aq.dev.lan().vsis_for([0xFF; 6]), vec![v1, v2]);
    // the list is in use
    let free = [3, 0, 1, 0, list as u8, (list >> 8) as u8];
    assert_eq!(aq.cmd(opc::FREE_RES, flag::RD, &[1, 0], Some((&free, 6))).retval(), rc::EBUSY);
    // update the rule back to forward-to-VSI, then free the list
    let idx = *aq.dev.lan().rules().keys().next().unwrap();
    let mut upd = mac_rule(v1, [0xFF; 6]);
    upd[12..14].copy_from_slice(&idx.to_le_bytes());
    aq.ok(opc::UPDATE_SW_RULES, flag::RD, &[1, 0], Some((&upd, 32)));
    assert_eq!(aq.dev.lan().vsis_for([0xFF; 6]), vec![v1]);
    aq.ok(opc::FREE_RES, flag::RD, &[1, 0], Some((&free, 6)));
    assert!(aq.dev.lan().vsi_list(list).is_none());
    assert_eq!(aq.cmd(opc::FREE_RES, flag::RD, &[1, 0], Some((&free, 6))).retval(), rc::ENOENT);
    // a set rule naming an unknown list
    assert_eq!(aq.cmd(opc::ADD_SW_RULES, flag::RD, &[1, 0], Some((&set, 12))).retval(), rc::ENOENT);
}

#[test]
fn a_firmware_vsi_shows_in_switch_config_until_clear_pf_cfg() {
    let mut aq = Aq::with(LanConfig { firmware_vsi: Some(3), ..LanConfig::default() });
    let r = aq.ok(opc::GET_SW_CFG, 0, &[], Some((&[], 2048)));
    assert_eq!(r.p16(20), 2, "port and the leftover VSI");
    assert_eq!(le16(&r.buf, 6), 2 << 14 | 3);
    // usable as is: the PE filter can be turned on (iPXE style, spec §6 item 5)
    let mut upd = [0u8; 128];
    upd[0] = 1 << 7;
    upd[80] = 1;
    aq.ok(opc::UPDATE_VSI, flag::RD, &(3u16 | 0x8000).to_le_bytes(), Some((&upd, 128)));
    assert!(aq.dev.lan().vsis()[&3].pe_filter());
    aq.ok(opc::CLEAR_PF_CFG, 0, &[], None);
    let r = aq.ok(opc::GET_SW_CFG, 0, &[], Some((&[], 2048)));
    assert_eq!(r.p16(20), 1, "only the port");
}
