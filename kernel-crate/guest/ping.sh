#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# kernel-crate/guest/ping.sh — the guests' script under `cargo xtask vm module-test`
# (embedded as /etc/trapeze/run.sh; /init gives it trapeze_guest=K and trapeze_guests=N).
#
# 1. Ping: guest 0 loads trapeze.ko as node 0 and answers pings until every other guest's
#    ping was answered (bounded); every other guest K loads it as node K with ping_peer=0,
#    so its probe pings node 0 with a 4 KB payload and checks the pong byte for byte before
#    insmod returns. Then each prints its counters and unloads the module.
# With 3 guests or more (`vm module-test` boots 3 unless told --guests N), then:
# 2. NetRPC and GMS: guest 0 keeps the module it loaded in phase 1 as a GMS member of
#    0..N-1 (budget $budget pages), every other guest loads it again as one. Guest 0
#    answers echo calls and stores and serves pages; every other
#    guest's probe makes NetRPC echo calls to node 0 (blocking; nonblocking with the
#    continuation run in the receive path; nonblocking deferred to the work item), then
#    puts $pages pages into the other members' memory and gets each back, all checked
#    byte for byte. Guest 1 also gets /dev/gms0 on the GMS backend and checks it (a region
#    never written reads as zeros; 1 MiB written, caches dropped, read back with O_DIRECT).
#    Each stays up while the others may still use its memory, then unloads.
# 3. rmmod with requests in flight: every other guest loads the module with `unload_inflight=8`
#    (echo calls to silent node 1023, and getpages) and a `gms_nodes=` peer that never
#    starts (node 63: never heard, so not a member), and unloads at once: remove must fail
#    them cleanly.
# Exit status 0 only if every phase of this guest passed and every unload worked. Lines
# for the host start with "trapeze-test:".

say() { echo "trapeze-test: $*"; }
k=${trapeze_guest:-0}
n=${trapeze_guests:-2}
ko=/lib/modules/trapeze.ko
stats=/sys/module/trapeze/parameters/stats
count() { v=$(sed -n "s/^$1: //p" "$stats" 2>/dev/null); echo "${v:-0}"; }

pages=${trapeze_gms_pages:-32}
budget=${trapeze_gms_budget:-512}
members=$(seq -s, 0 $((n - 1)))
if [ "$k" = 0 ]; then
    # With 3 guests or more node 0 is loaded once for phases 1 and 2, as a GMS member.
    gms=""
    [ "$n" -ge 3 ] && gms="gms_nodes=$members gms_budget_pages=$budget"
    insmod "$ko" node=0 $gms || { say "insmod failed"; exit 1; }
    want=$((n - 1))
    t=0
    # Up to 90 s: the other guests boot, load the module and (re)try their pings.
    while [ "$(count pings_answered)" -lt "$want" ] && [ "$t" -lt 900 ]; do
        sleep 0.1
        t=$((t + 1))
    done
    got=$(count pings_answered)
    say "node 0 answered $got ping(s) of the $want guest(s) pinging it"
    [ "$got" -ge "$want" ]; ok=$?
else
    insmod "$ko" node="$k" ping_peer=0 || { say "insmod failed"; exit 1; }
    got=$(count pongs_ok)
    say "node $k: $got verified pong(s), $(count pongs_bad) bad"
    [ "$got" -ge 1 ]; ok=$?
fi
if [ "$k" != 0 ] || [ "$n" -lt 3 ]; then
    say "stats: $(tr '\n' ' ' < "$stats")"
    rmmod trapeze || { say "rmmod failed"; exit 1; }
    say "rmmod trapeze done"
fi
[ "$n" -ge 3 ] || exit $ok

# 2. NetRPC echo and GMS put/get.
passed() { dmesg | grep -q "$1"; }
if [ "$k" = 0 ]; then
    # Each other guest makes 1 + 16 blocking and 2 nonblocking echo calls (rpctest.rs).
    want=$((19 * (n - 1)))
    t=0
    while [ "$(count echo_served)" -lt "$want" ] && [ "$t" -lt 900 ]; do
        sleep 0.1
        t=$((t + 1))
    done
    got=$(count echo_served)
    say "node 0 answered $got of $want echo calls"
    [ "$got" -ge "$want" ] || ok=1
    # The others put and get their pages now (some stored here).
    sleep 25
else
    # Guest 1 also serves /dev/gms0 (4 MiB) from GMS memory on the others.
    disk=""
    [ "$k" = 1 ] && disk="gms_disk_pages=1024"
    insmod "$ko" node="$k" echo_peer=0 gms_nodes="$members" gms_budget_pages="$budget" \
        gms_test_pages="$pages" $disk || { say "insmod (rpc) failed"; exit 1; }
    passed "netrpc echo with node 0: PASSED" && e=passed || { e=FAILED; ok=1; }
    passed "gms test: PASSED" && g=passed || { g=FAILED; ok=1; }
    say "node $k: netrpc echo $e, gms put/get $g"
    if [ "$k" = 1 ]; then
        dev=/dev/gms0
        d=FAILED
        if [ -b "$dev" ]; then
            head -c 65536 /dev/zero > /tmp/z
            head -c 1048576 /dev/urandom > /tmp/pat
            dd if="$dev" of=/tmp/r0 bs=64k count=1 skip=40 2>/dev/null
            dd if=/tmp/pat of="$dev" bs=256k conv=fsync 2>/dev/null
            sync; echo 3 > /proc/sys/vm/drop_caches
            dd if="$dev" of=/tmp/back bs=256k count=4 iflag=direct 2>/dev/null
            cmp -s /tmp/r0 /tmp/z && cmp -s /tmp/pat /tmp/back && d=passed
        fi
        [ "$d" = passed ] || ok=1
        say "node 1: gms0 on GMS (zeros unwritten, 1 MiB written, read back O_DIRECT, md5 $(md5sum < /tmp/back | cut -c1-8)): $d"
    fi
    # Other guests may still be reading pages stored here.
    sleep 15
fi
say "stats: $(tr '\n' ' ' < "$stats")"
rmmod trapeze || { say "rmmod (rpc) failed"; exit 1; }
say "rmmod trapeze (rpc) done"
[ "$k" = 0 ] && exit $ok

# 3. Unload with calls and getpages in flight.
insmod "$ko" node="$k" gms_nodes="$members,63" unload_inflight=8 || { say "insmod (in flight) failed"; exit 1; }
rmmod trapeze || { say "rmmod (in flight) failed"; exit 1; }
passed "in flight at unload: failed (0 calls, 0 operations left)" && f=passed || { f=FAILED; ok=1; }
say "node $k: unload with requests in flight $f ($(dmesg | grep -c 'removed: NIC halted, frames freed') clean removes)"
exit $ok
