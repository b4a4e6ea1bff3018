#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# kernel-crate/guest/gmsdisk.sh — /dev/gms0 on the GMS backend across guests, by hand:
#   cargo xtask module && cargo xtask vm run --guests 3 --module kernel-crate/trapeze.ko \
#       --script kernel-crate/guest/gmsdisk.sh --quiet --timeout 240
# Every guest loads trapeze.ko as a GMS member of 0..N-1. Guests other than 1 serve (store
# pages in their memory budget) for a while; guest 1 also creates /dev/gms0 (4 MiB on GMS:
# writes are putpages to the others, reads getpages) and checks: a never-written region
# reads as zeros; 2 MiB of random data written, caches dropped, read back (cmp, md5);
# O_DIRECT reads and writes, sequential 4 KiB reads served by read-ahead (depth 8); the last guest unloads early and must be declared failed (no
# answer within the timeout), after which writes and reads go on; then unloads. Lines for the host start with "trapeze-disk:".

say() { echo "trapeze-disk: $*"; }
k=${trapeze_guest:-0}
n=${trapeze_guests:-3}
ko=/lib/modules/trapeze.ko
members=$(seq -s, 0 $((n - 1)))
dev=/dev/gms0
fails=0
check() { what=$1; shift; if "$@"; then say "ok: $what"; else say "FAILED: $what"; fails=$((fails + 1)); fi; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
md5() { md5sum < "$1" | cut -d' ' -f1; }

if [ "$k" != 1 ]; then
    insmod "$ko" node="$k" gms_nodes="$members" gms_budget_pages=512 || { say "insmod failed"; exit 1; }
    # The last guest leaves early: the others must declare it failed and carry on.
    if [ "$k" = $((n - 1)) ]; then sleep 30; else sleep 50; fi
    rmmod trapeze || { say "rmmod failed"; exit 1; }
    exit 0
fi
sleep 3
insmod "$ko" node=1 gms_nodes="$members" gms_budget_pages=512 gms_disk_pages=1024 gms_disk_readahead=8 ||
    { say "insmod failed"; exit 1; }
[ -b "$dev" ] || { say "FAILED: no $dev"; rmmod trapeze; exit 1; }
head -c 65536 /dev/zero > /tmp/z
dd if="$dev" of=/tmp/r0 bs=64k count=1 skip=10 2>/dev/null
check "never-written 64 KiB reads as zeros" cmp -s /tmp/r0 /tmp/z
head -c 2097152 /dev/urandom > /tmp/pat
t0=$(cut -d' ' -f1 /proc/uptime)
dd if=/tmp/pat of="$dev" bs=256k conv=fsync 2>/dev/null
t1=$(cut -d' ' -f1 /proc/uptime)
drop_caches
dd if="$dev" of=/tmp/back bs=256k count=8 2>/dev/null
t2=$(cut -d' ' -f1 /proc/uptime)
say "2 MiB written in $(echo "$t1 - $t0" | bc 2>/dev/null || echo "$t0..$t1") s, read in $(echo "$t2 - $t1" | bc 2>/dev/null || echo "$t1..$t2") s"
check "2 MiB read back after drop_caches (md5 $(md5 /tmp/back))" cmp -s /tmp/pat /tmp/back
dd if="$dev" of=/tmp/d1 bs=64k skip=4 count=1 iflag=direct 2>/dev/null
dd if=/tmp/pat of=/tmp/e1 bs=64k skip=4 count=1 2>/dev/null
check "O_DIRECT 64 KiB read matches" cmp -s /tmp/d1 /tmp/e1
# Sequential 4 KiB O_DIRECT reads: read-ahead serves most of them from its cache.
dd if="$dev" of=/tmp/seq bs=4k count=256 iflag=direct 2>/dev/null
head -c 1048576 /tmp/pat > /tmp/seq_want
check "1 MiB of sequential 4 KiB O_DIRECT reads match" cmp -s /tmp/seq /tmp/seq_want
head -c 8192 /dev/urandom > /tmp/w
dd if=/tmp/w of="$dev" bs=4k seek=700 count=2 oflag=direct conv=notrunc 2>/dev/null
drop_caches
dd if="$dev" of=/tmp/w2 bs=4k skip=700 count=2 iflag=direct 2>/dev/null
check "O_DIRECT 2-page write reads back" cmp -s /tmp/w /tmp/w2
# Node N-1 unloads ~30 s after booting: wait for this node to declare it failed, then the
# disk must go on with the members left (pages stored there are lost: reads of them fail).
last=$((n - 1))
t=0
while ! dmesg | grep -q "gms: node $last silent" && [ "$t" -lt 300 ]; do sleep 0.1; t=$((t + 1)); done
check "node $last declared failed after it left" dmesg | grep -q "gms: node $last silent"
head -c 262144 /dev/urandom > /tmp/p2
dd if=/tmp/p2 of="$dev" bs=4k seek=800 count=64 oflag=direct conv=notrunc 2>/dev/null
drop_caches
dd if="$dev" of=/tmp/b2 bs=4k skip=800 count=64 iflag=direct 2>/dev/null
check "256 KiB written and read back after node $last failed" cmp -s /tmp/p2 /tmp/b2
say "disk stats: $(tr '\n' ' ' < /sys/module/trapeze/parameters/gms_disk_stats 2>/dev/null)"
cached=$(sed -n 's/^disk_read_ahead_hits: *//p' /sys/module/trapeze/parameters/stats | head -1)
rmmod trapeze || { say "rmmod failed"; exit 1; }
say "reads served by read-ahead: ${cached:-none}"
check "read-ahead served reads" [ "${cached:-0}" -gt 0 ]
say "done: $fails check(s) failed"
[ "$fails" = 0 ]
