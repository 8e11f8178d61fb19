//! Builder round trips and accessor behaviour. Malformed input is covered by
//! `tests/gguf_malformed.rs`.

use std::io;

use super::*;

/// One key of every type, nested and empty arrays included.
fn every_type() -> Vec<(&'static str, MetaValue)> {
    let nested = MetaArray::from(vec![
        MetaArray::from(vec![1i32, -2, 3]),
        MetaArray::empty(MetaType::String),
        MetaArray::from(vec![MetaArray::from(vec![true, false])]),
    ]);
    vec![
        ("t.u8", MetaValue::U8(200)),
        ("t.i8", MetaValue::I8(-100)),
        ("t.u16", MetaValue::U16(65_000)),
        ("t.i16", MetaValue::I16(-32_000)),
        ("t.u32", MetaValue::U32(4_000_000_000)),
        ("t.i32", MetaValue::I32(-2_000_000_000)),
        ("t.f32", MetaValue::F32(1e-5)),
        ("t.bool", MetaValue::Bool(true)),
        ("t.string", MetaValue::from("héllo\n\"wörld\"")),
        ("t.empty_string", MetaValue::from("")),
        ("t.u64", MetaValue::U64(u64::MAX)),
        ("t.i64", MetaValue::I64(i64::MIN)),
        ("t.f64", MetaValue::F64(-0.125)),
        ("t.nan", MetaValue::F32(f32::NAN)),
        ("t.array_u8", vec![0u8, 255].into()),
        ("t.array_i8", vec![-1i8].into()),
        ("t.array_u16", vec![1u16, 2].into()),
        ("t.array_i16", vec![-3i16].into()),
        ("t.array_u32", vec![7u32].into()),
        ("t.array_i32", vec![i32::MIN, 0, i32::MAX].into()),
        ("t.array_f32", vec![0.5f32, -1.0].into()),
        ("t.array_bool", vec![true, false, true].into()),
        ("t.array_str", vec!["<|endoftext|>", "", "ü"].into()),
        ("t.array_u64", vec![u64::MAX].into()),
        ("t.array_i64", vec![-5i64].into()),
        ("t.array_f64", vec![2.5f64].into()),
        ("t.array_empty", MetaArray::empty(MetaType::F32).into()),
        ("t.array_nested", nested.into()),
    ]
}

fn q4_1_bytes(n_elements: usize) -> Vec<u8> {
    (0..n_elements / 32 * 20).map(|i| i as u8).collect()
}

fn sample_builder() -> GgufBuilder {
    let mut b = GgufBuilder::new();
    b.set("general.architecture", "llama");
    for (k, v) in every_type() {
        b.set(k, v);
    }
    b.add_tensor("a", GgmlType::F32, &[3, 2], vec![1u8; 24])
        .unwrap();
    b.add_tensor("b", GgmlType::Q4_1, &[64, 3], q4_1_bytes(192))
        .unwrap();
    b.add_tensor("c", GgmlType::F16, &[5], vec![2u8; 10])
        .unwrap();
    b
}

/// f32 NaN != NaN, so compare metadata by bits through the writer's own encoding.
fn same(a: &MetaValue, b: &MetaValue) -> bool {
    match (a, b) {
        (MetaValue::F32(x), MetaValue::F32(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

#[test]
fn round_trips_every_type_and_tensor() {
    let b = sample_builder();
    let bytes = b.to_bytes();
    assert_eq!(bytes.len() as u64, b.file_size());
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.data_offset() % 32, 0);
    assert_eq!(f.architecture().unwrap(), "llama");

    let expected = every_type();
    let got: Vec<_> = f.metadata().collect();
    assert_eq!(got.len(), expected.len() + 1);
    for ((k, v), (ek, ev)) in got[1..].iter().zip(&expected) {
        assert_eq!(k, ek);
        assert!(same(v, ev), "{k}: {v:?} != {ev:?}");
        assert!(same(f.get(k).unwrap(), ev));
    }

    assert_eq!(f.tensors(), &b.tensor_infos()[..]);
    let names: Vec<_> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    let a = f.tensor("a").unwrap();
    assert_eq!(
        (a.cols(), a.rows(), a.n_elements(), a.n_bytes),
        (3, 2, 6, 24)
    );
    assert_eq!(f.tensor_data(a), &[1u8; 24]);
    let q = f.tensor("b").unwrap();
    assert_eq!((q.ty, q.offset, q.n_bytes), (GgmlType::Q4_1, 32, 120));
    assert_eq!(f.tensor_data(q), q4_1_bytes(192));
    let c = f.tensor("c").unwrap();
    assert_eq!((c.rows(), c.offset), (1, 160));
    assert_eq!(f.tensor_data(c), &[2u8; 10]);
    assert!(f.tensor("missing").is_none());
    assert_eq!(f.file_size(), f.data_offset() + 170);
}

#[test]
fn version_2_and_custom_alignment() {
    let mut b = sample_builder();
    b.set_version(2).set_alignment(256);
    let f = GgufFile::from_bytes(b.to_bytes()).unwrap();
    assert_eq!(f.version(), 2);
    assert_eq!(f.alignment(), 256);
    assert_eq!(f.data_offset() % 256, 0);
    let offsets: Vec<_> = f.tensors().iter().map(|t| t.offset).collect();
    assert_eq!(offsets, [0, 256, 512]);
    assert_eq!(f.tensor_data(f.tensor("c").unwrap()), &[2u8; 10]);
}

#[test]
fn empty_file_round_trips() {
    let f = GgufFile::from_bytes(GgufBuilder::new().to_bytes()).unwrap();
    assert_eq!(f.metadata().count(), 0);
    assert!(f.tensors().is_empty());
    // Padded to the alignment even without tensors, as ggml writes it.
    assert_eq!(f.file_size(), 32);
    assert_eq!(f.data_offset(), 32);
}

#[test]
fn streaming_matches_to_bytes() {
    let full = sample_builder();
    let mut deferred = GgufBuilder::new();
    deferred.set("general.architecture", "llama");
    for (k, v) in every_type() {
        deferred.set(k, v);
    }
    deferred
        .add_tensor("a", GgmlType::F32, &[3, 2], vec![1u8; 24])
        .unwrap();
    deferred
        .add_tensor_deferred("b", GgmlType::Q4_1, &[64, 3])
        .unwrap();
    deferred
        .add_tensor_deferred("c", GgmlType::F16, &[5])
        .unwrap();

    let mut out = Vec::new();
    let mut calls = Vec::new();
    deferred
        .write_streaming(&mut out, |i, w| {
            calls.push(i);
            match i {
                // Several small writes, as a converter would do row by row.
                1 => q4_1_bytes(192).chunks(7).try_for_each(|c| w.write_all(c)),
                _ => w.write_all(&[2u8; 10]),
            }
        })
        .unwrap();
    assert_eq!(calls, [1, 2]);
    assert_eq!(out, full.to_bytes());

    let short = deferred.write_streaming(Vec::new(), |_, w| w.write_all(&[0; 3]));
    assert_eq!(short.unwrap_err().kind(), io::ErrorKind::InvalidData);
    let missing = deferred.write_to(Vec::new());
    assert_eq!(missing.unwrap_err().kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn builder_rejects_bad_tensors() {
    let mut b = GgufBuilder::new();
    b.add_tensor("x", GgmlType::F32, &[2], vec![0u8; 8])
        .unwrap();
    let err = |r: Result<&mut GgufBuilder>| r.unwrap_err().to_string();
    assert!(err(b.add_tensor("x", GgmlType::F32, &[2], vec![0u8; 8])).contains("duplicate"));
    assert!(err(b.add_tensor("y", GgmlType::F32, &[2], vec![0u8; 7])).contains("7 bytes given"));
    assert!(err(b.add_tensor("y", GgmlType::Q4_0, &[16], vec![])).contains("block size 32"));
    assert!(err(b.add_tensor("y", GgmlType::F32, &[], vec![])).contains("0 dimensions"));
    assert!(err(b.add_tensor("y", GgmlType::F32, &[1, 0], vec![])).contains("is 0"));
    assert!(
        err(b.add_tensor_deferred("y", GgmlType::F32, &[1 << 32, 1 << 32])).contains("overflows")
    );
    assert!(err(b.add_tensor_deferred("y", GgmlType::F64, &[1 << 31, 1 << 31])).contains("2^64"));
}

#[test]
fn set_replaces_in_place() {
    let mut b = GgufBuilder::new();
    b.set("a", 1u32).set("b", 2u32).set("a", "x");
    let f = GgufFile::from_bytes(b.to_bytes()).unwrap();
    let got: Vec<_> = f
        .metadata()
        .map(|(k, v)| (k.to_owned(), v.clone()))
        .collect();
    assert_eq!(
        got,
        [
            ("a".into(), MetaValue::from("x")),
            ("b".into(), MetaValue::U32(2))
        ]
    );
}

#[test]
#[should_panic(expected = "an array holds elements")]
fn set_rejects_inconsistent_arrays() {
    let bad = MetaArray {
        elem_type: MetaType::U8,
        values: vec![MetaValue::I32(1)],
    };
    GgufBuilder::new().set("k", bad);
}

#[test]
fn typed_getters_convert_and_explain() {
    let mut b = GgufBuilder::new();
    b.set("u8", 7u8)
        .set("i64", 5i64)
        .set("neg", -1i32)
        .set("big", u64::MAX)
        .set("f64", 0.25f64)
        .set("s", "text")
        .set("yes", true)
        .set("arr", vec![1u8, 2]);
    let f = GgufFile::from_bytes(b.to_bytes()).unwrap();
    assert_eq!(f.get_u32("u8").unwrap(), 7);
    assert_eq!(f.get_u64("i64").unwrap(), 5);
    assert_eq!(f.get_i64("neg").unwrap(), -1);
    assert_eq!(f.get_u64("big").unwrap(), u64::MAX);
    assert_eq!(f.get_f32("f64").unwrap(), 0.25);
    assert_eq!(f.get_str("s").unwrap(), "text");
    assert!(f.get_bool("yes").unwrap());
    assert_eq!(f.get_array("arr").unwrap().as_i32s().unwrap(), [1, 2]);
    assert_eq!(f.get_array("arr").unwrap().as_u32s().unwrap(), [1, 2]);

    let msg = |r: Result<u32>| r.unwrap_err().to_string();
    assert_eq!(
        msg(f.get_u32("missing")),
        "metadata key `missing`: not present"
    );
    assert!(msg(f.get_u32("neg")).contains("found INT32 -1"));
    assert!(msg(f.get_u32("big")).contains("fits in u32"));
    assert!(msg(f.get_u32("s")).contains("found STRING \"text\""));
    assert!(matches!(f.get_str("u8"), Err(Error::Metadata { key, .. }) if key == "u8"));
    assert!(f.get_f32("i64").is_err());
    assert!(f.get_array("s").is_err());
    assert!(f.get_bool("u8").is_err());
}

#[test]
fn array_accessors() {
    let strs = MetaArray::from(vec!["a", "b"]);
    assert_eq!(strs.as_strs().unwrap(), ["a", "b"]);
    assert!(strs.as_f32s().is_none());
    assert_eq!(MetaArray::from(vec![1.5f32]).as_f32s().unwrap(), [1.5]);
    assert_eq!(MetaArray::from(vec![-1i64, 3]).as_i32s().unwrap(), [-1, 3]);
    assert!(MetaArray::from(vec![1u64 << 40]).as_i32s().is_none());
    assert!(MetaArray::from(vec![-1i8]).as_u32s().is_none());
    assert!(MetaArray::new(MetaType::U8, vec![MetaValue::U8(1)]).is_ok());
    assert!(MetaArray::new(MetaType::U8, vec![MetaValue::I8(1)]).is_err());
    assert!(MetaArray::empty(MetaType::Bool).is_empty());
}

#[test]
fn meta_type_ids() {
    for (id, t) in MetaType::ALL.iter().enumerate() {
        assert_eq!(t.id(), id as u32);
        assert_eq!(MetaType::from_id(id as u32), Some(*t));
    }
    assert_eq!(MetaType::from_id(13), None);
    assert_eq!(MetaType::F32.name(), "FLOAT32");
}

#[test]
fn display_is_short_unless_alternate() {
    let tokens: MetaValue = (0..100).map(|i| format!("t{i}")).collect::<Vec<_>>().into();
    assert_eq!(
        tokens.to_string(),
        r#"[STRING; 100] ["t0", "t1", "t2", "t3", "t4", "t5", ...]"#
    );
    assert_eq!(format!("{tokens:.2}"), r#"[STRING; 100] ["t0", "t1", ...]"#);
    assert_eq!(format!("{tokens:.0}"), r#"[STRING; 100] [...]"#);
    assert!(format!("{tokens:#}").ends_with(r#""t98", "t99"]"#));

    let long = MetaValue::from("x".repeat(100));
    assert_eq!(
        long.to_string(),
        format!("\"{}\"... (100 bytes)", "x".repeat(64))
    );
    assert_eq!(format!("{long:#}"), format!("\"{}\"", "x".repeat(100)));
    assert_eq!(MetaValue::from("a\"b\n").to_string(), r#""a\"b\n""#);

    assert_eq!(MetaValue::F32(1e-5).to_string(), "1e-5");
    assert_eq!(MetaValue::F64(100000.0).to_string(), "100000.0");
    assert_eq!(MetaValue::I8(-3).to_string(), "-3");
    assert_eq!(MetaValue::Bool(false).to_string(), "false");
    let nested = MetaValue::from(vec![
        MetaArray::from(vec![1u8]),
        MetaArray::empty(MetaType::I32),
    ]);
    assert_eq!(
        nested.to_string(),
        "[ARRAY; 2] [[UINT8; 1] [1], [INT32; 0] []]"
    );
}

#[test]
fn tensor_info_shape_helpers() {
    let t = TensorInfo {
        name: "w".into(),
        ty: GgmlType::Q4_1,
        dims: vec![576, 1536, 2],
        offset: 0,
        n_bytes: 0,
    };
    assert_eq!(
        (t.cols(), t.rows(), t.n_elements()),
        (576, 3072, 576 * 3072)
    );
}

#[test]
#[should_panic(expected = "not inside this GGUF file")]
fn tensor_data_panics_for_foreign_tensors() {
    let f = GgufFile::from_bytes(sample_builder().to_bytes()).unwrap();
    let mut t = f.tensor("c").unwrap().clone();
    t.offset = u64::MAX - 3;
    f.tensor_data(&t);
}

#[test]
fn open_reports_the_path() {
    let err = GgufFile::open("/nonexistent/brass/x.gguf").unwrap_err();
    assert!(matches!(&err, Error::Io { .. }));
    assert!(
        err.to_string().starts_with("/nonexistent/brass/x.gguf: "),
        "{err}"
    );
}

#[test]
fn open_maps_files_including_empty_ones() {
    let dir = std::env::temp_dir().join(format!("brass-gguf-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.gguf");
    std::fs::write(&good, sample_builder().to_bytes()).unwrap();
    let f = GgufFile::open(&good).unwrap();
    assert_eq!(f.tensor_data(f.tensor("a").unwrap()), &[1u8; 24]);
    // The map is page aligned, so data alignment within the file is absolute.
    assert_eq!(
        f.tensor_data(f.tensor("b").unwrap()).as_ptr() as usize % 32,
        0
    );

    let empty = dir.join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    let err = GgufFile::open(&empty).unwrap_err().to_string();
    assert!(err.contains("truncated magic"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
