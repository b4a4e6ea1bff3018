// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask kernel`: the guest kernel — Debian's `linux-source-6.12` with Rust support,
//! configured from the repo's fragment and built once into a cache outside the clone.
//!
//! Steps, each skipped (`cached: …`) when already done:
//! 1. system packages (apt, `--no-install-recommends`);
//! 2. the workspace's pinned Rust toolchain (`rust-toolchain.toml`) with `rust-src`;
//! 3. `bindgen-cli` [`BINDGEN_VERSION`], installed into `<cache>/tools` (nothing global);
//! 4. the kernel tree, unpacked from `/usr/src/linux-source-6.12.tar.xz`;
//! 5. the extra C headers the module's bindings need, added to the tree's
//!    `rust/bindings/bindings_helper.h` ([`HELPER_HEADERS`]);
//! 6. `.config`: `tinyconfig` + `kernel-crate/kernel.config` (merge_config.sh) +
//!    `olddefconfig`, then every option of the fragment checked in the result;
//! 7. `make rustavailable`;
//! 8. `make bzImage modules` (under `nice`, progress every few seconds, log kept).
//!
//! Layout of `${XDG_CACHE_HOME:-~/.cache}/trapeze/kernel-6.12/`:
//! `linux-source-6.12/` (the tree), `build/` (`O=` output: `.config`, `arch/x86/boot/bzImage`,
//! modules), `tools/bin/bindgen`, `logs/*.log`, `stamp.json` (what was done with which source
//! version, fragment hash and toolchain). A changed fragment, toolchain or source version
//! invalidates the steps after it; the build itself is then incremental.
//!
//! Out-of-tree modules build against it with the same toolchain:
//! `make -C <cache>/build M=$PWD LLVM=1 RUSTC=… BINDGEN=…` ([`Toolchain::make_vars`]).

use anyhow::{bail, ensure, Context};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The kernel series (Debian package `linux-source-<SERIES>`).
pub const SERIES: &str = "6.12";
const SOURCE_PKG: &str = "linux-source-6.12";
const TARBALL: &str = "/usr/src/linux-source-6.12.tar.xz";
/// The directory the tarball unpacks to.
const TREE_DIR: &str = "linux-source-6.12";
/// The bindgen the kernel's Rust bindings are generated with.
pub const BINDGEN_VERSION: &str = "0.73.2";
/// The config fragment, relative to the workspace root.
pub const FRAGMENT: &str = "kernel-crate/kernel.config";

/// (package, what needs it)
const PACKAGES: [(&str, &str); 17] = [
    ("linux-source-6.12", "the kernel source tarball"),
    ("build-essential", "make and the host C toolchain"),
    ("flex", "kconfig's lexer"),
    ("bison", "kconfig's parser"),
    ("bc", "kernel build scripts"),
    ("libelf-dev", "objtool"),
    ("libssl-dev", "kernel host tools"),
    ("cpio", "kernel headers archive"),
    ("clang", "LLVM=1 kernel build"),
    ("llvm", "llvm-ar, llvm-nm, llvm-objcopy for LLVM=1"),
    ("lld", "ld.lld for LLVM=1"),
    ("libclang-dev", "bindgen generates the kernel's Rust bindings"),
    ("qemu-system-x86", "cargo xtask vm boots the guests"),
    ("qemu-utils", "disk images for the guests"),
    ("busybox-static", "the guests' initramfs"),
    ("dwarves", "pahole, kernel build scripts"),
    ("kmod", "depmod for module builds"),
];

/// Headers added to the tree's `rust/bindings/bindings_helper.h`: the PCI, IRQ, DMA and MMIO
/// C API the NIC driver calls through the generated bindings (6.12 has no Rust abstractions
/// for them).
pub const HELPER_HEADERS: [&str; 4] = ["linux/pci.h", "linux/interrupt.h", "linux/dma-mapping.h", "linux/io.h"];
const HELPER_MARK: &str = "/* Added by trapeze-rs `cargo xtask kernel`: the C API of the out-of-tree NIC driver. */";

/// Kconfig options shown in the summary (all fragment options are checked).
const SHOWN: [&str; 6] = [
    "CONFIG_RUST",
    "CONFIG_PCI_MSI",
    "CONFIG_VIRTIO_NET",
    "CONFIG_BLK_DEV_NBD",
    "CONFIG_SAMPLE_RUST_MINIMAL",
    "CONFIG_BLK_DEV_RUST_NULL",
];

/// How often a long step prints a progress line.
const HEARTBEAT: Duration = Duration::from_secs(15);

#[derive(clap::Args)]
pub struct KernelArgs {
    /// Parallel make jobs (default: the number of CPUs).
    #[arg(long, short)]
    jobs: Option<usize>,
    /// Run the kernel `make` even when the stamp says the build is current.
    #[arg(long)]
    rebuild: bool,
}

/// Where everything lives.
pub struct Paths {
    /// `${XDG_CACHE_HOME:-~/.cache}/trapeze/kernel-6.12`
    pub cache: PathBuf,
    /// The kernel source tree.
    pub tree: PathBuf,
    /// The `O=` build directory (`.config`, images, modules).
    pub build: PathBuf,
    /// `cargo install --root` for bindgen.
    pub tools: PathBuf,
    pub logs: PathBuf,
    pub stamp: PathBuf,
}

impl Paths {
    pub fn new() -> anyhow::Result<Self> {
        let cache = trapeze_cache()?.join(format!("kernel-{SERIES}"));
        Ok(Paths {
            tree: cache.join(TREE_DIR),
            build: cache.join("build"),
            tools: cache.join("tools"),
            logs: cache.join("logs"),
            stamp: cache.join("stamp.json"),
            cache,
        })
    }
    pub fn bzimage(&self) -> PathBuf {
        self.build.join("arch/x86/boot/bzImage")
    }
    pub fn bindgen(&self) -> PathBuf {
        self.tools.join("bin/bindgen")
    }
    /// The modules the last build made (from `modules.order`), as paths to `.ko` files.
    pub fn modules(&self) -> Vec<PathBuf> {
        fs::read_to_string(self.build.join("modules.order"))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| self.build.join(Path::new(l.trim()).with_extension("ko")))
            .filter(|p| p.exists())
            .collect()
    }
}

/// `${XDG_CACHE_HOME:-$HOME/.cache}/trapeze`
pub fn trapeze_cache() -> anyhow::Result<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(std::env::var_os("HOME").context("neither XDG_CACHE_HOME nor HOME is set")?).join(".cache")
        }
    };
    Ok(base.join("trapeze"))
}

/// What was done, with which inputs (`<cache>/stamp.json`).
#[derive(Serialize, Deserialize, Default, Debug)]
struct Stamp {
    /// Package version of the unpacked tree.
    source: Option<String>,
    /// rustc / bindgen / clang versions the tree was last configured with.
    toolchain: Option<String>,
    /// Hash of `kernel-crate/kernel.config` at the last configure.
    fragment_hash: Option<String>,
    /// Hash of source, toolchain and fragment at the last successful configure.
    configured: Option<String>,
    /// Toolchain for which `make rustavailable` passed.
    rust_available: Option<String>,
    /// Hash of the configure key and bindings_helper.h at the last successful build.
    built: Option<String>,
    /// Kbuild steps the last full build printed (for progress percentages).
    build_steps: Option<u64>,
    /// Wall time of the last build.
    build_secs: Option<f64>,
}

impl Stamp {
    fn load(p: &Paths) -> Stamp {
        fs::read(&p.stamp).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }
    fn save(&self, p: &Paths) -> anyhow::Result<()> {
        let tmp = p.stamp.with_extension("json.tmp");
        fs::write(&tmp, serde_json::to_vec_pretty(self)?)?;
        fs::rename(&tmp, &p.stamp).with_context(|| format!("writing {}", p.stamp.display()))
    }
}

/// The Rust toolchain (the workspace's pinned one) and the tools the kernel build uses.
pub struct Toolchain {
    pub rustc: PathBuf,
    pub rustc_version: String,
    pub bindgen: PathBuf,
    pub bindgen_version: String,
    pub clang_version: String,
}

impl Toolchain {
    fn key(&self) -> String {
        format!("{} | {} | {}", self.rustc_version, self.bindgen_version, self.clang_version)
    }
    /// The make variables every kernel or module build must use (modules need the
    /// kernel's own rustc).
    pub fn make_vars(&self) -> Vec<String> {
        let bin = self.rustc.parent().unwrap_or(Path::new("/"));
        vec![
            "ARCH=x86_64".into(),
            "LLVM=1".into(),
            format!("RUSTC={}", self.rustc.display()),
            format!("HOSTRUSTC={}", self.rustc.display()),
            format!("RUSTDOC={}", bin.join("rustdoc").display()),
            format!("RUSTFMT={}", bin.join("rustfmt").display()),
            format!("BINDGEN={}", self.bindgen.display()),
        ]
    }
}

/// What a finished `cargo xtask kernel` leaves.
pub struct Kernel {
    pub paths: Paths,
    pub toolchain: Toolchain,
}

impl Kernel {
    pub fn bzimage(&self) -> PathBuf {
        self.paths.bzimage()
    }
}

fn make_cmd(p: &Paths, tc: &Toolchain, nice: bool) -> Command {
    let mut c = if nice {
        let mut c = Command::new("nice");
        c.args(["-n", "10", "make"]);
        c
    } else {
        Command::new("make")
    };
    c.arg("-C").arg(&p.tree).arg(format!("O={}", p.build.display())).args(tc.make_vars());
    c
}

pub fn run(a: KernelArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let k = ensure(a.jobs, a.rebuild)?;
    let p = &k.paths;
    let bz = p.bzimage();
    let size = fs::metadata(&bz).map(|m| m.len()).unwrap_or(0);
    println!("\nkernel     {} ({:.1} MiB)", bz.display(), size as f64 / (1024.0 * 1024.0));
    let config = fs::read_to_string(p.build.join(".config")).unwrap_or_default();
    let shown: Vec<String> = SHOWN
        .iter()
        .map(|o| format!("{}={}", o.trim_start_matches("CONFIG_"), config_value(&config, o).unwrap_or("n")))
        .collect();
    println!("config     {} ({})", p.build.join(".config").display(), shown.join(" "));
    for m in p.modules() {
        println!("module     {}", m.display());
    }
    println!(
        "toolchain  {}; {}; {}",
        k.toolchain.rustc_version, k.toolchain.bindgen_version, k.toolchain.clang_version
    );
    println!("modules    make -C {} M=$PWD {}", p.build.display(), k.toolchain.make_vars().join(" "));
    println!("cache      {} (logs in {})", p.cache.display(), p.logs.display());
    println!("xtask kernel: done in {:.1?}", t0.elapsed());
    Ok(())
}

/// Run every step that is not done yet; return the built kernel.
pub fn ensure(jobs: Option<usize>, rebuild: bool) -> anyhow::Result<Kernel> {
    let p = Paths::new()?;
    fs::create_dir_all(&p.logs).with_context(|| format!("creating {}", p.logs.display()))?;
    let mut stamp = Stamp::load(&p);

    // 1. System packages.
    let pkgs = PACKAGES;
    let missing = crate::prereq::missing_packages(&pkgs);
    if missing.is_empty() {
        println!("cached: system packages ({} installed)", pkgs.len());
    } else {
        let names: Vec<&str> = missing.iter().map(|(n, _)| *n).collect();
        println!("==> installing system packages: {}", names.join(" "));
        let t = Instant::now();
        crate::prereq::ensure_packages(&pkgs)?;
        println!("    done in {:.1?}", t.elapsed());
    }
    let source_version = dpkg_version(SOURCE_PKG)?;

    // 2. Rust toolchain with rust-src.
    let (rustc, rustc_version) = rust_toolchain()?;

    // 3. bindgen-cli, into the cache.
    let bindgen = p.bindgen();
    let bindgen_version = match tool_version(&bindgen) {
        Some(v) if v == format!("bindgen {BINDGEN_VERSION}") => {
            println!("cached: {v} ({})", bindgen.display());
            v
        }
        found => {
            println!(
                "==> installing bindgen-cli {BINDGEN_VERSION} into {} (found: {}; about 2 minutes)",
                p.tools.display(),
                found.as_deref().unwrap_or("none")
            );
            let t = Instant::now();
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let st = Command::new(cargo)
                .args(["install", "--locked", "--force", "--root"])
                .arg(&p.tools)
                .args(["bindgen-cli", "--version", &format!("={BINDGEN_VERSION}")])
                .env("RUSTC", &rustc)
                .current_dir(&p.cache)
                .status()
                .context("running cargo install")?;
            ensure!(st.success(), "cargo install bindgen-cli {BINDGEN_VERSION} failed ({st})");
            let v = tool_version(&bindgen).context("bindgen installed but does not run")?;
            println!("    {v} installed in {:.1?}", t.elapsed());
            v
        }
    };
    let clang_version = first_line_of(Command::new("clang").arg("--version")).context("clang --version")?;
    let tc = Toolchain { rustc, rustc_version, bindgen, bindgen_version, clang_version };

    // 4. The kernel tree.
    if stamp.source.as_deref() == Some(source_version.as_str()) && p.tree.join("Makefile").exists() {
        println!("cached: kernel tree {} ({SOURCE_PKG} {source_version})", p.tree.display());
    } else {
        println!("==> unpacking {TARBALL} ({SOURCE_PKG} {source_version}) into {}", p.cache.display());
        let t = Instant::now();
        stamp = Stamp::default();
        stamp.save(&p)?;
        // A tree from another version (or a half-unpacked one) goes, and so does its
        // build output: the tarball's mtimes are older than any object built before.
        for d in [&p.tree, &p.build] {
            if d.exists() {
                println!("    removing {}", d.display());
                fs::remove_dir_all(d).with_context(|| format!("removing {}", d.display()))?;
            }
        }
        let tmp = p.cache.join("unpack.tmp");
        if tmp.exists() {
            fs::remove_dir_all(&tmp)?;
        }
        fs::create_dir_all(&tmp)?;
        let mut tar = Command::new("tar");
        tar.arg("-xf").arg(TARBALL).arg("-C").arg(&tmp);
        run_logged("unpack", &mut tar, &p.logs.join("unpack.log"), None)?;
        fs::rename(tmp.join(TREE_DIR), &p.tree).with_context(|| format!("{TARBALL} did not contain {TREE_DIR}/"))?;
        fs::remove_dir_all(&tmp)?;
        stamp.source = Some(source_version.clone());
        stamp.save(&p)?;
        println!("    unpacked kernel {} in {:.1?}", tree_version(&p.tree), t.elapsed());
    }

    // 5. bindings_helper.h.
    patch_bindings_helper(&p.tree)?;

    // 6. .config.
    let fragment_path = crate::workspace_root().join(FRAGMENT);
    let fragment =
        fs::read_to_string(&fragment_path).with_context(|| format!("reading {}", fragment_path.display()))?;
    let fragment_hash = fnv(&[fragment.as_bytes()]);
    let config_key = fnv(&[source_version.as_bytes(), tc.key().as_bytes(), fragment.as_bytes()]);
    let config_path = p.build.join(".config");
    let current = stamp.configured.as_deref() == Some(config_key.as_str())
        && fs::read_to_string(&config_path).is_ok_and(|c| check_config(&fragment, &c).is_empty());
    if current {
        println!("cached: {} (fragment {FRAGMENT} hash {fragment_hash})", config_path.display());
    } else {
        let why = match (&stamp.fragment_hash, &stamp.toolchain) {
            (None, _) => "first configure".to_string(),
            (Some(h), _) if *h != fragment_hash => format!("{FRAGMENT} changed: hash {h} -> {fragment_hash}"),
            (_, Some(t)) if *t != tc.key() => format!("toolchain changed: {t} -> {}", tc.key()),
            _ => "configure was not completed".to_string(),
        };
        println!("==> configuring: tinyconfig + {FRAGMENT} + olddefconfig ({why})");
        let t = Instant::now();
        stamp.configured = None;
        stamp.save(&p)?;
        fs::create_dir_all(&p.build)?;
        run_logged(
            "make tinyconfig",
            make_cmd(&p, &tc, false).arg("tinyconfig"),
            &p.logs.join("tinyconfig.log"),
            None,
        )?;
        let mut merge = Command::new(p.tree.join("scripts/kconfig/merge_config.sh"));
        merge.arg("-m").arg("-O").arg(&p.build).arg(&config_path).arg(&fragment_path).current_dir(&p.tree);
        run_logged("merge_config.sh", &mut merge, &p.logs.join("merge_config.log"), None)?;
        run_logged(
            "make olddefconfig",
            make_cmd(&p, &tc, false).arg("olddefconfig"),
            &p.logs.join("olddefconfig.log"),
            None,
        )?;
        let config = fs::read_to_string(&config_path)?;
        let problems = check_config(&fragment, &config);
        if !problems.is_empty() {
            bail!(
                "{} options of {FRAGMENT} did not survive olddefconfig (unmet dependencies?):\n  {}\n(.config: {})",
                problems.len(),
                problems.join("\n  "),
                config_path.display()
            );
        }
        let n = fragment_options(&fragment).len();
        stamp.configured = Some(config_key.clone());
        stamp.fragment_hash = Some(fragment_hash.clone());
        stamp.toolchain = Some(tc.key());
        stamp.save(&p)?;
        println!("    configured in {:.1?}; all {n} options of the fragment are set as asked", t.elapsed());
    }

    // 7. make rustavailable.
    if stamp.rust_available.as_deref() == Some(tc.key().as_str()) {
        println!("cached: make rustavailable passed with {}", tc.rustc_version);
    } else {
        println!("==> make LLVM=1 rustavailable");
        let log = p.logs.join("rustavailable.log");
        run_logged("make rustavailable", make_cmd(&p, &tc, false).arg("rustavailable"), &log, None)?;
        let out = fs::read_to_string(&log).unwrap_or_default();
        ensure!(
            out.contains("Rust is available!"),
            "make rustavailable did not say \"Rust is available!\" (log: {})",
            log.display()
        );
        println!("    Rust is available! ({}, {})", tc.rustc_version, tc.bindgen_version);
        stamp.rust_available = Some(tc.key());
        stamp.save(&p)?;
    }

    // 8. make bzImage modules.
    let helper = fs::read(p.tree.join("rust/bindings/bindings_helper.h"))?;
    let build_key = fnv(&[config_key.as_bytes(), &helper]);
    if !rebuild && stamp.built.as_deref() == Some(build_key.as_str()) && p.bzimage().exists() {
        println!(
            "cached: {} (built in {:.0} s; --rebuild runs make anyway)",
            p.bzimage().display(),
            stamp.build_secs.unwrap_or(0.0)
        );
    } else {
        let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let kind = if p.bzimage().exists() { "incremental build" } else { "full build, about 8-12 minutes on 2 cores" };
        println!("==> nice -n 10 make LLVM=1 -j{jobs} bzImage modules ({kind})");
        let t = Instant::now();
        stamp.built = None;
        stamp.save(&p)?;
        let steps = run_logged(
            "make bzImage modules",
            make_cmd(&p, &tc, true).arg(format!("-j{jobs}")).args(["bzImage", "modules"]),
            &p.logs.join("build.log"),
            stamp.build_steps.filter(|_| kind.starts_with("full")),
        )?;
        let secs = t.elapsed().as_secs_f64();
        stamp.built = Some(build_key);
        if steps > stamp.build_steps.unwrap_or(0) {
            stamp.build_steps = Some(steps);
        }
        stamp.build_secs = Some(secs);
        stamp.save(&p)?;
        println!("    built in {secs:.0} s ({steps} kbuild steps)");
    }
    Ok(Kernel { paths: p, toolchain: tc })
}

/// The pinned toolchain's rustc (from `rust-toolchain.toml`, as the workspace resolves it)
/// and its version; installs `rust-src` if it is missing.
fn rust_toolchain() -> anyhow::Result<(PathBuf, String)> {
    let root = crate::workspace_root();
    let out = Command::new("rustup")
        .args(["which", "rustc"])
        .current_dir(&root)
        .output()
        .context("running rustup (the pinned toolchain comes from rust-toolchain.toml through rustup)")?;
    ensure!(out.status.success(), "rustup which rustc: {}", String::from_utf8_lossy(&out.stderr).trim());
    let rustc = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let version = first_line_of(Command::new(&rustc).arg("-V")).context("rustc -V")?;
    let sysroot = first_line_of(Command::new(&rustc).args(["--print", "sysroot"])).context("rustc --print sysroot")?;
    let core = Path::new(&sysroot).join("lib/rustlib/src/rust/library/core/src/lib.rs");
    if core.exists() {
        println!("cached: {version} with rust-src ({})", rustc.display());
    } else {
        println!("==> rustup component add rust-src (for {version})");
        let st = Command::new("rustup").args(["component", "add", "rust-src"]).current_dir(&root).status()?;
        ensure!(st.success() && core.exists(), "could not install rust-src for {version}");
    }
    Ok((rustc, version))
}

/// Add [`HELPER_HEADERS`] to the tree's `rust/bindings/bindings_helper.h` (once).
fn patch_bindings_helper(tree: &Path) -> anyhow::Result<()> {
    let path = tree.join("rust/bindings/bindings_helper.h");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let missing: Vec<&str> =
        HELPER_HEADERS.iter().copied().filter(|h| !text.contains(&format!("#include <{h}>"))).collect();
    if missing.is_empty() {
        println!("cached: {} includes {}", path.display(), HELPER_HEADERS.join(", "));
        return Ok(());
    }
    println!("==> adding {} to {}", missing.join(", "), path.display());
    let lines: Vec<&str> = text.lines().collect();
    let last_include =
        lines.iter().rposition(|l| l.starts_with("#include <")).context("bindings_helper.h has no #include lines")?;
    let mut out: Vec<String> = lines[..=last_include].iter().map(|s| s.to_string()).collect();
    if !text.contains(HELPER_MARK) {
        out.push(HELPER_MARK.into());
    }
    out.extend(missing.iter().map(|h| format!("#include <{h}>")));
    out.extend(lines[last_include + 1..].iter().map(|s| s.to_string()));
    let mut new = out.join("\n");
    new.push('\n');
    fs::write(&path, new).with_context(|| format!("writing {}", path.display()))
}

/// The fragment's options: (name, Some(value)) for `CONFIG_X=v`, (name, None) for
/// `# CONFIG_X is not set`.
fn fragment_options(fragment: &str) -> Vec<(String, Option<String>)> {
    fragment
        .lines()
        .map(str::trim)
        .filter_map(|l| {
            if let Some(rest) = l.strip_prefix("# ").and_then(|r| r.strip_suffix(" is not set")) {
                rest.starts_with("CONFIG_").then(|| (rest.to_string(), None))
            } else if l.starts_with("CONFIG_") {
                let (k, v) = l.split_once('=')?;
                Some((k.to_string(), Some(v.to_string())))
            } else {
                None
            }
        })
        .collect()
}

fn config_value<'a>(config: &'a str, name: &str) -> Option<&'a str> {
    config.lines().find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
}

/// Every option of the fragment that the `.config` does not have as asked, described.
fn check_config(fragment: &str, config: &str) -> Vec<String> {
    fragment_options(fragment)
        .into_iter()
        .filter_map(|(name, want)| {
            let have = config_value(config, &name);
            match (&want, have) {
                (Some(w), Some(h)) if w == h => None,
                (None, None) => None,
                (None, Some("n")) => None,
                _ => Some(format!(
                    "{name}: fragment wants {}, .config has {}",
                    want.as_deref().unwrap_or("it unset"),
                    have.unwrap_or("it unset")
                )),
            }
        })
        .collect()
}

/// Run `cmd` with stdout and stderr into `log`, printing a progress line every
/// [`HEARTBEAT`] (kbuild steps done, the latest one, a percentage when `expected` steps are
/// known). On failure print the log's last lines and its path. Returns the kbuild steps seen.
fn run_logged(what: &str, cmd: &mut Command, log: &Path, expected: Option<u64>) -> anyhow::Result<u64> {
    let file = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(file.try_clone()?).stderr(file);
    eprintln!("    $ {} (log: {})", show_cmd(cmd), log.display());
    let mut child = cmd.spawn().with_context(|| format!("starting {what}"))?;
    let mut reader = fs::File::open(log)?;
    let start = Instant::now();
    let mut last_beat = start;
    let (mut steps, mut latest, mut pending) = (0u64, String::new(), String::new());
    let status = loop {
        let done = child.try_wait()?;
        let mut buf = Vec::new();
        let _ = reader.read_to_end(&mut buf);
        pending.push_str(&String::from_utf8_lossy(&buf));
        while let Some(i) = pending.find('\n') {
            let line: String = pending.drain(..=i).collect();
            let b = line.as_bytes();
            // Kbuild's quiet lines: two spaces, then an upper-case tag (CC, RUSTC, LD, AR…).
            if b.len() > 3 && b[0] == b' ' && b[1] == b' ' && b[2].is_ascii_uppercase() {
                steps += 1;
                latest = line.trim().to_string();
            }
        }
        if let Some(st) = done {
            break st;
        }
        if last_beat.elapsed() >= HEARTBEAT {
            last_beat = Instant::now();
            let pct =
                expected.filter(|&e| e > 0).map_or(String::new(), |e| format!(" (~{}%)", (steps * 100 / e).min(99)));
            if steps == 0 {
                eprintln!("    [{:>4.0?}] {what}: running", start.elapsed());
            } else {
                eprintln!("    [{:>4.0?}] {what}: {steps} steps{pct}, latest: {latest}", start.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    if !status.success() {
        let text = fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        eprintln!("    --- last lines of {} ---", log.display());
        for l in tail.iter().rev() {
            eprintln!("    {l}");
        }
        bail!("{what} failed ({status}); full log: {}", log.display());
    }
    Ok(steps)
}

fn show_cmd(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn first_line_of(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(Stdio::null()).output().ok().filter(|o| o.status.success())?;
    String::from_utf8_lossy(&out.stdout).lines().next().map(|l| l.trim().to_string())
}

fn tool_version(path: &Path) -> Option<String> {
    path.exists().then(|| first_line_of(Command::new(path).arg("--version"))).flatten()
}

fn dpkg_version(pkg: &str) -> anyhow::Result<String> {
    first_line_of(Command::new("dpkg-query").args(["-W", "-f=${Version}", pkg]))
        .filter(|v| !v.is_empty())
        .with_context(|| format!("{pkg} is not installed"))
}

/// `6.12.117` from the tree's Makefile.
fn tree_version(tree: &Path) -> String {
    let mk = fs::read_to_string(tree.join("Makefile")).unwrap_or_default();
    let get = |k: &str| {
        mk.lines()
            .find_map(|l| l.strip_prefix(k).map(|r| r.trim_start_matches([' ', '=']).trim().to_string()))
            .unwrap_or_default()
    };
    format!("{}.{}.{}", get("VERSION"), get("PATCHLEVEL"), get("SUBLEVEL"))
}

/// FNV-1a 64 over the parts (with a separator), as hex: stable change detection.
fn fnv(parts: &[&[u8]]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.iter().chain(&[0xffu8]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_check_reports_what_did_not_survive() {
        let frag = "# comment\nCONFIG_RUST=y\nCONFIG_A=m\n# CONFIG_MODVERSIONS is not set\n# CONFIG_B is not set\n";
        let cfg = "CONFIG_RUST=y\nCONFIG_A=y\nCONFIG_MODVERSIONS=y\n# CONFIG_B is not set\n";
        let p = check_config(frag, cfg);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].starts_with("CONFIG_A: fragment wants m, .config has y"));
        assert!(p[1].starts_with("CONFIG_MODVERSIONS: fragment wants it unset"));
        assert!(check_config("CONFIG_X=y\n", "CONFIG_XY=y\n").len() == 1);
    }

    #[test]
    fn run_logged_counts_steps_and_reports_a_failure_with_its_log() {
        let dir = std::env::temp_dir().join(format!("xtask-kernel-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let log = dir.join("ok.log");
        let mut ok = Command::new("sh");
        ok.args(["-c", "echo '  CC      a.o'; echo noise; echo '  LD      vmlinux' >&2"]);
        assert_eq!(run_logged("ok", &mut ok, &log, None).unwrap(), 2);
        let log = dir.join("fail.log");
        let mut fail = Command::new("sh");
        fail.args(["-c", "echo 'error: something broke'; exit 3"]);
        let e = run_logged("failing step", &mut fail, &log, None).unwrap_err().to_string();
        assert!(e.contains("failing step failed") && e.contains(&log.display().to_string()), "{e}");
        assert!(fs::read_to_string(&log).unwrap().contains("something broke"));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn fnv_separates_parts() {
        assert_ne!(fnv(&[b"ab", b"c"]), fnv(&[b"a", b"bc"]));
    }
}
