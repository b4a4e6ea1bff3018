#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# kernel-crate/guest/nbd.sh — Linux's NBD client on gmblock's NBD export (`cargo xtask vm
# nbd-test`). On the host, nbdkit runs gmblock's plugin over a volume striped across two
# gmblockd servers; QEMU's user-mode network (`-netdev user`) lets this guest reach the
# host's 127.0.0.1 as 10.0.2.2. /etc/trapeze/nbd.env (written by xtask) gives `port`.
#
# The guest connects /dev/nbd0 with Debian's nbd-client, makes an ext4 file system on it
# with Debian's mke2fs (copied into the initramfs with its libraries), mounts it, writes
# files of known contents (random bytes, their md5sums kept; one of them a seeded text
# pattern the host can rebuild), syncs, unmounts, drops the caches, mounts again and checks
# every file's md5sum, unmounts and disconnects. It prints "trapeze-nbd: file NAME MD5" per
# file: after the guest powers off, xtask reassembles the volume from the two servers'
# files, checks it with `e2fsck -fn` and reads each file out with `debugfs` against these
# sums.
tag=trapeze-nbd
. /etc/trapeze/lib.sh
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
. /etc/trapeze/nbd.env
dev=/dev/nbd0
# Debian's programs by their full paths: busybox's applets (its mke2fs makes only ext2)
# come first on PATH.
mke2fs=/usr/sbin/mke2fs
nbd_client=/usr/sbin/nbd-client
mnt=/mnt/nbd
FILES="small:7 one:1024 three:3072"

ip link set lo up
if ! ip link set eth0 up || ! ip addr add 10.0.2.15/24 dev eth0; then
    fail "eth0 (virtio-net, QEMU user network) is up as 10.0.2.15"; finish; exit 1
fi
t=0
until "$nbd_client" 10.0.2.2 "$port" "$dev" -b 4096 -t 30 -N "" >/tmp/nbd-client.log 2>&1; do
    t=$((t + 1))
    [ "$t" -ge 60 ] && break
    sleep 0.5
done
check "nbd-client connected $dev to 10.0.2.2:$port ($(tail -n 2 /tmp/nbd-client.log | tr '\n' ' '))" [ "$t" -lt 60 ] ||
    { finish; exit 1; }
sectors=$(cat /sys/block/nbd0/size)
check "$dev holds $((sectors / 2048)) MiB" [ "$sectors" -gt 0 ]

mkdir -p "$mnt"
# -E nodiscard: mke2fs would otherwise trim the whole device first (the export's trims
# are advisory; the point here is the file system's own I/O).
if ! "$mke2fs" -q -F -t ext4 -E nodiscard -L trapeze-nbd "$dev" >/tmp/mke2fs.log 2>&1; then
    fail "mkfs.ext4 on $dev: $(tail -n 3 /tmp/mke2fs.log | tr '\n' ' ')"; finish; exit 1
fi
pass "mkfs.ext4 on $dev ($("$mke2fs" -V 2>&1 | head -n 1))"
check "mount -t ext4 $dev" mount -t ext4 "$dev" "$mnt" || { finish; exit 1; }
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
check "mount again (caches dropped)" mount -t ext4 "$dev" "$mnt" || { finish; exit 1; }
check "every file's md5sum matches after the remount" sh -c "cd $mnt && md5sum -c -s /tmp/sums"
check "lines.txt ends with its last line" [ "$(tail -n 1 "$mnt/lines.txt")" = "trapeze-nbd line 19999" ]
check "umount after reading" umount "$mnt"
check "no I/O error on $dev in the kernel log" sh -c "! dmesg | grep -q 'I/O error, dev nbd0'"
"$nbd_client" -d "$dev" >/dev/null 2>&1
finish
