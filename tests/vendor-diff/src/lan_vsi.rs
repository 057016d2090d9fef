//! The VSI context the LAN bring-up sends with Add VSI (issue #30): the
//! vendor's Linux 6.1 ice_lib.c builders (`ice_vsi_set_tc_cfg`, then
//! `ice_vsi_init` with `ice_set_dflt_vsi_ctx`, `ice_set_fd_vsi_ctx`,
//! `ice_set_rss_vsi_ctx`, `ice_vsi_setup_q_map`), cut verbatim out of the
//! fetched file at build time (`build_ice_lib.rs`, `shim/ice/lib_glue.c`),
//! against the driver's `irdma::ice::cmd::VsiContext::{pf_add, ctrl_add,
//! for_update}` (what `BringUp` sends), on the same inputs.
//!
//! Compared: all 128 bytes of `struct ice_aqc_vsi_props`, whether each
//! side refuses, and on Add the descriptor facts the vendor sets in the
//! context (VSI type PF, allocated from the pool: the driver's `add_vsi`
//! always sends both).
//!
//! Generated (what the driver supports): a PF or a CTRL VSI, Add or
//! Update, RSS on or off, flow director off or on with seeded dedicated /
//! shared filter counts, VEB or VEPA, a switch id, the first Rx queue
//! (0..=0x7ff; one case in 64 beyond, which the driver refuses and ice
//! writes into the 16-bit q_mapping\[0\]: deviation
//! `vsi_ctx_rxq_base_over_11_bits`), 0..=2048 Rx queues, 1..=2048 Tx
//! queues. Not generated: DCB / more than one TC (the
//! driver builds TC 0 only; `ice_vsi_set_tc_cfg` runs with DCB off), double
//! VLAN mode (the driver has none), VF / channel / switchdev / loopback
//! VSIs, and no Tx queues (the driver's builder has no Tx count: ice
//! refuses zero, the driver cannot be asked).

use irdma::ice::cmd::{PfVsiParams, VSI_CTX_LEN, VsiContext, vsi};

use crate::rng::Rng;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct VdLibIn {
    vsi_type: u8,
    init_vsi: u8,
    rss_ena: u8,
    fd_ena: u8,
    veb: u8,
    sw_id: u8,
    rxq_base: u16,
    alloc_rxq: u16,
    alloc_txq: u16,
    num_gfltr: u16,
    num_bfltr: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct VdLibOut {
    ret: i32,
    called: i32,
    flags: u16,
    alloc_from_pool: u8,
    pad: u8,
    num_rxq: u16,
    num_txq: u16,
    props: [u8; VSI_CTX_LEN],
}

unsafe extern "C" {
    fn vd_lib_vsi_init(i: *const VdLibIn, o: *mut VdLibOut) -> i32;
}

/// ice_type.h → enum ice_vsi_type.
const ICE_VSI_PF: u8 = 0;
const ICE_VSI_CTRL: u8 = 3;
/// ice_adminq_cmd.h → ICE_AQ_VSI_TYPE_PF.
const ICE_AQ_VSI_TYPE_PF: u16 = 2;

/// This area's own stream (the other areas' cases stay what they were).
pub const SEED_SALT: u64 = 0x7673_695f_6374_7831;

/// Contexts per post case of a run (each a few microseconds).
pub const PER_CASE: u64 = 4;

/// One input, given to both sides.
#[derive(Clone, Copy, Debug)]
pub struct VsiCase {
    pub ctrl: bool,
    pub update: bool,
    pub rss: bool,
    pub fd: Option<(u16, u16)>,
    pub veb: bool,
    pub sw_id: u8,
    pub rxq_base: u16,
    pub num_rxq: u16,
    pub num_txq: u16,
}

pub fn gen_vsi_case(rng: &mut Rng) -> VsiCase {
    let count = |rng: &mut Rng, lo: u64| -> u16 {
        match rng.below(8) {
            0 => rng.pick(&[1u16, 2, 3, 4, 255, 256, 257, 512, 2048]).max(lo as u16),
            1 => rng.range(lo, 2048) as u16,
            _ => rng.range(lo, 300) as u16,
        }
    };
    VsiCase {
        ctrl: rng.chance(1, 5),
        update: rng.chance(1, 3),
        rss: rng.chance(3, 4),
        fd: rng
            .chance(1, 3)
            .then(|| (rng.field(16) as u16, rng.pick(&[0u16, 1, 64, 0x3fff, 0xffff]))),
        veb: rng.chance(3, 4),
        sw_id: rng.field(8) as u8,
        rxq_base: match rng.below(64) {
            0 => rng.range(0x800, 0xffff) as u16,
            1..=15 => rng.pick(&[0u16, 1, 0x7fe, 0x7ff]),
            _ => rng.below(0x800) as u16,
        },
        num_rxq: if rng.chance(1, 50) { 0 } else { count(rng, 1) },
        num_txq: count(rng, 1),
    }
}

/// The deviations this area classifies (deviations.toml).
pub const KNOWN: &[&str] =
    &["vsi_ctx_veb_local_lb", "vsi_ctx_fd_acl", "vsi_ctx_rxq_base_over_11_bits"];

/// What the runs saw.
pub mod stats {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    pub static EQUAL: AtomicU64 = AtomicU64::new(0);
    pub static EQUAL_BUT_DEVIATIONS: AtomicU64 = AtomicU64::new(0);
    pub static REFUSED_BOTH: AtomicU64 = AtomicU64::new(0);
    pub static UPDATES: AtomicU64 = AtomicU64::new(0);
    pub static CTRL: AtomicU64 = AtomicU64::new(0);

    pub fn line() -> String {
        format!(
            "{} byte for byte equal, {} equal but for listed deviations, {} refused by both; \
             {} updates, {} CTRL VSIs",
            EQUAL.load(Relaxed),
            EQUAL_BUT_DEVIATIONS.load(Relaxed),
            REFUSED_BOTH.load(Relaxed),
            UPDATES.load(Relaxed),
            CTRL.load(Relaxed)
        )
    }
}

/// The driver's context for `c` (what `BringUp` would send).
fn driver(c: &VsiCase) -> Result<VsiContext, irdma::ice::cmd::CmdError> {
    let p = PfVsiParams {
        sw_id: c.sw_id,
        rxq_base: c.rxq_base,
        num_rxq: c.num_rxq,
        rss: c.rss,
        flow_director: c.fd,
        veb: c.veb,
    };
    let ctx = if c.ctrl { VsiContext::ctrl_add(&p)? } else { VsiContext::pf_add(&p)? };
    Ok(if c.update { ctx.for_update() } else { ctx })
}

/// The vendor's: (return code, context, VSI type, alloc_from_pool, which
/// admin-queue call it reached).
fn vendor(c: &VsiCase) -> (i32, [u8; VSI_CTX_LEN], u16, u8, i32) {
    let (gfltr, bfltr) = c.fd.unwrap_or((0, 0));
    let i = VdLibIn {
        vsi_type: if c.ctrl { ICE_VSI_CTRL } else { ICE_VSI_PF },
        init_vsi: u8::from(!c.update),
        rss_ena: u8::from(c.rss),
        fd_ena: u8::from(c.fd.is_some()),
        veb: u8::from(c.veb),
        sw_id: c.sw_id,
        rxq_base: c.rxq_base,
        alloc_rxq: c.num_rxq,
        alloc_txq: c.num_txq,
        num_gfltr: gfltr,
        num_bfltr: bfltr,
    };
    let mut o = VdLibOut {
        ret: 0,
        called: 0,
        flags: 0,
        alloc_from_pool: 0,
        pad: 0,
        num_rxq: 0,
        num_txq: 0,
        props: [0; VSI_CTX_LEN],
    };
    // SAFETY: both pointers are to live, properly laid out #[repr(C)]
    // values; the C side reads `i` and writes only `o`.
    unsafe { vd_lib_vsi_init(&i, &mut o) };
    (o.ret, o.props, o.flags, o.alloc_from_pool, o.called)
}

/// Undoes the driver's listed deviations in `d` (those `c` triggers) and
/// names them.
fn undo_deviations(c: &VsiCase, d: &mut [u8; VSI_CTX_LEN]) -> Vec<&'static str> {
    let mut ids = Vec::new();
    if c.veb && d[vsi::SW_FLAGS] & (1 << 6) != 0 {
        d[vsi::SW_FLAGS] &= !(1 << 6);
        ids.push("vsi_ctx_veb_local_lb");
    }
    let valid = u16::from_le_bytes([d[0], d[1]]);
    if c.fd.is_some() && valid & vsi::PROP_ACL_VALID != 0 && d[vsi::ACL_DEF_ACT] == 0x32 {
        let v = (valid & !vsi::PROP_ACL_VALID).to_le_bytes();
        d[0] = v[0];
        d[1] = v[1];
        d[vsi::ACL_DEF_ACT] = 0;
        d[vsi::ACL_DEF_ACT + 1] = 0;
        ids.push("vsi_ctx_fd_acl");
    }
    ids
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Runs one case: `Ok(deviations)` when the sides agree (up to those
/// listed deviations), `Err(what)` otherwise.
pub fn run_vsi(c: &VsiCase) -> Result<Vec<&'static str>, String> {
    let (ret, v, flags, pool, called) = vendor(c);
    let d = driver(c);
    match (ret, d) {
        (0, Err(irdma::ice::cmd::CmdError::Invalid(_))) if c.rxq_base > 0x7ff && c.num_rxq > 0 => {
            Ok(vec!["vsi_ctx_rxq_base_over_11_bits"])
        }
        (0, Err(e)) => Err(format!("the vendor builds a context, the driver refuses: {e:?}")),
        (r, Ok(_)) if r != 0 => {
            Err(format!("the vendor refuses ({r}), the driver builds a context"))
        }
        (_, Err(_)) => Ok(Vec::new()),
        (_, Ok(d)) => {
            let want_call = if c.update { 2 } else { 1 };
            if called != want_call {
                return Err(format!(
                    "the vendor reached admin-queue call {called}, not {want_call}"
                ));
            }
            if !c.update && (flags != ICE_AQ_VSI_TYPE_PF || pool != 1) {
                return Err(format!(
                    "the vendor adds with VSI type {flags} and alloc_from_pool {pool}, \
                     the driver with type PF ({ICE_AQ_VSI_TYPE_PF}) from the pool"
                ));
            }
            if d.0 == v {
                return Ok(Vec::new());
            }
            let mut undone = d.0;
            let ids = undo_deviations(c, &mut undone);
            if undone == v {
                return Ok(ids);
            }
            let at: Vec<String> = (0..VSI_CTX_LEN)
                .filter(|&i| undone[i] != v[i])
                .map(|i| format!("byte {i}: vendor {:#04x} driver {:#04x}", v[i], d.0[i]))
                .collect();
            Err(format!(
                "contexts differ ({})\n  vendor {}\n  driver {}",
                at.join(", "),
                hex(&v),
                hex(&d.0)
            ))
        }
    }
}

/// Drops what the difference does not need: the fields one at a time back
/// to the plainest value while it still differs.
pub fn shrink_vsi(mut c: VsiCase) -> VsiCase {
    let tries: [fn(&mut VsiCase); 8] = [
        |c| c.ctrl = false,
        |c| c.update = false,
        |c| c.fd = None,
        |c| c.veb = false,
        |c| c.sw_id = 0,
        |c| c.rxq_base = 0,
        |c| c.num_rxq = 1,
        |c| c.num_txq = 1,
    ];
    for t in tries {
        let mut s = c;
        t(&mut s);
        if run_vsi(&s).is_err() {
            c = s;
        }
    }
    c
}

/// One round (`PER_CASE` contexts); true when the run should stop (five
/// differences).
pub fn vsi_round(n: u64, seed: u64, rng: &mut Rng, rep: &mut crate::Report) -> bool {
    for _ in 0..PER_CASE {
        let c = gen_vsi_case(rng);
        rep.vsi_ctx_cases += 1;
        let r = run_vsi(&c);
        if let Ok(ids) = &r {
            use std::sync::atomic::Ordering::Relaxed;
            let n = if c.num_rxq == 0 {
                &stats::REFUSED_BOTH
            } else if ids.is_empty() {
                &stats::EQUAL
            } else {
                &stats::EQUAL_BUT_DEVIATIONS
            };
            n.fetch_add(1, Relaxed);
            stats::UPDATES.fetch_add(u64::from(c.update), Relaxed);
            stats::CTRL.fetch_add(u64::from(c.ctrl), Relaxed);
        }
        match r {
            Ok(ids) => ids.into_iter().for_each(|id| rep.deviation(id)),
            Err(_) => {
                let small = shrink_vsi(c);
                let what = run_vsi(&small).err().unwrap_or_default();
                println!("DIFF LAN VSI context case #{n} (seed {seed:#x}): {what}");
                println!("  input: {small:?}");
                if rep.difference() {
                    return true;
                }
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bring_up(veb: bool) -> VsiCase {
        // what BringUp passes to pf_add (src/ice/bringup.rs)
        VsiCase {
            ctrl: false,
            update: false,
            rss: true,
            fd: None,
            veb,
            sw_id: 3,
            rxq_base: 0,
            num_rxq: 16,
            num_txq: 16,
        }
    }

    #[test]
    fn bring_up_context_equals_ice_lib() {
        let _serial = crate::serial();
        assert_eq!(run_vsi(&bring_up(false)), Ok(vec![]));
        assert_eq!(run_vsi(&bring_up(true)), Ok(vec!["vsi_ctx_veb_local_lb"]));
    }

    /// The difference this area found: an update of an RSS context marks
    /// Q_OPT valid (irdma VsiContext::for_update).
    #[test]
    fn update_with_rss_equals_ice_lib() {
        let _serial = crate::serial();
        let c = VsiCase { update: true, num_rxq: 1, num_txq: 1, ..bring_up(false) };
        assert_eq!(run_vsi(&c), Ok(vec![]));
        let (_, v, ..) = vendor(&c);
        assert_eq!(u16::from_le_bytes([v[0], v[1]]), 0xc2, "SECURITY | RXQ_MAP | Q_OPT");
    }

    #[test]
    fn deviations_are_only_the_listed_bytes() {
        let _serial = crate::serial();
        let c = VsiCase { fd: Some((10, 20)), ..bring_up(true) };
        assert_eq!(run_vsi(&c), Ok(vec!["vsi_ctx_veb_local_lb", "vsi_ctx_fd_acl"]));
        let (_, v, ..) = vendor(&c);
        assert_eq!(v[vsi::SW_FLAGS], 0xa0, "6.1: SRC_PRUNE | ALLOW_LB");
        assert_eq!(u16::from_le_bytes([v[0], v[1]]), 0x0802, "6.1: SECURITY | FLOW_DIR");
        // a wrong byte elsewhere is still a difference
        let wrong = VsiCase { rxq_base: 0x800, ..c };
        assert_eq!(run_vsi(&wrong), Ok(vec!["vsi_ctx_rxq_base_over_11_bits"]));
        let mut d = driver(&c).unwrap().0;
        d[vsi::Q_MAPPING] ^= 1;
        assert!(undo_deviations(&c, &mut d).len() == 2 && d != v);
    }
}
