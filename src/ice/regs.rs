//! The LAN-side registers this layer touches (BAR0 offsets, E810 PF).
//!
//! Admin queue: spec ice-lan-for-rdma §1.1 (ice: ice_hw_autogen.h →
//! PF_FW_ATQ*/PF_FW_ARQ*; iPXE intelxl.h → INTELXL_ADMIN_*). Reset, identity
//! and firmware mode: spec §1.7 and §5 steps 2–3 (ice_hw_autogen.h →
//! PFGEN_CTRL, GLGEN_RSTAT, GLGEN_RSTCTL, GLNVM_ULD, PF_FUNC_RID,
//! PFGEN_PORTNUM, GL_MNG_FWSM; ice_osdep.h → ice_flush reads GLGEN_STAT).

/// ATQ base address, low 32 bits (bits 5:0 must be zero).
pub const PF_FW_ATQBAL: usize = 0x0008_0000;
/// ARQ base address, low.
pub const PF_FW_ARQBAL: usize = 0x0008_0080;
/// ATQ base address, high.
pub const PF_FW_ATQBAH: usize = 0x0008_0100;
/// ARQ base address, high.
pub const PF_FW_ARQBAH: usize = 0x0008_0180;
/// ATQ length / enable / critical.
pub const PF_FW_ATQLEN: usize = 0x0008_0200;
/// ARQ length / enable / critical.
pub const PF_FW_ARQLEN: usize = 0x0008_0280;
/// ATQ head (firmware).
pub const PF_FW_ATQH: usize = 0x0008_0300;
/// ARQ head (firmware).
pub const PF_FW_ARQH: usize = 0x0008_0380;
/// ATQ tail (driver).
pub const PF_FW_ATQT: usize = 0x0008_0400;
/// ARQ tail (driver).
pub const PF_FW_ARQT: usize = 0x0008_0480;

/// LEN / HEAD / TAIL value bits 9:0.
pub const LEN_MASK: u32 = 0x3ff;
/// Largest ring (LEN bits 9:0).
pub const LEN_MAX: u16 = 0x3ff;
/// LEN bit 30: firmware critical error.
pub const LEN_CRIT: u32 = 1 << 30;
/// LEN bit 31: queue enabled.
pub const LEN_ENABLE: u32 = 1 << 31;

/// Read to flush posted writes (ice_flush).
pub const GLGEN_STAT: usize = 0x000B_612C;
/// PF software reset: bit 0 PFSWR.
pub const PFGEN_CTRL: usize = 0x0009_1000;
/// PFGEN_CTRL.PFSWR.
pub const PFGEN_CTRL_PFSWR: u32 = 1;
/// Global reset status: DEVSTATE bits 1:0.
pub const GLGEN_RSTAT: usize = 0x000B_8188;
/// Global reset control: GRSTDEL bits 5:0.
pub const GLGEN_RSTCTL: usize = 0x000B_8180;
/// Reset-done bits.
pub const GLNVM_ULD: usize = 0x000B_6008;
/// PCIER_DONE, PCIER_DONE_1, CORER_DONE, GLOBR_DONE, POR_DONE, POR_DONE_1,
/// PCIER_DONE_2 (bits 0, 1, 3, 4, 5, 8, 9; ice_check_reset).
pub const GLNVM_ULD_DONE: u32 =
    (1 << 0) | (1 << 1) | (1 << 3) | (1 << 4) | (1 << 5) | (1 << 8) | (1 << 9);
/// PE_DONE (bit 10): the RDMA engine's firmware is up after reset.
pub const GLNVM_ULD_PE_DONE: u32 = 1 << 10;
/// PCI function: bits 2:0 = pf_id.
pub const PF_FUNC_RID: usize = 0x0009_E880;
/// Port number: bits 2:0.
pub const PFGEN_PORTNUM: usize = 0x001D_2400;
/// Firmware mode: bit 0 debug, bit 1 recovery, bit 2 rollback, bit 30
/// FW_LOADING (ice_get_fw_mode, ice_wait_fw_load).
pub const GL_MNG_FWSM: usize = 0x000B_6134;
