#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# kernel-crate/guest/suite.sh — the guest suite, `cargo xtask vm suite` (a stage of
# `cargo xtask test`). Four guests, all GMS members 0,1,2,3 (gms_nodes=0,1,2,3):
#
# * B (guest 1), C (guest 2) and D (guest 3) are servers: they load trapeze.ko with
#   budgets of 768 pages and store what A puts; A keeps two copies of every page
#   (gms_replicas=2) on two of them. C is SIGKILLed by the host mid-run (QEMU and its
#   NIC) when A prints "trapeze-suite: KILL node 2", and booted again (a new NIC and QEMU)
#   when A prints "trapeze-suite: RESTART node 2"; its second life serves as before. D is
#   SIGKILLed for good when A prints "trapeze-suite: KILL node 3". B and C unload once A
#   has gone silent (they declared node 0 failed: A unloaded), bounded.
# * A (guest 0) loads it with /dev/gms0 on the GMS backend ($disk_pages pages, two copies
#   of each, no module read-ahead: every read that reaches the disk is a getpage) and
#   checks:
#   1. the file system: mke2fs (ext2, 4 KiB blocks) on the first 3 MiB, mount, files of
#      random data (1 MiB, 512 KiB, 300 KiB and a small one), md5sums, sync, umount, drop
#      the kernel's caches (the module caches nothing), mount again, md5sums verified —
#      and the disk's counters show the pages were read from the disk, i.e. fetched from
#      B and C (the only place a written page exists);
#   2. replicas: every page A put so far is stored twice, on two of B, C and D, no write
#      had fewer copies, and puts were placed by the global LRU's plan;
#   3. 64 probe pages past the file system, written one at a time with O_DIRECT, read back
#      O_DIRECT and verified;
#   4. the failure case: A asks the host to kill C, with a reader looping over the probe
#      pages and a writer rewriting 32 other pages (new bytes each pass) in flight; C must
#      be declared failed (bounded), the reader and writer must end (no hang) with no
#      write error, the writer's last pass reads back intact, and each probe page is read
#      once (O_DIRECT, each read bounded by `timeout`): every one reads back correctly,
#      from its other copy where C's is gone (the reads that went on to the second
#      replica are counted), and re-replication copied at least the probe pages' replicas
#      C held to B or D, none failing;
#   5. restart: A asks the host to boot C again (node 2 with a new incarnation, its
#      memory empty); A must admit it again, put copies of new writes on it, and leave no
#      page short of a copy;
#   6. a second failure: A asks the host to kill D for good; no page had both copies on
#      C's first life and D, so none may fail: every probe and new page reads back at
#      once, D's replicas are re-made on B or C, and the file system still verifies;
#   7. unload: rmmod while a reader loops over the disk (rmmod is refused while the disk
#      is open, so it is retried until it lands between two reads; then the reader sees no
#      disk), then reload with a silent member and unload_inflight=8 (NetRPC echo calls
#      and getpages in flight) and rmmod at once: remove must fail them cleanly.
# Lines for the host start with "trapeze-suite:"; checks print PASS or FAIL, and the total
# "N passed, M failed". Every wait is bounded.

tag=trapeze-suite
. /etc/trapeze/lib.sh
k=${trapeze_guest:-0}
ko=/lib/modules/trapeze.ko
members=0,1,2,3
budget=512
# B, C and D hold the two copies of every page A writes (gms_replicas=2).
budget_of() { case $1 in 0) echo "$budget" ;; *) echo 768 ;; esac; }
replicas=2
disk_pages=1024
dev=/dev/gms0
now() { cut -d' ' -f1 /proc/uptime; }
# Whole seconds since $1 (a /proc/uptime reading).
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

if [ "$k" != 0 ]; then
    budget=$(budget_of "$k")
    insmod "$ko" node="$k" gms_nodes="$members" gms_budget_pages="$budget" || { say "insmod failed"; exit 1; }
    say "node $k: serving, budget $budget pages"
    # C is killed by the host long before this ends. B waits until A unloaded (A silent
    # for 3 s: declared failed here, and not back), at most 280 s.
    wait_gone 0 2800
    say "node $k: node 0 gone after $((t / 10)) s; stats: $(tr '\n' ' ' < /sys/module/trapeze/parameters/stats)"
    rmmod trapeze || { say "rmmod failed"; exit 1; }
    say "node $k: rmmod trapeze done"
    exit 0
fi

# ---- guest A ----------------------------------------------------------------------
insmod "$ko" node=0 gms_nodes="$members" gms_budget_pages="$budget" gms_disk_pages="$disk_pages" gms_replicas="$replicas" ||
    { say "FAIL insmod"; say "0 passed, 1 failed"; exit 1; }
check "module loaded, $dev on GMS ($disk_pages pages)" [ -b "$dev" ]
[ -b "$dev" ] || { say "$passes passed, $fails failed"; rmmod trapeze; exit 1; }

# Wait (60 s at most) until B and C store pages (a 2-page O_DIRECT write puts a page to
# each of them while no plan has been made: round robin); they load as A does.
head -c 8192 /dev/urandom > /tmp/w
t0=$(now)
up=no
for i in $(seq 1 60); do
    if dd if=/tmp/w of="$dev" bs=4k seek=1020 count=2 oflag=direct conv=notrunc 2>/dev/null &&
        dd if=/tmp/w of="$dev" bs=4k seek=1022 count=2 oflag=direct conv=notrunc 2>/dev/null; then
        up=yes
        break
    fi
    sleep 1
done
check "servers B and C store pages (after $(since "$t0") s)" [ "$up" = yes ]

# 1. ext2 on the first 3 MiB.
fsk=3072
mkdir -p /mnt
if mke2fs -F -b 4096 -i 65536 -m 0 "$dev" "$fsk" > /tmp/mkfs.log 2>&1; then
    pass "mke2fs: ext2, 4 KiB blocks, $fsk KiB on $dev"
else
    fail "mke2fs: $(tail -1 /tmp/mkfs.log)"
fi
mounted=no
mount -t ext2 "$dev" /mnt && mounted=yes
check "mount -t ext2 $dev /mnt" [ "$mounted" = yes ]
if [ "$mounted" = yes ]; then
    head -c 1048576 /dev/urandom > /mnt/a
    head -c 524288 /dev/urandom > /mnt/b
    mkdir -p /mnt/d
    head -c 307200 /dev/urandom > /mnt/d/c
    echo "trapeze guest suite $(now)" > /mnt/d/small
    (cd /mnt && md5sum a b d/c d/small > /tmp/sums)
    sync
    umount /mnt && mounted=no
    check "files written (1 MiB, 512 KiB, 300 KiB, small), synced, unmounted" [ "$mounted" = no ]
    sync
    echo 3 > /proc/sys/vm/drop_caches
    r0=$(stat_of pages_read)
    mount -t ext2 -o ro "$dev" /mnt && mounted=yes
    if [ "$mounted" = yes ] && (cd /mnt && md5sum -c /tmp/sums > /tmp/sums.out 2>&1); then
        got=$(( $(stat_of pages_read) - r0 ))
        say "md5: $(cut -c1-8 /tmp/sums | tr '\n' ' ')"
        # 1.8 MiB of file data alone is 460 pages.
        check "data verified: 4 files' md5sums match after drop_caches and remount ($got pages read from GMS)" [ "$got" -ge 460 ]
    else
        fail "data verified: md5sum -c after remount: $(grep -v ': OK' /tmp/sums.out 2>/dev/null | tr '\n' ' ')"
    fi
    [ "$mounted" = yes ] && umount /mnt
fi

# 2. Placement so far (the file system's pages and the first writes): two copies of every
# page, on two of B, C and D.
b1=$(tstat disk_puts_stored_at_node_1)
c1=$(tstat disk_puts_stored_at_node_2)
d1=$(tstat disk_puts_stored_at_node_3)
say "placement: B stored $b1 pages, C $c1, D $d1; plans adopted $(tstat lru_plans), targets by plan $(tstat lru_puts_by_plan), least loaded $(tstat lru_puts_fallback)"
placed=no
[ "$(tstat lru_plans)" -ge 1 ] && [ "$(tstat lru_puts_by_plan)" -ge 1 ] && [ "$b1" -ge 1 ] && [ "$c1" -ge 1 ] &&
    [ "$d1" -ge 1 ] && [ $((b1 + c1 + d1)) -ge 1000 ] && [ "$(tstat disk_under_replicated)" = 0 ] && placed=yes
check "replicas: every page A wrote is stored twice, on two of B, C and D (B $b1, C $c1, D $d1; puts placed by the global LRU's plan: $(tstat lru_puts_by_plan); none with fewer copies)" \
    [ "$placed" = yes ]

# 3. Probe pages 900..963, one O_DIRECT write each.
base=900
np=64
head -c $((np * 4096)) /dev/urandom > /tmp/probe
wrote=0
for i in $(seq 0 $((np - 1))); do
    dd if=/tmp/probe of="$dev" bs=4k count=1 skip="$i" seek=$((base + i)) oflag=direct conv=notrunc 2>/dev/null &&
        wrote=$((wrote + 1))
done
sync
echo 3 > /proc/sys/vm/drop_caches
dd if="$dev" of=/tmp/probe.back bs=4k skip="$base" count="$np" iflag=direct 2>/dev/null
same=no
[ "$wrote" = "$np" ] && cmp -s /tmp/probe /tmp/probe.back && same=yes
check "$np probe pages written one by one ($wrote ok) and read back O_DIRECT" [ "$same" = yes ]
pc=$(( $(tstat disk_puts_stored_at_node_2) - c1 ))
pb=$(( $(tstat disk_puts_stored_at_node_1) - b1 ))
pd=$(( $(tstat disk_puts_stored_at_node_3) - d1 ))
say "probe pages: B stored $pb, C $pc, D $pd"

# 4. Kill C with reads and writes in flight: a reader loops over the probe pages, a writer
# writes the 32 pages after them (964..995) again and again, new bytes each pass, and
# remembers the last pass that completed.
rm -f /tmp/reader.stop /tmp/reader.done /tmp/writer.done /tmp/wd.last
(
    n=0
    while [ ! -e /tmp/reader.stop ]; do
        dd if="$dev" of=/dev/null bs=4k skip="$base" count="$np" iflag=direct 2>/dev/null
        n=$((n + 1))
    done
    echo "$n" > /tmp/reader.done
) &
wbase=964
(
    n=0; werr=0
    while [ ! -e /tmp/reader.stop ]; do
        head -c $((32 * 4096)) /dev/urandom > /tmp/wd
        if dd if=/tmp/wd of="$dev" bs=4k seek="$wbase" count=32 oflag=direct conv=notrunc 2>/dev/null; then
            mv /tmp/wd /tmp/wd.last
        else
            werr=$((werr + 1))
        fi
        n=$((n + 1))
    done
    echo "$n $werr" > /tmp/writer.done
) &
sleep 1
tk=$(now)
say "KILL node 2 now (the host SIGKILLs guest 2's QEMU and NIC)"
wait_logged "gms: node 2 silent" 300
check "failure case: node 2 declared failed $(since "$tk") s after the kill request" logged "gms: node 2 silent"
# The writer keeps going for 3 s after the failure (C no longer a target).
sleep 3
touch /tmp/reader.stop
t=0
while { [ ! -e /tmp/reader.done ] || [ ! -e /tmp/writer.done ]; } && [ "$t" -lt 600 ]; do sleep 0.1; t=$((t + 1)); done
check "failure case: the reader in flight during the kill ended ($(cat /tmp/reader.done 2>/dev/null || echo '?') passes), no hang" \
    [ -e /tmp/reader.done ]
set -- $(cat /tmp/writer.done 2>/dev/null || echo "? ?")
wpasses=$1; werrs=$2
wok=no
[ "$werrs" = 0 ] && [ -e /tmp/wd.last ] &&
    dd if="$dev" of=/tmp/wd.back bs=4k skip="$wbase" count=32 iflag=direct 2>/dev/null &&
    cmp -s /tmp/wd.last /tmp/wd.back && wok=yes
check "failure case: the writer across the kill: $wpasses passes of 32 pages, $werrs with an I/O error, the last pass read back intact ($(tstat disk_under_replicated) copies of writes not placed)" \
    [ "$wok" = yes ]
# Re-replication: the replicas C held are copied from their other copy to B or D; the
# store's scan goes over the disk again only while a pass left a replica short (30 s at most).
t=0
while { [ "$(tstat disk_rereplicate_passes)" -lt 1 ] || [ "$(tstat disk_replicas_short)" != 0 ] ||
    [ "$(tstat disk_rereplicated)" -lt "$pc" ]; } && [ "$t" -lt 300 ]; do
    sleep 0.1; t=$((t + 1))
done
rr=$(tstat disk_rereplicated); rrf=$(tstat disk_rereplicate_failed); rpasses=$(tstat disk_rereplicate_passes)
rok=no
[ "$rr" -ge "$pc" ] && [ "$rpasses" -ge 1 ] && [ "$(tstat disk_replicas_short)" = 0 ] && rok=yes
check "failure case: re-replication copied $rr replicas C held to B or D in $rpasses passes ($rrf copies tried again), the last pass met no page short of a copy" \
    [ "$rok" = yes ]
# Each probe page once, bounded: EIO or the right bytes.
eio=0; ok=0; bad=0; hung=0; other=0
slow=0
failed_pages=""
for i in $(seq 0 $((np - 1))); do
    t1=$(now)
    timeout 40 dd if="$dev" of=/tmp/pg bs=4k count=1 skip=$((base + i)) iflag=direct 2>/tmp/pg.err
    rc=$?
    s=$(since "$t1")
    slow=$(awk -v a="$slow" -v b="$s" 'BEGIN { print (b > a) ? b : a }')
    if [ "$rc" = 0 ]; then
        dd if=/tmp/probe of=/tmp/want bs=4k count=1 skip="$i" 2>/dev/null
        if cmp -s /tmp/pg /tmp/want; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
    elif [ "$rc" = 143 ] || [ "$rc" = 124 ]; then
        hung=$((hung + 1))
    elif grep -qi "input/output error" /tmp/pg.err; then
        eio=$((eio + 1))
        failed_pages="$failed_pages $i"
    else
        other=$((other + 1))
        say "page $((base + i)): rc $rc: $(cat /tmp/pg.err)"
    fi
done
say "after the kill: $ok pages ok, $eio EIO (C stored $pc), $bad wrong bytes, $hung timed out, $other other errors; slowest read ${slow} s"
check "failure case: no read hung (each bounded by 40 s; slowest ${slow} s), none returned wrong bytes" \
    [ "$hung$bad$other" = 000 ]
# Every page has its other copy on B: none may fail. (B registers its copies whose
# directory was C with their new directory, repair, so the second replica of a page whose
# directory was C is found too.)
for i in $failed_pages; do say "page $((base + i)): I/O error"; done
kept=no
[ "$ok" = "$np" ] && [ "$(tstat disk_replica_fallbacks)" -ge 1 ] && kept=yes
check "failure case: every probe page reads back correctly from its other copy ($ok of $np, $eio I/O errors; $(tstat disk_replica_fallbacks) reads went on to the second replica)" \
    [ "$kept" = yes ]
say "disk stats: $(tr '\n' ' ' < /sys/module/trapeze/parameters/gms_disk_stats)"

# 5. Restart: the host boots guest 2 again (a new NIC and QEMU: node 2 with a new
# incarnation, its memory empty). A must admit it again once it hears its heartbeat
# (bounded), and put copies of new writes on it: 64 new pages (800..863), written one at
# a time, in rounds until C stored some (the global LRU's plan takes an epoch to weigh a
# newcomer), then read back. Re-replication after the rejoin must leave no page short of
# a copy.
c0=$(tstat disk_puts_stored_at_node_2)
j0=$(tstat gms_rejoins)
tr=$(now)
say "RESTART node 2 now (the host boots guest 2 again)"
wait_logged "gms: node 2 is back" 1800
check "restart: node 2 (booted again, a new incarnation) admitted again $(since "$tr") s after the restart request ($(( $(tstat gms_rejoins) - j0 )) rejoin)" \
    logged "gms: node 2 is back"
abase=800
head -c $((64 * 4096)) /dev/urandom > /tmp/again
rounds=0; awrote=0; cnew=0
while [ "$rounds" -lt 6 ]; do
    rounds=$((rounds + 1))
    for i in $(seq 0 63); do
        dd if=/tmp/again of="$dev" bs=4k count=1 skip="$i" seek=$((abase + i)) oflag=direct conv=notrunc 2>/dev/null &&
            awrote=$((awrote + 1))
    done
    cnew=$(( $(tstat disk_puts_stored_at_node_2) - c0 ))
    [ "$cnew" -ge 1 ] && break
    sleep 2
done
dd if="$dev" of=/tmp/again.back bs=4k skip="$abase" count=64 iflag=direct 2>/dev/null
aok=no
[ "$awrote" = $((rounds * 64)) ] && cmp -s /tmp/again /tmp/again.back && aok=yes
check "restart: 64 new pages written ($awrote writes in $rounds rounds, none failed) and read back O_DIRECT" [ "$aok" = yes ]
check "restart: node 2 stores A's copies again ($cnew since its restart)" [ "$cnew" -ge 1 ]
t=0
while [ "$(tstat disk_replicas_short)" != 0 ] && [ "$t" -lt 300 ]; do sleep 0.1; t=$((t + 1)); done
check "restart: no page short of a copy after the rejoin ($(tstat disk_replicas_short) short, $(tstat disk_rereplicated) replicas re-made in all)" \
    [ "$(tstat disk_replicas_short)" = 0 ]

# 6. A second failure: D is killed for good. The re-replications after C's kill and
# after its rejoin left no page short of a copy, so no page had both its copies on D:
# none may fail. Every probe page and new page reads back right at once (from B or C),
# re-replication re-makes the replicas D held on B or C (C, admitted again, takes them
# too), and the file system still verifies afterwards.
rr0=$(tstat disk_rereplicated)
p0=$(tstat disk_rereplicate_passes)
tk2=$(now)
say "KILL node 3 now (the host SIGKILLs guest 3's QEMU and NIC)"
wait_logged "gms: node 3 silent" 300
check "second failure: node 3 declared failed $(since "$tk2") s after the kill request" logged "gms: node 3 silent"
# Every page of the probe and of the new writes, bounded: both regions at once.
read_both() {
    rm -f /tmp/probe.b2 /tmp/again.b2
    timeout 60 dd if="$dev" of=/tmp/probe.b2 bs=4k skip="$base" count="$np" iflag=direct 2>/dev/null &&
        timeout 60 dd if="$dev" of=/tmp/again.b2 bs=4k skip="$abase" count=64 iflag=direct 2>/dev/null &&
        cmp -s /tmp/probe /tmp/probe.b2 && cmp -s /tmp/again /tmp/again.b2
}
check "second failure: no page had both copies on the dead nodes, and every one of the $np probe and 64 new pages reads back right (no I/O error)" \
    read_both
t=0
while { [ "$(tstat disk_rereplicate_passes)" -lt $((p0 + 1)) ] || [ "$(tstat disk_replicas_short)" != 0 ]; } &&
    [ "$t" -lt 300 ]; do
    sleep 0.1; t=$((t + 1))
done
rr2=$(( $(tstat disk_rereplicated) - rr0 ))
rok2=no
[ "$rr2" -ge 1 ] && [ "$(tstat disk_replicas_short)" = 0 ] && rok2=yes
check "second failure: re-replication re-made $rr2 replicas D held on B or C, the last pass met no page short of a copy" \
    [ "$rok2" = yes ]
sync
echo 3 > /proc/sys/vm/drop_caches
fsok=no
if mount -t ext2 -o ro "$dev" /mnt; then
    (cd /mnt && md5sum -c /tmp/sums > /tmp/sums2.out 2>&1) && read_both && fsok=yes
    umount /mnt
fi
check "second failure: after re-replication the file system's md5sums and every probe and new page still verify" \
    [ "$fsok" = yes ]

# 7. Unload under load: a reader loops over the disk; rmmod is refused while it has the
# disk open, so retry until it lands between two reads (60 s at most).
rm -f /tmp/reader.stop /tmp/reader.done
(
    n=0
    while [ ! -e /tmp/reader.stop ] && [ -b "$dev" ]; do
        dd if="$dev" of=/dev/null bs=4k count=16 iflag=direct 2>/dev/null
        n=$((n + 1))
    done
    echo "$n" > /tmp/reader.done
) &
sleep 1
tries=0
gone=no
while [ "$tries" -lt 600 ]; do
    tries=$((tries + 1))
    if rmmod trapeze 2>/dev/null; then gone=yes; break; fi
    sleep 0.1
done
touch /tmp/reader.stop
t=0
while [ ! -e /tmp/reader.done ] && [ "$t" -lt 300 ]; do sleep 0.1; t=$((t + 1)); done
clean=no
[ "$gone" = yes ] && [ -e /tmp/reader.done ] && logged "removed: NIC halted, frames freed" && clean=yes
check "clean unload: rmmod with a reader looping on $dev (after $tries tries; reader ended: $(cat /tmp/reader.done 2>/dev/null || echo no) passes)" \
    [ "$clean" = yes ]
# Requests in flight at unload: echo calls to a silent node (1023), getpages; node 63 is
# a gms_nodes= peer that never starts (never heard: not a member).
if insmod "$ko" node=0 gms_nodes=0,1,63 unload_inflight=8 && rmmod trapeze; then
    check "clean unload with NetRPC calls and getpages in flight" \
        logged "in flight at unload: failed (0 calls, 0 operations left)"
else
    fail "clean unload with NetRPC calls and getpages in flight: insmod/rmmod failed"
fi
say "$passes passed, $fails failed"
[ "$fails" = 0 ]
