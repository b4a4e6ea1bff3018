// SPDX-License-Identifier: GPL-2.0-only
#![cfg(feature = "flashed")]
//! Flashed mode end to end: the real riscv32imac firmware image on the NIC's emulated
//! core, in-process NICs on an `InProcSwitch`, user-space hosts through `HostPort`.
//!
//! The image: `$TRAPEZE_FW_IMAGE` if set, else built here once per test process with
//! `DEFMT_LOG=info cargo build -p trapeze-firmware --bin trapeze-fw --features image
//! --target riscv32imac-unknown-none-elf --profile fw` (what `cargo xtask build` runs;
//! cargo's JSON messages give the path). Tests that need it are ignored unless asked for
//! (`needs: riscv32 target`: `cargo xtask test` runs them). Every test runs under a watchdog.

mod common;

use object::elf;
use object::write::elf::{FileHeader, ProgramHeader, SectionHeader, Sym, Writer};
use object::Endianness;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use trapeze_firmware::iface::ipt::PayloadToken;
use trapeze_firmware::iface::layout::{ctrl, ctrl_word, FwState, IMAGE_TEXT_BYTES};
use trapeze_firmware::iface::mem::NicMemory;
use trapeze_firmware::iface::regs::{HALT, NIC_MEM_BASE, REGS_BASE};
use trapeze_host::endpoint::EndpointConfig;
use trapeze_node::host::{HostPort, DEFAULT_REGION_BASE};
use trapeze_vnic::control::{serve, ControlClient, Request};
use trapeze_vnic::engines::new_eventfd;
use trapeze_vnic::image::{check_image, LoadedImage};
use trapeze_vnic::link::backend::InProcSwitch;
use trapeze_vnic::link::{FaultConfig, Link};
use trapeze_vnic::nic::{FirmwareKind, Nic};
use trapeze_vnic::shm::Mapping;

// ---- the image ---------------------------------------------------------------------------

const TARGET: &str = "riscv32imac-unknown-none-elf";

/// The firmware image, built once per test process. Tests that need it are
/// `#[ignore = "needs: riscv32 target"]`: `cargo xtask test` runs them when the target is
/// installed (it installs it), and plain `cargo test` lists them as ignored.
fn image() -> &'static [u8] {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(|| common::build_image().unwrap_or_else(|e| panic!("{e} (is the {TARGET} target installed?)")))
}

// ---- test scaffolding --------------------------------------------------------------------

/// Aborts the test process if a test runs longer than `secs` (a hung emulator or a lost
/// wakeup must fail the run, not stall it).
struct Watchdog(Arc<AtomicBool>);

fn watchdog(name: &'static str, secs: u64) -> Watchdog {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        let t0 = Instant::now();
        while !d.load(Ordering::Acquire) {
            if t0.elapsed() > Duration::from_secs(secs) {
                eprintln!("test {name} exceeded {secs} s: aborting");
                std::process::abort();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    Watchdog(done)
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

const SPIN: Duration = Duration::from_micros(50);

fn nic(switch: &InProcSwitch, name: &str, node: u16) -> Arc<Nic> {
    let link = Link::new(node, Box::new(switch.port(node)), FaultConfig::default());
    Arc::new(Nic::new(name, link, SPIN).unwrap())
}

fn flashed(bytes: &[u8]) -> FirmwareKind {
    FirmwareKind::Flashed(Arc::new(LoadedImage::from_elf(bytes).unwrap()))
}

/// An in-process host on `nic`: a 1 MiB frame region, doorbell and interrupt eventfds.
fn host(nic: &Nic, node: u16) -> HostPort {
    let region = Arc::new(Mapping::create_memfd("frames", 1 << 20).unwrap());
    let s = nic.shared();
    s.dma.register("host", DEFAULT_REGION_BASE, region.clone(), 0, region.len() as u64).unwrap();
    let db = Arc::new(new_eventfd().unwrap());
    let irq = Arc::new(new_eventfd().unwrap());
    s.wakers.add_doorbell(db.clone());
    s.notifier.add(irq.clone());
    let cfg = EndpointConfig { node_id: node, ..EndpointConfig::default() };
    HostPort::new(nic.mem(), region, DEFAULT_REGION_BASE, db, irq, cfg, [0x1234 + node as u64, 0x5678]).unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// `from` sends `ctrl` + `payload` to node `to_node`; `to` must receive exactly that.
fn exchange(from: &mut HostPort, to: &mut HostPort, from_node: u16, to_node: u16, ctrl: &[u8], payload: &[u8]) {
    from.send(to_node, ctrl, payload, PayloadToken::NONE, 0).unwrap();
    let m = to.recv(Duration::from_secs(5)).unwrap_or_else(|| {
        panic!("node {to_node} received nothing from node {from_node} ({} payload bytes)", payload.len())
    });
    assert_eq!(m.src, from_node);
    assert_eq!(m.ctrl, ctrl);
    assert_eq!(m.payload.len(), payload.len());
    assert!(m.payload == payload, "payload of {} bytes corrupted", payload.len());
}

/// Control messages and 4 KB / 8 KB payloads both ways between two hosts.
fn converse(a: &mut HostPort, b: &mut HostPort, na: u16, nb: u16) {
    for round in 0..4u8 {
        let ctrl = [round; 40];
        exchange(a, b, na, nb, &ctrl, &[]);
        exchange(b, a, nb, na, &ctrl[..17], &[]);
        exchange(a, b, na, nb, b"4k", &pattern(4096, round));
        exchange(b, a, nb, na, b"4k back", &pattern(4096, round + 100));
        exchange(a, b, na, nb, b"8k", &pattern(8192, round + 7));
        exchange(b, a, nb, na, b"8k back", &pattern(8192, round + 77));
    }
}

fn fw_state(nic: &Nic) -> u32 {
    nic.mem().load(ctrl_word(ctrl::FW_STATE), Ordering::Acquire)
}

fn fw_build_id(nic: &Nic) -> u32 {
    nic.mem().load_relaxed(ctrl_word(ctrl::FW_BUILD_ID))
}

/// Wait (bounded) for a log line containing `needle`.
fn wait_log(nic: &Nic, needle: &str) -> String {
    let t0 = Instant::now();
    loop {
        if let Some(l) = nic.status().log.into_iter().find(|l| l.contains(needle)) {
            return l;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "no log line with {needle:?}: {:#?}", nic.status().log);
        std::thread::sleep(Duration::from_millis(5));
    }
}

// ---- small synthetic riscv32 images ------------------------------------------------------

const TEXT: u64 = NIC_MEM_BASE as u64;

/// A riscv32 ELF executable whose text section is `code` (at the text region start),
/// with the symbols `check_image` wants (build id and version in `.rodata`, the stack
/// reserve). `extra_text` bytes of padding follow the code (to make it oversized).
fn riscv_elf(code: &[u8], extra_text: usize, build_id: u32) -> Vec<u8> {
    riscv_elf_with(code, extra_text, build_id, &[])
}

/// [`riscv_elf`] with extra function symbols `(name, offset into the code)`.
fn riscv_elf_with(code: &[u8], extra_text: usize, build_id: u32, funcs: &[(&str, u64)]) -> Vec<u8> {
    let mut text = code.to_vec();
    text.resize(code.len() + extra_text, 0);
    let rodata_addr = TEXT + text.len().next_multiple_of(4) as u64;
    let mut rodata = build_id.to_le_bytes().to_vec();
    rodata.extend_from_slice(&0x0000_0900u32.to_le_bytes());

    let mut buf = Vec::new();
    let mut w = Writer::new(Endianness::Little, false, &mut buf);
    w.reserve_file_header();
    w.reserve_program_headers(2);
    let _ = w.reserve_null_section_index();
    let text_name = w.add_section_name(b".text");
    let rodata_name = w.add_section_name(b".rodata");
    let _text_idx = w.reserve_section_index();
    let rodata_idx = w.reserve_section_index();
    let text_off = w.reserve(text.len(), 4);
    let rodata_off = w.reserve(rodata.len(), 4);
    let _ = w.reserve_null_symbol_index();
    let mut wanted = vec![
        ("TRAPEZE_FW_BUILD_ID", Some(rodata_idx), rodata_addr),
        ("TRAPEZE_FW_VERSION", Some(rodata_idx), rodata_addr + 4),
        ("_trapeze_stack_reserve", None, 0x1000),
    ];
    wanted.extend(funcs.iter().map(|&(n, off)| (n, Some(_text_idx), TEXT + off)));
    let syms: Vec<_> = wanted
        .into_iter()
        .map(|(n, sec, v)| {
            let id = w.add_string(n.as_bytes());
            w.reserve_symbol_index(sec);
            (id, sec, v)
        })
        .collect();
    w.reserve_symtab_section_index();
    w.reserve_symtab();
    w.reserve_strtab_section_index();
    w.reserve_strtab();
    w.reserve_shstrtab_section_index();
    w.reserve_shstrtab();
    w.reserve_section_headers();
    w.write_file_header(&FileHeader {
        os_abi: elf::ELFOSABI_NONE,
        abi_version: 0,
        e_type: elf::ET_EXEC,
        e_machine: elf::EM_RISCV,
        e_entry: TEXT,
        e_flags: elf::EF_RISCV_RVC,
    })
    .unwrap();
    w.write_align_program_headers();
    for (off, addr, len) in [(text_off, TEXT, text.len()), (rodata_off, rodata_addr, rodata.len())] {
        w.write_program_header(&ProgramHeader {
            p_type: elf::PT_LOAD,
            p_flags: elf::PF_R | elf::PF_X,
            p_offset: off as u64,
            p_vaddr: addr,
            p_paddr: addr,
            p_filesz: len as u64,
            p_memsz: len as u64,
            p_align: 4,
        });
    }
    w.write_align(4);
    w.write(&text);
    w.write_align(4);
    w.write(&rodata);
    w.write_null_symbol();
    for (name, section, value) in syms {
        w.write_symbol(&Sym {
            name: Some(name),
            section,
            st_info: (elf::STB_GLOBAL << 4) | elf::STT_OBJECT,
            st_other: 0,
            st_shndx: if section.is_none() { elf::SHN_ABS } else { 0 },
            st_value: value,
            st_size: 4,
        });
    }
    w.write_strtab();
    w.write_shstrtab();
    w.write_null_section_header();
    for (name, off, addr, len, flags) in [
        (text_name, text_off, TEXT, text.len(), elf::SHF_ALLOC | elf::SHF_EXECINSTR),
        (rodata_name, rodata_off, rodata_addr, rodata.len(), elf::SHF_ALLOC),
    ] {
        w.write_section_header(&SectionHeader {
            name: Some(name),
            sh_type: elf::SHT_PROGBITS,
            sh_flags: flags as u64,
            sh_addr: addr,
            sh_offset: off as u64,
            sh_size: len as u64,
            sh_link: 0,
            sh_info: 0,
            sh_addralign: 4,
            sh_entsize: 0,
        });
    }
    w.write_symtab_section_header(1);
    w.write_strtab_section_header();
    w.write_shstrtab_section_header();
    buf
}

/// RV32I: `lui t0, REGS_BASE >> 12; addi t1, zero, code; sw t1, HALT(t0); j .`
fn halt_program(code: u16) -> Vec<u8> {
    assert!(code < 0x800 && REGS_BASE & 0xfff == 0 && HALT < 0x20);
    let lui = REGS_BASE | (5 << 7) | 0x37;
    let addi = ((code as u32) << 20) | (6 << 7) | 0x13;
    let sw = (6 << 20) | (5 << 15) | (2 << 12) | (HALT << 7) | 0x23;
    let j_self = 0x0000_006f;
    [lui, addi, sw, j_self].iter().flat_map(|w| w.to_le_bytes()).collect()
}

// ---- tests -------------------------------------------------------------------------------

/// (a) + (d): a NIC loads the built image, the firmware publishes the ready word with the
/// image's build id, status shows the image, and the defmt boot line is decoded.
#[test]
#[ignore = "needs: riscv32 target"]
fn flashed_nic_boots_the_image_and_reports_it() {
    let _w = watchdog("flashed_nic_boots_the_image_and_reports_it", 60);
    let bytes = image();
    let want = check_image(bytes).unwrap();
    let switch = InProcSwitch::new();
    let n = nic(&switch, "boot", 1);
    let info = n.load_image(bytes).unwrap();
    assert_eq!(info.build_id, want.build_id);
    assert_eq!(fw_state(&n), FwState::Ready as u32);
    assert_eq!(fw_build_id(&n), want.build_id);
    let st = n.status();
    assert_eq!(st.mode, "flashed");
    assert!(st.running);
    assert_eq!(st.fw_version, want.version_string());
    assert_eq!(st.fw_build_id, format!("{:08x}", want.build_id));
    let img = st.image.expect("status shows the image");
    assert_eq!(img.build_id, format!("{:08x}", want.build_id));
    assert_eq!(img.checksum, format!("{:08x}", want.checksum));
    assert!(img.intact && img.defmt);
    // (d) The boot line, decoded from the image's defmt frames.
    let line = wait_log(&n, "ready");
    let expect = format!("firmware v{} build {:#010x} ready", want.version_string(), want.build_id);
    assert!(line.contains(&expect), "boot line {line:?} should contain {expect:?}");
    assert!(line.contains("info"), "{line:?}");
    // The NIC's node (1), not the unconfigured firmware's 0; and the native firmware of
    // these sources reports the image's build id.
    assert!(line.contains("ready: node 1,"), "{line:?}");
    assert_eq!(want.build_id, trapeze_firmware::BUILD_ID);
    // The core keeps running its main loop (the heartbeat moves once a host rings).
    n.halt().unwrap();
    assert_eq!(n.status().mode, "halted");
}

/// (b) A flashed NIC and a native NIC exchange control messages and 4 KB / 8 KB
/// payloads both ways.
#[test]
#[ignore = "needs: riscv32 target"]
fn flashed_and_native_nics_exchange_messages() {
    let _w = watchdog("flashed_and_native_nics_exchange_messages", 90);
    let bytes = image();
    let switch = InProcSwitch::new();
    let a = nic(&switch, "fa", 1);
    let b = nic(&switch, "nb", 2);
    a.start(flashed(bytes)).unwrap();
    b.start(FirmwareKind::Native).unwrap();
    let mut ha = host(&a, 1);
    let mut hb = host(&b, 2);
    converse(&mut ha, &mut hb, 1, 2);
    assert_eq!(a.status().mode, "flashed");
    assert_eq!(b.status().mode, "native");
    let rx = a.status().counters.iter().find(|c| c.0 == "rx_packets").unwrap().1;
    assert_eq!(rx, 4 * 3);
    // The link-level echo is the device's, whatever firmware runs: both answer, and the
    // echoes never reach the firmware.
    for (n, peer) in [(&a, 2), (&b, 1)] {
        for _ in 0..3 {
            assert!(n.ping(peer, Duration::from_secs(5)).unwrap().is_some(), "no echo from node {peer}");
        }
    }
    assert_eq!((a.status().echo.requests_answered, b.status().echo.requests_answered), (3, 3));
    let rx = a.status().counters.iter().find(|c| c.0 == "rx_packets").unwrap().1;
    assert_eq!(rx, 4 * 3, "an echo reached the firmware");
}

/// (b) Two flashed NICs exchange control messages and 4 KB / 8 KB payloads.
#[test]
#[ignore = "needs: riscv32 target"]
fn two_flashed_nics_exchange_messages() {
    let _w = watchdog("two_flashed_nics_exchange_messages", 90);
    let bytes = image();
    let switch = InProcSwitch::new();
    let a = nic(&switch, "f1", 1);
    let b = nic(&switch, "f2", 2);
    a.start(flashed(bytes)).unwrap();
    b.start(flashed(bytes)).unwrap();
    let mut ha = host(&a, 1);
    let mut hb = host(&b, 2);
    converse(&mut ha, &mut hb, 1, 2);
    // Bursts of 24 messages without waiting in between (within the 32-entry receive ring:
    // Trapeze has no flow control, a fuller ring drops), four times so both rings wrap.
    for burst in 0..4u32 {
        for i in 0..24u32 {
            let k = burst * 24 + i;
            ha.send(2, &k.to_le_bytes(), &pattern(1024, k as u8), PayloadToken::NONE, 0).unwrap();
        }
        for i in 0..24u32 {
            let k = burst * 24 + i;
            let m = hb
                .recv(Duration::from_secs(5))
                .unwrap_or_else(|| panic!("burst message {k} lost; receiver counters {:?}", b.status().counters));
            assert_eq!(m.ctrl, k.to_le_bytes());
            assert_eq!(m.payload, pattern(1024, k as u8));
        }
    }
}

/// (c) Corrupt, x86-64 and oversized images are refused with clear errors, and the NIC
/// keeps running its old firmware: status unchanged, traffic still flows. A valid image
/// whose firmware faults at boot is loaded, reported, and the old firmware restarted.
#[test]
#[ignore = "needs: riscv32 target"]
fn bad_images_are_refused_and_the_old_firmware_keeps_running() {
    let _w = watchdog("bad_images_are_refused_and_the_old_firmware_keeps_running", 90);
    let bytes = image();
    let switch = InProcSwitch::new();
    let a = nic(&switch, "victim", 1);
    let b = nic(&switch, "peer", 2);
    a.load_image(bytes).unwrap();
    b.start(FirmwareKind::Native).unwrap();
    let mut ha = host(&a, 1);
    let mut hb = host(&b, 2);
    exchange(&mut ha, &mut hb, 1, 2, b"before", &pattern(8192, 1));
    let before = a.status();

    let mut truncated = bytes.to_vec();
    truncated.truncate(bytes.len() / 3);
    let mut garbage = bytes.to_vec();
    garbage[..64].fill(0x5a);
    let x86_64 = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let oversized = riscv_elf(&halt_program(1), IMAGE_TEXT_BYTES as usize, 0xb16_b16);
    let cases: [(&str, &[u8], &[&str]); 4] = [
        ("truncated", &truncated, &["image refused"]),
        ("garbage header", &garbage, &["image refused", "not an object file"]),
        ("x86-64", &x86_64, &["image refused", "64-bit ELF"]),
        ("oversized", &oversized, &["image refused", "outside the image regions"]),
    ];
    for (what, img, needles) in cases {
        let err = format!("{:#}", a.load_image(img).expect_err(what));
        for n in needles {
            assert!(err.contains(n), "{what}: error {err:?} should mention {n:?}");
        }
        let now = a.status();
        assert_eq!(now.mode, "flashed", "{what}");
        assert_eq!(
            (now.fw_state.as_str(), now.fw_build_id.as_str()),
            (before.fw_state.as_str(), before.fw_build_id.as_str()),
            "{what}"
        );
        assert_eq!(now.image.as_ref().unwrap().checksum, before.image.as_ref().unwrap().checksum, "{what}");
        assert!(now.image.as_ref().unwrap().intact, "{what}");
        exchange(&mut ha, &mut hb, 1, 2, what.as_bytes(), &pattern(4096, 3));
        exchange(&mut hb, &mut ha, 2, 1, what.as_bytes(), &pattern(8192, 4));
    }

    // A well-formed image whose code writes HALT at once: loaded, started, faults; the
    // NIC reports that and goes back to the old image.
    let halting = riscv_elf(&halt_program(0x42), 0, 0xdead_0042);
    let err = format!("{:#}", a.load_image(&halting).expect_err("halting image"));
    assert!(err.contains("faulted") && err.contains("0x42"), "{err}");
    assert!(err.contains("previous flashed firmware was restarted"), "{err}");
    let now = a.status();
    assert_eq!(now.fw_build_id, before.fw_build_id);
    assert_eq!(now.fw_state, format!("{:?}", FwState::Ready));
    assert!(now.log.iter().any(|l| l.contains("HALT") && l.contains("0x00000042")), "{:#?}", now.log);
    // The endpoint was re-initialised by the restarted firmware: reattach the host.
    drop(ha);
    let mut ha = host_again(&a, 1);
    exchange(&mut ha, &mut hb, 1, 2, b"after restart", &pattern(8192, 5));
    exchange(&mut hb, &mut ha, 2, 1, b"after restart", &pattern(8192, 6));
}

/// A second host on a NIC whose first host is gone (same region name re-registered).
fn host_again(nic: &Nic, node: u16) -> HostPort {
    nic.shared().dma.unregister("host");
    host(nic, node)
}

/// The control socket's `load` request reads the ELF file and answers the new status;
/// an unreadable or invalid file is an error and changes nothing.
#[test]
#[ignore = "needs: riscv32 target"]
fn control_socket_loads_an_image_file() {
    let _w = watchdog("control_socket_loads_an_image_file", 60);
    let bytes = image();
    let want = check_image(bytes).unwrap();
    let dir = std::env::temp_dir().join(format!("trapeze-flashed-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let elf = dir.join("fw.elf");
    std::fs::write(&elf, bytes).unwrap();
    let switch = InProcSwitch::new();
    let n = nic(&switch, "ctl", 1);
    n.start(FirmwareKind::Native).unwrap();
    let server = serve(n.clone(), &dir.join("ctl.sock")).unwrap();
    let client = ControlClient::connect(server.path()).unwrap();
    let v = client.request(&Request::Load { path: elf.display().to_string() }).unwrap();
    assert_eq!(v["status"]["mode"], "flashed");
    assert_eq!(v["status"]["fw_build_id"], format!("{:08x}", want.build_id));
    assert_eq!(v["image"]["build_id"], want.build_id);
    let err = client.request(&Request::Load { path: dir.join("missing.elf").display().to_string() }).unwrap_err();
    assert!(format!("{err:#}").contains("missing.elf"), "{err:#}");
    std::fs::write(dir.join("bad.elf"), b"\x7fELF nonsense").unwrap();
    let err = client.request(&Request::Load { path: dir.join("bad.elf").display().to_string() }).unwrap_err();
    assert!(format!("{err:#}").contains("image refused"), "{err:#}");
    let v = client.request(&Request::Status).unwrap();
    assert_eq!(v["status"]["mode"], "flashed");
    assert_eq!(v["status"]["image"]["checksum"], format!("{:08x}", want.checksum));
    // `start` with mode "flashed" restarts the last image after a halt.
    client.request(&Request::Halt).unwrap();
    let v = client.request(&Request::Start { mode: "flashed".into() }).unwrap();
    assert_eq!(v["status"]["mode"], "flashed");
    drop(client);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Halting works even when the firmware never reads a register again (a core spinning
/// in `j .`): the NIC stops the emulation from outside.
#[test]
fn a_spinning_core_can_be_halted() {
    let _w = watchdog("a_spinning_core_can_be_halted", 30);
    // No riscv build needed: a hand-written image that spins forever.
    let spin = riscv_elf(&[0x6f, 0, 0, 0], 0, 0x5b1_4000);
    let switch = InProcSwitch::new();
    let n = nic(&switch, "spin", 1);
    let img = Arc::new(LoadedImage::from_elf(&spin).unwrap());
    // It never publishes Ready: start times out (READY_TIMEOUT), then halt must work.
    let t0 = Instant::now();
    let err = n.start(FirmwareKind::Flashed(img)).unwrap_err();
    assert!(format!("{err:#}").contains("ready word"), "{err:#}");
    assert!(n.is_running());
    n.halt().unwrap();
    assert!(!n.is_running());
    assert!(t0.elapsed() < Duration::from_secs(20));
}

/// A hand-written image that writes HALT: the NIC publishes Fault with its code.
#[test]
fn halt_register_faults_the_core() {
    let _w = watchdog("halt_register_faults_the_core", 30);
    let switch = InProcSwitch::new();
    let n = nic(&switch, "halt", 1);
    let err = format!("{:#}", n.load_image(&riscv_elf(&halt_program(0x7ff), 0, 1)).unwrap_err());
    assert!(err.contains("faulted while starting (code 0x7ff)"), "{err}");
    assert!(err.contains("the NIC is halted"), "{err}");
    assert!(!n.is_running());
}

/// A firmware that panics (reaches `rust_begin_unwind`) or executes an illegal
/// instruction is stopped and reported as faulted, with the NIC's fault codes.
#[test]
fn panics_and_cpu_exceptions_fault_the_core() {
    use trapeze_vnic::cpu::flashed::fault;
    let _w = watchdog("panics_and_cpu_exceptions_fault_the_core", 30);
    let switch = InProcSwitch::new();
    let n = nic(&switch, "panic", 1);
    // `jal zero, +4` into the "panic handler": `j .` (as panic-halt's loop).
    let code = [0x0040_006fu32, 0x0000_006f].iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>();
    let elf = riscv_elf_with(&code, 0, 2, &[("_RNvCs123_7___rustc17rust_begin_unwind", 4)]);
    let err = format!("{:#}", n.load_image(&elf).unwrap_err());
    assert!(err.contains(&format!("code {:#x}", fault::PANIC)), "{err}");
    assert!(n.status().log.iter().any(|l| l.contains("panicked")), "{:#?}", n.status().log);
    // An all-zero word is an illegal instruction.
    let err = format!("{:#}", n.load_image(&riscv_elf(&[0; 4], 0, 3)).unwrap_err());
    assert!(err.contains(&format!("code {:#x}", fault::CPU)), "{err}");
    assert!(!n.is_running());
}
