#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# kernel-crate/guest/bench.sh — the guests' script under `cargo xtask bench vm` (embedded as
# /etc/trapeze/run.sh). /init gives it trapeze_guest=K, trapeze_guests=N and, from the
# kernel command line, trapeze_bench_mb (disk size), trapeze_bench_reads,
# trapeze_bench_seed, trapeze_bench_rounds and trapeze_bench_ko (base64 of the insmod
# arguments of trapeze.ko for this guest; absent = no GMS part).
#
# Guest 1 (B) serves a RAM-backed file (tmpfs) of trapeze_bench_mb MiB with the Debian
# nbd-server over virtio-net (10.0.0.2:10809), loads trapeze.ko as a GMS server, and serves
# until the host stops it. Guests 2… only load trapeze.ko and serve.
# Guest 0 (A) connects Linux's NBD client (/dev/nbd0, the Debian nbd-client) to B, loads
# trapeze.ko with the GMS disk /dev/gms0, and runs trapeze-blkbench on the two devices in
# turn for trapeze_bench_rounds rounds (the first writes the pattern), then powers off.
# Lines for the host start with "trapeze-bench:"; each measurement is one
# "trapeze-bench: result {json}" line.

say() { echo "trapeze-bench: $*"; }
k=${trapeze_guest:-0}
mb=${trapeze_bench_mb:-64}
reads=${trapeze_bench_reads:-2000}
seed=${trapeze_bench_seed:-1}
rounds=${trapeze_bench_rounds:-3}
ko_args=
[ -n "$trapeze_bench_ko" ] && ko_args=$(echo "$trapeze_bench_ko" | base64 -d)
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
mkdir -p /var/run /run /etc
port=10809

net_up() {
    ip link set lo up
    ip link set eth0 up || { say "eth0: no virtio-net interface"; return 1; }
    ip addr add "10.0.0.$((k + 1))/24" dev eth0 || return 1
    say "eth0 $(cat /sys/class/net/eth0/address) is 10.0.0.$((k + 1))/24"
}

load_trapeze() {
    [ -n "$ko_args" ] || return 1
    say "insmod trapeze.ko $ko_args"
    # shellcheck disable=SC2086 # the arguments are words
    insmod /lib/modules/trapeze.ko $ko_args || { say "gms: insmod trapeze.ko $ko_args failed"; return 1; }
}

# One measurement: name, device, round (round 1 writes the pattern first); prints the
# result line or the error.
measure() {
    name=$1 dev=$2 round=$3
    w=
    [ "$round" = 1 ] && w=--write
    say "$name: round $round: trapeze-blkbench${w:+ $w} --size-mb $mb --reads $reads on $dev"
    # shellcheck disable=SC2086 # $w is one optional word
    if out=$(trapeze-blkbench --name "$name" $w --size-mb "$mb" --reads "$reads" --seed "$seed" "$dev" 2>&1); then
        say "result $out"
    else
        say "$name: FAILED: $out"
    fi
}

serve_forever() {
    say "serving until the host stops this guest"
    while :; do sleep 3600; done
}

case "$k" in
1)
    net_up || exit 1
    dd if=/dev/zero of=/tmp/nbd.img bs=1M count=0 seek="$mb" 2>/dev/null || exit 1
    # -C /dev/null: no config file; the export given on the command line is the default one.
    nbd-server -C /dev/null "$port" /tmp/nbd.img || { say "nbd-server failed to start"; exit 1; }
    say "nbd-server exporting /tmp/nbd.img ($mb MiB, tmpfs) on 10.0.0.2:$port"
    load_trapeze
    serve_forever
    ;;
0)
    net_up || exit 1
    t=0
    nbd=
    # -t 30: a request the server does not answer fails after 30 s instead of hanging.
    until nbd-client 10.0.0.2 "$port" /dev/nbd0 -b 4096 -t 30 -N "" >/tmp/nbd-client.log 2>&1; do
        t=$((t + 1))
        [ "$t" -ge 120 ] && { say "nbd: could not connect to 10.0.0.2:$port: $(tail -n 3 /tmp/nbd-client.log | tr '\n' ' ')"; break; }
        sleep 0.5
    done
    if [ -b /dev/nbd0 ] && [ "$(cat /sys/block/nbd0/size)" -gt 0 ]; then
        say "nbd: /dev/nbd0 connected, $(($(cat /sys/block/nbd0/size) / 2048)) MiB"
        nbd=/dev/nbd0
    fi
    # The network floor under NBD: ICMP round trips guest A -> guest B over virtio-net.
    rtt=$(ping -c 20 -i 0.05 -q 10.0.0.2 2>&1 | sed -n 's/.*min\/avg\/max = //p')
    say "net: ping 10.0.0.2 x20 round trip min/avg/max ${rtt:-unknown}"
    gms=
    if [ -z "$ko_args" ]; then
        say "gms: not measured (${trapeze_bench_gms_why:-no reason given})"
    elif load_trapeze; then
        t=0
        while [ ! -b /dev/gms0 ] && [ "$t" -lt 50 ]; do sleep 0.1; t=$((t + 1)); done
        if [ -b /dev/gms0 ]; then
            gms=/dev/gms0
        else
            say "gms: /dev/gms0 does not exist after insmod trapeze.ko $ko_args"
        fi
    fi
    # The devices take turns, round after round; the first round writes the pattern.
    r=1
    while [ "$r" -le "$rounds" ]; do
        [ -n "$nbd" ] && measure nbd "$nbd" "$r"
        [ -n "$gms" ] && measure gms "$gms" "$r"
        r=$((r + 1))
    done
    [ -n "$nbd" ] && nbd-client -d /dev/nbd0 >/dev/null 2>&1
    if [ -n "$gms" ]; then
        st=/sys/module/trapeze/parameters/gms_disk_stats
        [ -r "$st" ] && say "gms: stats: $(tr '\n' ' ' < "$st")"
        dmesg | grep -E '(gms0|trapeze): ' | tail -n 8 | while read -r l; do say "gms: dmesg: $l"; done
    fi
    if lsmod 2>/dev/null | grep -q '^trapeze ' || [ -d /sys/module/trapeze ]; then
        rmmod trapeze && say "rmmod trapeze done" || say "rmmod trapeze failed"
    fi
    # The GMS backend's counters, printed at remove: reads over the network, from the
    # read-ahead cache, prefetches (did read-ahead engage?).
    c=$(dmesg | sed -n 's/.*\/dev\/gms0 on GMS: //p' | tail -n 1)
    [ -n "$c" ] && say "gms: counters: $c"
    say "done"
    ;;
*)
    load_trapeze
    serve_forever
    ;;
esac
