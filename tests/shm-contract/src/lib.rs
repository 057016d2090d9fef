//! The harness mailbox of `cargo xtask qemu`: the wire contract between the
//! unikernel (`irdma-boot`, the guest) and the device model process
//! (`mock-bar-shm`, the host), both of which use this crate.
//!
//! It is its own crate, `no_std` and without dependencies, because the model
//! must not depend on the driver side (`irdma`, `irdma-hal`, `irdma-boot`:
//! `cargo xtask test model-independence`), yet both sides must read and
//! write the same words. Only the mailbox is here; the rest of the harness
//! contract (files, exit codes, console lines, the DMA pool, the CM
//! scenario's addresses and data) is `irdma_boot::contract`, which
//! re-exports this crate.
//!
//! The mailbox is the first page of the upper half of the BAR file
//! (`irdma_boot::contract::MAILBOX`; the model gets its offset in the
//! environment as `IRDMA_MAILBOX`); the interrupt counters sit in the page
//! after it.
//!
//! # Layout (offsets from the mailbox base, little-endian)
//!
//! | offset | size | written by | meaning |
//! |---|---|---|---|
//! | [`MB_GUEST_MAGIC`] | u32 | guest | [`GUEST_MAGIC`] once the BAR scenario wrote its pattern |
//! | [`MB_HOST_MAGIC`] | u32 | model | [`HOST_MAGIC`] while a host model process serves the BAR |
//! | [`MB_HOST_TSC_HZ`] | u64 | xtask | host TSC rate in Hz (0 = unknown); a cross-check only |
//! | [`MB_NONCE`] | u64 | xtask | per-run random value, never 0 |
//! | [`MB_ECHO`] | u64 | guest | [`echo`]`(nonce)` |
//! | [`MB_SHUTDOWN`] | u32 | xtask | non-zero once QEMU has exited: a model process must exit |
//! | [`MB_PING`] | u32 | guest | doorbell: a sequence number, never 0 |
//! | [`MB_PONG`] | u32 | model | [`pong`]`(ping)` once the model saw the doorbell (after it wrote the counters below) |
//! | [`MB_FAULT_KIND`] | u32 | guest | fault to inject: [`FAULT_CLEAR`], [`FAULT_FAIL_CQP_OP`], …, [`FAULT_FUNCTION_RESET`], or an admin-queue fault [`FAULT_AQ_HANG`] … [`FAULT_AQ_RESET`] |
//! | [`MB_FAULT_ARG`] | u32 | guest | its count (ops or AQ commands to let pass first, or ops to affect) |
//! | [`MB_FAULT_CODES`] | u32 | guest | `major << 16 \| minor` for [`FAULT_FAIL_CQP_OP`]; `opcode << 16 \| retval` for [`FAULT_AQ_FAIL_OPCODE`] |
//! | [`MB_FAULT_SEQ`] | u32 | guest | written last: request number, never 0 |
//! | [`MB_FAULT_ACK`] | u32 | model | the request number once applied (or refused) |
//! | [`MB_FAULT_RESULT`] | u32 | model | 0 applied, 1 unknown kind (valid once ACK matches) |
//! | [`MB_MODEL_CQP_OPS`] | u64 | model | CQP ops the device model executed |
//! | [`MB_MODEL_CQP_ERRORS`] | u64 | model | of those, completed with an error |
//! | [`MB_MODEL_DMA_FAULTS`] | u64 | model | device DMA outside guest RAM |
//! | [`MB_SCRATCH`] | [`SCRATCH_WORDS`] × u64 | guest | word `i` = [`pattern`]`(nonce, i)` |
//! | [`MB_MODEL_IRQ_RAISED`] … [`MB_MODEL_IRQ_LATCHED`] | u64 each | model | interrupt counters (interrupt runs only) |
//! | [`MB_CM_PEER`] … [`MB_CM_CLOSED`] | u32 each (the MAC a u64) | guest / CM peer | the CM peer's requests and results (`mock-bar-cm` only) |
//!

#![no_std]

/// Guest magic (u32), written last by the BAR scenario.
pub const MB_GUEST_MAGIC: usize = 0x00;
/// Host model magic (u32), written by a model process when it is ready.
pub const MB_HOST_MAGIC: usize = 0x04;
/// Host TSC rate in Hz (u64), written by xtask before boot.
pub const MB_HOST_TSC_HZ: usize = 0x08;
/// Per-run nonce (u64), written by xtask before boot.
pub const MB_NONCE: usize = 0x10;
/// The guest's answer to the nonce (u64).
pub const MB_ECHO: usize = 0x18;
/// Set to non-zero by xtask (u32) after QEMU exited: the model must exit.
pub const MB_SHUTDOWN: usize = 0x20;
/// Guest → model doorbell (u32 sequence number) of the `model_ping` scenario.
pub const MB_PING: usize = 0x24;
/// Model → guest answer (u32), [`pong`] of the last doorbell.
pub const MB_PONG: usize = 0x28;
/// Fault request: kind (u32), see [`FAULT_FAIL_CQP_OP`].
pub const MB_FAULT_KIND: usize = 0x30;
/// Fault request: count (u32).
pub const MB_FAULT_ARG: usize = 0x34;
/// Fault request: `major << 16 | minor` (u32).
pub const MB_FAULT_CODES: usize = 0x38;
/// Fault request number (u32, never 0), written last by the guest.
pub const MB_FAULT_SEQ: usize = 0x3c;
/// The model's acknowledgement: the request number it handled (u32).
pub const MB_FAULT_ACK: usize = 0x40;
/// 0 = applied, 1 = unknown kind (u32).
pub const MB_FAULT_RESULT: usize = 0x44;
/// CQP ops the model executed (u64).
pub const MB_MODEL_CQP_OPS: usize = 0x48;
/// CQP ops the model completed with an error (u64).
pub const MB_MODEL_CQP_ERRORS: usize = 0x50;
/// Model DMA accesses outside guest RAM (u64).
pub const MB_MODEL_DMA_FAULTS: usize = 0x58;

/// CM peer (`mock-bar-cm`, the model process with a second device driven
/// by the host-side driver): its state, [`CM_PEER_STARTING`],
/// [`CM_PEER_READY`] or [`CM_PEER_FAILED`]; 0 when the model has no peer.
pub const MB_CM_PEER: usize = 0x60;
/// Guest: a request sequence number (never 0), written last; the peer acts
/// once per new value: [`CM_REQ_CONNECT`] in [`MB_CM_REQ_KIND`] makes it
/// connect to the guest's port (`irdma_boot::contract::CM_GUEST_PORT`).
pub const MB_CM_REQ_SEQ: usize = 0x64;
/// Guest: what the request asks for.
pub const MB_CM_REQ_KIND: usize = 0x68;
/// Guest: its IPv4 address, the four bytes in address order (a
/// little-endian u32 of `[a, b, c, d]`).
pub const MB_CM_GUEST_IP: usize = 0x6c;
/// Guest: its MAC (bytes 0..6 of a u64, little-endian).
pub const MB_CM_GUEST_MAC: usize = 0x70;
/// Peer: connections whose SEND and WRITE data it checked and found right.
pub const MB_CM_VERIFIED: usize = 0x78;
/// Peer: 0, or the first error ([`CM_ERR_DATA`], …); its line on the
/// model's output says more.
pub const MB_CM_ERROR: usize = 0x7c;
/// Peer: connections it saw disconnected (DREQ/DREP done).
pub const MB_CM_CLOSED: usize = 0x80;

/// [`MB_CM_PEER`]: the peer thread started, its driver is probing.
pub const CM_PEER_STARTING: u32 = 1;
/// [`MB_CM_PEER`]: the peer's driver is up and listening on its port
/// (`irdma_boot::contract::CM_PEER_PORT`).
pub const CM_PEER_READY: u32 = 0x4344_5249;
/// [`MB_CM_PEER`]: the peer's driver failed (see the model's output).
pub const CM_PEER_FAILED: u32 = 0xdead_0c0c;
/// [`MB_CM_REQ_KIND`]: connect to the guest's port
/// (`irdma_boot::contract::CM_GUEST_PORT`).
pub const CM_REQ_CONNECT: u32 = 1;
/// [`MB_CM_ERROR`]: SEND or WRITE data differed from
/// `irdma_boot::contract::cm_byte`.
pub const CM_ERR_DATA: u32 = 1;
/// [`MB_CM_ERROR`]: a CM or verbs call failed, or an unexpected event.
pub const CM_ERR_PROTOCOL: u32 = 2;
/// [`MB_CM_ERROR`]: a connection did not progress in time.
pub const CM_ERR_TIMEOUT: u32 = 3;

/// Fault kind: clear every injected fault.
pub const FAULT_CLEAR: u32 = 0;
/// Fault kind: let `ARG` CQP ops pass, then fail one with `CODES` (the op
/// is not executed).
pub const FAULT_FAIL_CQP_OP: u32 = 1;
/// Fault kind: do not write the next `ARG` CCQ completions.
pub const FAULT_DROP_CQP_COMPLETIONS: u32 = 2;
/// Fault kind: lose the next `ARG` doorbells.
pub const FAULT_LOSE_DOORBELLS: u32 = 3;
/// Request kind: function-level reset of the model device (what the LAN
/// driver's reset does); the function then accepts a new COMMIT_FPM_VAL.
pub const FAULT_FUNCTION_RESET: u32 = 4;
/// Fault kind: let `ARG` SQ WQEs pass, then complete the next one with an
/// error CQE carrying `CODES` (its QP goes to ERROR).
pub const FAULT_FAIL_WQE: u32 = 5;
/// Fault kind: LAN admin queue — let `ARG` commands complete, then the
/// firmware stops answering until a reset (the guest sees a timeout).
pub const FAULT_AQ_HANG: u32 = 6;
/// Fault kind: LAN admin queue — firmware critical error: CRIT in
/// ATQLEN/ARQLEN, no command completes until [`FAULT_CLEAR`].
pub const FAULT_AQ_CRIT: u32 = 7;
/// Fault kind: LAN admin queue — the next command with opcode
/// `CODES >> 16` fails with return code `CODES & 0xFFFF` (not executed).
pub const FAULT_AQ_FAIL_OPCODE: u32 = 8;
/// Fault kind: LAN admin queue — at the `ARG`th command from now a global
/// reset happens instead (the command never completes).
pub const FAULT_AQ_RESET: u32 = 9;

/// Fault kind: the model acknowledges, then stops serving for `ARG` µs (at
/// most 1 s), so work the guest posts meanwhile completes while it waits.
pub const FAULT_PAUSE: u32 = 10;
/// Longest [`FAULT_PAUSE`] the model honours, µs (a longer `ARG` is cut to it).
pub const PAUSE_MAX_US: u32 = 1_000_000;

/// u64, model: interrupts the device raised (all vectors).
pub const MB_MODEL_IRQ_RAISED: usize = 0x1200;
/// u64, model: eventfd writes (interrupts signalled to QEMU).
pub const MB_MODEL_IRQ_SIGNALS: usize = 0x1208;
/// u64, model: CEQEs written.
pub const MB_MODEL_IRQ_CEQES: usize = 0x1210;
/// u64, model: CQ arm requests seen.
pub const MB_MODEL_IRQ_ARMS: usize = 0x1218;
/// u64, model: events that found their vector disabled (INTENA 0), latched.
pub const MB_MODEL_IRQ_LATCHED: usize = 0x1220;

/// Start of the scratch pattern.
pub const MB_SCRATCH: usize = 0x100;
/// Number of u64 words of the scratch pattern (4 KiB).
pub const SCRATCH_WORDS: usize = 512;

/// "IRDG": the guest finished writing the BAR pattern.
pub const GUEST_MAGIC: u32 = 0x4744_5249;
/// "IRDH": a host model process is serving the BAR.
pub const HOST_MAGIC: u32 = 0x4844_5249;

/// The guest's answer to the host nonce.
pub const fn echo(nonce: u64) -> u64 {
    nonce.rotate_left(17) ^ 0x5bd1_e995_7f4a_7c15
}

/// The model's answer to doorbell `seq` (never equal to `seq`, never 0 for
/// `seq != 0`).
pub const fn pong(seq: u32) -> u32 {
    !seq.rotate_left(7)
}

/// Scratch word `i` for `nonce` (splitmix64 of `nonce + i`).
pub const fn pattern(nonce: u64, i: u64) -> u64 {
    let mut z = nonce.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const _: () = {
    assert!(MB_SCRATCH + SCRATCH_WORDS * 8 <= 4096 + 0x100);
    assert!(MB_MODEL_DMA_FAULTS + 8 <= MB_CM_PEER);
    assert!(MB_CM_CLOSED + 4 <= MB_SCRATCH);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_and_echo_depend_on_their_inputs() {
        assert_ne!(pattern(1, 0), pattern(2, 0));
        assert_ne!(pattern(1, 0), pattern(1, 1));
        assert_ne!(echo(1), echo(2));
        assert_ne!(echo(7), 7);
        for s in [1u32, 2, 0x8000_0000, u32::MAX - 1] {
            assert_ne!(pong(s), s);
            assert_ne!(pong(s), 0);
        }
    }
}
