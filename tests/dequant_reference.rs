//! Dequantization against gguf-py 0.19.0's output, bit for bit.
//!
//! `tests/reference/dequant_vectors.json` holds, per type, 48 random blocks
//! (`data_hex`) and what `gguf.quants.dequantize` made of them (`expected_f32_hex`, f32
//! little-endian). Values are compared as bit patterns, so a NaN must match a NaN of the
//! same payload and +0 is not -0.

mod common;

use std::path::PathBuf;

use brass::quant::{dequantize, dequantize_row, GgmlType};
use serde_json::Value;

fn vectors_path() -> PathBuf {
    common::reference_path("dequant_vectors.json")
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    assert!(hex.len().is_multiple_of(2), "odd-length hex string");
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex digit"))
        .collect()
}

struct Case {
    ty: GgmlType,
    blocks: usize,
    data: Vec<u8>,
    expected: Vec<u32>,
}

fn load_cases() -> Vec<Case> {
    let text = std::fs::read_to_string(vectors_path()).expect("read reference vectors");
    let json: Value = serde_json::from_str(&text).expect("parse reference vectors");
    let types = json["types"].as_object().expect("`types` object");
    types
        .iter()
        .map(|(name, v)| {
            let ty = GgmlType::from_name(name).unwrap_or_else(|| panic!("unknown type {name}"));
            let field = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{name}.{k}")) as usize;
            assert_eq!(
                (field("block_elems"), field("block_bytes")),
                ty.block_layout(),
                "{name}"
            );
            let expected = hex_bytes(v["expected_f32_hex"].as_str().expect("expected_f32_hex"))
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            Case {
                ty,
                blocks: field("blocks"),
                data: hex_bytes(v["data_hex"].as_str().expect("data_hex")),
                expected,
            }
        })
        .collect()
}

#[test]
fn matches_gguf_py_bit_for_bit() {
    let cases = load_cases();
    let covered: Vec<_> = cases.iter().map(|c| c.ty).collect();
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ] {
        assert!(covered.contains(&ty), "reference vectors lack {ty}");
    }

    let mut failures = Vec::new();
    for case in &cases {
        let (elems, bytes) = case.ty.block_layout();
        assert_eq!(case.data.len(), case.blocks * bytes, "{}", case.ty);
        assert_eq!(case.expected.len(), case.blocks * elems, "{}", case.ty);

        let got = dequantize_row(case.ty, &case.data).unwrap();
        let mismatches: Vec<_> = got
            .iter()
            .zip(&case.expected)
            .enumerate()
            .filter(|(_, (g, &e))| g.to_bits() != e)
            .collect();
        if let Some(&(i, (g, &e))) = mismatches.first() {
            failures.push(format!(
                "{}: {} of {} values differ; first at {i} (block {}): got {g:e} ({:#010x}), \
                 gguf-py {:e} ({e:#010x})",
                case.ty,
                mismatches.len(),
                got.len(),
                i / elems,
                g.to_bits(),
                f32::from_bits(e),
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn dequantizes_from_unaligned_slices() {
    // The same bytes at every offset within an 8-byte word must give the same values.
    for case in load_cases() {
        let mut shifted = vec![0u8; case.data.len() + 7];
        for offset in 1..8 {
            shifted[offset..offset + case.data.len()].copy_from_slice(&case.data);
            let got = dequantize_row(case.ty, &shifted[offset..offset + case.data.len()]).unwrap();
            assert!(
                got.iter()
                    .zip(&case.expected)
                    .all(|(g, &e)| g.to_bits() == e),
                "{} at offset {offset}",
                case.ty
            );
        }
    }
}

#[test]
fn size_mismatches_are_errors_not_panics() {
    for case in load_cases() {
        let (elems, bytes) = case.ty.block_layout();
        let mut out = vec![0.0f32; case.blocks * elems];
        assert!(dequantize(case.ty, &case.data, &mut out).is_ok());
        assert!(dequantize(case.ty, &case.data[..bytes * 2 - 1], &mut out[..elems * 2]).is_err());
        assert!(dequantize(case.ty, &case.data, &mut out[1..]).is_err());
        assert!(dequantize(case.ty, &case.data[..bytes], &mut out).is_err());
        assert!(dequantize(case.ty, &[], &mut []).is_ok());
    }
    let mut out = vec![0.0f32; 256];
    for ty in GgmlType::ALL.into_iter().filter(|t| !t.can_dequantize()) {
        let bytes = vec![0u8; ty.type_size()];
        let mut out = vec![0.0f32; ty.block_size()];
        assert!(dequantize(ty, &bytes, &mut out).is_err(), "{ty}");
    }
    assert!(dequantize(GgmlType::F32, &[0u8; 1023], &mut out).is_err());
}
