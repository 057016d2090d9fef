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
//! # Mailbox
//!
//! The mailbox's layout (the `MB_*` offsets from [`MAILBOX`], the fault
//! kinds, the magics, [`echo`], [`pong`], [`pattern`]) is the `shm-contract`
//! crate (tests/shm-contract), re-exported here: the model process uses that
//! same crate, since it may not depend on this one.
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
//! implementation of this contract. The model may not depend on this crate;
//! it shares the mailbox layout through `shm-contract` (see above).
//! `--no-model` runs against the bare BAR file.
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

pub use shm_contract::*;

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

/// MSI-X vectors of the ivshmem-doorbell device in interrupt runs.
pub const IRQ_VECTORS: u32 = 3;
/// First RDMA vector (entry 0 stands for ice's own, as on a real PF).
pub const IRQ_FIRST: u16 = 1;

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

const _: () = {
    assert!(BAR_FILE_SIZE.is_power_of_two());
    assert!(MAILBOX as u64 + 4096 <= BAR_FILE_SIZE);
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
}
