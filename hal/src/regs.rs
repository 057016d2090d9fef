//! The GEN_2 (E810, "icrdma") PF register map and register field layouts.
//!
//! Source: spec control-path §1.3–1.6, which takes the offsets from the Intel
//! driver's `icrdma_hw.h` (table `icrdma_regs`, built by
//! `icrdma_hw.c: icrdma_init_hw`) and the fields from `irdma.h` / `icrdma_hw.h`.
//! Offsets are byte offsets into BAR0.

use bitfield::bitfield;

use crate::field::Field;

/// CQP SQ tail; `WQTAIL` moves as the device consumes CQP WQEs.
/// (icrdma_hw.h: PFPE_CQPTAIL; ctrl.c: irdma_cqp_poll_registers)
pub const CQPTAIL: usize = 0x0050_0880;
/// CQP SQ doorbell: the driver writes the new SQ head index.
/// (icrdma_hw.h: PFPE_CQPDB; ctrl.c: irdma_sc_cqp_post_sq)
pub const CQPDB: usize = 0x0050_0800;
/// CQP status; non-zero without `CCQP_ERR` after create means alive.
/// (icrdma_hw.h: PFPE_CCQPSTATUS; ctrl.c: irdma_sc_cqp_create)
pub const CCQPSTATUS: usize = 0x0050_A000;
/// CQP host-context physical address, bits \[63:32\]; written first.
/// (icrdma_hw.h: PFPE_CCQPHIGH; ctrl.c: irdma_sc_cqp_create)
pub const CCQPHIGH: usize = 0x0050_A100;
/// CQP host-context physical address, bits \[31:0\]; writing it starts the create.
/// (icrdma_hw.h: PFPE_CCQPLOW; ctrl.c: irdma_sc_cqp_create)
pub const CCQPLOW: usize = 0x0050_A080;
/// CQ arm doorbell: write the CQ id. (icrdma_hw.h: PFPE_CQARM; uk.c:
/// irdma_uk_cq_request_notification)
pub const CQARM: usize = 0x0050_2C00;
/// CQ acknowledge after consuming its CEQE: write the CQ id.
/// (icrdma_hw.h: PFPE_CQACK; ctrl.c: irdma_sc_cq_ack)
pub const CQACK: usize = 0x0050_2C80;
/// Number of AEQ entries consumed since the last write.
/// (icrdma_hw.h: PFPE_AEQALLOC; ctrl.c: irdma_sc_repost_aeq_entries)
pub const AEQALLOC: usize = 0x0050_2D00;
/// Major/minor code of the last failed CQP op.
/// (icrdma_hw.h: PFPE_CQPERRCODES; ctrl.c: irdma_cqp_poll_registers)
pub const CQPERRCODES: usize = 0x0050_A200;
/// Kernel SQ doorbell: write the QP id. (icrdma_hw.h: PFPE_WQEALLOC;
/// uk.c: irdma_uk_qp_post_wr)
pub const WQEALLOC: usize = 0x0050_4400;
/// PE doorbell size (read once at init). (icrdma_hw.h: GLPCI_LBARCTRL;
/// ctrl.c: irdma_sc_dev_init)
pub const GLPCI_LBARCTRL: usize = 0x0009_DE74;
/// Firmware status words; ready when all three read [`CPUSTATUS_READY`].
/// (icrdma_hw.h: GLPE_CPUSTATUS0..2; ctrl.c: irdma_wait_pe_ready)
pub const GLPE_CPUSTATUS: [usize; 3] = [0x0050_BA5C, 0x0050_BA60, 0x0050_BA64];
/// AEQ interrupt control. (icrdma_hw.h: PFINT_AEQCTL; ctrl.c: irdma_cfg_aeq)
pub const PFINT_AEQCTL: usize = 0x0016_CB00;
/// Invalidate a cached HMC page descriptor. (icrdma_hw.h: PFHMC_PDINV;
/// hmc.c: irdma_invalidate_pf_hmc_pd)
pub const PFHMC_PDINV: usize = 0x0052_0300;
/// Critical-error syndrome. (icrdma_hw.h: GLPE_CRITERR; main.c:
/// irdma_iidc_event_handler)
pub const GLPE_CRITERR: usize = 0x0053_4000;
/// PCI function number in bits \[2:0\]. (main.c: irdma_fill_device_info)
pub const PF_FUNC_RID: usize = 0x0009_E880;
/// Base of the user doorbell page — an offset, not a register.
/// (icrdma_hw.h: ICRDMA_DB_ADDR_OFFSET)
pub const DB_ADDR_OFFSET: usize = 0x007F_0000;

/// Number of MSI-X dynamic-control registers (GLINT_DYN_CTL(0..2047)).
pub const GLINT_DYN_CTL_COUNT: u16 = 2048;
/// Number of CEQ interrupt-control registers (GLINT_CEQCTL(0..2047)).
pub const GLINT_CEQCTL_COUNT: u16 = 2048;

/// Offset of `GLINT_DYN_CTL(n)`, or `None` past the array.
/// (icrdma_hw.h: GLINT_DYN_CTL; icrdma_hw.c: icrdma_ena_irq indexes 32-bit
/// registers, so element n is at base + 4·n)
pub const fn glint_dyn_ctl(n: u16) -> Option<usize> {
    if n < GLINT_DYN_CTL_COUNT { Some(0x0016_0000 + 4 * n as usize) } else { None }
}

/// Offset of `GLINT_CEQCTL(ceq)`, or `None` past the array.
/// (icrdma_hw.h: GLINT_CEQCTL; icrdma_hw.c: icrdma_cfg_ceq)
pub const fn glint_ceqctl(ceq: u16) -> Option<usize> {
    if ceq < GLINT_CEQCTL_COUNT { Some(0x0015_C000 + 4 * ceq as usize) } else { None }
}

/// Value each `GLPE_CPUSTATUS` register holds once firmware is ready.
/// (ctrl.c: irdma_wait_pe_ready)
pub const CPUSTATUS_READY: u32 = 0x80;
/// Linux polls firmware readiness at most this many times… (ctrl.c:
/// irdma_sc_dev_init: max_pe_ready_count = 14, loop runs while count <= max)
pub const PE_READY_MAX_READS: u32 = 15;
/// …this far apart, in milliseconds. (ctrl.c: irdma_wait_pe_ready)
pub const PE_READY_INTERVAL_MS: u64 = 100;

/// The smallest BAR0 the driver can work with: every register above lies
/// below it, and the doorbell page ends at 8 MiB. (spec control-path §1.2)
pub const MIN_BAR_SIZE: usize = 8 << 20;

/// Field layouts of the registers above (spec control-path §1.4).
pub mod field {
    use super::Field;

    /// CQPTAIL.WQTAIL \[10:0\] (irdma.h: IRDMA_CQPTAIL_WQTAIL).
    pub const CQPTAIL_WQTAIL: Field = Field::bits(10, 0);
    /// CQPTAIL.CQP_OP_ERR \[31\] (irdma.h: IRDMA_CQPTAIL_CQP_OP_ERR).
    pub const CQPTAIL_OP_ERR: Field = Field::bit(31);
    /// CQPERRCODES minor code \[15:0\] (irdma.h: IRDMA_CQPERRCODES_CQP_MINOR_CODE).
    pub const CQPERRCODES_MINOR: Field = Field::bits(15, 0);
    /// CQPERRCODES major code \[31:16\] (irdma.h: IRDMA_CQPERRCODES_CQP_MAJOR_CODE).
    pub const CQPERRCODES_MAJOR: Field = Field::bits(31, 16);
    /// CCQPSTATUS.CCQP_DONE \[0\] (icrdma_hw.h: ICRDMA_CCQPSTATUS_CCQP_DONE).
    pub const CCQPSTATUS_DONE: Field = Field::bit(0);
    /// CCQPSTATUS.CCQP_ERR \[31\] (icrdma_hw.h: ICRDMA_CCQPSTATUS_CCQP_ERR).
    pub const CCQPSTATUS_ERR: Field = Field::bit(31);
    /// GLPCI_LBARCTRL.PE_DB_SIZE \[5:4\]: 1 = 4 MiB, 2 = 8 MiB
    /// (irdma.h: IRDMA_GLPCI_LBARCTRL_PE_DB_SIZE; defs.h: IRDMA_PE_DB_SIZE_*).
    pub const LBARCTRL_PE_DB_SIZE: Field = Field::bits(5, 4);
    /// GLINT_DYN_CTL.INTENA \[0\] (irdma.h: IRDMA_GLINT_DYN_CTL_INTENA).
    pub const DYN_CTL_INTENA: Field = Field::bit(0);
    /// GLINT_DYN_CTL.CLEARPBA \[1\] (irdma.h: IRDMA_GLINT_DYN_CTL_CLEARPBA).
    pub const DYN_CTL_CLEARPBA: Field = Field::bit(1);
    /// GLINT_DYN_CTL.ITR_INDX \[4:3\] (irdma.h: IRDMA_GLINT_DYN_CTL_ITR_INDX).
    pub const DYN_CTL_ITR_INDX: Field = Field::bits(4, 3);
    /// GLINT_DYN_CTL.INTERVAL \[16:5\] (irdma.h: IRDMA_GLINT_DYN_CTL_INTERVAL).
    pub const DYN_CTL_INTERVAL: Field = Field::bits(16, 5);
    /// GLINT_CEQCTL / PFINT_AEQCTL MSIX_INDX \[10:0\]
    /// (irdma.h: IRDMA_GLINT_CEQCTL_MSIX_INDX, IRDMA_PFINT_AEQCTL_MSIX_INDX).
    pub const INTCTL_MSIX_INDX: Field = Field::bits(10, 0);
    /// GLINT_CEQCTL / PFINT_AEQCTL ITR_INDX \[12:11\].
    pub const INTCTL_ITR_INDX: Field = Field::bits(12, 11);
    /// GLINT_CEQCTL / PFINT_AEQCTL CAUSE_ENA \[30\].
    pub const INTCTL_CAUSE_ENA: Field = Field::bit(30);
    /// PFHMC_PDINV.PMSDIDX \[11:0\] (irdma.h: IRDMA_PFHMC_PDINV_PMSDIDX).
    pub const PDINV_PMSDIDX: Field = Field::bits(11, 0);
    /// PFHMC_PDINV.PMSDPARTSEL \[15\] (irdma.h: IRDMA_PFHMC_PDINV_PMSDPARTSEL).
    pub const PDINV_PMSDPARTSEL: Field = Field::bit(15);
    /// PFHMC_PDINV.PMPDIDX \[24:16\] (irdma.h: IRDMA_PFHMC_PDINV_PMPDIDX).
    pub const PDINV_PMPDIDX: Field = Field::bits(24, 16);

    const _: () = crate::field::assert_disjoint(&[CQPTAIL_WQTAIL, CQPTAIL_OP_ERR]);
    const _: () = crate::field::assert_disjoint(&[CQPERRCODES_MINOR, CQPERRCODES_MAJOR]);
    const _: () = crate::field::assert_disjoint(&[CCQPSTATUS_DONE, CCQPSTATUS_ERR]);
    const _: () = crate::field::assert_disjoint(&[
        DYN_CTL_INTENA,
        DYN_CTL_CLEARPBA,
        DYN_CTL_ITR_INDX,
        DYN_CTL_INTERVAL,
    ]);
    const _: () =
        crate::field::assert_disjoint(&[INTCTL_MSIX_INDX, INTCTL_ITR_INDX, INTCTL_CAUSE_ENA]);
    const _: () = crate::field::assert_disjoint(&[PDINV_PMSDIDX, PDINV_PMSDPARTSEL, PDINV_PMPDIDX]);
}

bitfield! {
    /// A CQPTAIL value (spec control-path §1.4).
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub struct CqpTail(u32);
    impl Debug;
    /// Index of the next CQP WQE the device will process.
    pub u16, wqtail, set_wqtail: 10, 0;
    /// A CQP op failed; CQPERRCODES holds the codes.
    pub op_err, set_op_err: 31;
}

bitfield! {
    /// A CQPERRCODES value (spec control-path §1.4).
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub struct CqpErrCodes(u32);
    impl Debug;
    /// Minor error code.
    pub u16, minor, set_minor: 15, 0;
    /// Major error code.
    pub u16, major, set_major: 31, 16;
}

bitfield! {
    /// A CCQPSTATUS value (spec control-path §1.4).
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub struct CcqpStatus(u32);
    impl Debug;
    /// The CQP exists.
    pub done, set_done: 0;
    /// CQP create failed.
    pub err, set_err: 31;
}

bitfield! {
    /// A GLPCI_LBARCTRL value (spec control-path §1.4).
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub struct LbarCtrl(u32);
    impl Debug;
    /// PE doorbell size: 1 = 4 MiB, 2 = 8 MiB, anything else = disabled.
    pub u8, pe_db_size, set_pe_db_size: 5, 4;
}

bitfield! {
    /// A PFHMC_PDINV value (spec control-path §1.4, §3.6).
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub struct PdInv(u32);
    impl Debug;
    /// SD index.
    pub u16, pmsdidx, set_pmsdidx: 11, 0;
    /// Partition select; 1 for the PF.
    pub pmsdpartsel, set_pmsdpartsel: 15;
    /// PD index within the SD.
    pub u16, pmpdidx, set_pmpdidx: 24, 16;
}

impl LbarCtrl {
    /// The PE doorbell size in bytes, or `None` when the doorbell is disabled
    /// (Linux fails probe then: ctrl.c: irdma_sc_dev_init).
    pub fn pe_db_bytes(self) -> Option<usize> {
        match self.pe_db_size() {
            1 => Some(4 << 20),
            2 => Some(8 << 20),
            _ => None,
        }
    }
}

// Every register lies inside the minimum BAR, and the bitfield structs agree
// with the field tables (checked in tests below for the accessor side).
const _: () = {
    let regs = [
        CQPTAIL,
        CQPDB,
        CCQPSTATUS,
        CCQPHIGH,
        CCQPLOW,
        CQARM,
        CQACK,
        AEQALLOC,
        CQPERRCODES,
        WQEALLOC,
        GLPCI_LBARCTRL,
        GLPE_CPUSTATUS[0],
        GLPE_CPUSTATUS[1],
        GLPE_CPUSTATUS[2],
        PFINT_AEQCTL,
        PFHMC_PDINV,
        GLPE_CRITERR,
        PF_FUNC_RID,
    ];
    let mut i = 0;
    while i < regs.len() {
        assert!(regs[i].is_multiple_of(4), "register not 4-byte aligned");
        assert!(regs[i] + 4 <= MIN_BAR_SIZE, "register beyond BAR");
        let mut j = i + 1;
        while j < regs.len() {
            assert!(regs[i] != regs[j], "two registers share an offset");
            j += 1;
        }
        i += 1;
    }
    assert!(DB_ADDR_OFFSET + 4096 <= MIN_BAR_SIZE);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_match_the_spec_table() {
        // spec control-path §1.3, icrdma_regs.
        assert_eq!(CQPTAIL, 0x50_0880);
        assert_eq!(CQPDB, 0x50_0800);
        assert_eq!(CCQPSTATUS, 0x50_A000);
        assert_eq!(CCQPHIGH, 0x50_A100);
        assert_eq!(CCQPLOW, 0x50_A080);
        assert_eq!(CQARM, 0x50_2C00);
        assert_eq!(CQACK, 0x50_2C80);
        assert_eq!(AEQALLOC, 0x50_2D00);
        assert_eq!(CQPERRCODES, 0x50_A200);
        assert_eq!(WQEALLOC, 0x50_4400);
        assert_eq!(GLPCI_LBARCTRL, 0x9_DE74);
        assert_eq!(GLPE_CPUSTATUS, [0x50_BA5C, 0x50_BA60, 0x50_BA64]);
        assert_eq!(PFHMC_PDINV, 0x52_0300);
        assert_eq!(DB_ADDR_OFFSET, (8 << 20) - (64 << 10));
    }

    #[test]
    fn register_arrays() {
        assert_eq!(glint_dyn_ctl(0), Some(0x16_0000));
        assert_eq!(glint_dyn_ctl(2047), Some(0x16_0000 + 4 * 2047));
        assert_eq!(glint_dyn_ctl(2048), None);
        assert_eq!(glint_ceqctl(1), Some(0x15_C004));
        assert_eq!(glint_ceqctl(2048), None);
    }

    #[test]
    fn bitfield_structs_agree_with_field_tables() {
        let raw: u32 = 0x8000_0123;
        let t = CqpTail(raw);
        assert_eq!(t.wqtail() as u64, field::CQPTAIL_WQTAIL.get(raw as u64));
        assert_eq!(t.op_err(), field::CQPTAIL_OP_ERR.is_set(raw as u64));
        let e = CqpErrCodes(0xffff_8002);
        assert_eq!(e.major(), 0xffff);
        assert_eq!(e.minor(), 0x8002);
        assert_eq!(e.major() as u64, field::CQPERRCODES_MAJOR.get(0xffff_8002));
        let s = CcqpStatus(0x8000_0001);
        assert!(s.done() && s.err());
        let mut p = PdInv(0);
        p.set_pmsdidx(5);
        p.set_pmsdpartsel(true);
        p.set_pmpdidx(0x1ff);
        let expect = field::PDINV_PMSDIDX.prep(5)
            | field::PDINV_PMSDPARTSEL.prep(1)
            | field::PDINV_PMPDIDX.prep(0x1ff);
        assert_eq!(p.0 as u64, expect);
    }

    #[test]
    fn lbarctrl_doorbell_size() {
        assert_eq!(LbarCtrl(0x10).pe_db_bytes(), Some(4 << 20));
        assert_eq!(LbarCtrl(0x20).pe_db_bytes(), Some(8 << 20));
        assert_eq!(LbarCtrl(0x30).pe_db_bytes(), None);
        assert_eq!(LbarCtrl(0x0).pe_db_bytes(), None);
    }
}
