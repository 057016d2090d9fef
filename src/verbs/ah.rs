//! Address handles (`ib_ah`) for UD sends, RoCEv2 GIDs, and the static
//! neighbour table (IP → MAC) that feeds MANAGE_ARP.
//!
//! An AH is a device object: CREATE_ADDR_HANDLE (0x1C) with its own id
//! (FSIAV table, index 0 reserved), the next hop's MAC in an ARP-table entry
//! the AH names by index (uda.c: irdma_sc_access_ah; irdma_kcompat.c:
//! irdma_create_ah, irdma_fill_ah_info, irdma_create_ah_vlan_tag; spec
//! rocev2-wire §5.2). Destroy (0x1E) carries the full AH info, as Linux
//! sends it.

use irdma_hal::{Bar, Hal};

use super::error::Quantity;
use super::error::VerbsError;
use super::pd::Pd;
use super::qp::IpAddr;
use crate::Phrase;
use crate::cqp::cmd::{AhInfo, CreateAh, DestroyAh};
use crate::device::Device;

/// VLAN_N_VID: the VLAN tag Linux writes into an AH without a VLAN
/// (irdma_kcompat.c: irdma_create_ah_vlan_tag; conformance README).
const NO_VLAN_TAG: u16 = 0x1000;

/// Where a UD datagram goes (`rdma_ah_attr` with its GRH, RoCEv2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AhAttr {
    /// Destination IP (the destination GID).
    pub dest_ip: IpAddr,
    /// Source IP (the local GID); same family as `dest_ip`.
    pub src_ip: IpAddr,
    /// Next-hop MAC; `None` looks `dest_ip` up in the neighbour table
    /// ([`Device::add_neighbour`]).
    pub dest_mac: Option<[u8; 6]>,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class (DSCP << 2 | ECN).
    pub traffic_class: u8,
    /// IPv6 flow label (20 bits).
    pub flow_label: u32,
    /// VLAN id with priority (`vid | prio << 13`), if tagged.
    pub vlan: Option<u16>,
}

impl AhAttr {
    /// An untagged AH to `dest_ip` from `src_ip` with hop limit 64, traffic
    /// class 0, flow label 0 and the MAC from the neighbour table.
    pub const fn new(dest_ip: IpAddr, src_ip: IpAddr) -> Self {
        AhAttr {
            dest_ip,
            src_ip,
            dest_mac: None,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            vlan: None,
        }
    }
}

/// The AH's IP words: host order, `[0]` most significant; IPv4 in `[0]`
/// (uda.h: struct irdma_ah_info; conformance README "Inputs").
fn ah_words(ip: IpAddr) -> [u32; 4] {
    match ip {
        IpAddr::V4(a) => [u32::from_be_bytes(a), 0, 0, 0],
        IpAddr::V6(a) => core::array::from_fn(|i| {
            let b = [a[4 * i], a[4 * i + 1], a[4 * i + 2], a[4 * i + 3]];
            u32::from_be_bytes(b)
        }),
    }
}

/// The RoCEv2 GID of an interface address: IPv4 as the IPv4-mapped IPv6
/// address `::ffff:a.b.c.d`, IPv6 as it is (spec ib-cm-rocev2 §1; Linux
/// include/rdma/ib_addr.h: rdma_ip2gid → ipv6_addr_set_v4mapped).
pub fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4([a, b, c, d]) => [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d],
        IpAddr::V6(g) => g,
    }
}

/// The interface address of a RoCEv2 GID: an IPv4-mapped GID is IPv4,
/// any other is IPv6 (Linux include/rdma/ib_addr.h: rdma_gid2ip).
pub fn ip_of_gid(gid: [u8; 16]) -> IpAddr {
    match gid {
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d] => IpAddr::V4([a, b, c, d]),
        g => IpAddr::V6(g),
    }
}

/// An address handle (`ib_ah`). Dropping it destroys it.
pub struct Ah<'d, H: Hal, B: Bar + Clone> {
    dev: &'d Device<H, B>,
    info: AhInfo,
    alive: bool,
    /// The ARP reference is still held.
    arp: bool,
}

impl<'d, H: Hal, B: Bar + Clone> Ah<'d, H, B> {
    /// The AH index a UD SEND names ([`crate::wr::WrOpcode::UdSend`]).
    pub fn id(&self) -> u32 {
        self.info.ah_idx
    }

    /// The PD.
    pub fn pd_id(&self) -> u32 {
        self.info.pd_idx
    }

    /// The ARP-table index of the next hop.
    pub fn arp_index(&self) -> u16 {
        self.info.dst_arp_index
    }

    /// `ib_destroy_ah`: DESTROY_ADDR_HANDLE with the full AH info
    /// (irdma_kcompat.c: irdma_destroy_ah), then the id, the ARP reference
    /// and the PD reference are released. After a failed destroy the AH is
    /// still alive and the call may be retried.
    pub fn destroy(&mut self) -> Result<(), VerbsError> {
        if self.alive {
            let cmd = DestroyAh(self.info);
            self.dev.with_cqp(|c| c.exec(cmd, 0).map(|_| ()))?;
            self.alive = false;
            if let Some(ids) = self.dev.res.lock().ids.as_mut() {
                let _ = ids.ah_ids.free(self.info.ah_idx);
            }
            self.dev.release_refs(Some(self.info.pd_idx), &[]);
        }
        if self.arp {
            self.dev.arp_put(self.info.dst_arp_index)?;
            self.arp = false;
        }
        Ok(())
    }
}

impl<H: Hal, B: Bar + Clone> Drop for Ah<'_, H, B> {
    fn drop(&mut self) {
        if self.destroy().is_err() && self.alive {
            // The device may still hold the AH: its id is never reused.
            self.dev.quarantine_ids(1);
        }
    }
}

impl<'d, H: Hal, B: Bar + Clone> Pd<'d, H, B> {
    /// `ib_create_ah` on this PD ([`Device::create_ah`]).
    pub fn create_ah(&self, attr: &AhAttr) -> Result<Ah<'d, H, B>, VerbsError> {
        self.device().create_ah(self, attr)
    }
}

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// `ib_create_ah` (irdma_kcompat.c: irdma_create_ah): an AH id, an ARP
    /// entry for the next hop (shared with QPs going to the same MAC), then
    /// CREATE_ADDR_HANDLE with the local MAC, the addresses, TTL, traffic
    /// class, flow label and VLAN tag as Linux fills them, loopback when
    /// source and destination address are equal.
    pub fn create_ah<'d>(
        &'d self,
        pd: &Pd<'d, H, B>,
        attr: &AhAttr,
    ) -> Result<Ah<'d, H, B>, VerbsError> {
        self.own(pd.device(), &"PD of another device")?;
        let v4 = matches!(attr.dest_ip, IpAddr::V4(_));
        if v4 != matches!(attr.src_ip, IpAddr::V4(_)) {
            return Err(VerbsError::Invalid { what: Phrase::new(&"mixed IPv4/IPv6 addresses") });
        }
        if attr.flow_label >= 1 << 20 {
            return Err(VerbsError::Invalid { what: Phrase::new(&"flow_label width") });
        }
        if attr.vlan.is_some_and(|v| v & 0xFFF >= 0xFFF) {
            return Err(VerbsError::Invalid { what: Phrase::new(&"VLAN id") });
        }
        let mac = match attr.dest_mac {
            Some(m) => m,
            None => self.neighbour(attr.dest_ip).ok_or(VerbsError::Invalid {
                what: Phrase::new(&"no neighbour entry for the destination"),
            })?,
        };
        let id = {
            let mut res = self.res.lock();
            res.ids.as_mut().ok_or(VerbsError::Destroyed)?.ah_ids.alloc_next()?
        };
        let free_id = || {
            if let Some(ids) = self.res.lock().ids.as_mut() {
                let _ = ids.ah_ids.free(id);
            }
        };
        let arp = match self.arp_get(mac) {
            Ok(a) => a,
            Err(e) => {
                free_id();
                return Err(e);
            }
        };
        let info = AhInfo {
            ah_idx: id,
            pd_idx: pd.id(),
            dst_arp_index: arp,
            dest_ip: ah_words(attr.dest_ip),
            src_ip: ah_words(attr.src_ip),
            flow_label: attr.flow_label,
            vlan_tag: attr.vlan.unwrap_or(NO_VLAN_TAG),
            insert_vlan_tag: attr.vlan.is_some(),
            tc_tos: attr.traffic_class,
            hop_ttl: attr.hop_limit,
            mac: self.lan.mac,
            ipv4: v4,
            loopback: attr.dest_ip == attr.src_ip,
        };
        if let Err(e) = self.with_cqp(|c| c.exec(CreateAh(info), 0).map(|_| ())) {
            let _ = self.arp_put(arp);
            if crate::cqp::engine::device_may_own(&e) {
                // A timeout: the device may hold the AH; keep its id.
                self.quarantine_ids(1);
            } else {
                free_id();
            }
            return Err(e.into());
        }
        self.hold(Some(pd.id()), &[]);
        Ok(Ah { dev: self, info, alive: true, arp: true })
    }

    /// Adds or replaces a static neighbour entry `ip → mac` (a bare-metal
    /// host may have no ARP/ND of its own). AHs and RC address vectors
    /// without a MAC resolve through it; the MAC reaches the device in a
    /// MANAGE_ARP entry when an AH or QP first uses it.
    pub fn add_neighbour(&self, ip: IpAddr, mac: [u8; 6]) -> Result<(), VerbsError> {
        let mut res = self.res.lock();
        let ids = res.ids.as_mut().ok_or(VerbsError::Destroyed)?;
        if let Some(e) = ids.neigh.iter_mut().find(|(i, _)| *i == ip) {
            e.1 = mac;
            return Ok(());
        }
        ids.neigh.push((ip, mac)).map_err(|_| VerbsError::AboveLimit {
            what: Quantity::NeighbourEntries,
            requested: crate::device::MAX_NEIGHBOURS as u32 + 1,
            max: crate::device::MAX_NEIGHBOURS as u32,
        })
    }

    /// Removes the neighbour entry of `ip`; whether there was one. ARP
    /// entries already in use keep their MAC until their last user goes.
    pub fn remove_neighbour(&self, ip: IpAddr) -> bool {
        let mut res = self.res.lock();
        let Some(ids) = res.ids.as_mut() else { return false };
        match ids.neigh.iter().position(|(i, _)| *i == ip) {
            Some(p) => {
                ids.neigh.swap_remove(p);
                true
            }
            None => false,
        }
    }

    /// The MAC the neighbour table gives for `ip`.
    pub fn neighbour(&self, ip: IpAddr) -> Option<[u8; 6]> {
        let res = self.res.lock();
        res.ids.as_ref()?.neigh.iter().find(|(i, _)| *i == ip).map(|(_, m)| *m)
    }

    /// Address-handle ids in use.
    pub fn ahs_in_use(&self) -> u32 {
        self.res.lock().ids.as_ref().map_or(0, |i| i.ah_ids.in_use())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gids_are_ipv4_mapped_or_ipv6() {
        let g = gid_of(IpAddr::V4([192, 168, 1, 7]));
        assert_eq!(g, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 7]);
        assert_eq!(ip_of_gid(g), IpAddr::V4([192, 168, 1, 7]));
        let mut v6 = [0u8; 16];
        v6[0] = 0xfe;
        v6[1] = 0x80;
        v6[15] = 1;
        assert_eq!(gid_of(IpAddr::V6(v6)), v6);
        assert_eq!(ip_of_gid(v6), IpAddr::V6(v6));
    }

    #[test]
    fn ah_words_put_ipv4_in_word0() {
        assert_eq!(ah_words(IpAddr::V4([10, 0, 0, 1])), [0x0a00_0001, 0, 0, 0]);
        let mut v6 = [0u8; 16];
        v6[0] = 0x20;
        v6[1] = 0x01;
        v6[15] = 9;
        assert_eq!(ah_words(IpAddr::V6(v6)), [0x2001_0000, 0, 0, 9]);
    }
}
