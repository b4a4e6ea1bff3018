#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# kernel-crate/guest/bigdisk.sh — a large /dev/gms0, `cargo xtask vm big-disk` (a stage of
# `cargo xtask test`). Three guests, GMS members 0,1,2, with gms_fail_ms=10000:
#
# * B (guest 1) and C (guest 2) are servers with budgets of $server_mb MiB each
#   (gms_budget_mb: 256 MiB and a quarter to spare, in page-sized frames). Each unloads once it
#   has declared A failed (A unloaded), bounded.
# * A (guest 0) loads trapeze.ko with a $disk_mb MiB /dev/gms0 on the GMS backend, one copy
#   of each page (so B and C hold half each), and runs trapeze-blkbench over all of it:
#   a seeded pattern written to every page with O_DIRECT, random 4 KiB reads and one
#   sequential read of the whole device, every page read checked against the pattern.
#   Checks: the bench exits 0 with every page verified; the servers stored pages (the
#   disk's counters); no page error or timeout; dmesg quiet; `rmmod` clean with 0 errors.
#   Then A loads again with a $full_mb MiB disk, more than B and C hold together: the
#   first load's pages read back as it wrote them (the new load finds them, version and
#   holder), 8 MiB written over them read back as the new data (a reloaded writer's
#   writes are not taken for the old copies), and filling the disk fails with ENOSPC
#   ("No space left on device"), not an I/O error.
# Lines for the host start with "trapeze-big:"; checks print PASS or FAIL, and the total
# "N passed, M failed". Every wait is bounded.

tag=trapeze-big
. /etc/trapeze/lib.sh
k=${trapeze_guest:-0}
ko=/lib/modules/trapeze.ko
members=0,1,2
fail_ms=10000
disk_mb=512
disk_pages=$((disk_mb * 256))
full_mb=1024
full_pages=$((full_mb * 256))
server_mb=320
dev=/dev/gms0
TROUBLE='I/O error|Out of memory|oom-kill|Killed process|blocked for more than|Oops|BUG:|WARNING:|Call Trace'

if [ "$k" != 0 ]; then
    insmod "$ko" node="$k" gms_nodes="$members" gms_budget_mb="$server_mb" gms_fail_ms="$fail_ms" ||
        { say "insmod failed"; exit 1; }
    say "node $k: serving, budget $server_mb MiB"
    wait_gone 0 6000
    say "node $k: node 0 gone after $((t / 10)) s; $(grep -E 'MemTotal|MemFree' /proc/meminfo | tr -s ' \n' ' ')"
    rmmod trapeze || { say "rmmod failed"; exit 1; }
    say "node $k: rmmod trapeze done"
    exit 0
fi

insmod "$ko" node=0 gms_nodes="$members" gms_fail_ms="$fail_ms" gms_disk_pages="$disk_pages" gms_replicas=1 ||
    { say "FAIL insmod"; say "0 passed, 1 failed"; exit 1; }
check "module loaded, $dev on GMS: $disk_mb MiB ($disk_pages pages), one copy each" [ -b "$dev" ]
[ -b "$dev" ] || { finish; rmmod trapeze; exit 1; }
check "$dev is $disk_mb MiB" [ "$(blockdev --getsize64 "$dev")" = $((disk_mb << 20)) ]

head -c 8192 /dev/urandom > /tmp/w
up=no
t=0
while [ "$t" -lt 90 ]; do
    if dd if=/tmp/w of="$dev" bs=4096 seek=$((disk_pages - 2)) count=2 oflag=direct 2>/dev/null; then up=yes; break; fi
    sleep 1
    t=$((t + 1))
done
check "servers B and C store pages (after $t s)" [ "$up" = yes ]

t0=$(date +%s)
trapeze-blkbench --name big --write --reads 1000 --seed 7 "$dev" > /tmp/bench.out 2>&1
rc=$?
secs=$(($(date +%s) - t0))
sed 's/^/trapeze-big: | /' /tmp/bench.out
verified=$(sed -n 's/.*"pages_verified":\([0-9]*\).*/\1/p' /tmp/bench.out)
all_verified() { [ "$rc" = 0 ] && [ "${verified:-0}" -ge "$disk_pages" ]; }
check "every page written and read back as written: exit status $rc, ${verified:-no} pages verified (in $secs s)" \
    all_verified
written=$(stat_of pages_written)
check "pages stored on the servers ($written written)" [ "$written" -ge "$disk_pages" ]
no_errors() { [ "$(stat_of page_errors)" = 0 ] && [ "$(stat_of timeouts)" = 0 ]; }
check "no page errors or timeouts on $dev (page_errors $(stat_of page_errors), timeouts $(stat_of timeouts))" no_errors

dmesg | grep -E "$TROUBLE" > /tmp/trouble
check "dmesg: no I/O error, OOM kill, oops or hung task ($(wc -l < /tmp/trouble) lines)" [ ! -s /tmp/trouble ]
sed 's/^/trapeze-big: dmesg: /' /tmp/trouble | head -20

rmmod trapeze
rc=$?
unload=$(dmesg | grep "/dev/gms0 on GMS:" | tail -1)
say "unload: ${unload#*] }"
zero_errors() { [ "$rc" = 0 ] && echo "$unload" | grep -q " 0 errors"; }
check "rmmod trapeze clean, 0 errors at unload" zero_errors

# --- reloaded, and the cluster full -------------------------------------------------
# B and C still hold the pages the first load wrote (versions of that load). A loads again
# with a disk larger than both budgets together, reading ahead of sequential reads.
insmod "$ko" node=0 gms_nodes="$members" gms_fail_ms="$fail_ms" gms_disk_pages="$full_pages" gms_replicas=1 \
    gms_disk_readahead=16 ||
    { fail "insmod again ($full_mb MiB disk)"; finish; exit 1; }
check "module loaded again, $dev on GMS: $full_mb MiB, more than the servers' budgets together" [ -b "$dev" ]
t=0
while [ "$t" -lt 60 ] && ! trapeze-blkbench --name again --size-mb 16 --reads 100 --seed 7 "$dev" > /tmp/again.out 2>&1; do
    sleep 1
    t=$((t + 1))
done
sed 's/^/trapeze-big: | /' /tmp/again.out
again=$(sed -n 's/.*"pages_verified":\([0-9]*\).*/\1/p' /tmp/again.out)
check "after the reload, the first load's first 16 MiB read back as it wrote them (${again:-no} pages verified)" \
    [ "${again:-0}" -ge 4096 ]
ahead=$(sed -n 's/^disk_read_ahead: *//p' /sys/module/trapeze/parameters/stats | head -1)
hits=$(sed -n 's/^disk_read_ahead_hits: *//p' /sys/module/trapeze/parameters/stats | head -1)
check "read-ahead on (gms_disk_readahead=16): ${hits:-no} sequential reads served by ${ahead:-no} pages read ahead" \
    [ "${hits:-0}" -gt 0 ]
head -c $((8 << 20)) /dev/urandom > /tmp/new
t=0
while ! dd if=/tmp/new of="$dev" bs=256k count=32 oflag=direct 2>/dev/null && [ "$t" -lt 60 ]; do
    sleep 1
    t=$((t + 1))
done
dd if="$dev" of=/tmp/back bs=256k count=32 iflag=direct 2>/dev/null
check "after the reload, 8 MiB written over the first load's pages read back as the new data" cmp -s /tmp/new /tmp/back
t0=$(date +%s)
timeout 300 dd if=/dev/zero of="$dev" bs=256k oflag=direct 2>/tmp/dd.err
secs=$(($(date +%s) - t0))
say "filling $dev: $(tr '\n' ' ' < /tmp/dd.err)"
# 256 KiB records written (busybox dd: "N+0 records out").
blocks=$(sed -n 's/^\([0-9]*\)+[0-9]* records out.*/\1/p' /tmp/dd.err)
full_reported() {
    grep -q "No space left on device" /tmp/dd.err && [ "${blocks:-0}" -gt 0 ] && [ "$blocks" -lt $((full_mb * 4)) ] &&
        dmesg | grep -q "critical space allocation error, dev gms0"
}
check "writing past the servers' room fails with ENOSPC (BLK_STS_NOSPC), not EIO, before the disk's end ($((${blocks:-0} / 4)) MiB written, $secs s)" \
    full_reported
rmmod trapeze
rc=$?
unload=$(dmesg | grep "/dev/gms0 on GMS:" | tail -1)
say "unload: ${unload#*] }"
check "rmmod trapeze clean after the cluster filled" [ "$rc" = 0 ]
finish
[ "$fails" = 0 ]
