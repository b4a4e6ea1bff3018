#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# kernel-crate/guest/md.sh — gmblock's striped NBD export against Linux md RAID-0 over NBD
# exports of the same servers (`cargo xtask bench block`, its `stripe_md` row). QEMU's
# user-mode network lets this guest reach the host's 127.0.0.1 as 10.0.2.2.
# /etc/trapeze/md.env (written by xtask) gives the ports: `striped` (the volume striped by
# gmblock over four servers), `members` (each of those servers alone), `memory` (nbdkit
# memory), `plain` (an unmodelled gmblockd alone) and `nbd_server` (Debian's nbd-server
# exporting the four servers' files as m1..m4, unmodelled), and `rounds`, `mib`.
#
# /dev/nbd0 is the striped export; /dev/nbd1..4 the single exports, which md stripes as
# /dev/md0 (`mdadm --build`, RAID-0, 32 KiB chunks: no superblock, nothing written);
# /dev/nbd5 and /dev/nbd6 are the ceilings (nbdkit memory; the unmodelled server);
# /dev/md1 is md over nbd-server's four exports (/dev/nbd7..10), the secondary side. Every
# read is Debian's `dd bs=1M iflag=direct` of `mib` MiB, printed as
# "trapeze-md: read SIDE ROUND BYTES SECONDS"; the three volumes' md5sums as
# "trapeze-md: md5 SIDE SUM". Rounds alternate the order of the compared pair (nbd0 then
# md0, md0 then nbd0); md1 is read after the pair.
tag=trapeze-md
. /etc/trapeze/lib.sh
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
. /etc/trapeze/md.env
# Debian's programs by their full paths: busybox's applets come first on PATH.
nbd_client=/usr/sbin/nbd-client
mdadm=/usr/sbin/mdadm
gdd=/usr/bin/dd

user_net_up || { finish; exit 1; }

# connect DEV PORT [EXPORT]: nbd-client on 10.0.2.2:PORT (lib.sh's nbd_connect), checked.
connect() {
    if nbd_connect "$@"; then up=yes; else up=no; fi
    check "nbd-client connected $1 to 10.0.2.2:$2 ($(tail -n 1 /tmp/nbd-client.log))" [ "$up" = yes ]
}

connect /dev/nbd0 "$striped" || { finish; exit 1; }
k=1
for p in $members; do
    connect "/dev/nbd$k" "$p" || { finish; exit 1; }
    k=$((k + 1))
done
connect /dev/nbd5 "$memory" || { finish; exit 1; }
connect /dev/nbd6 "$plain" || { finish; exit 1; }
for k in 1 2 3 4; do
    connect "/dev/nbd$((k + 6))" "$nbd_server" "m$k" || { finish; exit 1; }
done

# build MD FIRST..LAST: RAID-0, 32 KiB chunks, over /dev/nbdFIRST..LAST.
build() {
    if ! "$mdadm" --build "/dev/$1" --level=0 --chunk=32 --raid-devices=4 \
        "/dev/nbd$2" "/dev/nbd$(($2 + 1))" "/dev/nbd$(($2 + 2))" "/dev/nbd$3" >/tmp/mdadm.log 2>&1; then
        fail "mdadm --build /dev/$1 (RAID-0 over nbd$2..$3): $(tail -n 3 /tmp/mdadm.log | tr '\n' ' ')"; return 1
    fi
    pass "mdadm --build /dev/$1 (RAID-0, 32 KiB chunks over nbd$2..$3; $("$mdadm" --version 2>&1))"
    say "$1: $(grep -A 1 "^$1" /proc/mdstat | tr '\n' ' ')"
}
build md0 1 4 || { finish; exit 1; }
build md1 7 10 || { finish; exit 1; }
need=$((mib * 2048))
for d in nbd0 md0 md1 nbd5 nbd6; do
    n=$(cat "/sys/block/$d/size")
    check "/dev/$d holds $((n / 2048)) MiB, at least the $mib MiB read" [ "$n" -ge "$need" ] || { finish; exit 1; }
done

# read SIDE DEV ROUND: one direct sequential read of the first `mib` MiB.
read_dev() {
    if ! "$gdd" if="$2" of=/dev/null bs=1M count="$mib" iflag=direct 2>/tmp/dd.log; then
        fail "dd from $2: $(tail -n 1 /tmp/dd.log)"; return 1
    fi
    # "33554432 bytes (34 MB, 32 MiB) copied, 1.23 s, 27.3 MB/s"
    set -- "$1" "$3" $(sed -n 's/^\([0-9]*\) bytes .* copied, \([0-9.e-]*\) s,.*/\1 \2/p' /tmp/dd.log)
    say "read $1 $2 $3 $4"
}

read_dev ceiling_memory /dev/nbd5 0
read_dev ceiling_plain /dev/nbd6 0
for d in nbd0 md0 md1; do
    sum=$("$gdd" if="/dev/$d" bs=1M count="$mib" iflag=direct 2>/dev/null | md5sum)
    say "md5 $d ${sum%% *}"
done
r=1
while [ "$r" -le "$rounds" ]; do
    if [ $((r % 2)) -eq 1 ]; then
        read_dev nbd0 /dev/nbd0 "$r"; read_dev md0 /dev/md0 "$r"
    else
        read_dev md0 /dev/md0 "$r"; read_dev nbd0 /dev/nbd0 "$r"
    fi
    read_dev md1 /dev/md1 "$r"
    r=$((r + 1))
done
check "no I/O error on an NBD or md device in the kernel log" sh -c "! dmesg | grep -qE 'I/O error, dev (nbd|md)'"
"$mdadm" --stop /dev/md0 >/dev/null 2>&1
"$mdadm" --stop /dev/md1 >/dev/null 2>&1
for k in 0 1 2 3 4 5 6 7 8 9 10; do "$nbd_client" -d "/dev/nbd$k" >/dev/null 2>&1; done
finish
