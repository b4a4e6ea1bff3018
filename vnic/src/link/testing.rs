// SPDX-License-Identifier: GPL-2.0-only
//! Test support (feature `test-support`, and this crate's own unit tests): a link backend
//! that wraps another and changes only what a test needs.
//!
//! [`Wrap`] forwards every [`LinkBackend`] method to the backend it wraps; its [`Hooks`]
//! see each frame sent (to record or check it) and may take over the route lookup (to
//! act at the moment link out asks for it), the frame size, the medium's properties and
//! the description. Every hook does nothing or forwards by default, so a test writes
//! only the one or two it changes.

use super::LinkBackend;
use std::io;
use std::os::fd::BorrowedFd;

/// What a [`Wrap`] changes; unless overridden, each method that gets `inner` forwards
/// to it.
pub trait Hooks<B: LinkBackend>: Send {
    /// Sees every frame as it is sent to `dst`, by either send path (in place: once
    /// written), before the inner backend sends it.
    fn sending(&mut self, dst: u16, frame: &[u8]) {
        let _ = (dst, frame);
    }

    /// Sees every receive asked of the inner backend (either receive path), before it.
    fn receiving(&mut self) {}

    fn routes_to(&self, inner: &B, dst: u16) -> bool {
        inner.routes_to(dst)
    }

    fn max_frame_bytes(&self, inner: &B) -> usize {
        inner.max_frame_bytes()
    }

    /// `true` to present the medium as neither a memory medium nor one that checks its
    /// frames (as raw Ethernet), whatever the inner backend is: the link then keeps a
    /// CRC on every packet and believes no verdict.
    fn plain_medium(&self) -> bool {
        false
    }

    fn describe(&self, inner: &B) -> String {
        inner.describe()
    }
}

/// No hooks: the inner backend as it is.
impl<B: LinkBackend> Hooks<B> for () {}

/// A backend `inner` with `hooks` applied.
pub struct Wrap<B, H> {
    pub inner: B,
    pub hooks: H,
}

impl<B, H> Wrap<B, H> {
    pub fn new(inner: B, hooks: H) -> Self {
        Wrap { inner, hooks }
    }
}

impl<B: LinkBackend, H: Hooks<B>> LinkBackend for Wrap<B, H> {
    fn send_frame(&mut self, dst: u16, frame: &[u8]) -> io::Result<()> {
        self.hooks.sending(dst, frame);
        self.inner.send_frame(dst, frame)
    }
    fn try_recv_frame(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.hooks.receiving();
        self.inner.try_recv_frame(buf)
    }
    fn send_frame_with(
        &mut self,
        dst: u16,
        len: usize,
        align_at: usize,
        scratch: &mut [u8],
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> io::Result<()> {
        let hooks = &mut self.hooks;
        self.inner.send_frame_with(dst, len, align_at, scratch, &mut |frame| {
            fill(frame);
            hooks.sending(dst, frame);
        })
    }
    fn recv_frame_with(&mut self, scratch: &mut [u8], take: &mut dyn FnMut(&[u8])) -> io::Result<bool> {
        self.hooks.receiving();
        self.inner.recv_frame_with(scratch, take)
    }
    fn readable_fd(&self) -> Option<BorrowedFd<'_>> {
        self.inner.readable_fd()
    }
    fn max_frame_bytes(&self) -> usize {
        self.hooks.max_frame_bytes(&self.inner)
    }
    fn routes_to(&self, dst: u16) -> bool {
        self.hooks.routes_to(&self.inner, dst)
    }
    fn prepare_wait(&self) -> bool {
        self.inner.prepare_wait()
    }
    fn end_wait(&self) {
        self.inner.end_wait()
    }
    fn last_frame(&self) -> Option<&[u8]> {
        self.inner.last_frame()
    }
    fn keeps_last_frame(&self) -> bool {
        self.inner.keeps_last_frame()
    }
    fn frames_waiting(&mut self) -> bool {
        self.inner.frames_waiting()
    }
    fn is_memory_medium(&self) -> bool {
        !self.hooks.plain_medium() && self.inner.is_memory_medium()
    }
    fn checksums_frames(&self) -> bool {
        !self.hooks.plain_medium() && self.inner.checksums_frames()
    }
    fn looks_are_system_calls(&self) -> bool {
        self.inner.looks_are_system_calls()
    }
    fn foreign_frames(&self) -> u64 {
        self.inner.foreign_frames()
    }
    fn describe(&self) -> String {
        self.hooks.describe(&self.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::backend::InProcSwitch;

    /// Counts the frames sent and says it is plain.
    #[derive(Default)]
    struct Counted(Vec<(u16, usize)>);

    impl<B: LinkBackend> Hooks<B> for Counted {
        fn sending(&mut self, dst: u16, frame: &[u8]) {
            self.0.push((dst, frame.len()));
        }
        fn plain_medium(&self) -> bool {
            true
        }
    }

    #[test]
    fn forwards_all_but_the_hooks() {
        let sw = InProcSwitch::new();
        let mut a = Wrap::new(sw.port(1), Counted::default());
        let mut b = Wrap::new(sw.port(2), ());
        a.send_frame(2, b"frame").unwrap();
        a.send_frame_with(2, 3, 0, &mut [], &mut |f| f.copy_from_slice(b"abc")).unwrap();
        assert_eq!(a.hooks.0, [(2, 5), (2, 3)], "both send paths seen");
        let mut buf = [0u8; 16];
        assert_eq!(b.try_recv_frame(&mut buf).unwrap(), Some(5));
        assert_eq!(b.try_recv_frame(&mut buf).unwrap(), Some(3));
        assert_eq!(&buf[..3], b"abc");
        assert_eq!(b.try_recv_frame(&mut buf).unwrap(), None);
        assert!(b.is_memory_medium() && b.keeps_last_frame(), "no hooks: the port's own properties");
        assert!(!a.is_memory_medium() && !a.checksums_frames(), "a plain medium");
        assert_eq!(a.describe(), "inproc node 1");
        assert!(a.routes_to(2) && !a.routes_to(9));
    }
}
