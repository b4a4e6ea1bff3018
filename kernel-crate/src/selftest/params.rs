// SPDX-License-Identifier: GPL-2.0-only
//! The self-tests' module parameters (`ping_peer=`, `ping_bytes=`, `echo_peer=`,
//! `gms_test_pages=`, `unload_inflight=`), in a `__param` table of their own.

use crate::sys::param::{int_entry, modinfo, param_table, IntParam};

/// `ping_peer=`: if >= 0, ping that node with a payload at load and check the pong.
pub(crate) static PING_PEER: IntParam = IntParam::new(-1);
/// `ping_bytes=`: payload bytes of that ping (1 ..= the frame size).
pub(super) static PING_BYTES: IntParam = IntParam::new(4096);
/// `echo_peer=`: if >= 0, make NetRPC echo calls to that node at load (2-way wait, then
/// nonblocking with a continuation) and check the replies.
pub(super) static ECHO_PEER: IntParam = IntParam::new(-1);
/// `gms_test_pages=`: if > 0, put that many pages into the other members' memory at load,
/// get them back and check every byte.
pub(super) static GMS_TEST_PAGES: IntParam = IntParam::new(0);
/// `unload_inflight=`: at the end of probe, leave that many nonblocking echo calls in
/// flight to a node that does not answer (the rmmod test: they must fail cleanly).
pub(super) static UNLOAD_INFLIGHT: IntParam = IntParam::new(0);

param_table!(PARAMS: 5 = [
    int_entry(c"ping_peer", &PING_PEER, &crate::THIS_MODULE),
    int_entry(c"ping_bytes", &PING_BYTES, &crate::THIS_MODULE),
    int_entry(c"echo_peer", &ECHO_PEER, &crate::THIS_MODULE),
    int_entry(c"gms_test_pages", &GMS_TEST_PAGES, &crate::THIS_MODULE),
    int_entry(c"unload_inflight", &UNLOAD_INFLIGHT, &crate::THIS_MODULE),
]);

modinfo!(PARMTYPE_PING_PEER, "parmtype=ping_peer:int\0");
modinfo!(PARM_PING_PEER, "parm=ping_peer:if >= 0, ping this node at load and check the pong (default -1)\0");
modinfo!(PARMTYPE_PING_BYTES, "parmtype=ping_bytes:int\0");
modinfo!(PARM_PING_BYTES, "parm=ping_bytes:payload bytes of that ping (default 4096)\0");
modinfo!(PARMTYPE_ECHO_PEER, "parmtype=echo_peer:int\0");
modinfo!(PARM_ECHO_PEER, "parm=echo_peer:if >= 0, NetRPC echo calls to this node at load, checked (default -1)\0");
modinfo!(PARMTYPE_GMS_TEST, "parmtype=gms_test_pages:int\0");
modinfo!(PARM_GMS_TEST, "parm=gms_test_pages:if > 0, put and get back that many pages at load, checked (default 0)\0");
modinfo!(PARMTYPE_UNLOAD_INFLIGHT, "parmtype=unload_inflight:int\0");
modinfo!(
    PARM_UNLOAD_INFLIGHT,
    "parm=unload_inflight:leave that many echo calls to a silent node in flight (rmmod test)\0"
);
