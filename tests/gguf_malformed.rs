//! The GGUF reader against malformed input: named corruptions of a valid file (each
//! must fail with a specific message at a specific byte), truncation at every byte,
//! and a few thousand seeded random mutations (each must fail cleanly or open a file
//! whose every accessor works). No input may panic or allocate more than a small
//! multiple of its own size.
//!
//! The named cases are also written to `target/gguf-corpus/*.gguf`, for running
//! `examples/inspect` over them.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;

use brass::gguf::{GgufBuilder, GgufFile, MetaArray, MetaType};
use brass::quant::GgmlType;
use brass::Error;

/// Records the largest single allocation made by the current thread, so that tests
/// can bound what the parser allocates for hostile counts. Other test threads are
/// unaffected because the record is thread-local.
struct Tracking;

thread_local! {
    static LARGEST_ALLOC: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // try_with: the slot may already be gone while the thread exits.
    let _ = LARGEST_ALLOC.try_with(|c| c.set(c.get().max(size)));
}

unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

/// The parser may allocate a small multiple of the input (a parsed `u8` array takes
/// 32 bytes per element), never anything a length field merely claims.
fn allocation_limit(input_len: usize) -> usize {
    40 * input_len + 4096
}

/// Parses `bytes` without letting a panic escape, and checks the allocation bound.
/// On success, touches every accessor so that lazily broken invariants show up.
fn parse_checked(label: &str, bytes: &[u8]) -> Result<GgufFile, Error> {
    LARGEST_ALLOC.with(|c| c.set(0));
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        let parsed = GgufFile::from_bytes(bytes.to_vec());
        if let Ok(file) = &parsed {
            touch_everything(file);
        }
        parsed
    }));
    let largest = LARGEST_ALLOC.with(Cell::get);
    match result {
        Ok(parsed) => {
            assert!(
                largest <= allocation_limit(bytes.len()),
                "{label}: parsing {} bytes allocated {largest} bytes at once",
                bytes.len()
            );
            parsed
        }
        Err(_) => {
            let path = corpus_dir().join(format!("panic-{label}.gguf"));
            std::fs::write(&path, bytes).unwrap();
            panic!(
                "{label}: the parser panicked; input saved to {}",
                path.display()
            );
        }
    }
}

fn touch_everything(file: &GgufFile) {
    let mut sum = 0u64;
    for t in file.tensors() {
        let data = file.tensor_data(t);
        assert_eq!(data.len() as u64, t.n_bytes);
        assert!(file.data_offset() + t.offset + t.n_bytes <= file.file_size());
        assert_eq!(file.tensor(&t.name), Some(t));
        sum += data.iter().map(|&b| u64::from(b)).sum::<u64>();
    }
    for (key, value) in file.metadata() {
        assert!(file.get(key).is_some());
        sum += format!("{value} {value:#}").len() as u64;
    }
    std::hint::black_box(sum);
}

fn corpus_dir() -> PathBuf {
    // CARGO_TARGET_TMPDIR is <target>/tmp, so this follows a custom target dir.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target tmp dir has a parent")
        .join("gguf-corpus");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

// ---- a small valid file and ways to find its fields ----

const Q4_1: &str = "tensor.q4_1";
const Q8_0: &str = "tensor.q8_0";
const F32: &str = "tensor.f32";

fn base_builder() -> GgufBuilder {
    let mut b = GgufBuilder::new();
    // Leading bulk, so that a file cut inside a later key still has enough bytes
    // left to pass the header's count check and reach the deeper checks.
    b.set("test.padding", "p".repeat(256))
        .set("general.architecture", "llama")
        .set_alignment(32)
        .set("test.bool", true)
        .set("test.string", "hello")
        .set("test.u64", 7u64)
        .set("test.f32", 0.5f32)
        .set("test.dup_a", 1u32)
        .set("test.dup_b", 2u32)
        .set(
            "test.tokens",
            vec!["alpha", "beta-long-token-name", "gamma"],
        )
        .set(
            "test.nested",
            vec![MetaArray::from(vec![1i32, 2]), MetaArray::from(vec![3i32])],
        );
    b.add_tensor(F32, GgmlType::F32, &[8, 2], vec![0x11; 64])
        .unwrap();
    b.add_tensor(Q4_1, GgmlType::Q4_1, &[64, 2], vec![0x22; 80])
        .unwrap();
    b.add_tensor(Q8_0, GgmlType::Q8_0, &[32], vec![0x33; 34])
        .unwrap();
    b
}

fn base() -> Vec<u8> {
    base_builder().to_bytes()
}

/// The position of the only occurrence of `needle`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    let mut hits = hay
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| w == &needle)
        .map(|(i, _)| i);
    let first = hits.next().expect("needle present");
    assert!(hits.next().is_none(), "needle must be unique");
    first
}

/// Positions of a key's length field, type tag and value.
struct KeyFields {
    len_at: usize,
    type_at: usize,
    value_at: usize,
}

fn key_fields(bytes: &[u8], key: &str) -> KeyFields {
    let start = find(bytes, key.as_bytes());
    KeyFields {
        len_at: start - 8,
        type_at: start + key.len(),
        value_at: start + key.len() + 4,
    }
}

/// Positions of a tensor info's fields (the file has the tensor's original n_dims).
struct TensorFields {
    name_at: usize,
    n_dims_at: usize,
    dims_at: usize,
    type_at: usize,
    offset_at: usize,
}

fn tensor_fields(bytes: &[u8], name: &str) -> TensorFields {
    let name_at = find(bytes, name.as_bytes());
    let n_dims_at = name_at + name.len();
    let n_dims = u32::from_le_bytes(bytes[n_dims_at..n_dims_at + 4].try_into().unwrap()) as usize;
    let dims_at = n_dims_at + 4;
    TensorFields {
        name_at,
        n_dims_at,
        dims_at,
        type_at: dims_at + 8 * n_dims,
        offset_at: dims_at + 8 * n_dims + 4,
    }
}

fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

fn mutated(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut bytes = base();
    f(&mut bytes);
    bytes
}

// ---- named cases ----

struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    /// Substrings the error message must contain.
    expect: Vec<String>,
    /// The byte offset the error must report.
    at: Option<usize>,
}

fn case(name: &'static str, bytes: Vec<u8>, expect: &[&str], at: Option<usize>) -> Case {
    Case {
        name,
        bytes,
        expect: expect.iter().map(|s| s.to_string()).collect(),
        at,
    }
}

fn nested_array(depth: usize) -> MetaArray {
    let mut a = MetaArray::from(vec![1u8]);
    for _ in 1..depth {
        a = MetaArray::from(vec![a]);
    }
    a
}

fn named_cases() -> Vec<Case> {
    let b = base();
    let tokens = key_fields(&b, "test.tokens");
    let string = key_fields(&b, "test.string");
    let align = key_fields(&b, "general.alignment");
    let boolean = key_fields(&b, "test.bool");
    let u64_key = key_fields(&b, "test.u64");
    let f32t = tensor_fields(&b, F32);
    let q41 = tensor_fields(&b, Q4_1);
    let q80 = tensor_fields(&b, Q8_0);
    let huge_len = 1u64 << 60;
    let len = b.len();

    vec![
        case("empty_file", vec![], &["truncated magic"], Some(0)),
        case(
            "bad_magic",
            mutated(|b| b[..4].copy_from_slice(b"GGML")),
            &["not a GGUF file", "\"GGML\""],
            Some(0),
        ),
        case(
            "version_1",
            mutated(|b| put_u32(b, 4, 1)),
            &["version 1 is not supported"],
            Some(4),
        ),
        case(
            "version_4",
            mutated(|b| put_u32(b, 4, 4)),
            &["unknown GGUF version 4"],
            Some(4),
        ),
        case(
            "version_big_endian",
            mutated(|b| put_u32(b, 4, 3u32.swap_bytes())),
            &["big-endian"],
            Some(4),
        ),
        case(
            "truncated_header",
            b[..20].to_vec(),
            &["header: truncated metadata key count", "only 4 left"],
            Some(16),
        ),
        case(
            "truncated_in_key",
            b[..string.len_at + 8 + 4].to_vec(),
            &["metadata key #4: key length 11 exceeds the 4 bytes left"],
            Some(string.len_at),
        ),
        case(
            "truncated_in_value",
            b[..u64_key.value_at + 5].to_vec(),
            &["`test.u64`: truncated UINT64 value (needs 8 bytes, only 5 left"],
            Some(u64_key.value_at),
        ),
        case(
            "truncated_in_array",
            b[..find(&b, b"beta") + 10].to_vec(),
            &["`test.tokens` element #1: string length 20 exceeds the 10 bytes left"],
            Some(find(&b, b"beta") - 8),
        ),
        case(
            "truncated_in_tensor_info",
            b[..q41.dims_at + 12].to_vec(),
            &["tensor #1 `tensor.q4_1`: truncated dimension"],
            Some(q41.dims_at + 8),
        ),
        case(
            "truncated_data",
            b[..len - 10].to_vec(),
            &["tensor #2 `tensor.q8_0`", "runs past the end of the file"],
            Some(q80.offset_at),
        ),
        case(
            "huge_key_length",
            mutated(|b| put_u64(b, 24, huge_len)),
            &["metadata key #0: key length 1152921504606846976 exceeds the"],
            Some(24),
        ),
        case(
            "huge_string_length",
            mutated(|b| put_u64(b, string.value_at, huge_len)),
            &["`test.string`: string length 1152921504606846976 exceeds the"],
            Some(string.value_at),
        ),
        case(
            "huge_array_count",
            mutated(|b| put_u64(b, tokens.value_at + 4, 1 << 62)),
            &["`test.tokens`: array count (of STRING) 4611686018427387904 needs at least"],
            Some(tokens.value_at + 4),
        ),
        case(
            "huge_tensor_count",
            mutated(|b| put_u64(b, 8, 1 << 40)),
            &["header: tensor count 1099511627776 needs at least"],
            Some(8),
        ),
        case(
            "huge_metadata_count",
            mutated(|b| put_u64(b, 16, u64::MAX)),
            &["header: metadata key count 18446744073709551615 needs at least"],
            Some(16),
        ),
        case(
            // Each count alone fits in the file; both together cannot.
            "counts_too_large_together",
            mutated(|b| put_u64(b, 8, (len as u64 - 24) / 32)),
            &["tensors and 11 metadata keys need at least"],
            Some(8),
        ),
        case(
            "nesting_too_deep",
            {
                let mut b = GgufBuilder::new();
                b.set("deep", nested_array(9));
                b.to_bytes()
            },
            &["`deep` element #0 element #0", "nested more than 8 deep"],
            None,
        ),
        case(
            "alignment_not_power_of_two",
            mutated(|b| put_u32(b, align.value_at, 48)),
            &["`general.alignment`: alignment 48 is not a nonzero power of two"],
            Some(align.value_at),
        ),
        case(
            "alignment_zero",
            mutated(|b| put_u32(b, align.value_at, 0)),
            &["alignment 0 is not a nonzero power of two"],
            Some(align.value_at),
        ),
        case(
            "alignment_wrong_type",
            {
                let mut b = base_builder();
                b.set("general.alignment", 32u64);
                b.to_bytes()
            },
            &["alignment must be a UINT32, found UINT64"],
            None,
        ),
        case(
            "n_dims_zero",
            mutated(|b| put_u32(b, f32t.n_dims_at, 0)),
            &["tensor #0 `tensor.f32`: 0 dimensions, must be 1 to 4"],
            Some(f32t.n_dims_at),
        ),
        case(
            "n_dims_five",
            mutated(|b| put_u32(b, f32t.n_dims_at, 5)),
            &["5 dimensions, must be 1 to 4"],
            Some(f32t.n_dims_at),
        ),
        case(
            "zero_dim",
            mutated(|b| put_u64(b, f32t.dims_at + 8, 0)),
            &["tensor #0 `tensor.f32`: dimension 1 of [8, 0] is 0"],
            Some(f32t.dims_at),
        ),
        case(
            "element_count_overflow",
            mutated(|b| {
                put_u64(b, f32t.dims_at, 1 << 62);
                put_u64(b, f32t.dims_at + 8, 4);
            }),
            &["element count of dims [4611686018427387904, 4] overflows"],
            Some(f32t.dims_at),
        ),
        case(
            "row_not_multiple_of_block",
            mutated(|b| put_u64(b, q41.dims_at, 48)),
            &["row length 48 is not a multiple of Q4_1's block size 32"],
            Some(q41.dims_at),
        ),
        case(
            "tensor_bytes_overflow",
            mutated(|b| {
                put_u64(b, f32t.dims_at, 1 << 31);
                put_u64(b, f32t.dims_at + 8, 1 << 31);
                put_u32(b, f32t.type_at, GgmlType::F64.id());
            }),
            &["4611686018427387904 F64 elements", "more than 2^64 bytes"],
            Some(f32t.dims_at),
        ),
        case(
            "tensor_data_out_of_bounds",
            mutated(|b| put_u64(b, q80.offset_at, 1 << 40)),
            &["tensor #2 `tensor.q8_0`: data (file bytes 1099511628640..1099511628674) runs past the end of the file (1058 bytes)"],
            Some(q80.offset_at),
        ),
        case(
            "tensor_offset_overflow",
            mutated(|b| put_u64(b, q80.offset_at, u64::MAX - 31)),
            &["data offset 18446744073709551584 + 34 bytes", "overflows u64"],
            Some(q80.offset_at),
        ),
        case(
            "misaligned_offset",
            mutated(|b| {
                let off = get_u64(b, q41.offset_at);
                put_u64(b, q41.offset_at, off + 1);
            }),
            &["data offset 65 is not a multiple of the alignment 32"],
            Some(q41.offset_at),
        ),
        case(
            "overlapping_tensors",
            mutated(|b| put_u64(b, q41.offset_at, 0)),
            &["tensor #1 `tensor.q4_1`: data bytes 0..80 overlap tensor #0 `tensor.f32` (bytes 0..64)"],
            Some(q41.offset_at),
        ),
        case(
            "overlapping_tensors_partly",
            mutated(|b| put_u64(b, q80.offset_at, 96)),
            &["tensor #2 `tensor.q8_0`: data bytes 96..130 overlap tensor #1 `tensor.q4_1` (bytes 64..144)"],
            Some(q80.offset_at),
        ),
        case(
            "unknown_tensor_type",
            mutated(|b| put_u32(b, q41.type_at, 4)),
            &["tensor #1 `tensor.q4_1`: unknown tensor type id 4"],
            Some(q41.type_at),
        ),
        case(
            "invalid_utf8_key",
            mutated(|b| b[24 + 8 + 3] = 0xff),
            &["metadata key #0: key is not valid UTF-8 (bad byte 3 of 12)"],
            Some(24 + 8 + 3),
        ),
        case(
            "invalid_utf8_string",
            mutated(|b| b[string.value_at + 8] = 0xc3),
            &["`test.string`: string is not valid UTF-8"],
            Some(string.value_at + 8),
        ),
        case(
            "invalid_utf8_tensor_name",
            mutated(|b| b[q80.name_at + 7] = 0x80),
            &["tensor #2: name is not valid UTF-8"],
            Some(q80.name_at + 7),
        ),
        case(
            "duplicate_key",
            mutated(|b| {
                let at = find(b, b"test.dup_b");
                b[at..at + 10].copy_from_slice(b"test.dup_a");
            }),
            &["`test.dup_a`: duplicate metadata key (first defined as key #7)"],
            Some(key_fields(&b, "test.dup_b").len_at),
        ),
        case(
            "duplicate_tensor_name",
            mutated(|b| b[q80.name_at..q80.name_at + Q8_0.len()].copy_from_slice(Q4_1.as_bytes())),
            &["tensor #2 `tensor.q4_1`: duplicate tensor name (first used by tensor #1)"],
            Some(q80.name_at - 8),
        ),
        case(
            "bool_not_0_or_1",
            mutated(|b| b[boolean.value_at] = 2),
            &["`test.bool`: BOOL value is 2, must be 0 or 1"],
            Some(boolean.value_at),
        ),
        case(
            "unknown_value_type",
            mutated(|b| put_u32(b, u64_key.type_at, 13)),
            &["`test.u64`: unknown value type 13"],
            Some(u64_key.type_at),
        ),
        case(
            "unknown_array_element_type",
            mutated(|b| put_u32(b, tokens.value_at, 99)),
            &["`test.tokens`: unknown array element type 99"],
            Some(tokens.value_at),
        ),
    ]
}

/// Valid files at the edges of what the reader accepts.
fn valid_cases() -> Vec<(&'static str, Vec<u8>)> {
    let v2 = {
        let mut b = base_builder();
        b.set_version(2);
        b.to_bytes()
    };
    let known_but_unsupported = {
        let mut b = base_builder();
        b.add_tensor("iq2_xs", GgmlType::IQ2_XS, &[256, 2], vec![0; 74 * 2])
            .unwrap();
        b.add_tensor("i8_4d", GgmlType::I8, &[1, 2, 3, 4], vec![0; 24])
            .unwrap();
        b.to_bytes()
    };
    let nested_8 = {
        let mut b = GgufBuilder::new();
        b.set("deep", nested_array(8))
            .set("empty", MetaArray::empty(MetaType::Array));
        b.to_bytes()
    };
    // Data need not be stored in table order: swap two equal-sized tensors' offsets.
    let out_of_order = {
        let mut b = GgufBuilder::new();
        b.add_tensor("x", GgmlType::F32, &[8], vec![1; 32]).unwrap();
        b.add_tensor("y", GgmlType::F32, &[8], vec![2; 32]).unwrap();
        let mut bytes = b.to_bytes();
        let (x, y) = (tensor_fields(&bytes, "x"), tensor_fields(&bytes, "y"));
        let (x_off, y_off) = (get_u64(&bytes, x.offset_at), get_u64(&bytes, y.offset_at));
        put_u64(&mut bytes, x.offset_at, y_off);
        put_u64(&mut bytes, y.offset_at, x_off);
        bytes
    };
    vec![
        ("valid_v3", base()),
        ("valid_v2", v2),
        ("valid_known_but_unsupported_types", known_but_unsupported),
        ("valid_nested_8_deep", nested_8),
        ("valid_no_tensors", GgufBuilder::new().to_bytes()),
        ("valid_tensors_out_of_order", out_of_order),
    ]
}

#[test]
fn allocation_tracking_sees_the_parse() {
    // Guards the allocation bound against a tracker that silently records nothing.
    let bytes = base();
    parse_checked("tracking", &bytes).unwrap();
    assert!(LARGEST_ALLOC.with(Cell::get) >= bytes.len());
}

#[test]
fn named_cases_fail_with_specific_messages() {
    let dir = corpus_dir();
    let mut failures = Vec::new();
    for c in named_cases() {
        std::fs::write(dir.join(format!("{}.gguf", c.name)), &c.bytes).unwrap();
        match parse_checked(c.name, &c.bytes) {
            Ok(_) => failures.push(format!("{}: opened, expected an error", c.name)),
            Err(Error::Gguf { offset, what }) => {
                let message = format!("malformed GGUF at byte {offset}: {what}");
                for needle in &c.expect {
                    if !message.contains(needle.as_str()) {
                        failures.push(format!("{}: `{message}` lacks `{needle}`", c.name));
                    }
                }
                if let Some(at) = c.at {
                    if offset != at as u64 {
                        failures.push(format!("{}: `{message}`: expected byte {at}", c.name));
                    }
                }
            }
            Err(other) => failures.push(format!("{}: wrong error kind: {other}", c.name)),
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn edge_cases_that_must_open() {
    let dir = corpus_dir();
    for (name, bytes) in valid_cases() {
        std::fs::write(dir.join(format!("{name}.gguf")), &bytes).unwrap();
        let file = parse_checked(name, &bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        if name == "valid_tensors_out_of_order" {
            assert_eq!(file.tensor_data(file.tensor("x").unwrap()), [2; 32]);
        }
        if name == "valid_known_but_unsupported_types" {
            let t = file.tensor("iq2_xs").unwrap();
            assert_eq!((t.ty, t.n_bytes), (GgmlType::IQ2_XS, 148));
            assert!(!t.ty.can_dequantize());
            assert_eq!(file.tensor("i8_4d").unwrap().dims, [1, 2, 3, 4]);
        }
    }
}

#[test]
fn every_truncation_fails() {
    let bytes = base();
    for len in 0..bytes.len() {
        let label = format!("truncated-to-{len}");
        match parse_checked(&label, &bytes[..len]) {
            Ok(_) => panic!("{label}: opened"),
            Err(Error::Gguf { offset, .. }) => assert!(offset <= len as u64, "{label}"),
            Err(other) => panic!("{label}: wrong error kind: {other}"),
        }
    }
    assert!(parse_checked("whole", &bytes).is_ok());
}

/// xorshift64*: enough randomness for mutation testing, and reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Values that tend to hit edge cases when written over a count, length or offset.
const INTERESTING: [u64; 12] = [0, 1, 2, 3, 4, 5, 31, 32, 0xff, 1 << 31, 1 << 60, u64::MAX];

#[test]
fn random_mutations_never_panic() {
    let base = base();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut opened, mut rejected) = (0, 0);
    for i in 0..6000 {
        let mut bytes = base.clone();
        match i % 3 {
            // Flip a few random bits.
            0 => {
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(bytes.len());
                    bytes[at] ^= 1 << rng.below(8);
                }
            }
            // Overwrite a random byte.
            1 => {
                let at = rng.below(bytes.len());
                bytes[at] = rng.next() as u8;
            }
            // Write an interesting u64 or u32 somewhere, then maybe truncate.
            _ => {
                let v = INTERESTING[rng.below(INTERESTING.len())];
                let width = if rng.below(2) == 0 { 4 } else { 8 };
                let at = rng.below(bytes.len() - width);
                bytes[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
                if rng.below(4) == 0 {
                    bytes.truncate(rng.below(bytes.len()));
                }
            }
        }
        match parse_checked(&format!("mutation-{i}"), &bytes) {
            Ok(_) => opened += 1,
            Err(Error::Gguf { .. }) => rejected += 1,
            Err(other) => panic!("mutation-{i}: wrong error kind: {other}"),
        }
    }
    // Flips in tensor data and many in metadata payloads are harmless; the rest must
    // have been caught. Both outcomes occurring shows the mutations reach both.
    assert!(
        opened > 100 && rejected > 1000,
        "opened {opened}, rejected {rejected}"
    );
}
