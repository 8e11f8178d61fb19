//! GGUF v2/v3 files: a zero-copy reader over memmap2, a builder that writes them, and
//! [`synthetic`] models (real shapes, random weights) written with it.
//!
//! ```no_run
//! # fn main() -> brass::Result<()> {
//! let file = brass::gguf::GgufFile::open("model.gguf")?;
//! let layers = file.get_u32("llama.block_count")?;
//! for t in file.tensors() {
//!     let bytes: &[u8] = file.tensor_data(t); // borrowed from the map
//!     println!("{} {} {:?} {} bytes", t.name, t.ty, t.dims, bytes.len());
//! }
//! # let _ = layers; Ok(()) }
//! ```
//!
//! Everything is validated when the file is opened (structure, shapes, that every
//! tensor's bytes lie inside the file without overlapping another's), so the accessors
//! cannot fail on a file that opened. Malformed input is an [`Error::Gguf`] naming
//! the byte offset and what was wrong there; it never panics or over-allocates.
//!
//! Tensor types that ggml knows but brass cannot compute (IQ2_XS, ...) open fine;
//! only type ids unknown to [`GgmlType::from_id`] are errors.
//!
//! [`GgufFile::open`] takes regular files only: a directory, FIFO or device is an
//! error naming what it is, and it never blocks. The file is mapped, not copied, so
//! another process that truncates it while it is read makes those reads fault: the
//! process dies of SIGBUS, which no check can turn into an error. What can be caught
//! is a change seen afterwards: [`GgufFile::check_unchanged`] compares the file's
//! size and modification time with those at open, and the model loader calls it
//! before and after uploading, so a file rewritten during a load is an error rather
//! than a model of mixed bytes.

mod meta;
mod parse;
pub mod synthetic;
mod write;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::fs::{File, Metadata};
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use memmap2::Mmap;

pub use meta::{MetaArray, MetaType, MetaValue};
pub use write::GgufBuilder;

use crate::quant::GgmlType;
use crate::{Error, Result};

/// The metadata key that sets the data alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// The alignment of tensor data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u32 = 32;

/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: usize = 4;

/// One tensor's entry in the file's tensor table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name (`blk.0.attn_q.weight`).
    pub name: String,
    /// How its elements are stored.
    pub ty: GgmlType,
    /// ggml order: `dims[0]` is the contiguous row length.
    pub dims: Vec<u64>,
    /// Relative to the start of the data section.
    pub offset: u64,
    /// Bytes of data: whole blocks of `ty` for every row.
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Elements in all: the product of `dims`.
    pub fn n_elements(&self) -> u64 {
        // Validated not to overflow for tensors read from a file; saturate rather than
        // panic for hand-built ones.
        self.dims.iter().fold(1u64, |n, &d| n.saturating_mul(d))
    }

    /// Row length: `dims[0]`.
    pub fn cols(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// The number of rows: the product of `dims[1..]`, 1 for a 1-D tensor.
    pub fn rows(&self) -> u64 {
        self.dims
            .iter()
            .skip(1)
            .fold(1u64, |n, &d| n.saturating_mul(d))
    }
}

/// Checks a tensor shape against ggml's rules for `ty` and returns its size in bytes.
pub(crate) fn check_shape(ty: GgmlType, dims: &[u64]) -> std::result::Result<u64, String> {
    if dims.is_empty() || dims.len() > MAX_DIMS {
        return Err(format!(
            "{} dimensions, must be 1 to {MAX_DIMS}",
            dims.len()
        ));
    }
    let mut n_elements = 1u64;
    for (d, &ne) in dims.iter().enumerate() {
        if ne == 0 {
            return Err(format!("dimension {d} of {dims:?} is 0"));
        }
        // ggml holds element counts in int64_t.
        n_elements = n_elements
            .checked_mul(ne)
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| format!("element count of dims {dims:?} overflows 63 bits"))?;
    }
    let block = ty.block_size() as u64;
    if !dims[0].is_multiple_of(block) {
        return Err(format!(
            "row length {} is not a multiple of {ty}'s block size {block}",
            dims[0]
        ));
    }
    ty.bytes_for(n_elements).ok_or_else(|| {
        format!("{n_elements} {ty} elements (dims {dims:?}) take more than 2^64 bytes")
    })
}

enum Backing {
    /// The map, and the file it maps with its size and modification time at open.
    Mmap(Mmap, Source),
    Owned(Vec<u8>),
}

struct Source {
    path: PathBuf,
    file: File,
    len: u64,
    modified: Option<SystemTime>,
}

/// Fails unless `meta` is a regular file's, naming what `path` is instead.
fn check_regular(path: &Path, meta: &Metadata) -> Result<()> {
    let ty = meta.file_type();
    if ty.is_file() {
        return Ok(());
    }
    let (kind, what) = if ty.is_dir() {
        (io::ErrorKind::IsADirectory, "is a directory".to_string())
    } else {
        let what = match special_file_kind(&ty) {
            Some(special) => format!("is not a regular file ({special})"),
            None => "is not a regular file".to_string(),
        };
        (io::ErrorKind::InvalidInput, what)
    };
    Err(Error::Io {
        path: path.to_owned(),
        source: io::Error::new(kind, what),
    })
}

/// What a file that is neither regular nor a directory is ("a FIFO"), where the
/// platform says.
#[cfg(unix)]
pub(crate) fn special_file_kind(ty: &std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if ty.is_fifo() {
        Some("a FIFO")
    } else if ty.is_socket() {
        Some("a socket")
    } else if ty.is_char_device() {
        Some("a character device")
    } else if ty.is_block_device() {
        Some("a block device")
    } else {
        None
    }
}

#[cfg(not(unix))]
pub(crate) fn special_file_kind(_: &std::fs::FileType) -> Option<&'static str> {
    None
}

/// A modification time as seconds since the Unix epoch.
fn seconds(t: Option<SystemTime>) -> String {
    t.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or("an unknown time".into(), |d| {
            format!("{:.9} s Unix time", d.as_secs_f64())
        })
}

/// Opens `path` for reading without ever blocking: a FIFO put in its place after the
/// check still opens at once (O_NONBLOCK) and is refused by the check on the open file.
fn open_nonblocking(path: &Path) -> io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    options.open(path)
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(map, _) => map,
            Backing::Owned(bytes) => bytes,
        }
    }
}

/// An open GGUF file: its parsed header and metadata, and its bytes (mapped, or owned
/// for [`GgufFile::from_bytes`]).
pub struct GgufFile {
    backing: Backing,
    version: u32,
    alignment: u64,
    data_offset: u64,
    metadata: Vec<(String, MetaValue)>,
    meta_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    /// [`GgufFile::identity`], computed on first use.
    identity: std::sync::OnceLock<(u64, u64)>,
}

impl GgufFile {
    /// Maps and parses the regular file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let io_error = |source| Error::Io {
            path: path.to_owned(),
            source,
        };
        check_regular(path, &std::fs::metadata(path).map_err(io_error)?)?;
        let file = open_nonblocking(path).map_err(io_error)?;
        let meta = file.metadata().map_err(io_error)?;
        check_regular(path, &meta)?;
        // SAFETY: the map is only read, and through `&[u8]`; if another process
        // truncates or rewrites the file while it is mapped, reads may fault or see
        // changed bytes. That is the accepted contract of mapping model files (as in
        // llama.cpp); the alternative is copying gigabytes. `check_unchanged` detects
        // a change after the fact.
        let map = unsafe { Mmap::map(&file) }.map_err(io_error)?;
        let source = Source {
            path: path.to_owned(),
            len: meta.len(),
            modified: meta.modified().ok(),
            file,
        };
        let parsed = Self::from_backing(Backing::Mmap(map, source))?;
        parsed.check_unchanged()?;
        Ok(parsed)
    }

    /// Fails if the mapped file's size or modification time differ from those at
    /// open, or its size from the map's: another process changed it, and bytes read
    /// from the map since may be a mix of old and new. Always passes for
    /// [`GgufFile::from_bytes`].
    pub fn check_unchanged(&self) -> Result<()> {
        let Backing::Mmap(map, source) = &self.backing else {
            return Ok(());
        };
        let meta = source.file.metadata().map_err(|e| Error::Io {
            path: source.path.clone(),
            source: e,
        })?;
        let (len, modified) = (meta.len(), meta.modified().ok());
        if len == source.len && len == map.len() as u64 && modified == source.modified {
            return Ok(());
        }
        Err(Error::Io {
            path: source.path.clone(),
            source: io::Error::other(format!(
                "the file changed while brass had it open: at open it had {} bytes, modified \
                 at {}; now {len} bytes, modified at {}",
                source.len,
                seconds(source.modified),
                seconds(modified)
            )),
        })
    }

    /// Parses a GGUF image held in memory.
    ///
    /// Tensor data is aligned within the image, but the `Vec`'s own address is
    /// whatever the allocator gave, so do not cast `tensor_data` to wider types
    /// without checking (`bytemuck::try_cast_slice`).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile> {
        Self::from_backing(Backing::Owned(bytes))
    }

    fn from_backing(backing: Backing) -> Result<GgufFile> {
        let parsed = parse::parse(backing.bytes())?;
        Ok(GgufFile {
            backing,
            version: parsed.version,
            alignment: parsed.alignment,
            data_offset: parsed.data_offset,
            metadata: parsed.metadata,
            meta_index: parsed.meta_index,
            tensors: parsed.tensors,
            tensor_index: parsed.tensor_index,
            identity: std::sync::OnceLock::new(),
        })
    }

    /// What tells this file from another model's: its size, and the first 8 bytes of
    /// the SHA-256 of everything before the tensor data (the header, the metadata and
    /// the tensor table), the same in every process.
    pub fn identity(&self) -> (u64, u64) {
        *self.identity.get_or_init(|| {
            use sha2::Digest;
            let bytes = self.as_bytes();
            let header = &bytes[..(self.data_offset as usize).min(bytes.len())];
            let digest = sha2::Sha256::digest(header);
            let first: [u8; 8] = digest[..8].try_into().expect("a SHA-256 has 32 bytes");
            (self.file_size(), u64::from_le_bytes(first))
        })
    }

    /// The GGUF version in the header: 2 or 3.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Alignment of tensor data within the data section (and of the section itself).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute file offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The file's size in bytes, as mapped.
    pub fn file_size(&self) -> u64 {
        self.as_bytes().len() as u64
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &[u8] {
        self.backing.bytes()
    }

    /// All metadata, in file order.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &MetaValue)> {
        self.metadata.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Metadata keys in the file.
    pub fn metadata_len(&self) -> usize {
        self.metadata.len()
    }

    /// The value of `key`, of whatever type; `None` where the file has no such key.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// Looks `key` up and converts it with `convert`, or says what was expected.
    fn get_as<'a, T>(
        &'a self,
        key: &str,
        expected: &str,
        convert: impl FnOnce(&'a MetaValue) -> Option<T>,
    ) -> Result<T> {
        let error = |what: String| Error::Metadata {
            key: key.to_owned(),
            what,
        };
        let value = self
            .get(key)
            .ok_or_else(|| error("not present".to_owned()))?;
        convert(value).ok_or_else(|| {
            error(format!(
                "expected {expected}, found {} {value}",
                value.meta_type()
            ))
        })
    }

    /// Any integer type whose value fits in a `u32`.
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        self.get_as(key, "an integer that fits in u32", MetaValue::as_u32)
    }

    /// Any integer type whose value fits in a `u64`.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        self.get_as(key, "an integer that fits in u64", MetaValue::as_u64)
    }

    /// Any integer type whose value fits in an `i64`.
    pub fn get_i64(&self, key: &str) -> Result<i64> {
        self.get_as(key, "an integer that fits in i64", MetaValue::as_i64)
    }

    /// `FLOAT32`, or `FLOAT64` rounded to `f32`.
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        self.get_as(key, "FLOAT32 or FLOAT64", MetaValue::as_f32)
    }

    /// A `BOOL`; [`Error::Metadata`] where `key` is absent or of another type.
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        self.get_as(key, "BOOL", MetaValue::as_bool)
    }

    /// A `STRING`; [`Error::Metadata`] where `key` is absent or of another type.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        self.get_as(key, "STRING", MetaValue::as_str)
    }

    /// An `ARRAY`; [`Error::Metadata`] where `key` is absent or of another type.
    pub fn get_array(&self, key: &str) -> Result<&MetaArray> {
        self.get_as(key, "ARRAY", MetaValue::as_array)
    }

    /// `general.architecture` (`"llama"`, `"qwen3"`, ...).
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }

    /// All tensors, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor called `name`; `None` where the file has none.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of `t`, exactly `t.n_bytes` long, borrowed from the file.
    ///
    /// # Panics
    ///
    /// If `t` is not one of this file's tensors and its range lies outside the file.
    /// For this file's own tensors the range was checked at open.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let range = self
            .data_offset
            .checked_add(t.offset)
            .and_then(|start| Some(start..start.checked_add(t.n_bytes)?))
            .and_then(|r| Some(usize::try_from(r.start).ok()?..usize::try_from(r.end).ok()?));
        range
            .and_then(|r| self.as_bytes().get(r))
            .unwrap_or_else(|| {
                panic!(
                    "tensor `{}` (offset {}, {} bytes) is not inside this GGUF file",
                    t.name, t.offset, t.n_bytes
                )
            })
    }
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("file_size", &self.file_size())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .field("metadata_keys", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }
}
