//! Prints a GGUF file's header, metadata, tensor table and a per-type summary.
//!
//! ```text
//! cargo run --release --example inspect                  # the default model
//! cargo run --release --example inspect -- model.gguf     # or -m model.gguf
//! ```
//!
//! With `--plan`, also the plan a model loaded from it runs on the live adapter or a
//! preset (`--profile h200`): every matrix of the forward pass, its kernel and why;
//! `--plan --json` prints only that, in the schema `decode --plan --json` prints.
//!
//! A malformed file prints `error: ...` (with the byte offset) and exits with code 1.

use std::collections::BTreeMap;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use brass::device::{AdapterChoice, Device, DeviceProfile, WgpuDevice};
use brass::gguf::{GgufFile, MetaValue};
use brass::hub::default_model_path;
use brass::model::{plan, LoadOptions};
use brass::quant::GgmlType;
use brass::router::{Force, Overrides};
use clap::Parser;

/// Print a GGUF file's header, metadata and tensor table.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The GGUF file to inspect (default: SmolLM2-135M-Instruct Q4_1, fetched into the
    /// cache on first use, as decode does).
    #[arg(conflicts_with = "model")]
    file: Option<PathBuf>,

    /// The GGUF file, as decode takes it.
    #[arg(short, long)]
    model: Option<PathBuf>,

    /// Show every array element and whole strings instead of a short rendering.
    #[arg(long)]
    full: bool,

    /// Also print the plan a model loaded from the file runs: every matrix of the
    /// forward pass, its kernel, geometry, and why.
    #[arg(long)]
    plan: bool,

    /// With --plan: print only the plan, as JSON (the schema of `decode --plan --json`).
    #[arg(long, requires = "plan")]
    json: bool,

    /// Route for a preset profile (m4-max, rdna4, h200, lavapipe) instead of the live
    /// adapter.
    #[arg(long, requires = "plan")]
    profile: Option<String>,

    /// With --plan: force a family (dot4, coop, scalar) or a kernel, as an A/B run would.
    #[arg(long, requires = "plan")]
    force: Option<String>,

    /// With --plan: norms hand dot4 matrices x quantized (true: all, false: none), as
    /// decode's --x-q8.
    #[arg(long, requires = "plan")]
    x_q8: Option<bool>,

    /// With --plan: silu(gate) * up quantized by its own dispatch, as decode's --glu-q8.
    #[arg(long, requires = "plan")]
    glu_q8: Option<bool>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn model_path(args: &Args) -> brass::Result<PathBuf> {
    match args.file.as_ref().or(args.model.as_ref()) {
        Some(path) => Ok(path.clone()),
        None => default_model_path(),
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let file = GgufFile::open(model_path(args)?)?;
    let mut out = BufWriter::new(io::stdout().lock());
    if args.json {
        writeln!(out, "{:#}", plan_for(args, &file)?.to_json())?;
        return Ok(out.flush()?);
    }
    let printed = print_header(&mut out, &file)
        .and_then(|()| print_metadata(&mut out, &file, args.full))
        .and_then(|()| print_tensors(&mut out, &file))
        .and_then(|()| print_summary(&mut out, &file))
        .and_then(|()| out.flush());
    if printed.is_ok() && args.plan {
        writeln!(out, "\n{}", plan_for(args, &file)?)?;
        out.flush()?;
    }
    match printed {
        // `inspect model.gguf | head` is normal use, not a failure.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(Into::into),
    }
}

/// The plan on the preset `--profile` names, or on the live adapter.
fn plan_for(args: &Args, file: &GgufFile) -> brass::Result<brass::model::Plan> {
    let profile = match &args.profile {
        Some(name) => DeviceProfile::preset(name)?,
        None => WgpuDevice::open(&AdapterChoice::from_env())?
            .profile()
            .clone(),
    };
    let options = LoadOptions {
        routing: Overrides {
            force: args.force.as_deref().map(str::parse::<Force>).transpose()?,
            x_q8: args.x_q8,
            glu_q8: args.glu_q8,
            ..Overrides::default()
        },
        ..LoadOptions::default()
    };
    plan(file, &profile, &options)
}

fn print_header(out: &mut impl Write, file: &GgufFile) -> io::Result<()> {
    writeln!(
        out,
        "GGUF version {}, {} bytes",
        file.version(),
        file.file_size()
    )?;
    writeln!(
        out,
        "alignment {}, data section at byte {}",
        file.alignment(),
        file.data_offset()
    )?;
    writeln!(
        out,
        "{} metadata keys, {} tensors",
        file.metadata_len(),
        file.tensors().len()
    )
}

fn print_metadata(out: &mut impl Write, file: &GgufFile, full: bool) -> io::Result<()> {
    writeln!(out, "\nmetadata:")?;
    let key_width = file.metadata().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (i, (key, value)) in file.metadata().enumerate() {
        let ty = value.meta_type().name();
        write!(out, "{i:5}  {key:key_width$}  {ty:7}  ")?;
        write_value(out, value, full)?;
        writeln!(out)?;
    }
    Ok(())
}

fn write_value(out: &mut impl Write, value: &MetaValue, full: bool) -> io::Result<()> {
    if full {
        write!(out, "{value:#}")
    } else {
        write!(out, "{value}")
    }
}

fn print_tensors(out: &mut impl Write, file: &GgufFile) -> io::Result<()> {
    let name_width = file
        .tensors()
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4);
    writeln!(out, "\ntensors:")?;
    writeln!(
        out,
        "{:>5}  {:name_width$}  {:7}  {:22}  {:>12}  {:>12}",
        "index", "name", "type", "dims", "bytes", "offset"
    )?;
    for (i, t) in file.tensors().iter().enumerate() {
        writeln!(
            out,
            "{i:5}  {:name_width$}  {:7}  {:22}  {:>12}  {:>12}",
            t.name,
            t.ty.name(),
            format!("{:?}", t.dims),
            t.n_bytes,
            t.offset
        )?;
    }
    Ok(())
}

fn print_summary(out: &mut impl Write, file: &GgufFile) -> io::Result<()> {
    let mut per_type: BTreeMap<GgmlType, (usize, u64)> = BTreeMap::new();
    for t in file.tensors() {
        let entry = per_type.entry(t.ty).or_default();
        entry.0 += 1;
        entry.1 += t.n_bytes;
    }
    writeln!(out, "\nsummary:")?;
    for (ty, (count, bytes)) in &per_type {
        let note = if ty.can_dequantize() {
            ""
        } else {
            "  (brass cannot compute this type)"
        };
        writeln!(
            out,
            "  {:7}  {count:5} tensors  {bytes:>12} bytes{note}",
            ty.name()
        )?;
    }
    let total: u64 = per_type.values().map(|&(_, bytes)| bytes).sum();
    writeln!(
        out,
        "  {:7}  {:5} tensors  {total:>12} bytes",
        "total",
        file.tensors().len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_is_a_path_either_way_or_the_default() {
        let path = |argv: &[&str]| model_path(&Args::try_parse_from(argv).unwrap()).unwrap();
        assert_eq!(path(&["inspect", "a.gguf"]), PathBuf::from("a.gguf"));
        assert_eq!(path(&["inspect", "-m", "a.gguf"]), PathBuf::from("a.gguf"));
        assert!(Args::try_parse_from(["inspect", "a.gguf", "-m", "b.gguf"]).is_err());
        // The default model is in the cache wherever the suite runs (CI fetches it first).
        assert_eq!(path(&["inspect"]), default_model_path().unwrap());
    }
}
