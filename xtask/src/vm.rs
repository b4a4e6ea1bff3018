// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask vm SUBCOMMAND`: boot QEMU guests (TCG) on the cached kernel, each with its
//! own virtual NIC as a PCI device, and run a test or given commands in them.
//!
//! Per guest K, in a runtime directory (`$XDG_RUNTIME_DIR/trapeze/vm-PID`, else
//! `/dev/shm/trapeze-UID/vm-PID`, so guest RAM is never written to disk):
//! * `guestK.ram` — the guest's RAM, a `memory-backend-file,share=on` created by xtask at its
//!   final size, which the NIC maps for DMA (guest-physical address = DMA address);
//! * a `trapeze-nic` process, node K, on one UDP link with every other guest's NIC, serving
//!   `nicK.ivshmem.sock` as an ivshmem-doorbell server (BAR2 = NIC memory, 2 MSI-X vectors);
//!   it must listen before QEMU starts, so xtask waits for its "ivshmem server" line;
//! * `qemu-system-x86_64 -machine pc -accel tcg` with `-device ivshmem-doorbell` on that
//!   socket, the busybox initramfs and the serial console in `guestK.console`.
//!
//! The initramfs (`kernel-crate/guest/init` as `/init`, busybox, the kernel's modules and
//! any `--module` in `/lib/modules`, optionally a script as `/etc/trapeze/run.sh`) is a
//! newc cpio written here and gzipped. Commands reach the guest base64-encoded as
//! `trapeze_cmd=` on the kernel command line; `trapeze_guest=K` and `trapeze_guests=N`
//! tell each guest who it is.
//!
//! The subcommands, each in its own file: [`smoke`] (the sample Rust module in a guest),
//! [`module_test`] (`trapeze.ko` in three guests: ping, NetRPC, GMS, unload with calls in
//! flight), [`blk_test`] (`/dev/gms0` on RAM), [`suite`] (the guest suite, a server killed
//! mid-run), [`swap`] (swap on `/dev/gms0` under memory pressure), [`big_disk`] (a disk
//! larger than a server's budget, reloaded larger than the cluster), [`disks`] (disk
//! identities: two guests' own disks, a second load refused, a reload after pages died),
//! [`gmsd_test`] (a host gmsd in a guest's cluster), [`nbd_test`] (guests' kernel NBD
//! clients on gmblock's NBD export: ext4, then a volume shared by three guests, whose
//! layout and host checks are [`nbd_shared`]) and [`run`](mod@run) (given commands
//! or a script). What they share: [`session`] (the common options; build, boot, wait,
//! report), [`cluster`] (the guests' processes, the wait, a kill on request, cleanup),
//! [`initramfs`], [`report`] (what a console shows), [`runtime`] (directories, ports,
//! programs), [`host_gmsd`], [`host_proc`]; [`bench_guests`] boots guests for `cargo xtask bench vm`, and
//! [`md_bench`] the guest phase of `cargo xtask bench block`.
//!
//! A drop guard kills every child and removes RAM files, sockets and the initramfs on every
//! return, error or not; SIGINT, SIGTERM and SIGHUP end the run through it (once the
//! children start, a handler turns them into an error). Children are also started through
//! `setpriv --pdeathsig KILL`, so they die with xtask even if it is SIGKILLed. Console and
//! process logs stay until the next `cargo xtask vm`, which removes the runtime directories
//! of runs whose xtask is gone (and anything such a run left behind).

pub mod bench_guests;
mod big_disk;
mod blk_test;
mod cluster;
pub mod cpu_marks;
mod disks;
mod gmsd_test;
mod host_gmsd;
mod host_proc;
mod initramfs;
pub(crate) use initramfs::{guest_tool, programs_with_libraries};
pub(crate) mod md_bench;
mod module_test;
mod nbd_shared;
mod nbd_test;
pub(crate) use nbd_test::missing as nbd_test_missing;
mod report;
mod run;
mod runtime;
mod session;
mod smoke;
mod suite;
mod swap;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum VmCmd {
    /// One guest (by default) boots, lists the NIC, loads and unloads the Rust sample module.
    ///
    /// Boot the guests and check that each lists the NIC (PCI 1af4:1110), loads and unloads
    /// the Rust sample module and powers off cleanly; exit status 0 or 1, with the console
    /// lines that matter.
    Smoke(smoke::SmokeArgs),
    /// trapeze.ko in three guests: ping, NetRPC echo, GMS put/get, unload with calls in flight.
    ///
    /// Build trapeze.ko and test it in (at least) three guests (`kernel-crate/guest/ping.sh`):
    /// guest 0 loads it as node 0, the others as node K pinging node 0 with a 4 KB payload;
    /// then NetRPC echo calls and GMS put/get between the guests (guest 1 also /dev/gms0 on
    /// GMS), and an unload with calls in flight; each checks its side, unloads it and powers
    /// off. Waits at least 120 s for the power-off. Exit status 0 or 1, with the console
    /// lines that matter.
    ModuleTest(module_test::ModuleTestArgs),
    /// The block device /dev/gms0 on its RAM backend (data, O_DIRECT, EIO and timeout paths, rmmod).
    ///
    /// Build trapeze.ko and test its GMS block device /dev/gms0 on the RAM backend in each
    /// guest, one by default (`kernel-crate/guest/blk.sh`: data round trips with dropped
    /// caches, O_DIRECT, a tar file round trip, rmmod while the disk is open, reload,
    /// failing and stalling pages). Waits at least 300 s for the power-off. Exit status 0
    /// or 1, with the console lines that matter.
    BlkTest(blk_test::BlkTestArgs),
    /// The guest suite: ext2 on /dev/gms0 on GMS across three guests, a server killed mid-run.
    ///
    /// Build trapeze.ko and run the guest suite on three guests (`kernel-crate/guest/suite.sh`):
    /// ext2 on /dev/gms0 on GMS with data verified after dropping caches, a server guest
    /// SIGKILLed mid-run (I/O errors, not a hang), unload under load. Waits at least 300 s
    /// for the power-off. Exit status 0 or 1, with the console lines that matter.
    Suite(suite::SuiteArgs),
    /// Swap on /dev/gms0 (GMS) under memory pressure: every page verified, zero I/O errors.
    ///
    /// Build trapeze.ko and trapeze-memhog (guest-tools/) and run three guests
    /// (`kernel-crate/guest/swap.sh`): guest 0 swaps on its /dev/gms0, whose pages guests 1
    /// and 2 hold, pins most of its RAM and runs a workload over 1.5x what is left, every
    /// page verified; zero page errors, no I/O error/OOM/oops in dmesg, clean swapoff and
    /// rmmod. Waits at least 420 s for the power-off. Exit status 0 or 1.
    Swap(swap::SwapArgs),
    /// A 512 MiB /dev/gms0 held by two servers with 320 MiB budgets: every page verified.
    ///
    /// Build trapeze.ko and trapeze-blkbench (guest-tools/) and run three guests
    /// (`kernel-crate/guest/bigdisk.sh`) with at least 576 MiB of RAM: guest 0 writes a
    /// pattern over its whole /dev/gms0 (one copy of each page) and reads it all back,
    /// every page checked; zero page errors, dmesg quiet, clean rmmod; then reloads it
    /// with a 1 GiB disk: the first load's pages read back, new writes over them read back
    /// new, and filling the disk fails with ENOSPC. Waits at least 600 s for the power-off.
    /// Exit status 0 or 1.
    BigDisk(big_disk::BigDiskArgs),
    /// Disk identities: two guests' own disks on the same servers, a second load refused, a reload after pages died.
    ///
    /// Build trapeze.ko and run four guests (`kernel-crate/guest/disks.sh`), guests 2 and 3
    /// servers: guests 0 and 1 each load /dev/gms0 with their own gms_disk_id= and write
    /// their own pattern over the same page numbers, each reading back only its own data;
    /// guest 1 loads guest 0's identity while guest 0 holds it (EIO, the kernel log names
    /// the identity and its owner); guest 0 loads a disk with one copy of each page, guest
    /// 3 is SIGKILLed, and the disk reloaded on what is left: every written page reads back
    /// or fails with EIO, none as zeros or other bytes, unwritten pages read as zeros.
    /// Waits at least 600 s for the power-off. Exit status 0 or 1.
    Disks(disks::DisksArgs),
    /// A host gmsd in a guest's GMS cluster: the guest's /dev/gms0 pages stored on it.
    ///
    /// Build trapeze.ko and gmsd: one guest (node 0) and a host `gmsd` (node 1) on the
    /// guests' UDP link in one GMS cluster (`kernel-crate/guest/gmsd.sh`): the guest's
    /// /dev/gms0 pages land on the daemon and read back; `gms stat` on the host shows them
    /// held and `gms get` reads each one. Waits at least 240 s for the power-off. Exit
    /// status 0 or 1.
    GmsdTest(gmsd_test::GmsdTestArgs),
    /// Guests' kernel NBD clients on gmblock's NBD export (striped over two gmblockd): ext4, then one shared volume.
    ///
    /// Build gmblockd and the nbdkit plugin, run two gmblockd servers and nbdkit exporting
    /// the volume striped over them on the host, and three guests
    /// (`kernel-crate/guest/nbd.sh`) on QEMU's user-mode network, each connecting /dev/nbd0
    /// with nbd-client. Guest 0 makes ext4 with mke2fs, writes files, remounts with caches
    /// dropped and verifies them by md5sum; then it writes a region after the file system,
    /// flushes and writes a header; guests 1 and 2 wait for the header and read the region
    /// back with O_DIRECT; then all three read a common region at once. The host
    /// reassembles the volume from the servers' files, runs `e2fsck -fn` on it, reads every
    /// file back with debugfs and the shared regions by md5sum, and finds in nbdkit's
    /// request log the writer's FLUSH before its header and the three guests' reads in
    /// flight together. Skipped without nbdkit, nbd-client or e2fsprogs. Waits at least
    /// 300 s for the power-off. Exit status 0 or 1.
    NbdTest(nbd_test::NbdTestArgs),
    /// Guests that run --cmd and/or --script, then power off.
    ///
    /// Boot the guests, run --cmd, then --script, in each, echoing their consoles (unless
    /// --quiet), and check that each lists the NIC (PCI 1af4:1110) and powers off cleanly;
    /// exit status 0 or 1.
    Run(run::RunArgs),
}

pub fn run(cmd: VmCmd) -> anyhow::Result<()> {
    match cmd {
        VmCmd::Smoke(a) => smoke::run(a),
        VmCmd::ModuleTest(a) => module_test::run(a),
        VmCmd::BlkTest(a) => blk_test::run(a),
        VmCmd::Suite(a) => suite::run(a),
        VmCmd::Swap(a) => swap::run(a),
        VmCmd::BigDisk(a) => big_disk::run(a),
        VmCmd::Disks(a) => disks::run(a),
        VmCmd::GmsdTest(a) => gmsd_test::run(a),
        VmCmd::NbdTest(a) => nbd_test::run(a),
        VmCmd::Run(a) => run::run(a),
    }
}
