//! Several devices joined by a wire, behind one lock.
//!
//! Every register access goes through the fabric, which hands the addressed
//! device access to the others for the duration of the access; a request to
//! another device's QP is answered before the doorbell write returns, so the
//! whole system stays deterministic.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::datapath::{Peers, Response};
use crate::device::Device;
use crate::port::{self, Port};
use crate::wire::{self, Capture};

/// Index of a device on a [`Fabric`].
pub type DeviceId = usize;

/// A set of devices connected by an in-order, lossless wire carrying
/// RoCEv2 frames ([`crate::wire`]). Routing is by (destination IP word 3,
/// destination QPN) of the sending QP's context; the receiver then checks
/// every frame against its own context. A QP whose destination is on its
/// own device is looped back through the same frames.
#[derive(Default)]
pub struct Fabric {
    devices: Mutex<Vec<Option<Device>>>,
    capture: Mutex<Option<Capture>>,
    port: Mutex<Option<Arc<Port>>>,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric").field("devices", &self.lock().len()).finish()
    }
}

/// An RC request for a QP no device of the fabric owns: out through the
/// port, and the peer's response frames back (`crate::port`, "The RC
/// requester meets a real peer"). The [`Response`] is read from the first
/// response frame's opcode and AETH; the requester then checks every frame
/// against its QP context as for a device's answer.
fn through_port(port: &Port, src_qpn: u32, frames: &[Vec<u8>]) -> Option<(Response, Vec<Vec<u8>>)> {
    let back = port.exchange(src_qpn, frames)?;
    let first = wire::parse(back.first()?).ok()?.pkt;
    let resp = match (first.opcode, first.aeth.map(|a| a.0)) {
        (o, _) if (wire::op::READ_RESP_FIRST..=wire::op::READ_RESP_ONLY).contains(&o) => {
            Response::ReadData(Vec::new())
        }
        // wire §4.4: the syndrome's kind
        (_, Some(s)) if s & 0x60 == 0 => Response::Ack,
        (_, Some(s)) if s & 0x60 == 0x20 => Response::RnrNak,
        (_, Some(wire::syndrome::NAK_PSN_SEQ)) => Response::NakSeq(first.psn),
        (_, Some(wire::syndrome::NAK_ACCESS)) => Response::NakAccess,
        (_, Some(wire::syndrome::NAK_INVALID)) => Response::NakInvalid,
        _ => Response::NakOp,
    };
    Some((resp, back))
}

/// A UD datagram no device claims leaves through the port.
fn datagram_to_port(port: &Port, frame: &[u8]) -> Option<bool> {
    port.send(frame);
    Some(true)
}

/// The peers of one device of the fabric: the fabric's other devices,
/// maybe one device kept outside it (`ext`: the QEMU-facing device of a
/// [`crate::shm::ShmHost`] joined with [`Fabric::poll_joined`]), and the
/// port for whatever none of them owns.
struct FabricPeers<'a> {
    devs: &'a mut [Option<Device>],
    ext: Option<&'a mut Device>,
    port: Option<&'a Port>,
}

impl Peers for FabricPeers<'_> {
    fn deliver(
        &mut self,
        ip: u32,
        qpn: u32,
        src_qpn: u32,
        frames: &[Vec<u8>],
    ) -> Option<(Response, Vec<Vec<u8>>)> {
        if let Some(d) = self.devs.iter_mut().flatten().find(|d| d.owns(ip, qpn)) {
            return d.receive(qpn, src_qpn, frames);
        }
        match self.ext.as_deref_mut().filter(|d| d.owns(ip, qpn)) {
            Some(ext) => ext.receive(qpn, src_qpn, frames),
            None => through_port(self.port?, src_qpn, frames),
        }
    }

    fn deliver_datagram(&mut self, frame: &[u8]) -> Option<bool> {
        if let Some(r) = self.devs.iter_mut().flatten().find_map(|d| d.receive_datagram(frame)) {
            return Some(r);
        }
        match self.ext.as_deref_mut().and_then(|d| d.receive_datagram(frame)) {
            Some(r) => Some(r),
            None => datagram_to_port(self.port?, frame),
        }
    }
}

impl Fabric {
    /// An empty fabric.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Option<Device>>> {
        self.devices.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a device; returns its id.
    pub fn add(&self, mut dev: Device) -> DeviceId {
        let mut v = self.lock();
        dev.node = v.len() as u32;
        if let Some(c) = self.capture.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            dev.set_capture(Some(c));
        }
        v.push(Some(dev));
        v.len() - 1
    }

    /// Records every frame any device of this fabric sends, from now on
    /// (also for devices added later); returns the capture.
    pub fn capture(&self) -> Capture {
        let mut cap = self.capture.lock().unwrap_or_else(|e| e.into_inner());
        let c = cap.get_or_insert_with(Capture::new).clone();
        drop(cap);
        if let Some(p) = self.port() {
            p.set_capture(Some(c.clone()));
        }
        for d in self.lock().iter_mut().flatten() {
            d.set_capture(Some(c.clone()));
        }
        c
    }

    /// Records every frame any device of this fabric sends into `c` (an
    /// existing capture, e.g. the one of a joined shm host), from now on.
    pub fn record_into(&self, c: Capture) {
        *self.capture.lock().unwrap_or_else(|e| e.into_inner()) = Some(c.clone());
        if let Some(p) = self.port() {
            p.set_capture(Some(c.clone()));
        }
        for d in self.lock().iter_mut().flatten() {
            d.set_capture(Some(c.clone()));
        }
    }

    /// Plugs an Ethernet port ([`crate::port`]) into this fabric: frames
    /// for destinations no device claims leave through it, and
    /// [`Fabric::pump_port`] (also run by [`Fabric::step`] and
    /// [`Fabric::poll`]) takes the frames that arrive. Replaces an earlier
    /// port. Returns the port (address, counters).
    pub fn attach_port(&self, port: Port) -> Arc<Port> {
        let port = Arc::new(port);
        port.set_capture(self.capture.lock().unwrap_or_else(|e| e.into_inner()).clone());
        *self.port.lock().unwrap_or_else(|e| e.into_inner()) = Some(port.clone());
        port
    }

    /// The attached port, if any.
    pub fn port(&self) -> Option<Arc<Port>> {
        self.port.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Handles every frame waiting at the port (`crate::port`, "What comes
    /// in"): ARP/ND answered, RoCEv2 frames checked and handed to the
    /// device that owns their QP, whose answers leave through the port.
    /// Returns how many frames were handled (0 without a port).
    pub fn pump_port(&self) -> usize {
        self.pump_port_with(None)
    }

    /// [`Fabric::pump_port`] with one more device kept outside the fabric
    /// (`ext`, as in [`Fabric::poll_joined`]): a frame no device of the
    /// fabric owns goes to `ext` if it owns it.
    fn pump_port_with(&self, mut ext: Option<&mut Device>) -> usize {
        let Some(port) = self.port() else { return 0 };
        let mut devs = self.lock();
        let mut n = 0;
        while let Some(f) = port.next_frame() {
            n += 1;
            let port::Rx::Roce(f, p) = port.classify(f) else { continue };
            if wire::has_deth(p.pkt.opcode) {
                let took = match devs.iter_mut().flatten().find_map(|d| d.receive_datagram(&f)) {
                    Some(r) => Some(r),
                    None => ext.as_deref_mut().and_then(|d| d.receive_datagram(&f)),
                };
                match took {
                    Some(_) => port.delivered(),
                    None => port.drop_qp(),
                }
                continue;
            }
            if port::is_response(p.pkt.opcode) {
                port.unsolicited();
                continue;
            }
            let (ip, qpn) = (p.dst_ip[3], p.pkt.dest_qp);
            let d = match devs.iter_mut().flatten().find(|d| d.owns(ip, qpn)) {
                Some(d) => d,
                None => match ext.as_deref_mut().filter(|d| d.owns(ip, qpn)) {
                    Some(d) => d,
                    None => {
                        // wire §1.3/§1.4: a destination IP that is neither
                        // the port's nor any RC QP's local address is an
                        // addressing drop (`ip`); an address of ours with
                        // no such QP is a `qp` drop
                        let ours = port.has_ip(p.ipv4, p.dst_ip)
                            || devs.iter().flatten().any(|d| d.has_local_ip(ip))
                            || ext.as_deref().is_some_and(|d| d.has_local_ip(ip));
                        if ours {
                            port.drop_qp()
                        } else {
                            port.drop_ip()
                        }
                        continue;
                    }
                },
            };
            port.delivered();
            // RC frames carry no source QPN: the QP's own peer is assumed
            let src = d.qp(qpn).map_or(0, |q| q.dest_qp);
            if let Some((_, back)) = d.receive(qpn, src, &[f]) {
                for b in &back {
                    port.send(b);
                }
            }
        }
        n
    }

    /// A register read on device `id` (all-ones for an unknown id).
    pub fn mmio_read32(&self, id: DeviceId, off: u32) -> u32 {
        self.with(id, |d| d.mmio_read32(off)).unwrap_or(u32::MAX)
    }

    /// A register write on device `id`; doorbells are fully processed,
    /// including the other devices' side of the wire, before this returns.
    pub fn mmio_write32(&self, id: DeviceId, off: u32, v: u32) {
        let port = self.port();
        let mut devs = self.lock();
        let Some(mut dev) = devs.get_mut(id).and_then(Option::take) else { return };
        dev.mmio_write32_with(
            off,
            v,
            &mut FabricPeers { devs: &mut devs, ext: None, port: port.as_deref() },
        );
        if let Some(slot) = devs.get_mut(id) {
            *slot = Some(dev);
        }
    }

    /// Runs `f` on device `id` (inspection, fault injection).
    pub fn with<R>(&self, id: DeviceId, f: impl FnOnce(&mut Device) -> R) -> Option<R> {
        self.lock().get_mut(id).and_then(Option::as_mut).map(f)
    }

    /// Retries stalled work on every device (RNR retries).
    pub fn step(&self) {
        self.pump_port();
        let port = self.port();
        let mut devs = self.lock();
        for id in 0..devs.len() {
            let Some(mut dev) = devs.get_mut(id).and_then(Option::take) else { continue };
            dev.step_with(&mut FabricPeers { devs: &mut devs, ext: None, port: port.as_deref() });
            devs[id] = Some(dev);
        }
    }
}

impl Fabric {
    /// Deferred mode: polls every device once (see [`Device::poll`]).
    /// Returns whether any device did work.
    pub fn poll(&self) -> bool {
        let mut work = self.pump_port() > 0;
        let port = self.port();
        let mut devs = self.lock();
        for id in 0..devs.len() {
            let Some(mut dev) = devs.get_mut(id).and_then(Option::take) else { continue };
            work |= dev.poll_with(&mut FabricPeers {
                devs: &mut devs,
                ext: None,
                port: port.as_deref(),
            });
            devs[id] = Some(dev);
        }
        work
    }

    /// Deferred mode with one more device kept outside the fabric (`ext`,
    /// e.g. the device a [`crate::shm::ShmHost`] serves to QEMU): polls
    /// `ext` with this fabric's devices as its peers, then every device of
    /// the fabric with `ext` among theirs, so frames cross between them on
    /// the same wire. Frames waiting at the fabric's port
    /// ([`Fabric::attach_port`]) are handled first, `ext` among the devices
    /// they may be for. The devices of the fabric must be in
    /// [`crate::Mode::Deferred`] too (an immediate-mode doorbell is served
    /// inside the register write, where `ext` is out of reach). Returns
    /// whether any device did work.
    pub fn poll_joined(&self, ext: &mut Device) -> bool {
        // frames from the port first, for the fabric's devices and `ext`
        let mut work = self.pump_port_with(Some(&mut *ext)) > 0;
        let port = self.port();
        let mut devs = self.lock();
        work |=
            ext.poll_with(&mut FabricPeers { devs: &mut devs, ext: None, port: port.as_deref() });
        for id in 0..devs.len() {
            let Some(mut dev) = devs.get_mut(id).and_then(Option::take) else { continue };
            work |= dev.poll_with(&mut FabricPeers {
                devs: &mut devs,
                ext: Some(&mut *ext),
                port: port.as_deref(),
            });
            devs[id] = Some(dev);
        }
        work
    }

    /// Starts a device thread that polls every device (use with
    /// [`crate::Mode::Deferred`]): spins while there is work, then sleeps
    /// `idle` between polls. Stops when the handle is dropped.
    pub fn spawn_device_thread(self: &Arc<Self>, idle: std::time::Duration) -> DeviceThread {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (f, s) = (self.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Acquire) {
                if !f.poll() {
                    std::thread::sleep(idle);
                }
            }
        });
        DeviceThread { stop, handle: Some(handle) }
    }
}

/// A running device thread; dropping it stops and joins the thread.
#[derive(Debug)]
pub struct DeviceThread {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Drop for DeviceThread {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
