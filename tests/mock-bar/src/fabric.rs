//! Several devices joined by a wire, behind one lock.
//!
//! Every register access goes through the fabric, which hands the addressed
//! device access to the others for the duration of the access; a request to
//! another device's QP is answered before the doorbell write returns, so the
//! whole system stays deterministic.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::datapath::{Peers, Response};
use crate::device::Device;
use crate::wire::Capture;

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
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric").field("devices", &self.lock().len()).finish()
    }
}

struct FabricPeers<'a> {
    devs: &'a mut [Option<Device>],
}

impl Peers for FabricPeers<'_> {
    fn deliver(
        &mut self,
        ip: u32,
        qpn: u32,
        src_qpn: u32,
        frames: &[Vec<u8>],
    ) -> Option<(Response, Vec<Vec<u8>>)> {
        let d = self.devs.iter_mut().flatten().find(|d| d.owns(ip, qpn))?;
        d.receive(qpn, src_qpn, frames)
    }

    fn deliver_datagram(&mut self, frame: &[u8]) -> Option<bool> {
        self.devs.iter_mut().flatten().find_map(|d| d.receive_datagram(frame))
    }
}

/// The fabric's devices plus one device kept outside it (the QEMU-facing
/// device of a [`crate::shm::ShmHost`] joined with [`Fabric::poll_joined`]).
struct JoinedPeers<'a> {
    devs: &'a mut [Option<Device>],
    ext: Option<&'a mut Device>,
}

impl Peers for JoinedPeers<'_> {
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
        let ext = self.ext.as_deref_mut().filter(|d| d.owns(ip, qpn))?;
        ext.receive(qpn, src_qpn, frames)
    }

    fn deliver_datagram(&mut self, frame: &[u8]) -> Option<bool> {
        if let Some(r) = self.devs.iter_mut().flatten().find_map(|d| d.receive_datagram(frame)) {
            return Some(r);
        }
        self.ext.as_deref_mut()?.receive_datagram(frame)
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
        for d in self.lock().iter_mut().flatten() {
            d.set_capture(Some(c.clone()));
        }
        c
    }

    /// Records every frame any device of this fabric sends into `c` (an
    /// existing capture, e.g. the one of a joined shm host), from now on.
    pub fn record_into(&self, c: Capture) {
        *self.capture.lock().unwrap_or_else(|e| e.into_inner()) = Some(c.clone());
        for d in self.lock().iter_mut().flatten() {
            d.set_capture(Some(c.clone()));
        }
    }

    /// A register read on device `id` (all-ones for an unknown id).
    pub fn mmio_read32(&self, id: DeviceId, off: u32) -> u32 {
        self.with(id, |d| d.mmio_read32(off)).unwrap_or(u32::MAX)
    }

    /// A register write on device `id`; doorbells are fully processed,
    /// including the other devices' side of the wire, before this returns.
    pub fn mmio_write32(&self, id: DeviceId, off: u32, v: u32) {
        let mut devs = self.lock();
        let Some(mut dev) = devs.get_mut(id).and_then(Option::take) else { return };
        dev.mmio_write32_with(off, v, &mut FabricPeers { devs: &mut devs });
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
        let mut devs = self.lock();
        for id in 0..devs.len() {
            let Some(mut dev) = devs.get_mut(id).and_then(Option::take) else { continue };
            dev.step_with(&mut FabricPeers { devs: &mut devs });
            devs[id] = Some(dev);
        }
    }
}

impl Fabric {
    /// Deferred mode: polls every device once (see [`Device::poll`]).
    /// Returns whether any device did work.
    pub fn poll(&self) -> bool {
        let mut devs = self.lock();
        let mut work = false;
        for id in 0..devs.len() {
            let Some(mut dev) = devs.get_mut(id).and_then(Option::take) else { continue };
            work |= dev.poll_with(&mut FabricPeers { devs: &mut devs });
            devs[id] = Some(dev);
        }
        work
    }

    /// Deferred mode with one more device kept outside the fabric (`ext`,
    /// e.g. the device a [`crate::shm::ShmHost`] serves to QEMU): polls
    /// `ext` with this fabric's devices as its peers, then every device of
    /// the fabric with `ext` among theirs, so frames cross between them on
    /// the same wire. The devices of the fabric must be in
    /// [`crate::Mode::Deferred`] too (an immediate-mode doorbell is served
    /// inside the register write, where `ext` is out of reach). Returns
    /// whether any device did work.
    pub fn poll_joined(&self, ext: &mut Device) -> bool {
        let mut devs = self.lock();
        let mut work = ext.poll_with(&mut JoinedPeers { devs: &mut devs, ext: None });
        for id in 0..devs.len() {
            let Some(mut dev) = devs.get_mut(id).and_then(Option::take) else { continue };
            work |= dev.poll_with(&mut JoinedPeers { devs: &mut devs, ext: Some(&mut *ext) });
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
