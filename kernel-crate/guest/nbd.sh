#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# kernel-crate/guest/nbd.sh — Linux's NBD client on gmblock's NBD export (`cargo xtask vm
# nbd-test`). On the host, nbdkit runs gmblock's plugin over a volume striped across two
# gmblockd servers; QEMU's user-mode network (`-netdev user`) lets every guest reach the
# host's 127.0.0.1 as 10.0.2.2. /etc/trapeze/nbd.env (written by xtask) gives `port`, the
# number of `guests`, the run's `nonce`, the layout (`fs_mib`, `area_mib`, `a_mib`,
# `a_len`, `c_mib`, `c_len`, in MiB), the common region's `c_passes` and `deadline` (the
# guest's uptime in seconds by which every wait gives up).
#
# Every guest connects /dev/nbd0 with Debian's nbd-client to the same export.
#
# Guest 0, the writer, first makes an ext4 file system on the volume's first `fs_mib` MiB
# with Debian's mke2fs (copied into the initramfs with its libraries), mounts it, writes
# files of known contents (random bytes, their md5sums kept; one of them a seeded text
# pattern the host can rebuild), syncs, unmounts, drops the caches, mounts again and checks
# every file's md5sum, and unmounts. It prints "trapeze-nbd: file NAME MD5" per file: after
# the guests power off, xtask reassembles the volume from the two servers' files, checks it
# with `e2fsck -fn` and reads each file out with `debugfs` against these sums.
#
# Then the shared volume, in the area after the file system: the writer writes random
# regions A (`a_len` MiB at `a_mib`) and C (`c_len` MiB at `c_mib`) with O_DIRECT and
# fsync (the kernel sends NBD FLUSH), prints "shared wrote MD5A MD5C", and only then
# writes the header block (the area's first 4 KiB: the run's nonce and both sums), also
# flushed. Each other guest, a reader, polls the header with O_DIRECT until it shows this
# run's nonce, drops its caches, reads A with O_DIRECT and checks it against the header's
# sum ("shared read MD5"). Then every guest writes its ready mark and waits until all
# marks are there, and all read C at once, each at least `c_passes` times and on until
# every guest has finished its first pass, checking every pass ("common read PASS MD5").
# xtask compares every guest's sums with the writer's and, in nbdkit's request log, finds
# the writer's FLUSH before its header and every guest's reads of C in flight during one
# shared span.
tag=trapeze-nbd
. /etc/trapeze/lib.sh
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
. /etc/trapeze/nbd.env
k=${trapeze_guest:-0}
dev=/dev/nbd0
# Debian's programs by their full paths: busybox's applets (its mke2fs makes only ext2)
# come first on PATH.
mke2fs=/usr/sbin/mke2fs
nbd_client=/usr/sbin/nbd-client
mnt=/mnt/nbd
FILES="small:7 one:1024 three:3072"
connected=no

# End here after a check the script cannot go on from. The writer marks the shared area
# abandoned first, so that the readers stop waiting for it.
give_up() {
    if [ "$connected" = yes ]; then
        [ "$k" = 0 ] && put_block 0 "trapeze-nbd-shared $nonce abandoned -"
        "$nbd_client" -d "$dev" >/dev/null 2>&1
    fi
    finish
    exit 1
}
now() { cut -d. -f1 /proc/uptime; }
late() { [ "$(now)" -ge "$deadline" ]; }
# put_block N TEXT: TEXT as the shared area's 4 KiB block N, written through and flushed.
put_block() {
    printf '%s\n' "$2" > /tmp/block
    dd if=/tmp/block of="$dev" bs=4096 count=1 seek=$((area_mib * 256 + $1)) conv=sync,fsync,notrunc oflag=direct 2>/dev/null
}
# get_block N: the text of the shared area's block N, read with O_DIRECT.
get_block() {
    dd if="$dev" bs=4096 count=1 skip=$((area_mib * 256 + $1)) iflag=direct 2>/dev/null | tr -d '\000' | head -n 1
}
# md5_of MIB LEN: the md5sum of LEN MiB of the device at MIB, read with O_DIRECT.
md5_of() { dd if="$dev" bs=1M skip="$1" count="$2" iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1; }

ext4_files() {
    mkdir -p "$mnt"
    # -E nodiscard: mke2fs would otherwise trim the device first (the export's trims are
    # advisory; the point here is the file system's own I/O).
    if ! "$mke2fs" -q -F -t ext4 -E nodiscard -L trapeze-nbd "$dev" "${fs_mib}M" >/tmp/mke2fs.log 2>&1; then
        fail "mkfs.ext4 on $dev: $(tail -n 3 /tmp/mke2fs.log | tr '\n' ' ')"; give_up
    fi
    pass "mkfs.ext4 on $dev's first $fs_mib MiB ($("$mke2fs" -V 2>&1 | head -n 1))"
    check "mount -t ext4 $dev" mount -t ext4 "$dev" "$mnt" || give_up
    grep " $mnt " /proc/mounts | sed "s/^/$tag: mounted: /"

    : > /tmp/sums
    for f in $FILES; do
        name=${f%%:*}; kib=${f#*:}
        dd if=/dev/urandom of="$mnt/$name" bs=1k count="$kib" 2>/dev/null
        (cd "$mnt" && md5sum "$name") >> /tmp/sums
    done
    # A text pattern: line N is "trapeze-nbd line N", 20000 lines.
    i=0
    while [ "$i" -lt 20000 ]; do echo "trapeze-nbd line $i"; i=$((i + 1)); done > "$mnt/lines.txt"
    (cd "$mnt" && md5sum lines.txt) >> /tmp/sums
    mkdir -p "$mnt/dir/sub" && cp "$mnt/small" "$mnt/dir/sub/copy"
    (cd "$mnt" && md5sum dir/sub/copy) >> /tmp/sums
    while read -r sum name; do say "file $name $sum"; done < /tmp/sums
    sync
    check "umount after writing" umount "$mnt"
    drop_caches
    check "mount again (caches dropped)" mount -t ext4 "$dev" "$mnt" || give_up
    check "every file's md5sum matches after the remount" sh -c "cd $mnt && md5sum -c -s /tmp/sums"
    check "lines.txt ends with its last line" [ "$(tail -n 1 "$mnt/lines.txt")" = "trapeze-nbd line 19999" ]
    check "umount after reading" umount "$mnt" || give_up
}

# The writer: regions A and C written through and flushed, then the header.
write_shared() {
    head -c $((a_len << 20)) /dev/urandom > /tmp/a
    head -c $((c_len << 20)) /dev/urandom > /tmp/c
    ma=$(md5sum < /tmp/a | cut -d' ' -f1)
    mc=$(md5sum < /tmp/c | cut -d' ' -f1)
    check "A: $a_len MiB written at $a_mib MiB (O_DIRECT, fsync)" \
        dd if=/tmp/a of="$dev" bs=1M seek="$a_mib" oflag=direct conv=fsync,notrunc 2>/dev/null || give_up
    check "C: $c_len MiB written at $c_mib MiB (O_DIRECT, fsync)" \
        dd if=/tmp/c of="$dev" bs=1M seek="$c_mib" oflag=direct conv=fsync,notrunc 2>/dev/null || give_up
    check "blockdev --flushbufs $dev" blockdev --flushbufs "$dev"
    rm -f /tmp/a /tmp/c
    say "shared wrote $ma $mc"
    check "the header written after the flushed data" put_block 0 "trapeze-nbd-shared $nonce $ma $mc" || give_up
}

# A reader: wait for this run's header, then A against its sum.
read_shared() {
    t0=$(now)
    while :; do
        set -- $(get_block 0)
        [ "$1 $2" = "trapeze-nbd-shared $nonce" ] && break
        late && break
        sleep 1
    done
    check "the writer's header for run $nonce is on the export (waited $(($(now) - t0)) s)" \
        [ "$1 $2" = "trapeze-nbd-shared $nonce" ] || give_up
    [ "$3" = abandoned ] && { fail "the writer gave up before writing the shared area"; give_up; }
    ma=$3 mc=$4
    drop_caches
    got=$(md5_of "$a_mib" "$a_len")
    say "shared read $got"
    check "A, the writer's flushed $a_len MiB, read back (O_DIRECT, caches dropped): md5 $got, the header's $ma" \
        [ "$got" = "$ma" ]
}

# marked WHAT BASE: how many guests' marks "trapeze-nbd-WHAT NONCE J" are in blocks BASE + J.
marked() {
    n=0 j=0
    while [ "$j" -lt "$guests" ]; do
        [ "$(get_block $(($2 + j)))" = "trapeze-nbd-$1 $nonce $j" ] && n=$((n + 1))
        j=$((j + 1))
    done
    echo "$n"
}

# Every guest: its ready mark (block 1 + k), the others', then C read at once by all. Each
# guest marks its first pass done (block 1 + guests + k) and reads on, at least `c_passes`
# times, until one whole pass has begun after it saw every guest's mark: each guest's
# reads of C then began before every other guest's last pass ended, so all overlap.
read_common() {
    check "ready mark written" put_block $((1 + k)) "trapeze-nbd-ready $nonce $k" || give_up
    t0=$(now)
    until [ "$(marked ready 1)" = "$guests" ] || late; do sleep 0.1; done
    check "all $guests guests ready to read C (waited $(($(now) - t0)) s)" [ "$(marked ready 1)" = "$guests" ] ||
        give_up
    drop_caches
    p=0 seen=no
    while :; do
        p=$((p + 1))
        got=$(md5_of "$c_mib" "$c_len")
        say "common read $p $got"
        check "C, pass $p ($c_len MiB, O_DIRECT): md5 $got, the writer's $mc" [ "$got" = "$mc" ]
        [ "$p" = 1 ] && put_block $((1 + guests + k)) "trapeze-nbd-reading $nonce $k"
        [ "$seen" = yes ] && [ "$p" -ge "$c_passes" ] && break
        [ "$(marked reading $((1 + guests)))" = "$guests" ] && seen=yes
        late && break
    done
    check "C read $p times, the last after every guest's first pass" [ "$seen" = yes ]
}

user_net_up || { finish; exit 1; }
if nbd_connect "$dev" "$port"; then up=yes; else up=no; fi
check "guest $k of $guests: nbd-client connected $dev to 10.0.2.2:$port ($(tail -n 2 /tmp/nbd-client.log | tr '\n' ' '))" \
    [ "$up" = yes ] || give_up
connected=yes
sectors=$(cat /sys/block/nbd0/size)
check "$dev holds $((sectors / 2048)) MiB" [ "$sectors" -gt 0 ]

if [ "$k" = 0 ]; then
    ext4_files
    write_shared
else
    read_shared
fi
read_common
check "no I/O error on $dev in the kernel log" sh -c "! dmesg | grep -q 'I/O error, dev nbd0'"
"$nbd_client" -d "$dev" >/dev/null 2>&1
finish
