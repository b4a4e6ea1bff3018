#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# kernel-crate/guest/blk.sh — the guest's script under `cargo xtask vm blk-test` (embedded
# as /etc/trapeze/run.sh): the GMS block device /dev/gms0 of trapeze.ko on its RAM backend.
#
# 0. Bad parameters: insmod with a parameter out of its range is refused, and the kernel
#    log names the parameter (nothing loaded); gms_nodes= with an id past 63 too.
# 1. insmod with gms_disk_mb=16: size; I/O past the end fails cleanly; an 8 MiB random pattern written, caches dropped,
#    read back and compared (cmp + md5sum); O_DIRECT reads; a 1000-byte write at an
#    unaligned offset (read-modify-write through the page cache); a tar archive written to
#    the raw device and extracted again (the kernel has no disk filesystem: ext2/vfat are
#    not configured); two readers and a writer at once.
# 2. rmmod while a dd has the device open is refused (the open disk pins the module) and
#    the dd finishes with correct data; rmmod after it succeeds; insmod again gives a
#    fresh, zeroed disk.
# 3. Fault injection: gms_ram_fail_page fails a page (read and write get EIO, the rest of
#    the disk works), gms_ram_stall_page never completes a page (the request fails at the
#    gms_disk_timeout_ms timeout instead of hanging); rmmod with the stalled page still
#    held by the backend is clean.
#
# Lines for the host: "trapeze-blk: PASS <check>" / "trapeze-blk: FAIL <check>: <why>",
# then "trapeze-blk: N passed, M failed". Exit status 0 only if nothing failed.

tag=trapeze-blk
. /etc/trapeze/lib.sh
ko=/lib/modules/trapeze.ko
dev=/dev/gms0
stats=/sys/module/trapeze/parameters/gms_disk_stats
md5() { md5sum < "$1" | cut -d' ' -f1; }
wait_dev() { # the disk appears through devtmpfs
    t=0
    while [ ! -b "$dev" ] && [ "$t" -lt 50 ]; do sleep 0.1; t=$((t + 1)); done
    [ -b "$dev" ]
}
# The totals, then exit: 0 only if nothing failed.
end() { finish; [ "$fails" = 0 ]; exit $?; }

# --- 0. bad parameters ----------------------------------------------------------------
refused() { # refused PARAM=VALUE: insmod fails and the log names PARAM=VALUE out of range
    if insmod "$ko" "$1" 2>/dev/null; then
        rmmod trapeze
        return 1
    fi
    dmesg | tail -10 | grep -q "$1 is out of range"
}
for p in gms_budget_pages=999999 gms_budget_pages=-1 gms_budget_mb=1025 "gms_budget_mb=4 gms_budget_pages=100" gms_dir_pages=-1 gms_dir_pages=2000000 \
    gms_disk_readahead=33 gms_disk_pages=-2 gms_replicas=5 gms_replicas=-1 gms_disk_direct_reads=2 \
    gms_disk_pages=99999999 node=-2 node=65535 gms_fail_ms=10 gms_disk_mb=-1 gms_nodes=0,64; do
    case $p in
    gms_nodes=*) check "insmod $p refused, named in the log" sh -c "! insmod $ko $p 2>/dev/null && dmesg | tail -10 | grep -q 'gms_nodes=\"0,64\": node 64 is past the ids GMS liveness covers'" ;;
    gms_disk_mb=*) check "insmod $p refused" sh -c "! insmod $ko $p 2>/dev/null && dmesg | tail -10 | grep -q 'gms_disk_mb=-1: must be'" ;;
    *" "*) check "insmod $p refused" sh -c "! insmod $ko $p 2>/dev/null && dmesg | tail -10 | grep -q 'both given'" ;;
    *) check "insmod $p refused, named in the log" refused "$p" ;;
    esac
done
check "nothing loaded after the refusals" sh -c "! grep -q '^trapeze ' /proc/modules"

# --- 1. data round trips ------------------------------------------------------------
if ! insmod "$ko" gms_disk_mb=16; then fail "insmod gms_disk_mb=16"; end; fi
check "disk /dev/gms0 appears" wait_dev || end
size=$(blockdev --getsize64 "$dev")
check "size 16 MiB ($size bytes)" [ "$size" = 16777216 ]
check "logical block 4096 bytes" [ "$(blockdev --getss "$dev")" = 4096 ]
past_end() { # a direct write and a direct read at the first page past the end both fail
    ! dd if=/dev/zero of="$dev" bs=4096 seek=4096 count=1 oflag=direct 2>/dev/null &&
        [ "$(dd if="$dev" bs=4096 skip=4096 count=1 iflag=direct 2>/dev/null | wc -c)" = 0 ]
}
check "I/O past the end fails cleanly (write refused, read returns nothing)" past_end
both_tables() {
    [ -r /sys/module/trapeze/parameters/stats ] && [ -r "$stats" ] &&
        [ "$(cat /sys/module/trapeze/parameters/gms_disk_mb)" = 16 ]
}
check "parameters of both __param tables in sysfs (stats, gms_disk_mb, gms_disk_stats)" both_tables

dd if=/dev/urandom of=/tmp/pat bs=64k count=128 2>/dev/null
check "write 8 MiB pattern" dd if=/tmp/pat of="$dev" bs=64k conv=fsync 2>/dev/null
drop_caches
dd if="$dev" of=/tmp/back bs=64k count=128 2>/dev/null
if cmp -s /tmp/pat /tmp/back; then
    pass "8 MiB read back after drop_caches: md5 $(md5 /tmp/back)"
else
    fail "8 MiB read back differs: md5 $(md5 /tmp/pat) written, $(md5 /tmp/back) read"
fi
rm -f /tmp/back

# O_DIRECT: 64 KiB at 1 MiB, and 4 KiB pages at odd page offsets, straight from the device.
dd if="$dev" of=/tmp/d1 bs=64k skip=16 count=1 iflag=direct 2>/dev/null
dd if=/tmp/pat of=/tmp/e1 bs=64k skip=16 count=1 2>/dev/null
check "O_DIRECT 64 KiB read matches" cmp -s /tmp/d1 /tmp/e1
# 1 MiB O_DIRECT reads: the block layer splits each into 256 KiB requests (64 pages).
dd if="$dev" of=/tmp/d3 bs=1M count=2 iflag=direct 2>/dev/null
dd if=/tmp/pat of=/tmp/e3 bs=1M count=2 2>/dev/null
check "O_DIRECT 1 MiB reads (split into 256 KiB requests) match" cmp -s /tmp/d3 /tmp/e3
rm -f /tmp/d3 /tmp/e3
dd if="$dev" of=/tmp/d2 bs=4k skip=1023 count=3 iflag=direct 2>/dev/null
dd if=/tmp/pat of=/tmp/e2 bs=4k skip=1023 count=3 2>/dev/null
check "O_DIRECT 3 pages at page 1023 match" cmp -s /tmp/d2 /tmp/e2
# O_DIRECT write of 2 pages at page 3000 (beyond the pattern), then read back cold.
dd if=/tmp/pat of=/tmp/w bs=4k skip=7 count=2 2>/dev/null
dd if=/tmp/w of="$dev" bs=4k seek=3000 count=2 oflag=direct conv=notrunc 2>/dev/null
drop_caches
dd if="$dev" of=/tmp/w2 bs=4k skip=3000 count=2 2>/dev/null
check "O_DIRECT 2-page write reads back" cmp -s /tmp/w /tmp/w2
rm -f /tmp/d1 /tmp/e1 /tmp/d2 /tmp/e2 /tmp/w /tmp/w2

# 1000 bytes at byte 5000 (inside pages 1 and 2): the page cache reads, patches, writes.
dd if=/dev/urandom of=/tmp/patch bs=1000 count=1 2>/dev/null
dd if=/tmp/patch of="$dev" bs=1000 seek=5000 oflag=seek_bytes conv=notrunc,fsync 2>/dev/null
dd if=/tmp/patch of=/tmp/pat bs=1000 seek=5000 oflag=seek_bytes conv=notrunc 2>/dev/null
drop_caches
dd if="$dev" of=/tmp/back bs=4k count=4 2>/dev/null
dd if=/tmp/pat of=/tmp/want bs=4k count=4 2>/dev/null
check "unaligned 1000-byte write (read-modify-write) reads back" cmp -s /tmp/back /tmp/want
rm -f /tmp/back /tmp/want /tmp/patch

# A file round trip without a filesystem: tar onto the raw device (at 12 MiB), extract.
mkdir -p /tmp/src /tmp/out
cp /bin/busybox /tmp/src/busybox
dd if=/tmp/pat of=/tmp/src/pattern bs=64k count=20 2>/dev/null
echo "trapeze gms0 file round trip" > /tmp/src/note.txt
(cd /tmp/src && tar cf - busybox pattern note.txt) > /tmp/a.tar
tar_blocks=$(( ($(wc -c < /tmp/a.tar) + 4095) / 4096 ))
dd if=/tmp/a.tar of="$dev" bs=4k seek=3072 conv=notrunc,fsync 2>/dev/null
drop_caches
if [ "$tar_blocks" -gt 1024 ]; then
    fail "tar archive too large for the test area ($tar_blocks pages)"
elif dd if="$dev" bs=4k skip=3072 count="$tar_blocks" 2>/dev/null | tar xf - -C /tmp/out; then
    ok=1
    for f in busybox pattern note.txt; do
        [ "$(md5 /tmp/src/$f)" = "$(md5 /tmp/out/$f)" ] || ok=0
    done
    if [ "$ok" = 1 ]; then
        pass "tar of 3 files ($(wc -c < /tmp/a.tar) bytes) through /dev/gms0: md5 equal"
    else
        fail "tar round trip: extracted files differ"
    fi
else
    fail "tar round trip: extract failed"
fi
rm -rf /tmp/src /tmp/out /tmp/a.tar

# Two readers and a writer at once (writer on pages 2560.., away from the readers).
dd if=/tmp/pat of="$dev" bs=64k count=64 seek=160 conv=notrunc,fsync 2>/dev/null &
w=$!
drop_caches
dd if="$dev" of=/tmp/r1 bs=64k count=64 2>/dev/null &
r1=$!
dd if="$dev" of=/tmp/r2 bs=16k skip=256 count=256 2>/dev/null &
r2=$!
wait $w; ws=$?; wait $r1; r1s=$?; wait $r2; r2s=$?
dd if=/tmp/pat of=/tmp/e1 bs=64k count=64 2>/dev/null
dd if=/tmp/pat of=/tmp/e2 bs=16k skip=256 count=256 2>/dev/null
drop_caches
dd if="$dev" of=/tmp/r3 bs=64k skip=160 count=64 2>/dev/null
if [ "$ws$r1s$r2s" = 000 ] && cmp -s /tmp/r1 /tmp/e1 && cmp -s /tmp/r2 /tmp/e2 && cmp -s /tmp/r3 /tmp/e1; then
    pass "concurrent readers and writer"
else
    fail "concurrent readers and writer (status $ws/$r1s/$r2s)"
fi
rm -f /tmp/r1 /tmp/r2 /tmp/r3 /tmp/e1 /tmp/e2
say "stats: $(tr '\n' ' ' < "$stats")"

# --- 2. rmmod with the device open, reload ---------------------------------------------
# A reader keeps /dev/gms0 open (fd 3) and reads the pattern 6 times, cold each time.
(
    exec 3< "$dev"
    i=0
    while [ $i -lt 6 ]; do
        echo 1 > /proc/sys/vm/drop_caches
        dd if="$dev" bs=64k count=128 2>/dev/null | md5sum | cut -d' ' -f1 > /tmp/loop.$i
        i=$((i + 1))
    done
) &
loader=$!
sleep 0.3
if rmmod trapeze 2>/tmp/rmmod.err; then
    fail "rmmod while the disk is open: it unloaded (the open disk should pin the module)"
    wait $loader
    end
fi
pass "rmmod while a dd runs is refused: $(cat /tmp/rmmod.err)"
wait $loader
want=$(md5 /tmp/pat)
bad=0
for i in 0 1 2 3 4 5; do [ "$(cat /tmp/loop.$i 2>/dev/null)" = "$want" ] || bad=$((bad + 1)); done
check "the dd that held the disk read correct data 6 times" [ "$bad" = 0 ]
check "rmmod after the dd closed the disk" rmmod trapeze
check "/dev/gms0 gone" [ ! -b "$dev" ]
if ! insmod "$ko" gms_disk_mb=4; then fail "insmod again"; end; fi
check "insmod again: /dev/gms0 back" wait_dev
dd if="$dev" of=/tmp/z bs=64k count=64 2>/dev/null
dd if=/dev/zero of=/tmp/zz bs=64k count=64 2>/dev/null
check "new disk reads zeros" cmp -s /tmp/z /tmp/zz
rm -f /tmp/z /tmp/zz /tmp/loop.*
check "rmmod (second load)" rmmod trapeze

# --- 3. failing and stalling pages ------------------------------------------------------
if ! insmod "$ko" gms_disk_mb=4 gms_disk_timeout_ms=2000 gms_ram_fail_page=100 gms_ram_stall_page=200; then
    fail "insmod with fault injection"; end
fi
wait_dev
expect_error() { # expect_error NAME TEXT DD-ARGS...: dd must fail with TEXT in its message
    name=$1; text=$2; shift 2
    if dd "$@" 2>/tmp/err; then
        fail "$name: succeeded"
    elif grep -q "$text" /tmp/err; then
        pass "$name: $(grep "$text" /tmp/err | head -n 1)"
    else
        fail "$name: failed without '$text': $(tr '\n' ' ' < /tmp/err)"
    fi
}
expect_error "read of the failing page" "Input/output error" if="$dev" of=/dev/null bs=4k skip=100 count=1 iflag=direct
expect_error "write of the failing page" "Input/output error" if=/tmp/pat of="$dev" bs=4k seek=100 count=1 oflag=direct conv=notrunc
expect_error "a 16-page request containing the failing page fails whole" "Input/output error" \
    if="$dev" of=/dev/null bs=64k skip=6 count=1 iflag=direct
t0=$(cut -d' ' -f1 /proc/uptime)
expect_error "read of the stalled page fails at the 2 s timeout" "timed out" \
    if="$dev" of=/dev/null bs=4k skip=200 count=1 iflag=direct
t1=$(cut -d' ' -f1 /proc/uptime)
took=$(echo "$t1 $t0" | awk '{printf "%.1f", $1 - $2}')
check "the stalled read ended within 10 s (took $took s)" awk "BEGIN { exit !($took < 10) }"
check "timeouts counted" [ "$(stat_of timeouts)" -ge 1 ]
dd if=/tmp/pat of="$dev" bs=4k count=8 oflag=direct conv=notrunc 2>/dev/null
dd if="$dev" of=/tmp/b bs=4k count=8 iflag=direct 2>/dev/null
dd if=/tmp/pat of=/tmp/e bs=4k count=8 2>/dev/null
check "the rest of the disk still works" cmp -s /tmp/b /tmp/e
say "stats: $(tr '\n' ' ' < "$stats")"
check "rmmod with a stalled page held by the backend" rmmod trapeze
end
