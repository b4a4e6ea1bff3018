#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# kernel-crate/guest/lib.sh — what the guest scripts share, at /etc/trapeze/lib.sh in every
# initramfs `cargo xtask vm` packs. A script sets `tag` (the prefix of its console lines,
# which the host's parsers look for) and sources this file:
#
#     tag=trapeze-suite
#     . /etc/trapeze/lib.sh
#
# Checks print "<tag>: PASS what" or "<tag>: FAIL what"; `finish` prints the totals,
# "<tag>: N passed, M failed", which the host reads as the script's verdict.

say() { echo "${tag:?set tag before sourcing lib.sh}: $*"; }
passes=0
fails=0
pass() { say "PASS $*"; passes=$((passes + 1)); }
fail() { say "FAIL $*"; fails=$((fails + 1)); }
# check WHAT CMD...: PASS if CMD succeeds, else FAIL; CMD's verdict is check's status.
check() { what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; return 1; fi; }
finish() { say "$passes passed, $fails failed"; }
# One of /dev/gms0's counters (/sys/module/trapeze/parameters/gms_disk_stats), 0 if absent.
stat_of() { v=$(sed -n "s/^$1: //p" /sys/module/trapeze/parameters/gms_disk_stats 2>/dev/null); echo "${v:-0}"; }
# One of the module's counters (/sys/module/trapeze/parameters/stats), 0 if absent.
tstat() { v=$(sed -n "s/^$1: //p" /sys/module/trapeze/parameters/stats 2>/dev/null); echo "${v:-0}"; }
# Whether the kernel log shows $1.
logged() { dmesg | grep -q "$1"; }
# Wait until the kernel log shows $1, at most $2 tenths of a second.
wait_logged() { t=0; while ! logged "$1" && [ "$t" -lt "$2" ]; do sleep 0.1; t=$((t + 1)); done; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# Node $1 is gone for now: its last liveness line is its failure, not its return.
gone() { dmesg | grep -E "gms: node $1 (silent|is back)" | tail -1 | grep -q silent; }
# Wait until node $1 is gone and has stayed gone for 10 s, at most $2 tenths of a second
# (t: tenths waited). A member declared failed on a busy host while it runs (its guest
# starved of CPU for the failure timeout) is back within that: a server must not take
# that for the end of the run.
wait_gone() {
    t=0
    q=0
    while [ "$q" -lt 100 ] && [ "$t" -lt "$2" ]; do
        if gone "$1"; then q=$((q + 1)); else q=0; fi
        sleep 0.1
        t=$((t + 1))
    done
}

# user_net_up: lo, and eth0 (virtio-net on QEMU's user-mode network) as 10.0.2.15, where
# the host's 127.0.0.1 is 10.0.2.2; a FAIL line and false when eth0 will not come up.
user_net_up() {
    ip link set lo up
    if ! ip link set eth0 up || ! ip addr add 10.0.2.15/24 dev eth0; then
        fail "eth0 (virtio-net, QEMU user network) is up as 10.0.2.15"; return 1
    fi
}

# nbd_connect DEV PORT [EXPORT]: Debian's nbd-client (copied into the initramfs) connects
# DEV to the host's 10.0.2.2:PORT, tried for 30 s; false if it never did. Its output is
# in /tmp/nbd-client.log for the caller's check line.
nbd_connect() {
    nbd_tries=0
    until /usr/sbin/nbd-client 10.0.2.2 "$2" "$1" -b 4096 -t 30 -N "${3:-}" >/tmp/nbd-client.log 2>&1; do
        nbd_tries=$((nbd_tries + 1))
        [ "$nbd_tries" -ge 60 ] && return 1
        sleep 0.5
    done
}
