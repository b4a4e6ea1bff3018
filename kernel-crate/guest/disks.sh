#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# kernel-crate/guest/disks.sh — disk identities, `cargo xtask vm disks` (a stage of `cargo
# xtask test`). Four guests, GMS members 0,1,2,3, gms_fail_ms=$fail_ms:
#
# * B (guest 2) and C (guest 3) are the servers ($budget pages each). C is SIGKILLed by the
#   host (QEMU and NIC) when A prints "trapeze-disks: KILL node 3". B unloads once nodes 0
#   and 1 have both stayed declared failed for 10 s (A and A' are done), bounded.
# * A (guest 0) and A' (guest 1) store nothing (gms_budget_pages=0) and load disks:
#   (a) own identities on the same servers: A loads gms_disk_id=alpha, A' gms_disk_id=beta
#       (two copies of each page, on B and C), and each writes its own pattern — every
#       line of page p says "trapeze-disks <name> page p" — over the same page numbers,
#       0..$npages-1, and reads it back, every byte. Each checks again once the other has
#       written: A' after A has reloaded alpha (A' sees node 0 back with a new
#       incarnation: A wrote before it unloaded), A after A' unloaded beta (node 1
#       declared failed, or back as a new incarnation): each must read only its own data.
#       A's reload reads alpha back too.
#   (b) a second load of an identity a live member owns is refused: A' loads again with
#       gms_disk_id=alpha while A holds it; its reads and writes fail with EIO and the
#       kernel log says "/dev/gms0: gms_disk_id=<its identity> refused: ... in use by node 0". A
#       then reads alpha back unchanged (once node 1 has stayed declared failed for 10 s:
#       A' has powered off).
#   (c) a reload after every copy of some pages died: A loads gms_disk_id=gamma with one
#       copy of each page (gms_replicas=1) on B and C, writes pages 0..$gwritten-1, asks
#       the host to kill C, waits until C is declared failed and the volume's label and
#       written map have a copy on B (disk_meta_lost 0: the load writes again from memory
#       the ones C held), unloads and loads gamma again with C still listed
#       (gms_nodes=0,2,3): the load never hears C, so C is not a member (the kernel log
#       says "gms: node 3 (gms_nodes=) not heard", never "node 3 heard") and the disk runs
#       on B alone: every written page must read back as written or fail with EIO (its
#       copy was on C) — at least one of each, none as zeros or other bytes, none hanging
#       —, the pages never written ($gwritten..$npages-1) read as zeros, and a new page
#       written past them reads back. Then a new disk (delta) of two copies on the same
#       members: with only B alive it is warned about at load and a write fails (EIO).
# Lines for the host start with "trapeze-disks:"; A's and A''s checks print PASS or FAIL,
# and each its total "N passed, M failed". Every wait is bounded.

tag=trapeze-disks
. /etc/trapeze/lib.sh
k=${trapeze_guest:-0}
ko=/lib/modules/trapeze.ko
members=0,1,2,3
fail_ms=5000
budget=1024
disk_pages=256
npages=64
gwritten=48
dev=/dev/gms0
# Whether the kernel log shows node $1 declared failed (a function for wait_until).
silent() { logged "gms: node $1 silent"; }
# The identity the last load logged ("/dev/gms0: disk identity 0x…").
identity() { dmesg | sed -n 's/.*\/dev\/gms0: disk identity \(0x[0-9a-f]*\).*/\1/p' | tail -1; }
# $2 pages of disk $1's pattern, from page 0 (64 lines of 64 bytes a page).
pattern() {
    awk -v tag="$1" -v n="$2" 'BEGIN {
        for (p = 0; p < n; p++) for (l = 0; l < 64; l++) printf "%-63s\n", "trapeze-disks " tag " page " p " line " l
    }'
}
# Load the module as this node with disk $1 of $2 copies; the rest of the words are more
# parameters.
load() {
    id=$1; copies=$2; shift 2
    insmod "$ko" node="$k" gms_budget_pages=0 gms_fail_ms="$fail_ms" gms_disk_pages="$disk_pages" \
        gms_disk_id="$id" gms_replicas="$copies" "$@"
}
# Write file $1 over the disk from page $2 (0 if not given), trying again while the cluster
# does not take it yet (60 s at most).
write_pages() {
    t=0
    until timeout 90 dd if="$1" of="$dev" bs=4096 seek="${2:-0}" oflag=direct conv=notrunc 2>/dev/null; do
        [ "$t" -ge 60 ] && return 1
        sleep 1
        t=$((t + 1))
    done
}
# Whether the disk's first pages read back as file $1, every byte (O_DIRECT, bounded);
# $mismatch says which pages differ and whose data they hold.
verify() {
    n=$(($(wc -c < "$1") / 4096))
    rm -f /tmp/back
    timeout 90 dd if="$dev" of=/tmp/back bs=4096 count="$n" iflag=direct 2>/dev/null
    if cmp -s "$1" /tmp/back; then
        mismatch=""
        return 0
    fi
    bad=$(cmp -l "$1" /tmp/back 2>/dev/null | awk '{ print int(($1 - 1) / 4096) }' | uniq | wc -l)
    mismatch="$bad pages differ ($(wc -c < /tmp/back 2>/dev/null || echo 0) bytes read; lines of: $(grep -o 'trapeze-disks [a-z]*' /tmp/back | sort | uniq -c | tr -s ' \n' ' '))"
    return 1
}
# verify, tried again for 60 s (a reload's first reads wait for the members' views to settle).
verify_soon() {
    t=0
    until verify "$1"; do
        [ "$t" -ge 60 ] && return 1
        sleep 1
        t=$((t + 1))
    done
}
# A check that the disk reads back as file $2 ($1: what; $3: verify_soon to try again).
vcheck() { if ${3:-verify} "$2"; then pass "$1"; else fail "$1: $mismatch"; fi; }
# Node $1 reloaded: the kernel log shows it back with a new incarnation.
reloaded() { logged "gms: node $1 is back with a new incarnation"; }
# Node $1 left its first incarnation: declared failed, or already back as a new one.
left() { logged "gms: node $1 silent" || reloaded "$1"; }
# Wait until condition $1 (a function of node $2) holds, at most $3 tenths of a second.
wait_until() { t=0; while ! "$1" "$2" && [ "$t" -lt "$3" ]; do sleep 0.1; t=$((t + 1)); done; "$1" "$2"; }

# ---- B and C: servers -------------------------------------------------------------
if [ "$k" -ge 2 ]; then
    insmod "$ko" node="$k" gms_nodes="$members" gms_budget_pages="$budget" gms_fail_ms="$fail_ms" ||
        { say "insmod failed"; exit 1; }
    say "node $k: serving, budget $budget pages"
    # A and A' reload several times (each gap far shorter than the failure timeout); they
    # are done once both have stayed declared failed for 10 s. C is killed long before.
    t=0
    quiet=0
    while [ "$quiet" -lt 20 ] && [ "$t" -lt 1200 ]; do
        if gone 0 && gone 1; then quiet=$((quiet + 1)); else quiet=0; fi
        sleep 0.5
        t=$((t + 1))
    done
    say "node $k: nodes 0 and 1 gone after $((t / 2)) s; stats: $(tr '\n' ' ' < /sys/module/trapeze/parameters/stats)"
    rmmod trapeze || { say "rmmod failed"; exit 1; }
    say "node $k: rmmod trapeze done"
    exit 0
fi

# ---- A': beta, then a load of alpha while A holds it -------------------------------
if [ "$k" = 1 ]; then
    pattern beta "$npages" > /tmp/beta
    load beta 2 gms_nodes="$members" || { fail "insmod (gms_disk_id=beta)"; finish; exit 1; }
    say "beta is disk identity $(identity)"
    check "(a) beta: $npages pages of its own written (gms_disk_id=beta, two copies on B and C)" write_pages /tmp/beta
    vcheck "(a) beta: its $npages pages read back as written, every byte" /tmp/beta
    # A writes alpha over the same page numbers, then reloads it.
    wait_until reloaded 0 3000
    check "(a) node 0 reloaded alpha after writing it (seen here: node 0 back with a new incarnation)" reloaded 0
    vcheck "(a) beta after alpha's writes to the same page numbers: every page still beta's own, every byte" /tmp/beta
    rmmod trapeze || fail "rmmod after beta"
    # (b) Node 0 owns alpha (its reload claimed it) and is alive.
    load alpha 2 gms_nodes="$members" || { fail "insmod (gms_disk_id=alpha)"; finish; exit 1; }
    mine=$(identity)
    say "loaded as alpha: disk identity $mine"
    rm -f /tmp/r.err /tmp/w.err
    timeout 60 dd if="$dev" of=/tmp/r bs=4096 count=1 iflag=direct 2>/tmp/r.err
    rrc=$?
    timeout 60 dd if=/tmp/beta of="$dev" bs=4096 count=1 oflag=direct 2>/tmp/w.err
    wrc=$?
    say "a read: status $rrc ($(tr '\n' ' ' < /tmp/r.err)); a write: status $wrc ($(tr '\n' ' ' < /tmp/w.err))"
    eio() { [ "$rrc" = 1 ] && [ "$wrc" = 1 ] && grep -qi "input/output error" /tmp/r.err && grep -qi "input/output error" /tmp/w.err; }
    check "(b) a second load of alpha while node 0 holds it: a read and a write fail with EIO" eio
    line=$(dmesg | grep "/dev/gms0: gms_disk_id=" | tail -1)
    say "kernel log: ${line#*] }"
    named() { echo "$line" | grep -q "/dev/gms0: gms_disk_id=$mine refused: .* in use by node 0,"; }
    check "(b) the kernel log names gms_disk_id=$mine and its owner, node 0" named
    # Node 0 hears this load (heartbeats every second) before it goes.
    sleep 3
    rmmod trapeze || fail "rmmod after the refused load"
    finish
    [ "$fails" = 0 ]
    exit
fi

# ---- A: alpha, then gamma --------------------------------------------------------
pattern alpha "$npages" > /tmp/alpha
load alpha 2 gms_nodes="$members" || { fail "insmod (gms_disk_id=alpha)"; finish; exit 1; }
say "alpha is disk identity $(identity)"
check "(a) alpha: $npages pages of its own written (gms_disk_id=alpha, two copies on B and C)" write_pages /tmp/alpha
vcheck "(a) alpha: its $npages pages read back as written, every byte" /tmp/alpha
# A' hears this load (heartbeats every second) before the reload: it waits for the return.
sleep 3
rmmod trapeze || fail "rmmod after alpha's first load"
load alpha 2 gms_nodes="$members" || { fail "insmod again (gms_disk_id=alpha)"; finish; exit 1; }
vcheck "(a) alpha reloaded: its $npages pages read back as written" /tmp/alpha verify_soon
# A' has written beta over the same page numbers and checked it once it unloads.
wait_until left 1 3000
check "(a) node 1 done with beta (unloaded: declared failed, or back as a new incarnation)" left 1
vcheck "(a) alpha after beta's writes to the same page numbers: every page still alpha's own, every byte" /tmp/alpha
# (b) A' loads alpha while this load holds it, then unloads and powers off. Which of its
# loads this node hears, and as what, depends on how the loads interleave with this
# node's own reload; that A' is done does not: it stays declared failed (it loads alpha
# right after beta's unload, far inside the failure timeout, so a quiet this long comes
# only once it has powered off).
gone_quiet() { wait_gone "$1" 3000; [ "$q" -ge 100 ]; }
check "(b) node 1 done with its load of alpha (declared failed and silent for 10 s)" gone_quiet 1
vcheck "(b) alpha after node 1's refused load of it: every page unchanged" /tmp/alpha
rmmod trapeze || fail "rmmod after alpha"

# (c) gamma: one copy of each page, on B or C; C dies; gamma reloaded on what is left.
pattern gamma "$npages" > /tmp/gamma
head -c $((gwritten * 4096)) /tmp/gamma > /tmp/gamma.w
load gamma 1 gms_nodes=0,2,3 || { fail "insmod (gms_disk_id=gamma)"; finish; exit 1; }
say "gamma is disk identity $(identity)"
# In two halves, two global-LRU plans apart: a plan made before both servers were heard
# may aim every put of the first half at one of them (a CI run put all 97 on B), and (c)
# needs pages on each. The second half goes by a plan that has both.
half=$((gwritten / 2))
head -c $((half * 4096)) /tmp/gamma.w > /tmp/gamma.1
tail -c +$((half * 4096 + 1)) /tmp/gamma.w > /tmp/gamma.2
two_plans() { [ "$(tstat lru_plans)" -ge $(($1 + 2)) ]; }
halves() {
    write_pages /tmp/gamma.1 0 || return 1
    wait_until two_plans "$(tstat lru_plans)" 100
    write_pages /tmp/gamma.2 "$half"
}
check "(c) gamma: pages 0..$((gwritten - 1)) written, one copy each (gms_replicas=1)" halves
vcheck "(c) gamma: its $gwritten pages read back as written" /tmp/gamma.w
b=$(tstat disk_puts_stored_at_node_2)
c=$(tstat disk_puts_stored_at_node_3)
both() { [ "$b" -ge 2 ] && [ "$c" -ge 2 ]; }
check "(c) both servers hold gamma's pages (puts stored: B $b, C $c, the volume's label and map among them)" both
p0=$(tstat disk_rereplicate_passes)
say "KILL node 3 now (the host SIGKILLs guest 3's QEMU and NIC)"
wait_until silent 3 600
check "(c) node 3 declared failed" silent 3
# The failure is handed to the store, its repair pass runs, and the meta pages C held are
# written again on B.
meta_safe() { [ "$(tstat disk_rereplicate_passes)" -gt "$p0" ] && [ "$(tstat disk_meta_lost)" = 0 ]; }
t=0
while ! meta_safe && [ "$t" -lt 300 ]; do
    sleep 0.1
    t=$((t + 1))
done
b2=$(tstat disk_puts_stored_at_node_2)
check "(c) the volume's label and written map have a copy on a live member (disk_meta_lost $(tstat disk_meta_lost) after $((t / 10)) s; $((b2 - b)) meta pages written again on B; $(tstat disk_replicas_short) copies short)" \
    meta_safe
rmmod trapeze || fail "rmmod after gamma's first load"
# C stays listed: dead, it is never heard by this load, so never a member.
echo "trapeze-disks: gamma reload" > /dev/kmsg
load gamma 1 gms_nodes=0,2,3 || { fail "insmod again (gms_disk_id=gamma, gms_nodes=0,2,3)"; finish; exit 1; }
this_load() { dmesg | sed -n '/trapeze-disks: gamma reload/,$p'; }
targets=$(this_load | sed -n 's/.*written through to \(.*\), [0-9]* cop.*/\1/p' | tail -1)
not_member() { this_load | grep -q "gms: node 3 (gms_nodes=) not heard" && ! this_load | grep -q "gms: node 3 heard"; }
# The ticker reports the peers never heard once liveness settles (probe waited for it).
wait_until not_member 3 50
check "(c) reload with node 3 (dead) still in gms_nodes=: never heard, not a member (targets: ${targets:-?}; gms_never_heard $(tstat gms_never_heard))" \
    not_member
ok=0; eio=0; zero=0; wrong=0; hung=0; other=0; zeros_ok=0
head -c 4096 /dev/zero > /tmp/zero
for p in $(seq 0 $((npages - 1))); do
    timeout 60 dd if="$dev" of=/tmp/pg bs=4096 count=1 skip="$p" iflag=direct 2>/tmp/pg.err
    rc=$?
    dd if=/tmp/gamma of=/tmp/want bs=4096 count=1 skip="$p" 2>/dev/null
    if [ "$p" -ge "$gwritten" ]; then
        if [ "$rc" = 0 ] && cmp -s /tmp/pg /tmp/zero; then
            zeros_ok=$((zeros_ok + 1))
        else
            say "page $p, never written: status $rc, $(head -c 60 /tmp/pg 2>/dev/null | tr -cd '[:print:]')"
        fi
    elif [ "$rc" = 0 ] && cmp -s /tmp/pg /tmp/want; then
        ok=$((ok + 1))
    elif [ "$rc" = 0 ] && cmp -s /tmp/pg /tmp/zero; then
        zero=$((zero + 1))
        say "page $p: read as zeros"
    elif [ "$rc" = 0 ]; then
        wrong=$((wrong + 1))
        say "page $p: other bytes: $(head -c 60 /tmp/pg | tr -cd '[:print:]')"
    elif [ "$rc" = 143 ] || [ "$rc" = 124 ]; then
        hung=$((hung + 1))
    elif grep -qi "input/output error" /tmp/pg.err; then
        eio=$((eio + 1))
    else
        other=$((other + 1))
        say "page $p: status $rc: $(cat /tmp/pg.err)"
    fi
done
say "after the reload: $ok pages verified, $eio EIO, $zero zeros, $wrong other bytes, $hung timed out, $other other errors; $zeros_ok of $((npages - gwritten)) never written read as zeros"
check "(c) after the reload every written page reads back as written or fails with EIO: $ok verified, $eio EIO, $zero as zeros, $wrong as other bytes, $hung hung, $other other errors" \
    [ $((ok + eio)) = "$gwritten" ]
some_of_each() { [ "$eio" -ge 1 ] && [ "$ok" -ge 1 ]; }
check "(c) the pages whose only copy died with node 3 fail ($eio) and those on B read back ($ok): at least one of each" \
    some_of_each
check "(c) the $((npages - gwritten)) pages never written read as zeros ($zeros_ok)" [ "$zeros_ok" = $((npages - gwritten)) ]
# The disk still takes writes on the live member (one copy each: B).
dd if=/tmp/gamma of=/tmp/newpg bs=4096 count=1 2>/dev/null
fresh() {
    timeout 60 dd if=/tmp/newpg of="$dev" bs=4096 count=1 seek=$((npages + 8)) oflag=direct 2>/dev/null &&
        timeout 60 dd if="$dev" of=/tmp/newback bs=4096 count=1 skip=$((npages + 8)) iflag=direct 2>/dev/null &&
        cmp -s /tmp/newpg /tmp/newback
}
check "(c) a page written after the reload, with node 3 listed and dead, reads back (on B)" fresh
rmmod trapeze || fail "rmmod after gamma's reload"
unload=$(dmesg | grep "/dev/gms0 on GMS:" | tail -1)
say "unload: ${unload#*] }"
# Too few members: a new disk of two copies, with B the only one of 2 and 3 alive, says so
# at load and refuses writes (EIO) rather than store them with one copy.
echo "trapeze-disks: delta load" > /dev/kmsg
if load delta 2 gms_nodes=0,2,3; then
    this_load() { dmesg | sed -n '/trapeze-disks: delta load/,$p'; }
    timeout 60 dd if=/tmp/newpg of="$dev" bs=4096 count=1 oflag=direct 2>/tmp/few.err
    frc=$?
    warned=$(this_load | grep -c "1 of the 2 other members in gms_nodes= heard; writes fail until gms_replicas=2")
    refused() { [ "$frc" = 1 ] && grep -qi "input/output error" /tmp/few.err && [ "$warned" = 1 ]; }
    check "(c) a disk of two copies with one live member (node 3 listed, dead): warned at load ($warned), a write fails with EIO (status $frc)" \
        refused
    rmmod trapeze || fail "rmmod after delta"
    unload=$(dmesg | grep "/dev/gms0 on GMS:" | tail -1)
    say "unload: ${unload#*] }"
else
    fail "insmod (gms_disk_id=delta, gms_replicas=2, gms_nodes=0,2,3)"
fi
finish
[ "$fails" = 0 ]
