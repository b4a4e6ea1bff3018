#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# kernel-crate/guest/bench.sh — the guests' script under `cargo xtask bench vm` (embedded as
# /etc/trapeze/run.sh). /init gives it trapeze_guest=K, trapeze_guests=N and, from the
# kernel command line, trapeze_bench_mb (disk size), trapeze_bench_reads,
# trapeze_bench_seed, trapeze_bench_rounds, trapeze_bench_file_mb (the file of the file
# phase), trapeze_bench_swap_avail_mb (RAM left to the swap workload),
# trapeze_bench_swap_rounds (its runs on each device), trapeze_bench_large_mb (the large
# data set: /dev/gms0 and the fair disk are that large, rows gms_large and fair_large; 0 =
# none) and
# trapeze_bench_ko (base64 of the insmod arguments of trapeze.ko for this guest; absent =
# no GMS part).
#
# Guest 1 (B) serves a RAM-backed file (tmpfs) of trapeze_bench_mb MiB with the Debian
# nbd-server over virtio-net (10.0.0.2:10809), loads trapeze.ko as a GMS server, and serves
# until the host stops it. Guests 2… only load trapeze.ko and serve.
# Guest 0 (A) connects Linux's NBD client (/dev/nbd0, the Debian nbd-client) to B, loads
# trapeze.ko with the GMS disk /dev/gms0, then measures the two devices in the same way,
# taking turns (nbd, then gms):
# 1. raw device: trapeze-blkbench for trapeze_bench_rounds rounds on four devices — also
#    the fair baseline's virtio-blk disk (QEMU's NBD client to qemu-nbd on the host, serial
#    trapeze-fair), the null-co floor (serial trapeze-null), /dev/gms0's own floor on the
#    RAM backend (/dev/gmsram0, row ram) and the large data set — in an order reversed
#    every other round; each round writes the pattern, times trapeze_bench_writes random
#    4 KiB writes, random 4 KiB and sequential reads with O_DIRECT, every page checked
#    (not on null-co); "cpu begin/end NAME ROUND" lines around each for the host;
# 2. files: ext2 (mke2fs, 4 KiB blocks) on each device, a file of trapeze_bench_file_mb
#    MiB of pattern pages written and synced (trapeze-filebench), then per round the page
#    cache dropped and the file read whole with streaming read(), dropped again and read
#    through mmap, every page checked; unmounted;
# 3. swap: mkswap + swapon on the device, trapeze-memhog over 1.5x trapeze_bench_swap_avail_mb
#    MiB in a memory cgroup limited to that (every page written, checked in order and at
#    random, rewritten, checked: they go to swap and come back), its wall time reported;
#    swapoff; trapeze_bench_swap_rounds times, the runs' order reversed every other round.
#    The runs: gms, fair, nbd and zram (/dev/zram0, lzo-rle) with the incompressible
#    pattern; gms_compressible and zram_compressible with trapeze-memhog --compressible
#    (about 2:1); ram (no swap, no memory.max: all in RAM, the floor); gms_half (/dev/gms0,
#    memory.max half the workload).
# Every phase counts I/O trouble: new kernel log lines (I/O errors, swap read/write errors,
# ext2 errors, NBD request failures, OOM kills, hung tasks), page errors of /dev/gms0
# (gms_disk_stats) and the tools' own failures; each becomes an "errors: PHASE: …" line,
# and the host fails the bench on any. Then powers off.
# Lines for the host start with "trapeze-bench:"; each measurement is one
# "trapeze-bench: result {json}" (raw device), "file-result {json}" or
# "swap-result {json}" line. With trapeze_bench_mode=replication (repair, mac) the guests
# run one replication (repair, MAC-cost) session instead (see replication_session,
# repair_session, mac_session).

say() { echo "trapeze-bench: $*"; }
k=${trapeze_guest:-0}
mb=${trapeze_bench_mb:-64}
reads=${trapeze_bench_reads:-2000}
seed=${trapeze_bench_seed:-1}
rounds=${trapeze_bench_rounds:-5}
writes=${trapeze_bench_writes:-500}
file_mb=${trapeze_bench_file_mb:-16}
swap_avail_mb=${trapeze_bench_swap_avail_mb:-16}
swap_rounds=${trapeze_bench_swap_rounds:-2}
swap_mb=$((swap_avail_mb * 3 / 2))
large_mb=${trapeze_bench_large_mb:-0}
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

# One measurement: name, device, round. Every round writes the pattern (timed), times
# $writes random 4 KiB writes, then the reads; the null-co disk holds no pattern, so its
# pages are not checked. The host samples its processes' CPU time at the "cpu begin" and
# "cpu end" lines (the 0.1 s pause lets it see the first before the work starts). Prints
# the result line, with its round, or the error.
measure() {
    name=$1 dev=$2 round=$3 size=${4:-$mb}
    nv=
    [ "$name" = null ] && nv=--no-verify
    say "$name: round $round: trapeze-blkbench --write --writes $writes --size-mb $size --reads $reads${nv:+ $nv} on $dev"
    phase_start
    say "cpu begin $name $round"
    sleep 0.1
    # shellcheck disable=SC2086 # $nv is one optional word
    out=$(trapeze-blkbench --name "$name" --write --writes "$writes" --size-mb "$size" --reads "$reads" --seed "$seed" $nv "$dev" 2>&1)
    rc=$?
    say "cpu end $name $round"
    if [ "$rc" = 0 ]; then
        say "result $(echo "$out" | sed "s/^{/{\"round\":$round,/")"
    else
        say "errors: device $name round $round: trapeze-blkbench failed: $(echo "$out" | tail -n 2 | tr '\n' ' ')"
    fi
    phase_end "device $name round $round"
}

# The virtio-blk disk whose serial is $1 (QEMU's -device …,serial=), as /dev/vdX.
disk_by_serial() {
    for b in /sys/block/vd*; do
        [ "$(cat "$b/serial" 2>/dev/null)" = "$1" ] && { echo "/dev/${b##*/}"; return 0; }
    done
    return 1
}

# I/O trouble in the kernel log, counted before and after every phase.
TROUBLE='I/O error|Write-error on swap|Read-error on swap|EXT2-fs error|EXT2-fs \(.*\): error|nbd0: (Other side returned error|Receive control failed|Connection timed out|Dead connection|Possible stuck request)|Out of memory|oom-kill|Killed process|blocked for more than'
trouble_count() { dmesg | grep -cE "$TROUBLE"; }
# Page errors of /dev/gms0 (0 without the module).
gms_errors() { v=$(sed -n 's/^page_errors: //p' /sys/module/trapeze/parameters/gms_disk_stats 2>/dev/null); echo "${v:-0}"; }
phase_start() { trouble0=$(trouble_count); gmserr0=$(gms_errors); }
# Report what the phase named $1 added: kernel log lines and GMS page errors.
phase_end() {
    n=$(($(trouble_count) - trouble0))
    [ "$n" -gt 0 ] && say "errors: $1: $n kernel log line(s), the first: $(dmesg | grep -E "$TROUBLE" | tail -n "$n" | head -n 1)"
    g=$(($(gms_errors) - gmserr0))
    [ "$g" -gt 0 ] && say "errors: $1: $g page error(s) in /dev/gms0's gms_disk_stats"
    return 0
}
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# KiB read and written on block device $1 so far, and its read and write requests
# (/sys/block/NAME/stat).
# 0 0 0 0 without a device ("-": the all-in-RAM swap run).
dev_io() {
    if [ -b "$1" ]; then awk '{ print int($3 / 2), int($7 / 2), $1, $5 }' "/sys/block/${1##*/}/stat"; else echo 0 0 0 0; fi
}
# This guest's CPU time so far in USER_HZ ticks (/proc/stat): user (with nice), system,
# irq, softirq, idle.
cpu_ticks() { awk '$1 == "cpu" { print $2 + $3, $4, $7, $8, $5 }' /proc/stat; }
mem_mb() { echo $(($(sed -n "s/^$1: *\([0-9]*\) kB/\1/p" /proc/meminfo) / 1024)); }

# File phase, part one: ext2 on device $2 (name $1), mounted on /mnt/$1, the file written.
file_prepare() {
    name=$1 dev=$2
    phase_start
    mkdir -p "/mnt/$name"
    ok=no
    if ! mke2fs -F -b 4096 -m 0 "$dev" > /tmp/mkfs.log 2>&1; then
        say "errors: file $name: mke2fs $dev failed: $(tail -n 1 /tmp/mkfs.log)"
    elif ! mount -t ext2 "$dev" "/mnt/$name" 2>/tmp/mount.err; then
        say "errors: file $name: mount -t ext2 $dev failed: $(cat /tmp/mount.err)"
    elif out=$(trapeze-filebench --mode write --name "$name" --size-mb "$file_mb" --seed "$seed" "/mnt/$name/data" 2>&1); then
        say "file-result $out"
        ok=yes
    else
        say "errors: file $name: writing $file_mb MiB: $out"
    fi
    phase_end "file $name: mke2fs, mount, write"
    [ "$ok" = yes ]
}

# File phase, part two: the file of device $1 read with mode $2 (stream or mmap) after
# the page cache was dropped, in round $3.
file_read() {
    name=$1 mode=$2 round=$3
    drop_caches
    phase_start
    if out=$(trapeze-filebench --mode "$mode" --name "$name" --seed "$seed" "/mnt/$name/data" 2>&1); then
        say "file-result $out"
    else
        say "errors: file $name $mode round $round: $out"
    fi
    phase_end "file $name $mode round $round"
}

# cgroup v2 mounted on /sys/fs/cgroup with the memory controller on for its children.
memory_cgroups() {
    if [ ! -e /sys/fs/cgroup/cgroup.controllers ]; then
        mkdir -p /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup || return 1
    fi
    grep -qw memory /sys/fs/cgroup/cgroup.subtree_control || echo +memory > /sys/fs/cgroup/cgroup.subtree_control
}

# zram's data and compressed bytes now, KiB (/sys/block/zram0/mm_stat's first two fields).
zram_kib() { awk '{ print int($1 / 1024), int($2 / 1024) }' /sys/block/zram0/mm_stat 2>/dev/null || echo 0 0; }

# /dev/zram0 emptied and sized $mb MiB for the next swap run (lzo-rle: the kernel's
# default); the error line and a failure if it cannot be.
zram_ready() {
    [ -b /dev/zram0 ] || { say "errors: swap $1: no /dev/zram0 (a kernel without CONFIG_ZRAM?)"; return 1; }
    if ! { echo 1 > /sys/block/zram0/reset && echo lzo-rle > /sys/block/zram0/comp_algorithm &&
        echo "${mb}M" > /sys/block/zram0/disksize; } 2>/tmp/zram.err; then
        say "errors: swap $1: setting up /dev/zram0 failed: $(cat /tmp/zram.err)"
        return 1
    fi
}

# One swap run, named $1: swap on device $2 ("-": none), trapeze-memhog over $swap_mb MiB
# in a memory cgroup whose memory.max is $3 MiB ("max": no limit), pattern $4
# (incompressible or compressible); its report, with the peak swap use seen and, on zram,
# the data and compressed KiB at the peak.
swap_run() {
    name=$1 dev=$2 avail=$3 pattern=$4
    phase_start
    if [ "$dev" != - ]; then
        case "$dev" in /dev/zram*) zram_ready "$name" || { phase_end "swap $name"; return; } ;; esac
        if ! mkswap "$dev" > /tmp/mkswap.log 2>&1; then
            say "errors: swap $name: mkswap $dev failed: $(tail -n 1 /tmp/mkswap.log)"
            phase_end "swap $name"
            return
        fi
        if ! swapon "$dev" 2>/tmp/swapon.err; then
            say "errors: swap $name: swapon $dev failed: $(cat /tmp/swapon.err)"
            phase_end "swap $name"
            return
        fi
    fi
    # The workload runs in a memory cgroup of its own, limited to $avail MiB (memory.max):
    # exactly the same RAM on either device, whatever the rest of the guest uses (pinning
    # the rest of RAM away instead left 15.6 to 17 MiB by MemAvailable's drift, and the
    # devices then swapped 125 to 218 MiB).
    cg=/sys/fs/cgroup/swap-$name
    limit=max
    [ "$avail" = max ] || limit=${avail}M
    if ! memory_cgroups 2>/tmp/cg.err || ! mkdir "$cg" 2>>/tmp/cg.err ||
        ! echo "$limit" > "$cg/memory.max" 2>>/tmp/cg.err; then
        say "errors: swap $name: no memory cgroup for the workload (a kernel without CONFIG_MEMCG?): $(cat /tmp/cg.err)"
        [ "$dev" = - ] || swapoff "$dev"
        phase_end "swap $name"
        return
    fi
    flag=
    [ "$pattern" = compressible ] && flag=--compressible
    say "swap $name: MemTotal $(mem_mb MemTotal) MiB, MemAvailable $(mem_mb MemAvailable) MiB; trapeze-memhog${flag:+ $flag} over $swap_mb MiB in a cgroup of $limit on $dev"
    set -- $(dev_io "$dev") $(cpu_ticks)
    in0=$1 out0=$2 rq0=$3 wq0=$4 us0=$5 sy0=$6 hi0=$7 si0=$8 id0=$9
    # shellcheck disable=SC2086 # $5 is one optional word
    sh -c 'echo $$ > "$1/cgroup.procs" && exec trapeze-memhog --mib "$2" --seed "$3" $4' memhog "$cg" "$swap_mb" "$seed" "$flag" \
        > /tmp/memhog.out 2>&1 &
    pid=$!
    peak=0 zorig=0 zcompr=0
    t=0
    # At most 600 s, /proc/swaps (and zram's mm_stat) sampled every 0.5 s.
    while kill -0 "$pid" 2>/dev/null && [ "$t" -lt 1200 ]; do
        u=$(awk -v d="$dev" '$1 == d { print $4; f = 1 } END { if (!f) print 0 }' /proc/swaps)
        [ "$u" -gt "$peak" ] && peak=$u
        case "$dev" in /dev/zram*)
            set -- $(zram_kib)
            [ "$1" -gt "$zorig" ] && zorig=$1 zcompr=$2
            ;;
        esac
        sleep 0.5
        t=$((t + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid"
        say "errors: swap $name: trapeze-memhog still running after 600 s: killed"
    fi
    wait "$pid"
    rc=$?
    set -- $(dev_io "$dev") $(cpu_ticks)
    swin=$(($1 - in0)) swout=$(($2 - out0)) swrq=$(($3 - rq0)) swwq=$(($4 - wq0))
    ticks="{\"user\":$(($5 - us0)),\"system\":$(($6 - sy0)),\"irq\":$(($7 - hi0)),\"softirq\":$(($8 - si0)),\"idle\":$(($9 - id0))}"
    json=$(grep '^{"tool":"trapeze-memhog"' /tmp/memhog.out)
    zram=
    case "$dev" in /dev/zram*) zram=",\"zram_peak_data_kib\":$zorig,\"zram_peak_compr_kib\":$zcompr" ;; esac
    amb=$avail
    [ "$avail" = max ] && amb=null
    if [ "$rc" = 0 ] && [ -n "$json" ] && grep -q "pages verified, 0 wrong" /tmp/memhog.out; then
        say "swap-result {\"name\":\"$name\",\"device\":\"$dev\",\"avail_mb\":$amb,\"peak_swap_kib\":$peak,\"swap_in_kib\":$swin,\"swap_out_kib\":$swout,\"read_requests\":$swrq,\"write_requests\":$swwq,\"cpu_ticks\":$ticks$zram,\"memhog\":$json}"
        if [ "$dev" = - ]; then
            [ "$(awk 'NR > 1' /proc/swaps | wc -l)" = 0 ] || say "errors: swap $name: a swap device was on during the all-in-RAM run"
        else
            [ "$peak" -gt 1024 ] || say "errors: swap $name: swap barely used (peak $peak KiB in /proc/swaps)"
            # The workload is larger than the RAM left: at least half the excess must go
            # out to swap while it runs, or its time says nothing about the device.
            least=$(((swap_mb - avail) * 512))
            [ "$swout" -ge "$least" ] ||
                say "errors: swap $name: the workload barely swapped ($swout KiB written to $dev while it ran, less than $least)"
        fi
    else
        say "errors: swap $name: trapeze-memhog exit status $rc: $(tail -n 3 /tmp/memhog.out | tr '\n' ' ')"
    fi
    rmdir "$cg" || say "errors: swap $name: the workload's cgroup $cg could not be removed"
    if [ "$dev" != - ]; then
        timeout 120 swapoff "$dev" || say "errors: swap $name: swapoff $dev failed or took over 120 s"
        grep -q "^$dev " /proc/swaps && say "errors: swap $name: $dev still in /proc/swaps after swapoff"
    fi
    phase_end "swap $name"
}

# The swap runs (see the header): name, then device, memory.max in MiB and pattern.
SWAP_RUNS="gms fair nbd zram gms_compressible zram_compressible ram gms_half"
swap_case() {
    case "$1" in
    gms | fair | nbd) eval "echo \"\${$1:--}\"" "$swap_avail_mb" incompressible ;;
    zram) echo /dev/zram0 "$swap_avail_mb" incompressible ;;
    gms_compressible) echo "${gms:--}" "$swap_avail_mb" compressible ;;
    zram_compressible) echo /dev/zram0 "$swap_avail_mb" compressible ;;
    ram) echo - max incompressible ;;
    gms_half) echo "${gms:--}" $((swap_mb / 2)) incompressible ;;
    esac
}

serve_forever() {
    say "serving until the host stops this guest"
    while :; do sleep 3600; done
}

# The replication sessions (trapeze_bench_mode=replication): fresh guests, guest 0's
# /dev/gms0 of trapeze_bench_mb MiB keeping the copies its insmod arguments ask for; the
# pattern written in 256 KiB O_DIRECT writes (timed), then trapeze_bench_repl_writes
# random 4 KiB writes (each timed), then reads checked. One "repl-result {json}" line.
# A session's start: the servers load trapeze.ko and serve; guest 0 loads it and waits
# (5 s at most) for /dev/gms0. $1 names the session in the error.
session_start() {
    [ "$k" = 0 ] || { load_trapeze; serve_forever; }
    load_trapeze || exit 1
    t=0
    while [ ! -b /dev/gms0 ] && [ "$t" -lt 50 ]; do sleep 0.1; t=$((t + 1)); done
    [ -b /dev/gms0 ] || { say "errors: $1: no /dev/gms0 after insmod trapeze.ko $ko_args"; exit 1; }
}
replication_session() {
    session_start replication
    phase_start
    w=${trapeze_bench_repl_writes:-500}
    if out=$(trapeze-blkbench --name gms --write --writes "$w" --reads 50 --size-mb "$mb" --seed "$seed" /dev/gms0 2>&1); then
        say "repl-result $out"
    else
        say "errors: replication: trapeze-blkbench failed: $(echo "$out" | tail -n 2 | tr '\n' ' ')"
    fi
    phase_end "replication"
    st=/sys/module/trapeze/parameters/gms_disk_stats
    [ -r "$st" ] && say "gms: stats: $(tr '\n' ' ' < "$st")"
    rmmod trapeze || say "errors: replication: rmmod trapeze failed"
    say "done"
    exit 0
}
[ "${trapeze_bench_mode:-}" = replication ] && replication_session

# The repair session (trapeze_bench_mode=repair): fresh guests, guest 0's /dev/gms0 of
# trapeze_bench_mb MiB with two copies of every page on the servers (guests 1..3). The
# pattern is written; then guest 0 asks the host to kill guest 3 ("KILL node 3") and times
# re-replication from node 3's failure declaration until the last copy it held is made
# again (the moment disk_rereplicated last grew, polled every 0.1 s, once a pass met no
# page short of a copy); then every page is read back and checked. One
# "repair-result {json}" line.
kstat() { v=$(sed -n "s/^$1: //p" /sys/module/trapeze/parameters/stats 2>/dev/null); echo "${v:-0}"; }
uptime_s() { cut -d' ' -f1 /proc/uptime; }
repair_session() {
    session_start repair
    phase_start
    if ! out=$(trapeze-blkbench --name gms --write --reads 1 --size-mb "$mb" --seed "$seed" /dev/gms0 2>&1); then
        say "errors: repair: the pattern write failed: $(echo "$out" | tail -n 2 | tr '\n' ' ')"
        exit 1
    fi
    r0=$(kstat disk_rereplicated)
    p0=$(kstat disk_rereplicate_passes)
    say "KILL node 3"
    t=0
    while ! dmesg | grep -q "gms: node 3 silent" && [ "$t" -lt 600 ]; do sleep 0.1; t=$((t + 1)); done
    dmesg | grep -q "gms: node 3 silent" || { say "errors: repair: node 3 was never declared failed"; exit 1; }
    td=$(uptime_s)
    last=$r0
    tl=$td
    t=0
    while [ "$t" -lt 3000 ]; do
        c=$(kstat disk_rereplicated)
        if [ "$c" != "$last" ]; then last=$c; tl=$(uptime_s); fi
        [ "$(kstat disk_rereplicate_passes)" -ge $((p0 + 2)) ] && [ "$(kstat disk_replicas_short)" = 0 ] && break
        sleep 0.1
        t=$((t + 1))
    done
    short=$(kstat disk_replicas_short)
    [ "$short" = 0 ] || say "errors: repair: $short replicas still short of a copy after 300 s"
    if ! check=$(trapeze-blkbench --name gms --reads 50 --size-mb "$mb" --seed "$seed" /dev/gms0 2>&1); then
        say "errors: repair: reading the disk back failed: $(echo "$check" | tail -n 2 | tr '\n' ' ')"
    fi
    phase_end "repair"
    n=$((last - r0))
    say "repair-result $(awk -v n="$n" -v a="$td" -v b="$tl" -v s="$short" -v f="$(kstat disk_rereplicate_failed)" 'BEGIN {
        secs = b - a; rate = (secs > 0) ? n * 4096 / 1048576 / secs : 0
        printf "{\"rereplicated\":%d,\"repair_secs\":%.2f,\"repair_mb_s\":%.3f,\"short\":%d,\"failed_copies\":%d}", n, secs, rate, s, f }')"
    say "repair-check $check"
    rmmod trapeze || say "errors: repair: rmmod trapeze failed"
    say "done"
    exit 0
}
[ "${trapeze_bench_mode:-}" = repair ] && repair_session

# The MAC-cost sessions (trapeze_bench_mode=mac): fresh guests whose link the host runs
# under a cluster key or without one, session by session. Guest 0 measures /dev/gms0 as a
# raw-device round does (the pattern written, $writes random 4 KiB writes, $reads random
# 4 KiB reads and sequential reads, every page checked): one "mac-result {json}" line,
# then the unload's link line ("link: node 0 link (keyed) refused: …"), which says whether
# the NIC under this guest authenticated its link.
mac_session() {
    session_start mac
    phase_start
    say "cpu begin mac 1"
    sleep 0.1
    out=$(trapeze-blkbench --name gms --write --writes "$writes" --size-mb "$mb" --reads "$reads" --seed "$seed" /dev/gms0 2>&1)
    rc=$?
    say "cpu end mac 1"
    if [ "$rc" = 0 ]; then
        say "mac-result $out"
    else
        say "errors: mac: trapeze-blkbench failed: $(echo "$out" | tail -n 2 | tr '\n' ' ')"
    fi
    phase_end "mac"
    rmmod trapeze || say "errors: mac: rmmod trapeze failed"
    l=$(dmesg | sed -n 's/.*\(node [0-9]* link (.*) refused:.*\)/\1/p' | tail -n 1)
    say "link: ${l:-no link line at unload}"
    say "done"
    exit 0
}
[ "${trapeze_bench_mode:-}" = mac ] && mac_session

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
    # -t 30: a request the server does not answer fails after 30 s instead of hanging;
    # -swap: the client locks its memory (the swap phase swaps onto /dev/nbd0).
    until nbd-client 10.0.0.2 "$port" /dev/nbd0 -b 4096 -t 30 -swap -N "" >/tmp/nbd-client.log 2>&1; do
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
        # The disk's load (the volume's label and floor map read, its claim written, a new
        # volume's map made) is timed on its own: the rounds measure the loaded disk.
        t=0
        while [ -n "$gms" ] && [ "$(sed -n 's/^disk_ready: //p' /sys/module/trapeze/parameters/stats)" != 1 ] && [ "$t" -lt 600 ]; do
            sleep 0.1
            t=$((t + 1))
        done
        if [ -n "$gms" ] && [ "$t" -ge 600 ]; then
            say "errors: device gms: /dev/gms0 did not load within 60 s"
        elif [ -n "$gms" ]; then
            say "gms: /dev/gms0 loaded $((t / 10)).$((t % 10)) s after it appeared"
        fi
    fi
    # The fair baseline's virtio-blk disks (QEMU's NBD client to qemu-nbd on the host; the
    # null-co floor): a missing one is an error, never skipped.
    fair=$(disk_by_serial trapeze-fair) || say "errors: device fair: no virtio-blk disk with serial trapeze-fair"
    null=$(disk_by_serial trapeze-null) || say "errors: device null: no virtio-blk disk with serial trapeze-null"
    say "fair: ${fair:-missing} (QEMU NBD client -> host qemu-nbd), null: ${null:-missing} (null-co)"
    [ -n "$nbd" ] || say "errors: device nbd: /dev/nbd0 not connected"
    [ -n "$gms" ] || say "errors: device gms: no /dev/gms0"
    devices="gms fair null nbd"
    # The floor of /dev/gms0: the same block driver on local RAM (/dev/gmsram0, made when
    # the insmod arguments give gms_disk_mb beside gms_disk_pages).
    ram=
    if echo " $ko_args " | grep -q ' gms_disk_mb=' && [ -n "$gms" ]; then
        t=0
        while [ ! -b /dev/gmsram0 ] && [ "$t" -lt 50 ]; do sleep 0.1; t=$((t + 1)); done
        if [ -b /dev/gmsram0 ]; then ram=/dev/gmsram0; else say "errors: device ram: no /dev/gmsram0"; fi
        devices="$devices ram"
    fi
    # The large data set: the first $large_mb MiB of /dev/gms0 and of the fair disk (both
    # that large), 4x the answer tables' reach, beside the small one ($mb MiB).
    gms_large= fair_large=
    if [ "$large_mb" -gt 0 ]; then
        gms_large=$gms fair_large=$fair
        devices="$devices gms_large fair_large"
        say "large data set: $large_mb MiB of $gms and $fair"
    fi
    rdevices=$(for d in $devices; do echo "$d"; done | sed -n '1!G;h;$p' | tr '\n' ' ')
    # The devices take turns, round after round, the order reversed every other round
    # (gms fair null nbd …, … nbd null fair gms: A-B-B-A over pairs of rounds).
    r=1
    while [ "$r" -le "$rounds" ]; do
        if [ $((r % 2)) -eq 1 ]; then order=$devices; else order=$rdevices; fi
        for d in $order; do
            eval "dev=\$$d"
            size=$mb
            case "$d" in *_large) size=$large_mb ;; esac
            [ -n "$dev" ] && measure "$d" "$dev" "$r" "$size"
        done
        r=$((r + 1))
    done
    # Files on ext2: written once, then read by stream and by mmap after dropping caches,
    # the devices' order reversed every other round.
    files=
    for d in gms fair nbd; do
        eval "dev=\$$d"
        [ -n "$dev" ] && file_prepare "$d" "$dev" && files="$files $d"
    done
    rfiles=$(for d in $files; do echo "$d"; done | sed -n '1!G;h;$p' | tr '\n' ' ')
    r=1
    while [ -n "$files" ] && [ "$r" -le "$rounds" ]; do
        if [ $((r % 2)) -eq 1 ]; then order=$files; else order=$rfiles; fi
        for d in $order; do
            file_read "$d" stream "$r"
            file_read "$d" mmap "$r"
        done
        r=$((r + 1))
    done
    for d in nbd gms fair; do
        if grep -q " /mnt/$d " /proc/mounts; then
            umount "/mnt/$d" || say "errors: file $d: umount /mnt/$d failed"
        fi
    done
    # Swap under memory pressure, one run after the other, in $swap_rounds rounds whose
    # order is reversed every other round (A-B-B-A): each run's figures are the mean of its
    # rounds, so none always runs first. A run whose device is missing is an error line.
    rswap=$(for d in $SWAP_RUNS; do echo "$d"; done | sed -n '1!G;h;$p' | tr '\n' ' ')
    r=1
    while [ "$r" -le "$swap_rounds" ]; do
        if [ $((r % 2)) -eq 1 ]; then order=$SWAP_RUNS; else order=$rswap; fi
        for d in $order; do
            # shellcheck disable=SC2046 # three words
            set -- $(swap_case "$d")
            if [ "$1" = - ] && [ "$d" != ram ]; then
                say "errors: swap $d: no device"
            else
                swap_run "$d" "$1" "$2" "$3"
            fi
        done
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
