//! The one way brass assembles WGSL: the host's constants, then a root file under
//! `wgsl/` with the files it names in `#include "<path under wgsl/>"` lines (at its
//! top by convention), recursively, each file once and before the first file that
//! names it.
//!
//! The directive starts with `#`, which naga rejects, so one the composer missed could
//! never pass silently as a comment.

use std::fmt::Write;

use crate::{Error, Result};

macro_rules! wgsl_files {
    ($($path:literal,)*) => {
        &[$(($path, include_str!(concat!("../../wgsl/", $path)))),*]
    };
}

/// Every file under `wgsl/`, by its path there (a test holds it to the disk).
const FILES: &[(&str, &str)] = wgsl_files![
    "attention/combine.wgsl",
    "attention/decode.wgsl",
    "attention/decode_f16.wgsl",
    "attention/decode_f32.wgsl",
    "attention/decode_io.wgsl",
    "attention/decode_merge.wgsl",
    "attention/decode_portable.wgsl",
    "attention/decode_portable_f16.wgsl",
    "attention/decode_portable_f32.wgsl",
    "attention/decode_portable_q8_0.wgsl",
    "attention/decode_q8_0.wgsl",
    "attention/flash.wgsl",
    "attention/flash_f16.wgsl",
    "attention/flash_f32.wgsl",
    "attention/flash_q8_0.wgsl",
    "attention/kv_f16.wgsl",
    "attention/kv_f32.wgsl",
    "attention/kv_q8_0.wgsl",
    "attention/kv_rows.wgsl",
    "attention/kv_rows_q8_0.wgsl",
    "attention/kv_words_f16.wgsl",
    "attention/kv_words_f32.wgsl",
    "attention/kv_words_q8_0.wgsl",
    "attention/merge_ml.wgsl",
    "attention/prefill.wgsl",
    "attention/prefill_f16.wgsl",
    "attention/prefill_f32.wgsl",
    "attention/prefill_io.wgsl",
    "attention/prefill_q8_0.wgsl",
    "attention/rope_kv.wgsl",
    "attention/rope_kv_batch.wgsl",
    "attention/rope_kv_batch_f16.wgsl",
    "attention/rope_kv_batch_f32.wgsl",
    "attention/rope_kv_batch_q8_0.wgsl",
    "attention/rope_kv_block.wgsl",
    "attention/rope_kv_f16.wgsl",
    "attention/rope_kv_f32.wgsl",
    "attention/rope_kv_pair.wgsl",
    "attention/rope_kv_q8_0.wgsl",
    "attention/rope_math.wgsl",
    "attention/rows.wgsl",
    "matmul/columns.wgsl",
    "matmul/coop_staging.wgsl",
    "matmul/coopmat.wgsl",
    "matmul/dot4.wgsl",
    "matmul/f16_fma.wgsl",
    "matmul/f32_fma.wgsl",
    "matmul/fma.wgsl",
    "matmul/fma_k.wgsl",
    "matmul/fma_q32.wgsl",
    "matmul/group_values.wgsl",
    "matmul/io.wgsl",
    "matmul/q4_0.wgsl",
    "matmul/q4_0_columns.wgsl",
    "matmul/q4_0_coopmat.wgsl",
    "matmul/q4_0_dot4.wgsl",
    "matmul/q4_0_fma.wgsl",
    "matmul/q4_0_unpack.wgsl",
    "matmul/q4_1.wgsl",
    "matmul/q4_1_columns.wgsl",
    "matmul/q4_1_coopmat.wgsl",
    "matmul/q4_1_dot4.wgsl",
    "matmul/q4_1_fma.wgsl",
    "matmul/q4_1_unpack.wgsl",
    "matmul/q4_k.wgsl",
    "matmul/q4_k_columns.wgsl",
    "matmul/q4_k_coopmat.wgsl",
    "matmul/q4_k_dot4.wgsl",
    "matmul/q4_k_fma.wgsl",
    "matmul/q4_k_unpack.wgsl",
    "matmul/q5_0.wgsl",
    "matmul/q5_0_columns.wgsl",
    "matmul/q5_0_coopmat.wgsl",
    "matmul/q5_0_dot4.wgsl",
    "matmul/q5_0_fma.wgsl",
    "matmul/q5_0_unpack.wgsl",
    "matmul/q5_1.wgsl",
    "matmul/q5_1_columns.wgsl",
    "matmul/q5_1_coopmat.wgsl",
    "matmul/q5_1_dot4.wgsl",
    "matmul/q5_1_fma.wgsl",
    "matmul/q5_1_unpack.wgsl",
    "matmul/q5_k.wgsl",
    "matmul/q5_k_columns.wgsl",
    "matmul/q5_k_coopmat.wgsl",
    "matmul/q5_k_dot4.wgsl",
    "matmul/q5_k_fma.wgsl",
    "matmul/q5_k_unpack.wgsl",
    "matmul/q6_k.wgsl",
    "matmul/q6_k_columns.wgsl",
    "matmul/q6_k_coopmat.wgsl",
    "matmul/q6_k_dot4.wgsl",
    "matmul/q6_k_fma.wgsl",
    "matmul/q6_k_unpack.wgsl",
    "matmul/q8_0.wgsl",
    "matmul/q8_0_columns.wgsl",
    "matmul/q8_0_coopmat.wgsl",
    "matmul/q8_0_dot4.wgsl",
    "matmul/q8_0_fma.wgsl",
    "matmul/q8_0_unpack.wgsl",
    "matmul/span_sum.wgsl",
    "matmul/staged_scalar.wgsl",
    "matmul/staged_vec4.wgsl",
    "matmul/unpack.wgsl",
    "matmul/unpack_x.wgsl",
    "matmul/unpacked.wgsl",
    "matmul/x_planes.wgsl",
    "matvec/bytes.wgsl",
    "matvec/bytes_dot4.wgsl",
    "matvec/coop.wgsl",
    "matvec/dot4.wgsl",
    "matvec/dot4_no_prefetch.wgsl",
    "matvec/dot4_prefetch.wgsl",
    "matvec/f16_coop.wgsl",
    "matvec/f16_scalar.wgsl",
    "matvec/f32_coop.wgsl",
    "matvec/f32_scalar.wgsl",
    "matvec/k_scale_min_coop.wgsl",
    "matvec/k_scale_min_dot4.wgsl",
    "matvec/k_scale_min_scalar.wgsl",
    "matvec/k_scales_by_pair.wgsl",
    "matvec/q4_0_coop.wgsl",
    "matvec/q4_0_dot4.wgsl",
    "matvec/q4_0_scalar.wgsl",
    "matvec/q4_1_coop.wgsl",
    "matvec/q4_1_dot4.wgsl",
    "matvec/q4_1_scalar.wgsl",
    "matvec/q4_k_coop.wgsl",
    "matvec/q4_k_dot4.wgsl",
    "matvec/q4_k_scalar.wgsl",
    "matvec/q5_0_coop.wgsl",
    "matvec/q5_0_dot4.wgsl",
    "matvec/q5_0_scalar.wgsl",
    "matvec/q5_1_coop.wgsl",
    "matvec/q5_1_dot4.wgsl",
    "matvec/q5_1_scalar.wgsl",
    "matvec/q5_bits.wgsl",
    "matvec/q5_k_coop.wgsl",
    "matvec/q5_k_dot4.wgsl",
    "matvec/q5_k_quants.wgsl",
    "matvec/q5_k_scalar.wgsl",
    "matvec/q6_k_coop.wgsl",
    "matvec/q6_k_dot4.wgsl",
    "matvec/q6_k_scalar.wgsl",
    "matvec/q8_0_coop.wgsl",
    "matvec/q8_0_dot4.wgsl",
    "matvec/q8_0_scalar.wgsl",
    "matvec/q8_x.wgsl",
    "matvec/scalar.wgsl",
    "ops/add_rms_norm.wgsl",
    "ops/add_rms_norm_f32.wgsl",
    "ops/add_rms_norm_q8.wgsl",
    "ops/argmax.wgsl",
    "ops/embed.wgsl",
    "ops/glu_act.wgsl",
    "ops/head_rms_norm.wgsl",
    "ops/q8_out.wgsl",
    "ops/q8_round.wgsl",
    "ops/q8_rows.wgsl",
    "ops/quantize_rows.wgsl",
    "ops/rms_norm.wgsl",
    "ops/rms_norm_f32.wgsl",
    "ops/rms_norm_q8.wgsl",
    "ops/rms_scale.wgsl",
    "ops/silu_mul.wgsl",
    "ops/silu_mul_q8.wgsl",
    "ops/write_f32.wgsl",
    "probe/coop_peak.wgsl",
    "probe/dot4_peak.wgsl",
    "probe/fill.wgsl",
    "probe/fma_peak.wgsl",
    "probe/stream_read.wgsl",
];

const INCLUDE: &str = "#include";

/// A constant's value as the WGSL declares it.
pub enum WgslValue {
    /// `const NAME: u32 = v;`
    U32(u32),
    /// `const NAME: bool = v;`
    Bool(bool),
    /// `alias NAME = T;`
    Alias(&'static str),
    /// The file at this path under `wgsl/` (after its own includes), ahead of the root:
    /// a variant the host picks where the WGSL differs in more than constants. The
    /// constant's name is for the reader only.
    Include(&'static str),
}

/// A constant the host chooses per pipeline (launch geometry, options), declared ahead
/// of the files that use it.
pub struct WgslConst {
    /// The name the WGSL refers to it by.
    pub name: &'static str,
    /// Its value, which decides its declaration.
    pub value: WgslValue,
}

impl WgslConst {
    /// `const name: u32 = v;`
    pub fn u32(name: &'static str, v: u32) -> Self {
        WgslConst {
            name,
            value: WgslValue::U32(v),
        }
    }

    /// `const name: bool = v;`
    pub fn bool(name: &'static str, v: bool) -> Self {
        WgslConst {
            name,
            value: WgslValue::Bool(v),
        }
    }

    /// `alias name = ty;`
    pub fn alias(name: &'static str, ty: &'static str) -> Self {
        WgslConst {
            name,
            value: WgslValue::Alias(ty),
        }
    }

    /// The file `path` under `wgsl/`, as the variant `name` of what the root includes.
    pub fn include(name: &'static str, path: &'static str) -> Self {
        WgslConst {
            name,
            value: WgslValue::Include(path),
        }
    }
}

/// `enable` directives first, then one `const` (or `alias`) line per constant, then
/// the files the constants include, then the root file with its includes resolved.
pub fn compose(root: &str, enables: &[&str], consts: &[WgslConst]) -> Result<String> {
    compose_from(FILES, root, enables, consts)
}

/// [`compose`] over a table of files of the caller's (the tests' cycles).
fn compose_from(
    files: &[(&str, &str)],
    root: &str,
    enables: &[&str],
    consts: &[WgslConst],
) -> Result<String> {
    let mut out = String::new();
    for e in enables {
        writeln!(out, "enable {e};").expect("writing to a String");
    }
    let mut variants = Vec::new();
    for c in consts {
        let name = c.name;
        match c.value {
            WgslValue::U32(v) => writeln!(out, "const {name}: u32 = {v}u;"),
            WgslValue::Bool(v) => writeln!(out, "const {name}: bool = {v};"),
            WgslValue::Alias(ty) => writeln!(out, "alias {name} = {ty};"),
            WgslValue::Include(path) => {
                variants.push(path);
                writeln!(out, "// {name}: wgsl/{path}")
            }
        }
        .expect("writing to a String");
    }
    if !out.is_empty() {
        out.push('\n');
    }
    let mut includes = Includes {
        files,
        open: Vec::new(),
        done: Vec::new(),
    };
    for path in variants.into_iter().chain([root]) {
        includes
            .append(path, &mut out)
            .map_err(|what| Error::Shader {
                name: root.to_string(),
                what,
            })?;
    }
    Ok(out)
}

struct Includes<'a> {
    files: &'a [(&'a str, &'a str)],
    /// The chain of includers of the file being read: a file turning up in it again is
    /// a cycle.
    open: Vec<&'a str>,
    done: Vec<&'a str>,
}

impl<'a> Includes<'a> {
    /// Appends `path` after its includes, unless it is already in.
    fn append(&mut self, path: &'a str, out: &mut String) -> std::result::Result<(), String> {
        if self.done.contains(&path) {
            return Ok(());
        }
        if self.open.contains(&path) {
            return Err(format!(
                "include cycle: {} -> {path}",
                self.open.join(" -> ")
            ));
        }
        let Some(&(_, text)) = self.files.iter().find(|(p, _)| *p == path) else {
            let by = self
                .open
                .last()
                .map_or(String::new(), |f| format!(" (included by {f})"));
            return Err(format!("no file `wgsl/{path}`{by}"));
        };
        self.open.push(path);
        let mut own = String::with_capacity(text.len());
        for line in text.lines() {
            match line.strip_prefix(INCLUDE) {
                Some(rest) => {
                    let target = rest
                        .trim()
                        .strip_prefix('"')
                        .and_then(|r| r.strip_suffix('"'))
                        .ok_or_else(|| format!("wgsl/{path}: malformed `{line}`"))?;
                    self.append(target, out)?;
                }
                None => {
                    own.push_str(line);
                    own.push('\n');
                }
            }
        }
        self.open.pop();
        self.done.push(path);
        out.push_str(&own);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lists_exactly_the_files_under_wgsl() {
        fn walk(dir: &std::path::Path, root: &std::path::Path, found: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, root, found);
                } else {
                    let rel = path.strip_prefix(root).unwrap();
                    found.push(rel.to_str().unwrap().replace('\\', "/"));
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("wgsl");
        let mut on_disk = Vec::new();
        walk(&root, &root, &mut on_disk);
        on_disk.sort();
        let mut listed: Vec<String> = FILES.iter().map(|(p, _)| p.to_string()).collect();
        listed.sort();
        assert_eq!(listed, on_disk);
    }

    #[test]
    fn every_file_composes() {
        for (path, _) in FILES {
            compose(path, &[], &[]).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    #[test]
    fn constants_come_first_then_includes_depth_first_each_once() {
        let text = compose(
            "ops/rms_norm_q8.wgsl",
            &["f16"],
            &[
                WgslConst {
                    name: "WG",
                    value: WgslValue::U32(64),
                },
                WgslConst {
                    name: "ON",
                    value: WgslValue::Bool(true),
                },
                WgslConst {
                    name: "XS",
                    value: WgslValue::Alias("f16"),
                },
            ],
        )
        .unwrap();
        assert!(text.starts_with(
            "enable f16;\nconst WG: u32 = 64u;\nconst ON: bool = true;\nalias XS = f16;\n\n"
        ));
        assert!(!text.contains(INCLUDE));
        let at = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("{needle}"));
        // rms_scale, then q8_out's include q8_round's include q8_x, then q8_out, then
        // the norm (which names rms_scale again).
        assert!(at("fn rms_scale(") < at("fn q8_inv("));
        assert!(at("fn q8_inv(") < at("fn q8_round("));
        assert!(at("fn q8_round(") < at("fn write_out("));
        assert!(at("fn write_out(") < at("fn main("));
        assert_eq!(text.matches("fn rms_scale(").count(), 1);
    }

    /// The kernels that include dot4_no_prefetch.wgsl have nothing to load ahead: a
    /// route asking them to must fail to compile, not skip its rows.
    #[test]
    fn a_dot4_kernel_without_split_slices_refuses_prefetch() {
        use crate::kernels::matvec::{Family, MatvecLaunch, MATVEC_KERNELS};
        for k in MATVEC_KERNELS.iter().filter(|k| k.family == Family::Dot4) {
            // Made without the checks that would refuse it, as only a canonical launch is.
            let wgsl = MatvecLaunch::canonical(k, true).source().unwrap();
            let compiled = crate::device::translate::wgsl_to_spirv(k.name, &wgsl, "main", &[]);
            assert_eq!(compiled.is_ok(), k.splits_slices(), "{}", k.name);
        }
    }

    #[test]
    fn a_variant_the_host_includes_comes_after_the_constants_once() {
        let files = [
            ("root.wgsl", "#include \"shared.wgsl\"\nfn main() {}\n"),
            (
                "variant.wgsl",
                "#include \"shared.wgsl\"\nfn variant() {}\n",
            ),
            ("shared.wgsl", "fn shared() {}\n"),
        ];
        let text = compose_from(
            &files,
            "root.wgsl",
            &[],
            &[
                WgslConst::include("VARIANT", "variant.wgsl"),
                WgslConst::u32("N", 4),
            ],
        )
        .unwrap();
        let at = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("{needle}"));
        assert!(at("const N: u32 = 4u;") < at("fn shared("));
        assert!(at("fn shared(") < at("fn variant("));
        assert!(at("fn variant(") < at("fn main("));
        assert_eq!(text.matches("fn shared(").count(), 1);
        let missing = compose_from(
            &files,
            "root.wgsl",
            &[],
            &[WgslConst::include("VARIANT", "absent.wgsl")],
        )
        .unwrap_err()
        .to_string();
        assert!(missing.contains("no file `wgsl/absent.wgsl`"), "{missing}");
    }

    fn error_of(files: &[(&str, &str)]) -> String {
        compose_from(files, "a.wgsl", &[], &[])
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_missing_file_or_a_cycle_is_an_error() {
        let missing = error_of(&[("a.wgsl", "#include \"b.wgsl\"\n")]);
        assert!(
            missing.contains("no file `wgsl/b.wgsl` (included by a.wgsl)"),
            "{missing}"
        );
        let cycle = error_of(&[
            ("a.wgsl", "#include \"b.wgsl\"\n"),
            ("b.wgsl", "#include \"a.wgsl\"\n"),
        ]);
        assert!(
            cycle.contains("include cycle: a.wgsl -> b.wgsl -> a.wgsl"),
            "{cycle}"
        );
        let malformed = error_of(&[("a.wgsl", "#include b.wgsl\n")]);
        assert!(malformed.contains("malformed"), "{malformed}");
    }

    #[test]
    fn a_file_named_twice_comes_once_before_its_first_includer() {
        let files = [
            ("a.wgsl", "#include \"b.wgsl\"\n#include \"c.wgsl\"\na\n"),
            ("b.wgsl", "#include \"c.wgsl\"\nb\n"),
            ("c.wgsl", "c\n"),
        ];
        assert_eq!(
            compose_from(&files, "a.wgsl", &[], &[]).unwrap(),
            "c\nb\na\n"
        );
    }
}
