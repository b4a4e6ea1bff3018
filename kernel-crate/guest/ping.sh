#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# kernel-crate/guest/ping.sh — the guests' script under `cargo xtask vm --module-test`
# (embedded as /etc/trapeze/run.sh; /init gives it trapeze_guest=K and trapeze_guests=N).
#
# Guest 0 loads trapeze.ko as node 0 and answers pings until every other guest's ping was
# answered (bounded); every other guest K loads it as node K with ping_peer=0, so its probe
# pings node 0 with a 4 KB payload and checks the pong byte for byte before insmod returns.
# Then each prints its counters and unloads the module. Exit status 0 only if its side of
# the ping worked and the module loaded and unloaded. Lines for the host start with
# "trapeze-test:".

say() { echo "trapeze-test: $*"; }
k=${trapeze_guest:-0}
n=${trapeze_guests:-2}
ko=/lib/modules/trapeze.ko
stats=/sys/module/trapeze/parameters/stats
count() { v=$(sed -n "s/^$1: //p" "$stats" 2>/dev/null); echo "${v:-0}"; }

if [ "$k" = 0 ]; then
    insmod "$ko" node=0 || { say "insmod failed"; exit 1; }
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
say "stats: $(tr '\n' ' ' < "$stats")"
rmmod trapeze || { say "rmmod failed"; exit 1; }
say "rmmod trapeze done"
exit $ok
