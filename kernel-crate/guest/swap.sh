#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# kernel-crate/guest/swap.sh — swap on network memory, `cargo xtask vm swap` (a stage of
# `cargo xtask test`). Three guests, all GMS members 0,1,2, every one loaded with
# gms_fail_ms=10000 (a TCG guest busy swapping can be silent for seconds):
#
# * B (guest 1) and C (guest 2) are servers whose budgets hold A's whole disk with a
#   quarter to spare. Each unloads once it has declared A failed (A unloaded), bounded.
# * A (guest 0) loads trapeze.ko with /dev/gms0 on the GMS backend ($disk_pages pages),
#   waits until B and C store pages, then `mkswap /dev/gms0 && swapon /dev/gms0`, pins
#   all but $avail_mb MiB of its RAM in a ramfs (unevictable: the kernel cannot page it
#   out), and runs trapeze-memhog over 1.5x its MemAvailable: every page written with a
#   pattern of its index, re-read and checked in sequential and random order, rewritten
#   and checked again. Its pages must go to /dev/gms0 and come back. Before it, a
#   $keep_mb MiB file of random data goes into a tmpfs (shmem: swappable), with its md5sum.
#   Checks:
#   1. the workload exits 0 with every page verified and none wrong (not OOM-killed);
#   2. swap was used: /proc/swaps showed /dev/gms0 in use while it ran, and the disk's
#      counters (gms_disk_stats) show pages written to and read from GMS (the guest
#      kernel has no VM event counters, so /proc/vmstat has no pswpin/pswpout; where it
#      has them they must have grown too);
#   3. no page error or timeout on the disk;
#   4. `swapoff` (bounded) brings every page still swapped back — the tmpfs file's pages
#      among them — /proc/swaps is empty and the file's md5sum is unchanged;
#   5. dmesg shows no I/O error, swap read/write error, OOM kill, oops, BUG, WARNING or
#      hung task;
#   6. `rmmod` is clean, and its unload line "/dev/gms0 on GMS: … N errors, …" says
#      0 errors.
# Lines for the host start with "trapeze-swap:"; checks print PASS or FAIL, and the total
# "N passed, M failed". Every wait is bounded.

tag=trapeze-swap
. /etc/trapeze/lib.sh
k=${trapeze_guest:-0}
ko=/lib/modules/trapeze.ko
members=0,1,2
fail_ms=10000
# 56 MiB of swap; the two servers hold it with 1/7 to spare (8192 pages each).
disk_pages=14336
server_budget=8192
# MemAvailable left to A's workload once the ramfs pins the rest; the workload's multiple
# of it; the tmpfs file that must survive swap and swapoff. Every anonymous and tmpfs page
# (workload, file, the initramfs's own ~6 MiB) fits the disk with room to spare, even if
# each kept its swap slot: no OOM kill for want of swap.
avail_mb=28
ratio=1.5
keep_mb=4
dev=/dev/gms0
mem_kb() { sed -n "s/^$1: *\([0-9]*\) kB/\1/p" /proc/meminfo; }
# KiB of /dev/gms0 in use as swap (0 if not listed).
swap_used() { awk -v d="$dev" '$1 == d { print $4; f = 1 } END { if (!f) print 0 }' /proc/swaps; }
# Kernel lines that mean the swap path failed or the kernel is in trouble.
TROUBLE='I/O error|Write-error on swap|Read-error on swap|Out of memory|oom-kill|Killed process|blocked for more than|Oops|BUG:|WARNING:|Call Trace'

if [ "$k" != 0 ]; then
    insmod "$ko" node="$k" gms_nodes="$members" gms_budget_pages="$server_budget" gms_fail_ms="$fail_ms" ||
        { say "insmod failed"; exit 1; }
    say "node $k: serving, budget $server_budget pages"
    # A unloads at the end (silent for gms_fail_ms: declared failed here, and not back);
    # at most 400 s.
    wait_gone 0 4000
    say "node $k: node 0 gone after $((t / 10)) s; stats: $(tr '\n' ' ' < /sys/module/trapeze/parameters/stats)"
    rmmod trapeze || { say "rmmod failed"; exit 1; }
    say "node $k: rmmod trapeze done"
    exit 0
fi

# ---- guest A ----------------------------------------------------------------------
# One copy of each page: the servers' budgets hold the disk once.
insmod "$ko" node=0 gms_nodes="$members" gms_fail_ms="$fail_ms" gms_disk_pages="$disk_pages" gms_replicas=1 ||
    { say "FAIL insmod"; say "0 passed, 1 failed"; exit 1; }
check "module loaded, $dev on GMS ($disk_pages pages)" [ -b "$dev" ]
[ -b "$dev" ] || { finish; rmmod trapeze; exit 1; }

# Wait (90 s at most) until B and C store pages: a 2-page O_DIRECT write at the disk's end
# (mkswap rewrites the start) succeeds once both servers answer.
head -c 8192 /dev/urandom > /tmp/w
up=no
t=0
while [ "$t" -lt 90 ]; do
    if dd if=/tmp/w of="$dev" bs=4096 seek=$((disk_pages - 2)) count=2 oflag=direct 2>/dev/null; then up=yes; break; fi
    sleep 1
    t=$((t + 1))
done
check "servers B and C store pages (after $t s)" [ "$up" = yes ]

check "mkswap $dev" mkswap "$dev"
swapon "$dev" 2>/tmp/swapon.err || say "swapon: $(cat /tmp/swapon.err)"
check "swapon $dev" grep -q "^$dev " /proc/swaps
say "/proc/swaps: $(tail -n +2 /proc/swaps | tr -s ' \t' ' ' | tr '\n' ';')"

# A tmpfs file: its pages are swapped out with the workload's, and swapoff reads back
# what is still on the disk.
mkdir -p /keep
mount -t tmpfs tmpfs /keep
head -c $((keep_mb << 20)) /dev/urandom > /keep/data
md5sum /keep/data > /tmp/keep.md5
# pswpin/pswpout, if this kernel counts VM events (-1: it does not).
vmstat_of() { v=$(sed -n "s/^$1 //p" /proc/vmstat); echo "${v:--1}"; }
pswpout0=$(vmstat_of pswpout)
pswpin0=$(vmstat_of pswpin)

# Pin all but $avail_mb MiB of RAM in a ramfs: ramfs pages are never swapped, so what is
# left is what the workload competes for.
mkdir -p /balloon
mount -t ramfs ramfs /balloon
before=$(($(mem_kb MemAvailable) / 1024))
pin=$((before - avail_mb))
[ "$pin" -gt 0 ] && dd if=/dev/zero of=/balloon/pin bs=1M count="$pin" 2>/dev/null
after=$(($(mem_kb MemAvailable) / 1024))
say "RAM: MemTotal $(($(mem_kb MemTotal) / 1024)) MiB, MemAvailable $before MiB, $pin MiB pinned in ramfs, now $after MiB"

written0=$(stat_of pages_written)
read0=$(stat_of pages_read)

# The workload, bounded at 300 s; /proc/swaps sampled while it runs.
trapeze-memhog --ratio "$ratio" > /tmp/memhog.out 2>&1 &
pid=$!
peak=0
t=0
while kill -0 "$pid" 2>/dev/null && [ "$t" -lt 600 ]; do
    u=$(swap_used)
    [ "$u" -gt "$peak" ] && peak=$u
    sleep 0.5
    t=$((t + 1))
done
if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid"
    say "trapeze-memhog still running after 300 s: killed"
fi
wait "$pid"
rc=$?
sed 's/^/trapeze-swap: | /' /tmp/memhog.out
verified=$(sed -n 's/.*"pages_verified":\([0-9]*\).*/\1/p' /tmp/memhog.out)
workload_ok() { [ "$rc" = 0 ] && grep -q "pages verified, 0 wrong" /tmp/memhog.out; }
check "workload over ${ratio}x MemAvailable: exit status $rc, ${verified:-no} pages verified, 0 wrong (in $((t / 2)) s)" \
    workload_ok

written=$(($(stat_of pages_written) - written0))
readback=$(($(stat_of pages_read) - read0))
check "swap used: peak $((peak / 1024)) MiB of $dev in /proc/swaps" [ "$peak" -gt 4096 ]
both_ways() { [ "$written" -gt 1024 ] && [ "$readback" -gt 1024 ]; }
check "pages swapped out to GMS ($written written) and back in ($readback read)" both_ways
say "disk counters: $(tr '\n' ' ' < /sys/module/trapeze/parameters/gms_disk_stats)"
no_errors() { [ "$(stat_of page_errors)" = 0 ] && [ "$(stat_of timeouts)" = 0 ]; }
if [ "$pswpout0" = -1 ]; then
    say "/proc/vmstat has no pswpin/pswpout (CONFIG_VM_EVENT_COUNTERS off): the disk's counters above stand for them"
else
    vm_both() { [ "$(vmstat_of pswpout)" -gt "$pswpout0" ] && [ "$(vmstat_of pswpin)" -gt "$pswpin0" ]; }
    check "/proc/vmstat: pswpout $pswpout0 -> $(vmstat_of pswpout), pswpin $pswpin0 -> $(vmstat_of pswpin)" vm_both
fi
check "no page errors or timeouts on $dev (page_errors $(stat_of page_errors), timeouts $(stat_of timeouts))" no_errors

umount /balloon
left=$(swap_used)
swapoff_ok=no
timeout 120 swapoff "$dev" && swapoff_ok=yes
swap_gone() { [ "$left" -gt 0 ] && [ "$swapoff_ok" = yes ] && ! grep -q "^$dev " /proc/swaps; }
check "swapoff $dev ($((left / 1024)) MiB still swapped came back; /proc/swaps empty)" swap_gone
check "tmpfs file of $keep_mb MiB intact after swap and swapoff (md5sum)" md5sum -c -s /tmp/keep.md5
umount /keep

dmesg | grep -E "$TROUBLE" > /tmp/trouble
check "dmesg: no I/O error, swap error, OOM kill, oops or hung task ($(wc -l < /tmp/trouble) lines)" [ ! -s /tmp/trouble ]
sed 's/^/trapeze-swap: dmesg: /' /tmp/trouble | head -20
# What raised the first one (a warning's or allocation failure's header and its trace).
if [ -s /tmp/trouble ]; then
    dmesg | grep -E -m1 -B12 -A30 "$TROUBLE" | sed 's/^/trapeze-swap: dmesg context: /'
fi

rmmod trapeze
check "rmmod trapeze" [ ! -e /sys/module/trapeze ]
unload=$(dmesg | grep "/dev/gms0 on GMS:" | tail -1)
say "unload: ${unload:-no counters line}"
errors=$(echo "$unload" | sed -n 's/.* \([0-9]*\) errors, .*/\1/p')
check "disk counters at unload: ${errors:-no} errors" [ "$errors" = 0 ]
finish
[ "$fails" = 0 ]
