// SPDX-License-Identifier: GPL-2.0-only
//! The UDP and TCP loopback baselines: blocking and busy-polled sockets.

use super::*;

/// The latencies (ns) of `n` UDP loopback round trips (16 B request, 8 KB reply), the ends
/// placed by `place`, blocking or busy-polled (`spin`).
pub(crate) fn udp_baseline(n: u32, spin: bool, place: Placement) -> anyhow::Result<Vec<u64>> {
    socket_baseline(SocketPair::udp(spin, place)?, n, place)
}

/// The same over TCP loopback (NODELAY).
pub(crate) fn tcp_baseline(n: u32, spin: bool, place: Placement) -> anyhow::Result<Vec<u64>> {
    socket_baseline(SocketPair::tcp(spin, place)?, n, place)
}

pub(crate) fn socket_baseline(mut pair: SocketPair, n: u32, place: Placement) -> anyhow::Result<Vec<u64>> {
    let lat = place.pin(false).and_then(|()| pair.latencies(n));
    let unpinned = Placement::unpin();
    let closed = pair.close();
    let lat = lat?;
    unpinned?;
    closed?;
    Ok(lat)
}

/// A loopback socket pair for the baselines: its server end, on a thread of its own
/// placed by `place`, answers each 16 B request with 8 KB; the client end is the
/// caller's. Blocking sockets, or non-blocking ones both ends busy-poll (`spin`).
pub(crate) struct SocketPair {
    pub(crate) client: SocketClient,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) server: std::thread::JoinHandle<std::io::Result<()>>,
    pub(crate) buf: Vec<u8>,
}

pub(crate) enum SocketClient {
    Udp { socket: UdpSocket, server: std::net::SocketAddr },
    Tcp(TcpStream),
}

/// Retry an operation on a non-blocking socket until it stops saying "would block".
pub(crate) fn spin_io<T>(mut f: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            r => return r,
        }
    }
}

impl SocketPair {
    pub(crate) fn udp(spin: bool, place: Placement) -> anyhow::Result<Self> {
        let srv = UdpSocket::bind("127.0.0.1:0")?;
        let socket = UdpSocket::bind("127.0.0.1:0")?;
        let server = srv.local_addr()?;
        srv.set_nonblocking(spin)?;
        socket.set_nonblocking(spin)?;
        // Blocking, the server wakes now and then to see `stop`.
        srv.set_read_timeout(Some(Duration::from_millis(50)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::spawn(move || {
            let _ = place.pin(true);
            let mut buf = [0u8; 64];
            let reply = vec![0x5Au8; 8192];
            let mut idle = 0u32;
            while !st.load(Ordering::Relaxed) {
                match srv.recv_from(&mut buf) {
                    Ok((_, from)) => {
                        idle = 0;
                        let _ = srv.send_to(&reply, from);
                    }
                    // Busy-polled, it yields only after as many empty passes as NetRPC's
                    // server thread spins (a yield per empty poll made every look a
                    // second system call, slowing the echo); blocking, the 50 ms read
                    // timeout ran out.
                    Err(_) => {
                        idle += 1;
                        if !spin || idle >= SPIN_PASSES {
                            idle = 0;
                            std::thread::yield_now();
                        }
                    }
                }
            }
            Ok(())
        });
        Ok(SocketPair { client: SocketClient::Udp { socket, server }, stop, server: thread, buf: vec![0; 9000] })
    }

    pub(crate) fn tcp(spin: bool, place: Placement) -> anyhow::Result<Self> {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let addr = l.local_addr()?;
        let thread = std::thread::spawn(move || -> std::io::Result<()> {
            let _ = place.pin(true);
            let (mut s, _) = l.accept()?;
            s.set_nodelay(true)?;
            s.set_nonblocking(spin)?;
            let reply = vec![0x5Au8; 8192];
            let mut buf = [0u8; 16];
            loop {
                let mut got = 0;
                while got < 16 {
                    match spin_io(|| s.read(&mut buf[got..]))? {
                        // The client closed: done.
                        0 => return Ok(()),
                        k => got += k,
                    }
                }
                let mut off = 0;
                while off < reply.len() {
                    off += spin_io(|| s.write(&reply[off..]))?;
                }
            }
        });
        let c = TcpStream::connect(addr)?;
        c.set_nodelay(true)?;
        c.set_nonblocking(spin)?;
        Ok(SocketPair {
            client: SocketClient::Tcp(c),
            stop: Arc::new(AtomicBool::new(false)),
            server: thread,
            buf: vec![0; 8192],
        })
    }

    /// `n` round trips from the calling thread: their latencies (ns).
    pub(crate) fn latencies(&mut self, n: u32) -> anyhow::Result<Vec<u64>> {
        let mut lat = Vec::with_capacity(n as usize);
        let buf = &mut self.buf;
        for _ in 0..n {
            let t0 = Instant::now();
            match &mut self.client {
                SocketClient::Udp { socket, server } => {
                    spin_io(|| socket.send_to(&[1u8; 16], *server))?;
                    // Anything but a whole reply (a stray datagram) is skipped.
                    while spin_io(|| socket.recv(buf))? != 8192 {}
                }
                SocketClient::Tcp(c) => {
                    let mut off = 0;
                    while off < 16 {
                        off += spin_io(|| c.write(&[1u8; 16][off..]))?;
                    }
                    let mut got = 0;
                    while got < 8192 {
                        match spin_io(|| c.read(&mut buf[got..8192]))? {
                            0 => anyhow::bail!("tcp server closed"),
                            k => got += k,
                        }
                    }
                }
            }
            lat.push(t0.elapsed().as_nanos() as u64);
        }
        Ok(lat)
    }

    /// Stop the server end and wait for it.
    pub(crate) fn close(self) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        // A TCP server ends when the client end closes.
        drop(self.client);
        self.server.join().map_err(|_| anyhow::anyhow!("socket server panicked"))?.context("socket server")
    }
}
