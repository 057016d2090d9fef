//! The 32-byte admin-queue descriptor, its flags, opcodes and return codes
//! (spec ice-lan-for-rdma §1.2; ice: ice_adminq_cmd.h → struct ice_aq_desc,
//! struct ice_aqc_generic, ICE_AQ_FLAG_*, enum ice_aq_err).
//!
//! A [`Desc`] is always handled whole: the engine copies all 32 bytes to the
//! ring (reserved bytes zero) and back. Typed commands (`super::cmd`) fill
//! the parameter bytes through the named offsets below; nothing outside this
//! crate can put an arbitrary opcode or flag into a descriptor.

/// Descriptor flags (ice_adminq_cmd.h → ICE_AQ_FLAG_*; spec §1.2).
pub mod flags {
    /// Done (firmware).
    pub const DD: u16 = 0x0001;
    /// Completed (firmware).
    pub const CMP: u16 = 0x0002;
    /// Error (firmware).
    pub const ERR: u16 = 0x0004;
    /// The buffer is larger than 512 bytes.
    pub const LB: u16 = 0x0200;
    /// Firmware must read the buffer.
    pub const RD: u16 = 0x0400;
    /// A buffer is attached.
    pub const BUF: u16 = 0x1000;
    /// Set on every command ice sends (ice_fill_dflt_direct_cmd_desc).
    pub const SI: u16 = 0x2000;
}

/// Buffers above this many bytes get [`flags::LB`] (ice: ICE_AQ_LG_BUF;
/// ice_controlq.c → ice_sq_send_cmd, ice_alloc_rq_bufs).
pub const LARGE_BUF: usize = 512;

/// The largest indirect buffer (ice_controlq.h → ICE_AQ_MAX_BUF_LEN).
pub const MAX_BUF_LEN: usize = 4096;

/// Byte offsets inside the descriptor (spec §1.2 table).
pub mod off {
    /// Flags, u16.
    pub const FLAGS: usize = 0;
    /// Opcode, u16.
    pub const OPCODE: usize = 2;
    /// Indirect buffer length, u16.
    pub const DATALEN: usize = 4;
    /// Firmware return value, u16.
    pub const RETVAL: usize = 6;
    /// Opaque cookie, high half.
    pub const COOKIE_HIGH: usize = 8;
    /// Opaque cookie, low half.
    pub const COOKIE_LOW: usize = 12;
    /// First parameter byte.
    pub const PARAMS: usize = 16;
    /// Buffer bus address, high 32 bits (ice_aqc_generic addr_high).
    pub const ADDR_HIGH: usize = 24;
    /// Buffer bus address, low 32 bits.
    pub const ADDR_LOW: usize = 28;
}

/// The opcodes this driver sends (ice_adminq_cmd.h → enum ice_adminq_opc;
/// spec §2). A descriptor can only carry one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(u16)]
pub enum Opcode {
    /// Get Version (direct).
    GetVersion = 0x0001,
    /// Driver Version (indirect, RD).
    DriverVersion = 0x0002,
    /// Queue Shutdown (direct).
    QueueShutdown = 0x0003,
    /// Request Resource (direct).
    RequestResource = 0x0008,
    /// Release Resource (direct).
    ReleaseResource = 0x0009,
    /// List function capabilities (indirect).
    ListFuncCaps = 0x000A,
    /// List device capabilities (indirect).
    ListDevCaps = 0x000B,
    /// Manage MAC Address Read (indirect).
    ManageMacRead = 0x0107,
    /// Clear PXE Mode (direct).
    ClearPxe = 0x0110,
    /// Get Switch Configuration (indirect).
    GetSwitchConfig = 0x0200,
    /// Add VSI (indirect, RD).
    AddVsi = 0x0210,
    /// Update VSI (indirect, RD).
    UpdateVsi = 0x0211,
    /// Free VSI (indirect, RD).
    FreeVsi = 0x0213,
    /// Add Switch Rules (indirect, RD).
    AddSwitchRules = 0x02A0,
    /// Remove Switch Rules (indirect, RD).
    RemoveSwitchRules = 0x02A2,
    /// Set Port Parameters (direct).
    SetPortParams = 0x0203,
    /// Update Switch Rules (indirect, RD).
    UpdateSwitchRules = 0x02A1,
    /// Allocate Resources (indirect, RD): VSI lists (ice_aq_alloc_free_res).
    AllocResources = 0x0208,
    /// Free Resources (indirect, RD).
    FreeResources = 0x0209,
    /// Clear PF Configuration (direct).
    ClearPfConfig = 0x02A4,
    /// Get Default Topology (indirect).
    GetDefaultTopology = 0x0400,
    /// Add Scheduling Elements (indirect, RD).
    AddSchedElems = 0x0401,
    /// Query Scheduling Elements (indirect, RD).
    QuerySchedElems = 0x0404,
    /// Delete Scheduling Elements (indirect, RD).
    DeleteSchedElems = 0x040F,
    /// Query Tx Scheduler Resources (indirect).
    QuerySchedRes = 0x0412,
    /// Set MAC Config (direct).
    SetMacConfig = 0x0603,
    /// Restart Auto-Negotiation (direct).
    RestartAn = 0x0605,
    /// Get Link Status (indirect; also an ARQ event).
    GetLinkStatus = 0x0607,
    /// Set Event Mask (direct).
    SetEventMask = 0x0613,
    /// Stop firmware LLDP agent (direct; spec §6 item 10).
    LldpStop = 0x0A05,
    /// Disable Tx Queues (indirect, RD).
    DisableTxQueues = 0x0C31,
    /// Add RDMA Queue Set (indirect, RD).
    AddRdmaQset = 0x0C33,
    /// Download Package (indirect, RD).
    DownloadPackage = 0x0C40,
    /// Get Package Info List (indirect).
    GetPackageInfo = 0x0C43,
}

impl Opcode {
    /// Every opcode, for look-ups.
    pub const ALL: [Opcode; 34] = [
        Opcode::GetVersion,
        Opcode::DriverVersion,
        Opcode::QueueShutdown,
        Opcode::RequestResource,
        Opcode::ReleaseResource,
        Opcode::ListFuncCaps,
        Opcode::ListDevCaps,
        Opcode::ManageMacRead,
        Opcode::ClearPxe,
        Opcode::GetSwitchConfig,
        Opcode::AddVsi,
        Opcode::UpdateVsi,
        Opcode::FreeVsi,
        Opcode::AddSwitchRules,
        Opcode::UpdateSwitchRules,
        Opcode::RemoveSwitchRules,
        Opcode::SetPortParams,
        Opcode::AllocResources,
        Opcode::FreeResources,
        Opcode::ClearPfConfig,
        Opcode::GetDefaultTopology,
        Opcode::AddSchedElems,
        Opcode::QuerySchedElems,
        Opcode::DeleteSchedElems,
        Opcode::QuerySchedRes,
        Opcode::SetMacConfig,
        Opcode::RestartAn,
        Opcode::GetLinkStatus,
        Opcode::SetEventMask,
        Opcode::LldpStop,
        Opcode::DisableTxQueues,
        Opcode::AddRdmaQset,
        Opcode::DownloadPackage,
        Opcode::GetPackageInfo,
    ];

    /// The opcode with this number, if the driver knows it.
    pub fn from_u16(v: u16) -> Option<Opcode> {
        Self::ALL.iter().copied().find(|o| *o as u16 == v)
    }

    /// Whether firmware reads the buffer, so ice adds RD (spec §1.2 and §7
    /// item 2; the conformance README's list: 0x0210, 0x0211, 0x0401,
    /// 0x0404, 0x040F, 0x0C33, 0x0C31, 0x02A0, 0x02A1, 0x0208, 0x06EE;
    /// download package 0x0C40 and driver version 0x0002 per spec §1.2/§2.3).
    /// ice_aq_alloc_free_res sets RD for Free Resources (0x0209) as for
    /// Alloc (ice_common.c). Free VSI (0x0213) carries no buffer in ice (ice_aq_free_vsi sends
    /// a direct descriptor), so it is not listed.
    pub fn firmware_reads_buffer(self) -> bool {
        matches!(
            self,
            Opcode::DriverVersion
                | Opcode::AddVsi
                | Opcode::UpdateVsi
                | Opcode::AddSwitchRules
                | Opcode::UpdateSwitchRules
                | Opcode::RemoveSwitchRules
                | Opcode::AllocResources
                | Opcode::FreeResources
                | Opcode::AddSchedElems
                | Opcode::QuerySchedElems
                | Opcode::DeleteSchedElems
                | Opcode::DisableTxQueues
                | Opcode::AddRdmaQset
                | Opcode::DownloadPackage
        )
    }

    /// Whether ice resends this opcode on EBUSY (ice_common.c →
    /// ice_should_retry_sq_send_cmd: DNL, link topology, SFF EEPROM and the
    /// LLDP start/stop/filter commands; of these the driver sends only LLDP
    /// stop). The vectors confirm DNL call (0x0682) and Clear PF config are
    /// not retried.
    pub fn retried_on_busy(self) -> bool {
        retried_on_busy(self as u16)
    }
}

/// Whether ice resends the opcode `opcode` on EBUSY, for any opcode
/// number, known to [`Opcode`] or not: Get Link Topology Handle (0x06E0),
/// Read/Write SFF EEPROM (0x06EE), LLDP Stop (0x0A05), LLDP Start (0x0A06)
/// and LLDP Filter Control (0x0A0A) (Linux 6.1 ice_common.c →
/// ice_should_retry_sq_send_cmd; ice_adminq_cmd.h for the numbers). A raw
/// [`AdminQueue::send`](super::AdminQueue::send) of any of them is
/// retried like the typed LLDP stop.
pub const fn retried_on_busy(opcode: u16) -> bool {
    matches!(opcode, 0x06E0 | 0x06EE | 0x0A05 | 0x0A06 | 0x0A0A)
}

/// Firmware return codes (spec §1.2 "Error codes"; ice_adminq_cmd.h →
/// enum ice_aq_err). The low 8 bits of `retval`; ice drops the upper byte.
pub mod rc {
    /// Success.
    pub const OK: u8 = 0;
    /// Operation not permitted.
    pub const EPERM: u8 = 1;
    /// No such element.
    pub const ENOENT: u8 = 2;
    /// Bad opcode.
    pub const ESRCH: u8 = 3;
    /// I/O error.
    pub const EIO: u8 = 5;
    /// Out of memory / buffer too small.
    pub const ENOMEM: u8 = 9;
    /// Device or resource busy.
    pub const EBUSY: u8 = 12;
    /// Object already exists.
    pub const EEXIST: u8 = 13;
    /// Invalid argument.
    pub const EINVAL: u8 = 14;
    /// No space left.
    pub const ENOSPC: u8 = 16;

    /// The ice name of a code (for messages).
    pub fn name(code: u8) -> &'static str {
        const NAMES: [&str; 30] = [
            "OK",
            "EPERM",
            "ENOENT",
            "ESRCH",
            "EINTR",
            "EIO",
            "ENXIO",
            "E2BIG",
            "EAGAIN",
            "ENOMEM",
            "EACCES",
            "EFAULT",
            "EBUSY",
            "EEXIST",
            "EINVAL",
            "ENOTTY",
            "ENOSPC",
            "ENOSYS",
            "ERANGE",
            "EFLUSHED",
            "BAD_ADDR",
            "EMODE",
            "EFBIG",
            "ESBCOMP",
            "ENOSEC",
            "EBADSIG",
            "ESVN",
            "EBADMAN",
            "EBADBUF",
            "EACCES_BMCU",
        ];
        NAMES.get(code as usize).copied().unwrap_or("unknown")
    }
}

/// One admin-queue descriptor, little-endian, exactly as on the ring.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Desc {
    bytes: [u8; 32],
}

impl core::fmt::Debug for Desc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Desc(")?;
        for b in self.bytes {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

impl Desc {
    /// A command descriptor as ice starts every one: flags SI, the opcode,
    /// everything else zero (ice_controlq.c → ice_fill_dflt_direct_cmd_desc),
    /// plus RD when firmware reads the buffer.
    pub fn new(op: Opcode) -> Desc {
        let mut d = Desc { bytes: [0; 32] };
        let mut fl = flags::SI;
        if op.firmware_reads_buffer() {
            fl |= flags::RD;
        }
        d.set_u16(off::FLAGS, fl);
        d.set_u16(off::OPCODE, op as u16);
        d
    }

    /// A descriptor for the generic send path (what ice_aq_send_cmd takes
    /// from a caller that built its own): [`Desc::new`] plus the 16
    /// parameter bytes as given. The opcode is still one the driver knows;
    /// the engine adds BUF/LB and the buffer address itself.
    pub fn with_params(op: Opcode, params: [u8; 16]) -> Desc {
        let mut d = Desc::new(op);
        d.bytes[off::PARAMS..].copy_from_slice(&params);
        d
    }

    /// A caller-built descriptor for the generic send path, exactly as
    /// ice_aq_send_cmd takes one: flags SI plus the caller's `flags` (no RD
    /// unless the caller asks), any opcode, the 16 parameter bytes, the rest
    /// zero (ice_controlq.c → ice_fill_dflt_direct_cmd_desc, then the
    /// caller's changes). The engine adds BUF/LB, datalen and the buffer
    /// address itself.
    pub fn raw(opcode: u16, flags: u16, params: [u8; 16]) -> Desc {
        let mut d = Desc { bytes: [0; 32] };
        d.set_u16(off::FLAGS, flags::SI | flags);
        d.set_u16(off::OPCODE, opcode);
        d.bytes[off::PARAMS..].copy_from_slice(&params);
        d
    }

    /// A descriptor from its 32 bytes (what the ring or an event holds).
    pub const fn from_bytes(bytes: [u8; 32]) -> Desc {
        Desc { bytes }
    }

    /// The 32 bytes.
    pub const fn bytes(&self) -> &[u8; 32] {
        &self.bytes
    }

    /// Flags.
    pub fn flags(&self) -> u16 {
        self.u16_at(off::FLAGS)
    }
    /// Opcode number.
    pub fn opcode(&self) -> u16 {
        self.u16_at(off::OPCODE)
    }
    /// Datalen.
    pub fn datalen(&self) -> u16 {
        self.u16_at(off::DATALEN)
    }
    /// The full 16-bit retval as firmware wrote it.
    pub fn retval_raw(&self) -> u16 {
        self.u16_at(off::RETVAL)
    }
    /// The AQ return code: the low 8 bits of retval (ice_sq_send_cmd).
    pub fn retval(&self) -> u8 {
        self.retval_raw() as u8
    }
    /// Cookie high.
    pub fn cookie_high(&self) -> u32 {
        self.u32_at(off::COOKIE_HIGH)
    }
    /// Cookie low.
    pub fn cookie_low(&self) -> u32 {
        self.u32_at(off::COOKIE_LOW)
    }
    /// The 16 parameter bytes (descriptor bytes 16–31).
    pub fn params(&self) -> [u8; 16] {
        let mut p = [0u8; 16];
        p.copy_from_slice(&self.bytes[off::PARAMS..32]);
        p
    }

    /// The byte at descriptor offset `at` (0 past the end).
    pub fn u8_at(&self, at: usize) -> u8 {
        self.bytes.get(at).copied().unwrap_or(0)
    }
    /// The little-endian u16 at `at` (0 past the end).
    pub fn u16_at(&self, at: usize) -> u16 {
        u16::from_le_bytes([self.u8_at(at), self.u8_at(at + 1)])
    }
    /// The little-endian u32 at `at` (0 past the end).
    pub fn u32_at(&self, at: usize) -> u32 {
        u32::from_le_bytes([
            self.u8_at(at),
            self.u8_at(at + 1),
            self.u8_at(at + 2),
            self.u8_at(at + 3),
        ])
    }

    pub(crate) fn set_u8(&mut self, at: usize, v: u8) {
        if let Some(b) = self.bytes.get_mut(at) {
            *b = v;
        }
    }
    pub(crate) fn set_u16(&mut self, at: usize, v: u16) {
        for (i, b) in v.to_le_bytes().into_iter().enumerate() {
            self.set_u8(at + i, b);
        }
    }
    pub(crate) fn set_u32(&mut self, at: usize, v: u32) {
        for (i, b) in v.to_le_bytes().into_iter().enumerate() {
            self.set_u8(at + i, b);
        }
    }
    pub(crate) fn or_flags(&mut self, f: u16) {
        let cur = self.flags();
        self.set_u16(off::FLAGS, cur | f);
    }

    /// Sets the two opaque cookies, returned unchanged by firmware.
    pub fn set_cookies(&mut self, high: u32, low: u32) {
        self.set_u32(off::COOKIE_HIGH, high);
        self.set_u32(off::COOKIE_LOW, low);
    }
}

/// Queue Shutdown 0x0003: byte 16 bit 0 = driver unloading (ice_common.c →
/// ice_aq_q_shutdown; spec §1.6).
pub fn queue_shutdown(unloading: bool) -> Desc {
    let mut d = Desc::new(Opcode::QueueShutdown);
    d.set_u8(16, u8::from(unloading));
    d
}

// Byte readers of answer buffers (the command parsers in `cmd`, `caps`).

/// The little-endian u16 at byte `at` of `b` (bytes past the end read as 0).
pub(crate) fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b.get(at).copied().unwrap_or(0), b.get(at + 1).copied().unwrap_or(0)])
}

/// The little-endian u32 at byte `at` of `b` (bytes past the end read as 0).
pub(crate) fn le32(b: &[u8], at: usize) -> u32 {
    u32::from(le16(b, at)) | (u32::from(le16(b, at + 2)) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_sets_si_rd_and_opcode_only() {
        let d = Desc::new(Opcode::GetVersion);
        assert_eq!(d.bytes()[..4], [0x00, 0x20, 0x01, 0x00]);
        assert!(d.bytes()[4..].iter().all(|b| *b == 0));
        let d = Desc::new(Opcode::AddVsi);
        assert_eq!(d.flags(), flags::SI | flags::RD);
        assert_eq!(Desc::new(Opcode::ListDevCaps).flags(), flags::SI);
    }

    #[test]
    fn raw_takes_caller_flags_exactly() {
        // 0x0210 is an RD opcode for the typed path; a caller-built
        // descriptor has RD only when the caller asks (ice_aq_send_cmd)
        let p = [7u8; 16];
        let d = Desc::raw(0x0210, 0, p);
        assert_eq!((d.flags(), d.opcode(), d.params()), (flags::SI, 0x0210, p));
        assert!(d.bytes()[4..16].iter().all(|b| *b == 0));
        assert_eq!(Desc::raw(0x0682, flags::RD, p).flags(), flags::SI | flags::RD);
    }

    #[test]
    fn opcodes_round_trip_and_retval_low_byte() {
        for o in Opcode::ALL {
            assert_eq!(Opcode::from_u16(o as u16), Some(o));
        }
        assert_eq!(Opcode::from_u16(0x0682), None);
        let mut b = [0u8; 32];
        b[6] = 0x34;
        b[7] = 0x12;
        assert_eq!(Desc::from_bytes(b).retval(), 0x34);
        assert_eq!(rc::name(12), "EBUSY");
        assert_eq!(rc::name(200), "unknown");
    }
}
