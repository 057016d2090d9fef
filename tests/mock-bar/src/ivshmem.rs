//! The model process as the ivshmem server of a QEMU `ivshmem-doorbell`
//! device: MSI-X interrupts from the model into the guest (issue #31).
//!
//! Written from `shared/spec/interrupts.md` part B (QEMU's
//! docs/specs/ivshmem-spec.rst; hw/misc/ivshmem.c: ivshmem_recv_setup,
//! process_msg, ivshmem_vector_notify), layout 1 of B.6: one device, the
//! model is the server and hands QEMU the BAR file as the shared memory,
//! so BAR2 is the register file exactly as with `ivshmem-plain`, and BAR1
//! carries the MSI-X table.
//!
//! * **Transport** (B.4): a UNIX stream socket; QEMU connects as the client
//!   (`-chardev socket,path=…`). Every message is one little-endian `i64`,
//!   optionally with one fd as SCM_RIGHTS ancillary data.
//! * **Handshake** (B.4, in order): version 0; the client's id
//!   ([`GUEST_ID`]); −1 with the shared-memory fd; then the client's own id
//!   once per vector, each with a fresh eventfd (its vectors 0..N−1). No
//!   other peer is announced: the model needs no guest → model doorbell
//!   (it polls the BAR). QEMU reads the first three messages synchronously
//!   inside device realize, so [`Server::bind`] must happen before QEMU
//!   starts; [`Server::accept`] may run on another thread meanwhile.
//! * **Raising vector v** (B.5): write the 8-byte value 1 to the guest's
//!   eventfd of v; QEMU's main loop reads it and calls `msix_notify(v)`.
//!   Writes between two QEMU reads coalesce into one MSI, and an event
//!   while the guest has MSI-X disabled is lost (B.3), so interrupts the
//!   guest takes are ≤ signals. [`Doorbell::signal`] puts a Release fence
//!   before the write (A.11 item 7): the CQE and CEQE, written to the RAM
//!   file earlier, are visible before the interrupt can be.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{Ordering, fence};

/// The id the server gives its one client, the guest (B.4: the reference
/// server starts at 0; IVPosition then reads 0).
pub const GUEST_ID: i64 = 0;

/// Most vectors a device may ask for here (the guest's MSI-X table of an
/// `ivshmem-doorbell` has `vectors` entries; QEMU keeps 8 doorbell bits).
pub const MAX_VECTORS: u32 = 64;

/// A listening ivshmem server socket (removed on drop).
pub struct Server {
    listener: UnixListener,
    path: PathBuf,
}

/// The guest's eventfds, one per vector, after the handshake.
pub struct Doorbell {
    vectors: Vec<OwnedFd>,
    /// Kept open: QEMU treats a closed server connection as the server gone.
    _conn: UnixStream,
}

impl Server {
    /// Listens on `path` (a stale socket file there is replaced).
    pub fn bind(path: &Path) -> io::Result<Server> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        Ok(Server { listener, path: path.to_path_buf() })
    }

    /// Serves one client: waits for QEMU to connect and sends the
    /// handshake with `shm` as the shared memory and `vectors` eventfds.
    pub fn accept(&self, shm: &File, vectors: u32) -> io::Result<Doorbell> {
        if vectors == 0 || vectors > MAX_VECTORS {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "vectors not in 1..=64"));
        }
        let (conn, _) = self.listener.accept()?;
        send(&conn, 0, None)?;
        send(&conn, GUEST_ID, None)?;
        send(&conn, -1, Some(shm.as_raw_fd()))?;
        let mut fds = Vec::with_capacity(vectors as usize);
        for _ in 0..vectors {
            let fd = eventfd()?;
            send(&conn, GUEST_ID, Some(fd.as_raw_fd()))?;
            fds.push(fd);
        }
        Ok(Doorbell { vectors: fds, _conn: conn })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Doorbell {
    /// Number of vectors connected.
    pub fn vectors(&self) -> u32 {
        self.vectors.len() as u32
    }

    /// Raises vector `v` in the guest (after everything the interrupt
    /// announces is in guest memory). False: no such vector, or the write
    /// failed (the guest is gone).
    pub fn signal(&self, v: u32) -> bool {
        let Some(fd) = self.vectors.get(v as usize) else { return false };
        fence(Ordering::Release);
        let one = 1u64.to_ne_bytes();
        // SAFETY: `fd` is an open eventfd this value owns; the buffer is 8
        // readable bytes, the size an eventfd write takes.
        let n = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        n == 8
    }
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd(2) takes no pointers; the result is checked below.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by eventfd(2) and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends one message: `v` as a little-endian i64, with `fd` attached.
fn send(conn: &UnixStream, v: i64, fd: Option<RawFd>) -> io::Result<()> {
    let mut payload = v.to_le_bytes();
    let mut iov = libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: payload.len() };
    // Room for one cmsghdr carrying one int, aligned for cmsghdr.
    let mut control = [0u64; 4];
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    debug_assert!(space <= std::mem::size_of_val(&control));
    // SAFETY: msghdr is plain data; all-zero is a valid (empty) value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `control`, 32 bytes, 8-aligned, of
        // which `space` (≤ 32) are announced; CMSG_FIRSTHDR returns its
        // start (non-null since msg_controllen ≥ one header), and the one
        // int written at CMSG_DATA lies inside `space`.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
            libc::CMSG_DATA(c).cast::<RawFd>().write_unaligned(fd);
        }
    }
    // SAFETY: `msg` points at `iov` (8 bytes of `payload`) and `control`,
    // all alive for the call; the socket fd is open.
    let n = unsafe { libc::sendmsg(conn.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    match n {
        8 => Ok(()),
        n if n < 0 => Err(io::Error::last_os_error()),
        _ => Err(io::Error::new(io::ErrorKind::WriteZero, "short ivshmem message")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// The client side of the handshake, as QEMU's ivshmem_recv_msg reads
    /// it: one i64 and at most one fd per recvmsg.
    fn recv(conn: &UnixStream) -> (i64, Option<OwnedFd>) {
        let mut payload = [0u8; 8];
        let mut iov = libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: 8 };
        let mut control = [0u64; 4];
        // SAFETY: plain data, zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: the buffers outlive the call.
        let n = unsafe { libc::recvmsg(conn.as_raw_fd(), &mut msg, 0) };
        assert_eq!(n, 8);
        // SAFETY: the kernel filled `msg`; CMSG_FIRSTHDR checks the length.
        let fd = unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (!c.is_null() && (*c).cmsg_type == libc::SCM_RIGHTS)
                .then(|| OwnedFd::from_raw_fd(libc::CMSG_DATA(c).cast::<RawFd>().read_unaligned()))
        };
        (i64::from_le_bytes(payload), fd)
    }

    #[test]
    fn handshake_and_signal_as_qemu_sees_them() {
        let dir = std::env::temp_dir();
        let sock = dir.join(format!("mock-bar-ivshmem-test-{}", std::process::id()));
        let shm_path = dir.join(format!("mock-bar-ivshmem-shm-{}", std::process::id()));
        let shm =
            File::options().read(true).write(true).create(true).truncate(true).open(&shm_path);
        let shm = shm.unwrap();
        shm.set_len(4096).unwrap();
        let server = Server::bind(&sock).unwrap();
        let client = UnixStream::connect(&sock).unwrap();
        let db = server.accept(&shm, 3).unwrap();
        let _ = std::fs::remove_file(&shm_path);
        assert_eq!(recv(&client).0, 0, "version");
        assert_eq!(recv(&client).0, GUEST_ID, "own id");
        let (m, fd) = recv(&client);
        assert_eq!(m, -1);
        let shm_fd = File::from(fd.expect("shared memory fd"));
        assert_eq!(shm_fd.metadata().unwrap().len(), 4096);
        let mut evs: Vec<File> = (0..3)
            .map(|_| {
                let (id, fd) = recv(&client);
                assert_eq!(id, GUEST_ID);
                File::from(fd.expect("eventfd"))
            })
            .collect();
        assert_eq!(db.vectors(), 3);
        assert!(db.signal(2) && db.signal(2) && db.signal(0));
        assert!(!db.signal(3), "no vector 3");
        let mut b = [0u8; 8];
        evs[2].read_exact(&mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), 2, "two signals coalesce in the counter");
        evs[0].read_exact(&mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), 1);
        assert!(evs[1].read(&mut b).is_err(), "vector 1 was not signalled (EAGAIN)");
    }
}
