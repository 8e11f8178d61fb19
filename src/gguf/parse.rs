//! The GGUF parser: bytes in, validated header out, or an error naming the byte
//! offset and what was wrong there.
//!
//! Every count and length read from the file is bounded by the bytes left before
//! anything is allocated for it, and every offset computation is checked, so no input
//! can panic, read past the buffer, or allocate more than a small multiple of its own
//! size.

use std::collections::HashMap;
use std::fmt;

use super::meta::{MetaArray, MetaType, MetaValue};
use super::{check_shape, TensorInfo, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAX_DIMS};
use crate::quant::GgmlType;
use crate::{Error, Result};

pub(crate) const MAGIC: &[u8; 4] = b"GGUF";

/// Arrays may hold arrays; real files never nest, so this only has to be generous
/// enough for odd writers while keeping recursion shallow.
pub(crate) const MAX_ARRAY_DEPTH: u32 = 8;

/// An empty key, a type tag and a one-byte value.
const MIN_KV_SIZE: u64 = 8 + 4 + 1;

/// An empty name, n_dims, one dimension, type and offset.
const MIN_TENSOR_INFO_SIZE: u64 = 8 + 4 + 8 + 4 + 8;

/// Bytes before the first key-value pair: magic, version, two counts.
const HEADER_SIZE: u64 = 4 + 4 + 8 + 8;

/// Everything a GGUF file says about itself; the tensor bytes stay in the file.
pub(crate) struct Parsed {
    pub version: u32,
    pub alignment: u64,
    pub data_offset: u64,
    pub metadata: Vec<(String, MetaValue)>,
    pub meta_index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    pub tensor_index: HashMap<String, usize>,
}

/// Where in the file's structure the parser is, for error messages. Built on the
/// stack as the parser descends and only formatted when something is wrong.
enum Loc<'a> {
    Header,
    Key { index: u64 },
    Value { index: u64, key: &'a str },
    Element { parent: &'a Loc<'a>, index: u64 },
    Tensor { index: u64, name: Option<&'a str> },
}

impl fmt::Display for Loc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loc::Header => f.write_str("header"),
            Loc::Key { index } => write!(f, "metadata key #{index}"),
            Loc::Value { index, key } => write!(f, "metadata key #{index} `{key}`"),
            Loc::Element { parent, index } => write!(f, "{parent} element #{index}"),
            Loc::Tensor { index, name: None } => write!(f, "tensor #{index}"),
            Loc::Tensor {
                index,
                name: Some(name),
            } => write!(f, "tensor #{index} `{name}`"),
        }
    }
}

/// A bounds-checked little-endian cursor over the file.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn truncated(&self, loc: &Loc, what: &str, needed: u64) -> Error {
        Error::gguf(
            self.offset(),
            format!(
                "{loc}: truncated {what} (needs {needed} bytes, only {} left in the file)",
                self.remaining()
            ),
        )
    }

    fn bytes(&mut self, n: u64, loc: &Loc, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.truncated(loc, what, n));
        }
        let start = self.pos;
        // n <= remaining, so it fits in usize and the slice is in bounds.
        self.pos += n as usize;
        Ok(&self.buf[start..self.pos])
    }

    fn array<const N: usize>(&mut self, loc: &Loc, what: &str) -> Result<[u8; N]> {
        match self.buf[self.pos..].first_chunk::<N>() {
            Some(chunk) => {
                self.pos += N;
                Ok(*chunk)
            }
            None => Err(self.truncated(loc, what, N as u64)),
        }
    }

    fn u8(&mut self, loc: &Loc, what: &str) -> Result<u8> {
        self.array::<1>(loc, what).map(|[b]| b)
    }

    fn u32(&mut self, loc: &Loc, what: &str) -> Result<u32> {
        self.array(loc, what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, loc: &Loc, what: &str) -> Result<u64> {
        self.array(loc, what).map(u64::from_le_bytes)
    }

    /// A GGUF string: u64 byte length, then UTF-8 bytes (no terminator).
    fn string(&mut self, loc: &Loc, what: &str) -> Result<&'a str> {
        let len_at = self.offset();
        let len = self.u64(loc, what)?;
        if len > self.remaining() {
            return Err(Error::gguf(
                len_at,
                format!(
                    "{loc}: {what} length {len} exceeds the {} bytes left in the file",
                    self.remaining()
                ),
            ));
        }
        let start = self.offset();
        let bytes = self.bytes(len, loc, what)?;
        std::str::from_utf8(bytes).map_err(|e| {
            Error::gguf(
                start + e.valid_up_to() as u64,
                format!(
                    "{loc}: {what} is not valid UTF-8 (bad byte {} of {len})",
                    e.valid_up_to()
                ),
            )
        })
    }

    fn meta_type(&mut self, loc: &Loc, what: &str) -> Result<MetaType> {
        let at = self.offset();
        let id = self.u32(loc, what)?;
        MetaType::from_id(id).ok_or_else(|| {
            Error::gguf(
                at,
                format!("{loc}: unknown {what} {id} (known types are 0 to 12)"),
            )
        })
    }

    /// Fails unless `count` items of at least `min_size` bytes each could fit in what
    /// is left of the file; this is what keeps absurd counts from allocating.
    fn check_count(&self, at: u64, count: u64, min_size: u64, loc: &Loc, what: &str) -> Result<()> {
        let rem = self.remaining();
        if count > rem / min_size {
            // Cannot overflow in u128.
            let needed = u128::from(count) * u128::from(min_size);
            return Err(Error::gguf(
                at,
                format!(
                    "{loc}: {what} {count} needs at least {needed} bytes, \
                     only {rem} are left in the file"
                ),
            ));
        }
        Ok(())
    }

    fn value(&mut self, ty: MetaType, loc: &Loc, depth: u32) -> Result<MetaValue> {
        Ok(match ty {
            MetaType::U8 => MetaValue::U8(self.u8(loc, "UINT8 value")?),
            MetaType::I8 => MetaValue::I8(i8::from_le_bytes(self.array(loc, "INT8 value")?)),
            MetaType::U16 => MetaValue::U16(u16::from_le_bytes(self.array(loc, "UINT16 value")?)),
            MetaType::I16 => MetaValue::I16(i16::from_le_bytes(self.array(loc, "INT16 value")?)),
            MetaType::U32 => MetaValue::U32(self.u32(loc, "UINT32 value")?),
            MetaType::I32 => MetaValue::I32(i32::from_le_bytes(self.array(loc, "INT32 value")?)),
            MetaType::F32 => MetaValue::F32(f32::from_le_bytes(self.array(loc, "FLOAT32 value")?)),
            MetaType::U64 => MetaValue::U64(self.u64(loc, "UINT64 value")?),
            MetaType::I64 => MetaValue::I64(i64::from_le_bytes(self.array(loc, "INT64 value")?)),
            MetaType::F64 => MetaValue::F64(f64::from_le_bytes(self.array(loc, "FLOAT64 value")?)),
            MetaType::Bool => {
                let at = self.offset();
                match self.u8(loc, "BOOL value")? {
                    0 => MetaValue::Bool(false),
                    1 => MetaValue::Bool(true),
                    b => {
                        return Err(Error::gguf(
                            at,
                            format!("{loc}: BOOL value is {b}, must be 0 or 1"),
                        ))
                    }
                }
            }
            MetaType::String => MetaValue::String(self.string(loc, "string")?.to_owned()),
            MetaType::Array => MetaValue::Array(self.meta_array(loc, depth + 1)?),
        })
    }

    /// An array's body: element type, count, elements (each without a type tag).
    /// `depth` is 1 for an array that is a key's value.
    fn meta_array(&mut self, loc: &Loc, depth: u32) -> Result<MetaArray> {
        if depth > MAX_ARRAY_DEPTH {
            return Err(Error::gguf(
                self.offset(),
                format!("{loc}: arrays nested more than {MAX_ARRAY_DEPTH} deep"),
            ));
        }
        let elem_type = self.meta_type(loc, "array element type")?;
        let count_at = self.offset();
        let count = self.u64(loc, "array count")?;
        self.check_count(
            count_at,
            count,
            elem_type.min_encoded_size(),
            loc,
            &format!("array count (of {elem_type})"),
        )?;
        // check_count bounded count by the buffer length, so it fits in usize.
        let mut values = Vec::with_capacity(count as usize);
        for index in 0..count {
            let loc = Loc::Element { parent: loc, index };
            values.push(self.value(elem_type, &loc, depth)?);
        }
        Ok(MetaArray { elem_type, values })
    }
}

pub(crate) fn parse(buf: &[u8]) -> Result<Parsed> {
    let mut r = Reader { buf, pos: 0 };
    let (version, tensor_count, kv_count) = read_header(&mut r)?;
    let (metadata, meta_index, alignment) = read_metadata(&mut r, kv_count)?;

    // Counts were bounded by the buffer length, so the casts are lossless.
    let mut tensors = Vec::with_capacity(tensor_count as usize);
    let mut tensor_index = HashMap::with_capacity(tensor_count as usize);
    // File offsets of each tensor's offset field, for pointing at it in errors found
    // once all infos are read.
    let mut offset_fields = Vec::with_capacity(tensor_count as usize);
    for index in 0..tensor_count {
        let (info, offset_at) = read_tensor_info(&mut r, index, alignment, &tensor_index)?;
        tensor_index.insert(info.name.clone(), tensors.len());
        offset_fields.push(offset_at);
        tensors.push(info);
    }

    let infos_end = r.offset();
    let data_offset = infos_end
        .checked_next_multiple_of(alignment)
        .ok_or_else(|| Error::gguf(infos_end, "data section start overflows u64"))?;
    check_tensor_data(&tensors, &offset_fields, data_offset, buf.len() as u64)?;

    Ok(Parsed {
        version,
        alignment,
        data_offset,
        metadata,
        meta_index,
        tensors,
        tensor_index,
    })
}

/// Magic, version and the two counts, each count bounded by the bytes left.
fn read_header(r: &mut Reader) -> Result<(u32, u64, u64)> {
    let header = &Loc::Header;
    let magic = r.bytes(4, header, "magic")?;
    if magic != MAGIC {
        return Err(Error::gguf(
            0,
            format!(
                "not a GGUF file: it starts with \"{}\", expected \"GGUF\"",
                magic.escape_ascii()
            ),
        ));
    }

    let version = r.u32(header, "version")?;
    check_version(version)?;

    let tensor_count = r.u64(header, "tensor count")?;
    let kv_count = r.u64(header, "metadata key count")?;
    r.check_count(
        8,
        tensor_count,
        MIN_TENSOR_INFO_SIZE,
        header,
        "tensor count",
    )?;
    r.check_count(16, kv_count, MIN_KV_SIZE, header, "metadata key count")?;
    // Each count fits alone; together they must too. u128 cannot overflow here.
    let min_total = u128::from(tensor_count) * u128::from(MIN_TENSOR_INFO_SIZE)
        + u128::from(kv_count) * u128::from(MIN_KV_SIZE);
    if min_total > u128::from(r.remaining()) {
        return Err(Error::gguf(
            8,
            format!(
                "header: {tensor_count} tensors and {kv_count} metadata keys need at least \
                 {min_total} bytes, only {} are left in the file",
                r.remaining()
            ),
        ));
    }
    debug_assert_eq!(r.offset(), HEADER_SIZE);
    Ok((version, tensor_count, kv_count))
}

type Metadata = (Vec<(String, MetaValue)>, HashMap<String, usize>, u64);

/// All key-value pairs, their index, and the alignment they set.
fn read_metadata(r: &mut Reader, kv_count: u64) -> Result<Metadata> {
    let mut metadata = Vec::with_capacity(kv_count as usize);
    let mut meta_index = HashMap::with_capacity(kv_count as usize);
    let mut alignment = u64::from(DEFAULT_ALIGNMENT);
    for index in 0..kv_count {
        let key_at = r.offset();
        let key = r.string(&Loc::Key { index }, "key")?;
        let loc = Loc::Value { index, key };
        if let Some(first) = meta_index.get(key) {
            return Err(Error::gguf(
                key_at,
                format!("{loc}: duplicate metadata key (first defined as key #{first})"),
            ));
        }
        let ty = r.meta_type(&loc, "value type")?;
        let value_at = r.offset();
        let value = r.value(ty, &loc, 0)?;
        if key == ALIGNMENT_KEY {
            alignment = check_alignment(&value)
                .map_err(|what| Error::gguf(value_at, format!("{loc}: {what}")))?;
        }
        meta_index.insert(key.to_owned(), metadata.len());
        metadata.push((key.to_owned(), value));
    }
    Ok((metadata, meta_index, alignment))
}

/// One tensor info, with its shape and offset checked; also returns the file offset
/// of its offset field.
fn read_tensor_info(
    r: &mut Reader,
    index: u64,
    alignment: u64,
    seen: &HashMap<String, usize>,
) -> Result<(TensorInfo, u64)> {
    let name_at = r.offset();
    let name = r.string(&Loc::Tensor { index, name: None }, "name")?;
    let loc = Loc::Tensor {
        index,
        name: Some(name),
    };
    if let Some(first) = seen.get(name) {
        return Err(Error::gguf(
            name_at,
            format!("{loc}: duplicate tensor name (first used by tensor #{first})"),
        ));
    }

    let n_dims_at = r.offset();
    let n_dims = r.u32(&loc, "dimension count")?;
    if !(1..=MAX_DIMS as u32).contains(&n_dims) {
        return Err(Error::gguf(
            n_dims_at,
            format!("{loc}: {n_dims} dimensions, must be 1 to {MAX_DIMS}"),
        ));
    }
    let dims_at = r.offset();
    let dims = (0..n_dims)
        .map(|_| r.u64(&loc, "dimension"))
        .collect::<Result<Vec<_>>>()?;
    let type_at = r.offset();
    let type_id = r.u32(&loc, "type")?;
    let ty = GgmlType::from_id(type_id)
        .ok_or_else(|| Error::gguf(type_at, format!("{loc}: unknown tensor type id {type_id}")))?;
    let n_bytes =
        check_shape(ty, &dims).map_err(|what| Error::gguf(dims_at, format!("{loc}: {what}")))?;

    let offset_at = r.offset();
    let offset = r.u64(&loc, "data offset")?;
    if !offset.is_multiple_of(alignment) {
        return Err(Error::gguf(
            offset_at,
            format!("{loc}: data offset {offset} is not a multiple of the alignment {alignment}"),
        ));
    }

    let info = TensorInfo {
        name: name.to_owned(),
        ty,
        dims,
        offset,
        n_bytes,
    };
    Ok((info, offset_at))
}

fn check_version(version: u32) -> Result<()> {
    let what = match version {
        2 | 3 => return Ok(()),
        1 => "GGUF version 1 is not supported (it used 32-bit counts; brass reads versions 2 and 3)".to_owned(),
        v if matches!(v.swap_bytes(), 2 | 3) => format!(
            "version field is {v:#010x}: this looks like a big-endian GGUF, which brass does not read"
        ),
        v => format!("unknown GGUF version {v} (brass reads versions 2 and 3)"),
    };
    Err(Error::gguf(4, what))
}

/// `general.alignment` must be a UINT32 power of two, as ggml requires.
fn check_alignment(value: &MetaValue) -> std::result::Result<u64, String> {
    match *value {
        MetaValue::U32(a) if a.is_power_of_two() => Ok(a.into()),
        MetaValue::U32(a) => Err(format!("alignment {a} is not a nonzero power of two")),
        ref other => Err(format!(
            "alignment must be a UINT32, found {}",
            other.meta_type()
        )),
    }
}

/// Every tensor's bytes lie inside the file and no two tensors share a byte.
fn check_tensor_data(
    tensors: &[TensorInfo],
    offset_fields: &[u64],
    data_offset: u64,
    file_size: u64,
) -> Result<()> {
    let describe = |i: usize| {
        let t = &tensors[i];
        format!("tensor #{i} `{}`", t.name)
    };
    for (i, t) in tensors.iter().enumerate() {
        let start = data_offset.checked_add(t.offset);
        let end = start.and_then(|start| start.checked_add(t.n_bytes));
        let what = match (start, end) {
            (Some(_), Some(end)) if end <= file_size => continue,
            (Some(start), Some(end)) => format!(
                "{}: data (file bytes {start}..{end}) runs past the end of the file \
                 ({file_size} bytes)",
                describe(i)
            ),
            _ => format!(
                "{}: data offset {} + {} bytes after the data section start {data_offset} \
                 overflows u64",
                describe(i),
                t.offset,
                t.n_bytes
            ),
        };
        return Err(Error::gguf(offset_fields[i], what));
    }

    let mut order: Vec<usize> = (0..tensors.len()).collect();
    // Stable, so tensors with equal offsets are reported in file order.
    order.sort_by_key(|&i| tensors[i].offset);
    for pair in order.windows(2) {
        let (a, b) = (&tensors[pair[0]], &tensors[pair[1]]);
        // Both ranges were just checked to end inside the file, so this cannot overflow.
        let a_end = a.offset + a.n_bytes;
        if a_end > b.offset {
            return Err(Error::gguf(
                offset_fields[pair[1]],
                format!(
                    "{}: data bytes {}..{} overlap {} (bytes {}..{a_end})",
                    describe(pair[1]),
                    b.offset,
                    b.offset + b.n_bytes,
                    describe(pair[0]),
                    a.offset
                ),
            ));
        }
    }
    Ok(())
}
