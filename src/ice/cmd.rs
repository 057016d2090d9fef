//! Typed admin-queue commands (spec ice-lan-for-rdma §2).

use super::desc::{Desc, Opcode};

/// Queue Shutdown 0x0003: byte 16 bit 0 = driver unloading (ice_common.c →
/// ice_aq_q_shutdown; spec §1.6).
pub fn queue_shutdown(unloading: bool) -> Desc {
    let mut d = Desc::new(Opcode::QueueShutdown);
    d.set_u8(16, u8::from(unloading));
    d
}

/// Stop LLDP Agent 0x0A05: byte 16 bit 0 = shut the agent down, bit 1 =
/// persist across resets (ice_adminq_cmd.h → struct ice_aqc_lldp_stop; spec
/// §6 item 10: stopping firmware LLDP keeps one traffic class).
pub fn lldp_stop(persist: bool) -> Desc {
    let mut d = Desc::new(Opcode::LldpStop);
    d.set_u8(16, 1 | if persist { 2 } else { 0 });
    d
}
