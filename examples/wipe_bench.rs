//! Drives the wipe engine for `bench/wipe.sh`: builds trees of small files, wipes a filesystem volume or a block
//! device, and prints one `key=value` line per run.
//!
//! ```text
//! wipe_bench tree  <dir> <files> [per-dir]            create <files> one-byte files, <per-dir> per directory
//! wipe_bench fs    <root> [concurrency]                wipe everything beneath <root>
//! wipe_bench block <device> <method> [chunk-mib]       wipe a block device (method as in the config)
//! ```

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use localpv::contract::DevId;
use localpv::wipe::{
    BlockMethod, BlockOptions, Control, Expected, FsOptions, wipe_block, wipe_filesystem,
};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str);
    match (arg(0), arg(1)) {
        (Some("tree"), Some(dir)) => {
            let files = arg(2).context("missing file count")?.parse()?;
            let per_dir = arg(3).map_or(Ok(1000), str::parse)?;
            tree(Path::new(dir), files, per_dir)
        }
        (Some("fs"), Some(root)) => {
            let concurrency = arg(2).map_or(Ok(2), str::parse)?;
            fs(Path::new(root), concurrency)
        }
        (Some("block"), Some(device)) => {
            let method: BlockMethod =
                serde_json::from_value(arg(2).context("missing method")?.into())?;
            let chunk_mib: u64 = arg(3).map_or(Ok(128), str::parse)?;
            block(Path::new(device), method, chunk_mib)
        }
        _ => bail!(
            "usage: wipe_bench tree <dir> <files> [per-dir] | fs <root> [concurrency] | block <device> <method> [chunk-mib]"
        ),
    }
}

fn tree(dir: &Path, files: usize, per_dir: usize) -> anyhow::Result<()> {
    let per_dir = per_dir.max(1);
    for d in 0..files.div_ceil(per_dir) {
        let sub: PathBuf = dir.join(format!("d{d:05}"));
        std::fs::create_dir_all(&sub).with_context(|| format!("creating {}", sub.display()))?;
        for f in 0..per_dir.min(files - d * per_dir) {
            std::fs::write(sub.join(format!("f{f:05}")), b"x")?;
        }
    }
    Ok(())
}

fn fs(root: &Path, concurrency: usize) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let dev = DevId::from_dev(std::fs::metadata(root)?.dev());
    let expected = Expected {
        dev: Some(dev),
        check: None,
    };
    let opts = FsOptions {
        concurrency,
        ..FsOptions::default()
    };
    let started = Instant::now();
    let report = wipe_filesystem(root, &expected, &opts, &Control::default())?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "entries={} bytes={} skipped={} seconds={secs:.3} entries_per_sec={:.0}",
        report.removed_entries,
        report.removed_bytes,
        report.skipped.len() as u64 + report.skipped_more,
        report.removed_entries as f64 / secs
    );
    Ok(())
}

fn block(device: &Path, method: BlockMethod, chunk_mib: u64) -> anyhow::Result<()> {
    let opts = BlockOptions {
        method,
        chunk_bytes: chunk_mib << 20,
        ..BlockOptions::default()
    };
    let started = Instant::now();
    let report = wipe_block(device, None, &opts, &Control::default())?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "method={} used={} bytes={} seconds={secs:.3} mib_per_sec={:.0}",
        method,
        report.method,
        report.bytes,
        report.bytes as f64 / (1 << 20) as f64 / secs
    );
    Ok(())
}
