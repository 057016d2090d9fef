//! The host/guest contract of the QEMU harness.
//!
//! # Files
//!
//! `cargo xtask qemu` creates two files per run under `/dev/shm` (unique
//! names, removed afterwards), both `memory-backend-file,share=on`:
//!
//! * the **BAR file** ([`BAR_FILE_SIZE`], a power of two as ivshmem needs):
//!   the ivshmem-plain BAR2 the guest drives as the device's BAR0. Offsets
//!   `0..MIN_BAR_SIZE` (8 MiB) are the GEN_2 register space and belong to the
//!   device model; the **mailbox** at [`MAILBOX`] (the first page of the upper
//!   half) belongs to the harness;
//! * the **RAM file** ([`RAM_FILE_SIZE`]): all guest RAM, file offset = guest
//!   physical address (every GPA is below 4 GiB at this size) on x86_64,
//!   GPA − [`VIRT_RAM_BASE`] on aarch64 `virt`. The device
//!   model does its "DMA" there. The guest's DMA pool is [`DMA_POOL_BASE`] ..
//!   `+ DMA_POOL_SIZE`, a region that never holds code (TCG does not notice
//!   host writes to translated code pages).
//!
//! # Mailbox (offsets from [`MAILBOX`], little-endian)
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
//! | [`MB_MODEL_IRQ_RAISED`] … [`MB_MODEL_IRQ_LATCHED`] | u64 each | model | interrupt counters (interrupt runs only, see below) |
//!
//! # Interrupts (`cargo xtask qemu --irq`, issue #31)
//!
//! xtask passes `IRDMA_IVSHMEM_SOCK` (a UNIX socket path) and
//! `IRDMA_IRQ_VECTORS` ([`IRQ_VECTORS`]) to the model and replaces
//! `ivshmem-plain` with `ivshmem-doorbell,vectors=`[`IRQ_VECTORS`] whose
//! server is the model (spec interrupts.md B.6 layout 1): the model listens
//! before writing [`HOST_MAGIC`] and hands QEMU the BAR file as BAR2, so the
//! register space and the mailbox keep their offsets; BAR1 carries the
//! MSI-X table. The guest finds the MSI-X capability on the function and
//! runs its `irq_*` scenarios (they skip without it). MSI-X table entry
//! `n` is the device's vector `n` (GLINT_DYN_CTL(n)); the driver uses
//! [`IRQ_FIRST`] (AEQ) and [`IRQ_FIRST`] + 1 (CEQ 0).
//!
//! # Device model process (the hook for the out-of-process model)
//!
//! By default `cargo xtask qemu` builds and starts the device model,
//! `mock-bar-shm` (tests/mock-bar, harness mode); it is the reference
//! implementation of this contract. The model may not depend on this crate:
//! it repeats the mailbox layout (`mock_bar::shm::mailbox`), and xtask's
//! tests check that both agree. `--no-model` runs against the bare BAR file.
//! `cargo xtask qemu --model PROGRAM [--model-arg ARG]…` spawns `PROGRAM`
//! before QEMU, pinned to CPU 0 (QEMU goes to CPU 1) when there are two or
//! more CPUs, with the environment `IRDMA_BAR_FILE`, `IRDMA_BAR_SIZE`,
//! `IRDMA_RAM_FILE`, `IRDMA_RAM_SIZE` and `IRDMA_MAILBOX` (decimal byte
//! counts/offsets), and `IRDMA_RAM_BASE` (the GPA of RAM-file offset 0: 0
//! on x86_64, [`VIRT_RAM_BASE`] on aarch64). The model maps both files `MAP_SHARED`, serves the
//! register space below [`MAILBOX`], writes [`HOST_MAGIC`] to
//! [`MB_HOST_MAGIC`] once it is ready (xtask waits for it before starting
//! QEMU), and exits with status 0 after xtask sets [`MB_SHUTDOWN`]; any
//! other status, or not exiting, fails the run.
//!
//! # Exit codes
//!
//! The guest writes a value `v` to isa-debug-exit (port [`DEBUG_EXIT_PORT`]);
//! QEMU exits with `(v << 1) | 1`. The aarch64 image exits through
//! semihosting (`-semihosting`, SYS_EXIT_EXTENDED) with that same status
//! ([`qemu_status`]). Only [`EXIT_PASS`] (status
//! [`STATUS_PASS`] = 33) means success; a triple fault exits 0.
//!
//! # Console (COM1, text)
//!
//! One line per scenario: `PASS name (N us)`, `FAIL name: reason` or
//! `SKIP name: reason`, then `DONE passed=P failed=F skipped=S`.

/// Size of the BAR file (ivshmem needs a power of two; at least the
/// driver's 8 MiB minimum BAR, with room above it for the mailbox).
pub const BAR_FILE_SIZE: u64 = 16 << 20;
/// Size of guest RAM and of the RAM file.
pub const RAM_FILE_SIZE: u64 = 256 << 20;

/// Offset of the harness mailbox in the BAR: just above the GEN_2 register
/// space (`irdma_hal::regs::MIN_BAR_SIZE`).
pub const MAILBOX: usize = 8 << 20;
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
/// connect to the guest's [`CM_GUEST_PORT`].
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
/// [`MB_CM_PEER`]: the peer's driver is up and listening on [`CM_PEER_PORT`].
pub const CM_PEER_READY: u32 = 0x4344_5249;
/// [`MB_CM_PEER`]: the peer's driver failed (see the model's output).
pub const CM_PEER_FAILED: u32 = 0xdead_0c0c;
/// [`MB_CM_REQ_KIND`]: connect to the guest's [`CM_GUEST_PORT`].
pub const CM_REQ_CONNECT: u32 = 1;
/// [`MB_CM_ERROR`]: SEND or WRITE data differed from [`cm_byte`].
pub const CM_ERR_DATA: u32 = 1;
/// [`MB_CM_ERROR`]: a CM or verbs call failed, or an unexpected event.
pub const CM_ERR_PROTOCOL: u32 = 2;
/// [`MB_CM_ERROR`]: a connection did not progress in time.
pub const CM_ERR_TIMEOUT: u32 = 3;

/// The peer device's MAC.
pub const CM_PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
/// The peer's IPv4 address (the guest's is [`CM_GUEST_IP`]).
pub const CM_PEER_IP: [u8; 4] = [10, 0, 0, 2];
/// The guest's IPv4 address in the CM scenarios.
pub const CM_GUEST_IP: [u8; 4] = [10, 0, 0, 1];
/// RDMA_PS_TCP port the peer listens on (`cm_connect_active`).
pub const CM_PEER_PORT: u16 = 4420;
/// RDMA_PS_TCP port the guest listens on (`cm_connect_passive`).
pub const CM_GUEST_PORT: u16 = 4421;
/// Bytes of the guest's SEND; the peer posts a receive buffer this big.
pub const CM_SEND_BYTES: usize = 512;
/// Bytes of the guest's WRITE into the peer's region.
pub const CM_WRITE_BYTES: usize = 8192;
/// Bytes of the private data naming the peer's region: address (u64 LE),
/// rkey (u32 LE), length (u32 LE).
pub const CM_REGION_PDATA: usize = 16;

/// Byte `j` of what the guest sends (`what` 0: the SEND, 1: the WRITE) on
/// connection `conn` (1 = `cm_connect_active`, 2 = `cm_connect_passive`)
/// of the run with `nonce`.
pub const fn cm_byte(nonce: u64, conn: u32, what: u32, j: usize) -> u8 {
    let w = pattern(nonce ^ ((conn as u64) << 40) ^ ((what as u64) << 48), (j / 8) as u64);
    (w >> ((j % 8) * 8)) as u8
}

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
/// MSI-X vectors of the ivshmem-doorbell device in interrupt runs.
pub const IRQ_VECTORS: u32 = 3;
/// First RDMA vector (entry 0 stands for ice's own, as on a real PF).
pub const IRQ_FIRST: u16 = 1;

/// Start of the scratch pattern.
pub const MB_SCRATCH: usize = 0x100;
/// Number of u64 words of the scratch pattern (4 KiB).
pub const SCRATCH_WORDS: usize = 512;

/// "IRDG": the guest finished writing the BAR pattern.
pub const GUEST_MAGIC: u32 = 0x4744_5249;
/// "IRDH": a host model process is serving the BAR.
pub const HOST_MAGIC: u32 = 0x4844_5249;

/// Base of the DMA pool, 64 MiB into guest RAM: the guest-physical address
/// on x86_64 (RAM starts at 0), [`VIRT_RAM_BASE`] + this on aarch64 `virt`;
/// the RAM-file offset on both.
pub const DMA_POOL_BASE: u64 = 64 << 20;
/// Guest-physical start of RAM on QEMU's Arm `virt` machine: the RAM file's
/// offset 0 there. xtask passes it to the model as `IRDMA_RAM_BASE` (the
/// model's DMA address → file offset is `pa − IRDMA_RAM_BASE`; 0 or unset on
/// x86_64).
pub const VIRT_RAM_BASE: u64 = 0x4000_0000;
/// Size of the DMA pool (128 MiB, inside the 256 MiB of guest RAM).
pub const DMA_POOL_SIZE: u64 = 128 << 20;

/// isa-debug-exit I/O port (`-device isa-debug-exit,iobase=0xf4,iosize=0x04`).
pub const DEBUG_EXIT_PORT: u16 = 0xf4;
/// Every scenario passed.
pub const EXIT_PASS: u32 = 0x10;
/// At least one scenario failed (or none ran).
pub const EXIT_FAIL: u32 = 0x11;
/// A CPU exception was taken.
pub const EXIT_EXCEPTION: u32 = 0x7e;
/// The panic handler ran.
pub const EXIT_PANIC: u32 = 0x7f;

/// QEMU's exit status for a value written to isa-debug-exit.
pub const fn qemu_status(value: u32) -> i32 {
    (((value & 0x7f) << 1) | 1) as i32
}
/// QEMU's status when every scenario passed (33).
pub const STATUS_PASS: i32 = qemu_status(EXIT_PASS);

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
    assert!(BAR_FILE_SIZE.is_power_of_two());
    assert!(MAILBOX as u64 + 4096 <= BAR_FILE_SIZE);
    assert!(MB_SCRATCH + SCRATCH_WORDS * 8 <= 4096 + 0x100);
    assert!(MB_MODEL_DMA_FAULTS + 8 <= MB_CM_PEER);
    assert!(MB_CM_CLOSED + 4 <= MB_SCRATCH);
    assert!(DMA_POOL_BASE.is_multiple_of(4096) && DMA_POOL_SIZE.is_multiple_of(4096));
    assert!(DMA_POOL_BASE + DMA_POOL_SIZE <= RAM_FILE_SIZE - (16 << 20));
    assert!(STATUS_PASS == 33);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_match_qemu() {
        // notes/qemu-mock-bar.md §1: 0x10 → 33, 0x11 → 35, 0x7E → 253, 0x7F → 255.
        assert_eq!(qemu_status(EXIT_PASS), 33);
        assert_eq!(qemu_status(EXIT_FAIL), 35);
        assert_eq!(qemu_status(EXIT_EXCEPTION), 253);
        assert_eq!(qemu_status(EXIT_PANIC), 255);
    }

    #[test]
    fn mailbox_is_above_the_register_space() {
        const { assert!(MAILBOX >= irdma_hal::regs::MIN_BAR_SIZE) };
        // The mailbox page lies wholly inside the BAR file.
        let end = MAILBOX + MB_SCRATCH + 8 * SCRATCH_WORDS;
        assert!(end as u64 <= BAR_FILE_SIZE, "{end:#x}");
    }

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
