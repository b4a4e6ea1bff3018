#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# kernel-crate/guest/gmsd.sh — one guest and a host `gmsd` in one GMS cluster
# (`cargo xtask vm gmsd-test`): the guest is node 0, the host daemon node 1 on the same
# UDP link, both speaking the GMS heartbeat. The guest loads trapeze.ko with
# gms_nodes=0,1 and /dev/gms0 on GMS (its only putpage target is the daemon), writes
# PAGES 4 KiB pages with O_DIRECT, reads them back and compares (page by page, then all
# in one request: the daemon answers `GETPAGES`, gathering up to eight), then prints
# "trapeze-gmsd: WRITTEN" and stays a member for HOLD seconds while xtask checks the
# daemon (`gms stat`: pages held; `gms get` of a page the guest wrote, page id
# (0x6d736730 = "gms0", disk page)). Page p holds the 32-byte line
# "trapeze-gmsd page %05d -------\n" 128 times; xtask builds the same bytes.
tag=trapeze-gmsd
. /etc/trapeze/lib.sh
ko=/lib/modules/trapeze.ko
dev=/dev/gms0
PAGES=16
HOLD=40
page() { # page P into file F
    printf 'trapeze-gmsd page %05d -------\n' "$1" > /tmp/l
    for _ in 1 2 3 4 5 6 7; do cat /tmp/l /tmp/l > /tmp/l2 && mv /tmp/l2 /tmp/l; done
    mv /tmp/l "$2"
}
insmod "$ko" node=0 gms_nodes=0,1 gms_budget_pages=64 gms_disk_pages=256 || { fail insmod; finish; exit 1; }
[ -b "$dev" ] || { fail "no $dev"; rmmod trapeze; finish; exit 1; }
# The daemon must have been heard (heartbeats) before puts can go there: retry the first.
page 0 /tmp/p0
t=0
until dd if=/tmp/p0 of="$dev" bs=4k seek=0 count=1 oflag=direct conv=notrunc 2>/dev/null; do
    t=$((t + 1)); [ "$t" -ge 30 ] && break; sleep 2
done
check "first page stored on the host gmsd (after $t retries)" [ "$t" -lt 30 ]
ok=1
p=1
while [ "$p" -lt "$PAGES" ]; do
    page "$p" /tmp/p
    dd if=/tmp/p of="$dev" bs=4k seek="$p" count=1 oflag=direct conv=notrunc 2>/dev/null || { ok=0; say "write of page $p failed"; }
    p=$((p + 1))
done
check "$PAGES pages written through the host gmsd" [ "$ok" = 1 ]
ok=1
p=0
while [ "$p" -lt "$PAGES" ]; do
    page "$p" /tmp/p
    dd if="$dev" of=/tmp/r bs=4k skip="$p" count=1 iflag=direct 2>/dev/null && cmp -s /tmp/p /tmp/r || { ok=0; say "page $p read back wrong or failed"; }
    p=$((p + 1))
done
check "$PAGES pages read back from the host gmsd, every byte" [ "$ok" = 1 ]
# All of them in one request.
: > /tmp/all
p=0
while [ "$p" -lt "$PAGES" ]; do page "$p" /tmp/p; cat /tmp/p >> /tmp/all; p=$((p + 1)); done
dd if="$dev" of=/tmp/r bs=$((PAGES * 4))k count=1 iflag=direct 2>/dev/null && cmp -s /tmp/all /tmp/r
same=$?
ok=0
[ "$same" = 0 ] && ok=1
check "$PAGES pages read back in one request" [ "$ok" = 1 ]
say "WRITTEN $PAGES"
sleep "$HOLD"
# The driver counts the GMS heartbeats it accepted; here only the daemon sends any.
hb=$(cat /sys/module/trapeze/parameters/stats | sed -n 's/^heartbeats: *//p' | head -1)
check "the host gmsd's heartbeats accepted by the kernel node (${hb:-none})" [ "${hb:-0}" -gt 0 ]
check "rmmod" rmmod trapeze
finish
exit "$fails"
