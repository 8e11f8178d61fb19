//! Writing GGUF files: for tests, fixtures and synthetic models.

use std::collections::HashMap;
use std::io::{self, Read as _, Write};

use super::meta::{MetaArray, MetaValue};
use super::parse::MAGIC;
use super::{check_shape, TensorInfo, ALIGNMENT_KEY, DEFAULT_ALIGNMENT};
use crate::quant::GgmlType;
use crate::{Error, Result};

/// Builds a GGUF file: metadata of any type, then tensors, laid out with the file's
/// alignment. Tensor data is either given up front or streamed at write time from a
/// callback ([`GgufBuilder::add_tensor_deferred`], [`GgufBuilder::write_streaming`]),
/// so large synthetic models need not be held in memory.
///
/// ```
/// use brass::gguf::{GgufBuilder, GgufFile};
/// use brass::quant::GgmlType;
///
/// let mut b = GgufBuilder::new();
/// b.set("general.architecture", "llama")
///     .set("llama.block_count", 2u32)
///     .set("tokenizer.ggml.tokens", vec!["a", "b"]);
/// b.add_tensor("w", GgmlType::F32, &[2, 3], vec![0u8; 24])?;
/// let file = GgufFile::from_bytes(b.to_bytes())?;
/// assert_eq!(file.get_u32("llama.block_count")?, 2);
/// assert_eq!(file.tensor_data(file.tensor("w").unwrap()).len(), 24);
/// # Ok::<(), brass::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct GgufBuilder {
    version: u32,
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<PendingTensor>,
    tensor_names: HashMap<String, usize>,
    /// Sum of all tensor sizes plus the most padding each could need: kept below
    /// 2^64 so that laying the data out cannot overflow.
    data_bound: u64,
}

/// Padding before a tensor is less than the alignment, which is a `u32`.
const MAX_PADDING: u64 = u32::MAX as u64;

#[derive(Clone, Debug)]
struct PendingTensor {
    name: String,
    ty: GgmlType,
    dims: Vec<u64>,
    n_bytes: u64,
    /// `None`: supplied by the `write_streaming` callback.
    data: Option<Vec<u8>>,
}

impl Default for GgufBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufBuilder {
    /// An empty version 3 file.
    pub fn new() -> Self {
        GgufBuilder {
            version: 3,
            metadata: Vec::new(),
            tensors: Vec::new(),
            tensor_names: HashMap::new(),
            data_bound: 0,
        }
    }

    /// The version number written to the header. Not checked, so tests can write
    /// versions the reader rejects; 2 and 3 share one layout.
    pub fn set_version(&mut self, version: u32) -> &mut Self {
        self.version = version;
        self
    }

    /// Sets `general.alignment`. Tensor data is padded to it when it is a power of two;
    /// other values are written as given (for tests) while data is padded to the
    /// default 32.
    pub fn set_alignment(&mut self, alignment: u32) -> &mut Self {
        self.set(ALIGNMENT_KEY, alignment)
    }

    /// Sets a metadata value, replacing an existing one in place (so keys keep the
    /// order they were first set in).
    ///
    /// # Panics
    ///
    /// If `value` holds an array whose elements are not all of its declared type
    /// (build arrays with `From<Vec<_>>` or [`MetaArray::new`] to avoid this).
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<MetaValue>) -> &mut Self {
        let key = key.into();
        let value = value.into();
        assert!(
            value.is_consistent(),
            "GgufBuilder::set(`{key}`): an array holds elements of a type other than its element type"
        );
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.metadata.push((key, value)),
        }
        self
    }

    /// Sets an array value from its elements (`["a", "b"]`, `vec![1.0f32]`, ...).
    pub fn set_array(&mut self, key: impl Into<String>, values: impl Into<MetaArray>) -> &mut Self {
        self.set(key, MetaValue::Array(values.into()))
    }

    /// The value set for `key`, if any.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Removes a metadata key, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<MetaValue> {
        let i = self.metadata.iter().position(|(k, _)| k == key)?;
        Some(self.metadata.remove(i).1)
    }

    /// Adds a tensor with its bytes. The shape is checked as the reader checks it
    /// (1 to 4 nonzero dims, rows a whole number of blocks) and `data` must be exactly
    /// the size the type and shape imply.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        dims: &[u64],
        data: impl Into<Vec<u8>>,
    ) -> Result<&mut Self> {
        self.push_tensor(name.into(), ty, dims, Some(data.into()))
    }

    /// Adds a tensor whose bytes the [`GgufBuilder::write_streaming`] callback will
    /// write.
    pub fn add_tensor_deferred(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        dims: &[u64],
    ) -> Result<&mut Self> {
        self.push_tensor(name.into(), ty, dims, None)
    }

    fn push_tensor(
        &mut self,
        name: String,
        ty: GgmlType,
        dims: &[u64],
        data: Option<Vec<u8>>,
    ) -> Result<&mut Self> {
        let invalid =
            |what: String| Error::Invalid(format!("GgufBuilder: tensor `{name}`: {what}"));
        if self.tensor_names.contains_key(&name) {
            return Err(invalid("duplicate tensor name".to_owned()));
        }
        let n_bytes = check_shape(ty, dims).map_err(invalid)?;
        if let Some(data) = &data {
            if data.len() as u64 != n_bytes {
                return Err(invalid(format!(
                    "{} bytes given, {ty} {dims:?} takes {n_bytes}",
                    data.len()
                )));
            }
        }
        self.data_bound = self
            .data_bound
            .checked_add(n_bytes)
            .and_then(|sum| sum.checked_add(MAX_PADDING))
            .ok_or_else(|| invalid("tensor data would exceed 2^64 bytes".to_owned()))?;
        self.tensor_names.insert(name.clone(), self.tensors.len());
        self.tensors.push(PendingTensor {
            name,
            ty,
            dims: dims.to_vec(),
            n_bytes,
            data,
        });
        Ok(self)
    }

    /// The alignment tensor data will be padded to.
    pub fn alignment(&self) -> u64 {
        match self.get(ALIGNMENT_KEY) {
            Some(MetaValue::U32(a)) if a.is_power_of_two() => (*a).into(),
            _ => DEFAULT_ALIGNMENT.into(),
        }
    }

    /// The tensor table as it will be written, with data offsets.
    pub fn tensor_infos(&self) -> Vec<TensorInfo> {
        let alignment = self.alignment();
        let mut end = 0u64;
        self.tensors
            .iter()
            .map(|t| {
                // data_bound keeps this below 2^64.
                let offset = end.next_multiple_of(alignment);
                end = offset + t.n_bytes;
                TensorInfo {
                    name: t.name.clone(),
                    ty: t.ty,
                    dims: t.dims.clone(),
                    offset,
                    n_bytes: t.n_bytes,
                }
            })
            .collect()
    }

    /// Magic through tensor infos, padded to the data section start.
    /// Everything before the first tensor's data: header, metadata and tensor infos,
    /// padded. With it and [`GgufBuilder::file_size`] a test writes a file of any size
    /// whose data is zeros without writing them (a sparse file).
    pub fn header_bytes(&self) -> Vec<u8> {
        self.header(&self.tensor_infos())
    }

    fn header(&self, infos: &[TensorInfo]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_str(&mut out, key);
            out.extend_from_slice(&value.meta_type().id().to_le_bytes());
            put_value(&mut out, value);
        }
        for t in infos {
            put_str(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&t.offset.to_le_bytes());
        }
        let padded = (out.len() as u64).next_multiple_of(self.alignment());
        out.resize(padded as usize, 0);
        out
    }

    /// The file size `to_bytes` and the write methods produce.
    pub fn file_size(&self) -> u64 {
        let infos = self.tensor_infos();
        let data = infos.last().map_or(0, |t| t.offset + t.n_bytes);
        self.header(&infos).len() as u64 + data
    }

    /// The whole file in memory.
    ///
    /// # Panics
    ///
    /// If a tensor was added with `add_tensor_deferred`; use `write_streaming`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.file_size() as usize);
        self.write_to(&mut out)
            .expect("GgufBuilder::to_bytes: deferred tensors need write_streaming");
        out
    }

    /// Writes the file. Fails with `InvalidInput` if a tensor was added without data.
    pub fn write_to(&self, w: impl Write) -> io::Result<()> {
        self.write_streaming(w, |index, _| {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "tensor #{index} `{}` has no data; use write_streaming",
                    self.tensors[index].name
                ),
            ))
        })
    }

    /// Writes the file, calling `data(index, writer)` for each tensor added with
    /// `add_tensor_deferred`, in file order. The callback must write exactly that
    /// tensor's `n_bytes`; anything else is an `InvalidData` error.
    pub fn write_streaming<W: Write>(
        &self,
        mut w: W,
        mut data: impl FnMut(usize, &mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        let infos = self.tensor_infos();
        w.write_all(&self.header(&infos))?;
        let mut written = 0u64;
        for (index, (t, info)) in self.tensors.iter().zip(&infos).enumerate() {
            io::copy(&mut io::repeat(0).take(info.offset - written), &mut w)?;
            match &t.data {
                Some(bytes) => w.write_all(bytes)?,
                None => {
                    let mut counted = CountingWriter {
                        inner: &mut w,
                        n: 0,
                    };
                    data(index, &mut counted)?;
                    if counted.n != t.n_bytes {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "tensor #{index} `{}`: the callback wrote {} bytes, expected {}",
                                t.name, counted.n, t.n_bytes
                            ),
                        ));
                    }
                }
            }
            written = info.offset + t.n_bytes;
        }
        w.flush()
    }
}

struct CountingWriter<'a, W: Write> {
    inner: &'a mut W,
    n: u64,
}

impl<W: Write> Write for CountingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A value's payload, without its type tag (arrays carry their element type).
fn put_value(out: &mut Vec<u8>, value: &MetaValue) {
    match value {
        MetaValue::U8(v) => out.push(*v),
        MetaValue::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetaValue::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetaValue::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetaValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetaValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetaValue::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetaValue::Bool(v) => out.push(u8::from(*v)),
        MetaValue::String(s) => put_str(out, s),
        MetaValue::Array(a) => {
            out.extend_from_slice(&a.elem_type.id().to_le_bytes());
            out.extend_from_slice(&(a.values.len() as u64).to_le_bytes());
            for v in &a.values {
                put_value(out, v);
            }
        }
        MetaValue::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetaValue::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetaValue::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
    }
}
