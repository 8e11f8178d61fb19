//! Metadata values: GGUF's thirteen value types, typed accessors and a short rendering.

use std::fmt;

use crate::{Error, Result};

/// A GGUF metadata value type, with the numeric id the file format uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum MetaType {
    /// `UINT8`: an unsigned 8-bit integer.
    U8 = 0,
    /// `INT8`: a signed 8-bit integer.
    I8 = 1,
    /// `UINT16`: an unsigned 16-bit integer.
    U16 = 2,
    /// `INT16`: a signed 16-bit integer.
    I16 = 3,
    /// `UINT32`: an unsigned 32-bit integer.
    U32 = 4,
    /// `INT32`: a signed 32-bit integer.
    I32 = 5,
    /// `FLOAT32`: a 32-bit float.
    F32 = 6,
    /// `BOOL`: a boolean (one byte, 0 or 1).
    Bool = 7,
    /// `STRING`: a UTF-8 string (u64 length, then the bytes).
    String = 8,
    /// `ARRAY`: an array (element type, u64 count, then the elements).
    Array = 9,
    /// `UINT64`: an unsigned 64-bit integer.
    U64 = 10,
    /// `INT64`: a signed 64-bit integer.
    I64 = 11,
    /// `FLOAT64`: a 64-bit float.
    F64 = 12,
}

impl MetaType {
    /// Every type, indexed by its id.
    pub const ALL: [MetaType; 13] = {
        use MetaType::*;
        [
            U8, I8, U16, I16, U32, I32, F32, Bool, String, Array, U64, I64, F64,
        ]
    };

    /// The type with file-format id `id`; `None` for ids GGUF does not define.
    pub fn from_id(id: u32) -> Option<Self> {
        Self::ALL.get(id as usize).copied()
    }

    /// The type's id in the file format.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The name gguf-py and `gguf-dump` use (`UINT32`, `STRING`, ...).
    pub fn name(self) -> &'static str {
        use MetaType::*;
        match self {
            U8 => "UINT8",
            I8 => "INT8",
            U16 => "UINT16",
            I16 => "INT16",
            U32 => "UINT32",
            I32 => "INT32",
            F32 => "FLOAT32",
            Bool => "BOOL",
            String => "STRING",
            Array => "ARRAY",
            U64 => "UINT64",
            I64 => "INT64",
            F64 => "FLOAT64",
        }
    }

    /// The fewest bytes a value of this type can take in a file, not counting a type
    /// tag. The parser divides the bytes left by this to reject impossible counts
    /// before allocating for them.
    pub(crate) fn min_encoded_size(self) -> u64 {
        use MetaType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 => 8,
            // u64 length of an empty string
            String => 8,
            // u32 element type + u64 count of an empty array
            Array => 12,
        }
    }
}

impl fmt::Display for MetaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    /// A `UINT8`.
    U8(u8),
    /// A `INT8`.
    I8(i8),
    /// A `UINT16`.
    U16(u16),
    /// A `INT16`.
    I16(i16),
    /// A `UINT32`.
    U32(u32),
    /// A `INT32`.
    I32(i32),
    /// A `FLOAT32`.
    F32(f32),
    /// A `BOOL`.
    Bool(bool),
    /// A `STRING`.
    String(String),
    /// A `ARRAY`.
    Array(MetaArray),
    /// A `UINT64`.
    U64(u64),
    /// A `INT64`.
    I64(i64),
    /// A `FLOAT64`.
    F64(f64),
}

impl MetaValue {
    /// The value's type.
    pub fn meta_type(&self) -> MetaType {
        match self {
            MetaValue::U8(_) => MetaType::U8,
            MetaValue::I8(_) => MetaType::I8,
            MetaValue::U16(_) => MetaType::U16,
            MetaValue::I16(_) => MetaType::I16,
            MetaValue::U32(_) => MetaType::U32,
            MetaValue::I32(_) => MetaType::I32,
            MetaValue::F32(_) => MetaType::F32,
            MetaValue::Bool(_) => MetaType::Bool,
            MetaValue::String(_) => MetaType::String,
            MetaValue::Array(_) => MetaType::Array,
            MetaValue::U64(_) => MetaType::U64,
            MetaValue::I64(_) => MetaType::I64,
            MetaValue::F64(_) => MetaType::F64,
        }
    }

    /// The value as an `i128`, for any integer type. Every GGUF integer fits, which
    /// makes the narrowing accessors one `try_from` each.
    fn as_wide_int(&self) -> Option<i128> {
        Some(match *self {
            MetaValue::U8(v) => v.into(),
            MetaValue::I8(v) => v.into(),
            MetaValue::U16(v) => v.into(),
            MetaValue::I16(v) => v.into(),
            MetaValue::U32(v) => v.into(),
            MetaValue::I32(v) => v.into(),
            MetaValue::U64(v) => v.into(),
            MetaValue::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// Any integer type whose value fits in a `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_wide_int().and_then(|v| v.try_into().ok())
    }

    /// Any integer type whose value fits in an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_wide_int().and_then(|v| v.try_into().ok())
    }

    /// Any integer type whose value fits in a `u32`.
    pub fn as_u32(&self) -> Option<u32> {
        self.as_wide_int().and_then(|v| v.try_into().ok())
    }

    /// Any integer type whose value fits in an `i32`.
    pub fn as_i32(&self) -> Option<i32> {
        self.as_wide_int().and_then(|v| v.try_into().ok())
    }

    /// `F32` or `F64`.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v.into()),
            MetaValue::F64(v) => Some(v),
            _ => None,
        }
    }

    /// `F32` or `F64` (rounded to the nearest `f32`).
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            MetaValue::F32(v) => Some(v),
            MetaValue::F64(v) => Some(v as f32),
            _ => None,
        }
    }

    /// The value of a `BOOL`; `None` for any other type.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// The value of a `STRING`; `None` for any other type.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value of an `ARRAY`; `None` for any other type.
    pub fn as_array(&self) -> Option<&MetaArray> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// Whether every array inside this value (at any depth) holds only elements of its
    /// declared element type. Values read from a file always are; hand-built ones may
    /// not be, and could not be written.
    pub fn is_consistent(&self) -> bool {
        match self {
            MetaValue::Array(a) => a.is_consistent(),
            _ => true,
        }
    }

    fn render(&self, f: &mut fmt::Formatter<'_>, full: bool) -> fmt::Result {
        match self {
            MetaValue::U8(v) => write!(f, "{v}"),
            MetaValue::I8(v) => write!(f, "{v}"),
            MetaValue::U16(v) => write!(f, "{v}"),
            MetaValue::I16(v) => write!(f, "{v}"),
            MetaValue::U32(v) => write!(f, "{v}"),
            MetaValue::I32(v) => write!(f, "{v}"),
            MetaValue::U64(v) => write!(f, "{v}"),
            MetaValue::I64(v) => write!(f, "{v}"),
            // Debug keeps a decimal point and uses exponents for tiny values (1e-5),
            // which reads better for hyperparameters than Display's long decimals.
            MetaValue::F32(v) => write!(f, "{v:?}"),
            MetaValue::F64(v) => write!(f, "{v:?}"),
            MetaValue::Bool(v) => write!(f, "{v}"),
            MetaValue::String(s) => render_str(f, s, full),
            MetaValue::Array(a) => a.render(f, full),
        }
    }
}

/// Strings longer than this many characters are cut in the short rendering (chat
/// templates run to kilobytes).
const SHORT_STRING_CHARS: usize = 64;

/// Array elements shown in the short rendering unless a precision says otherwise.
const SHORT_ARRAY_ELEMENTS: usize = 6;

fn render_str(f: &mut fmt::Formatter<'_>, s: &str, full: bool) -> fmt::Result {
    match s.char_indices().nth(SHORT_STRING_CHARS) {
        Some((cut, _)) if !full => write!(f, "{:?}... ({} bytes)", &s[..cut], s.len()),
        _ => write!(f, "{s:?}"),
    }
}

/// `{}` gives a short, `gguf-dump`-like rendering: strings are quoted and escaped, long
/// strings are cut, arrays show their type, length and first few elements
/// (`[STRING; 49152] ["<|endoftext|>", "<|im_start|>", ...]`). A precision sets how
/// many array elements to show (`{:.20}`); the alternate form `{:#}` shows everything.
impl fmt::Display for MetaValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.render(f, f.alternate())
    }
}

/// A metadata array. All values have type `elem_type`; arrays may nest.
#[derive(Clone, Debug, PartialEq)]
pub struct MetaArray {
    /// The type every element has.
    pub elem_type: MetaType,
    /// The elements, in file order.
    pub values: Vec<MetaValue>,
}

impl MetaArray {
    /// An array of `values`, which must all be of `elem_type`.
    pub fn new(elem_type: MetaType, values: Vec<MetaValue>) -> Result<Self> {
        let array = MetaArray { elem_type, values };
        if array.is_consistent() {
            Ok(array)
        } else {
            Err(Error::Invalid(format!(
                "metadata array declared as {elem_type} holds elements of other types (or a nested array does)"
            )))
        }
    }

    /// An empty array of `elem_type`.
    pub fn empty(elem_type: MetaType) -> Self {
        MetaArray {
            elem_type,
            values: Vec::new(),
        }
    }

    /// Elements in the array.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The elements, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, MetaValue> {
        self.values.iter()
    }

    /// See [`MetaValue::is_consistent`].
    pub fn is_consistent(&self) -> bool {
        self.values
            .iter()
            .all(|v| v.meta_type() == self.elem_type && v.is_consistent())
    }

    /// The strings of a `STRING` array.
    pub fn as_strs(&self) -> Option<Vec<&str>> {
        self.values.iter().map(MetaValue::as_str).collect()
    }

    /// The values of a `FLOAT32` (or `FLOAT64`) array.
    pub fn as_f32s(&self) -> Option<Vec<f32>> {
        self.values.iter().map(MetaValue::as_f32).collect()
    }

    /// The values of an array of any integer type, if all fit in an `i32`.
    pub fn as_i32s(&self) -> Option<Vec<i32>> {
        self.values.iter().map(MetaValue::as_i32).collect()
    }

    /// The values of an array of any integer type, if all fit in a `u32`.
    pub fn as_u32s(&self) -> Option<Vec<u32>> {
        self.values.iter().map(MetaValue::as_u32).collect()
    }

    fn render(&self, f: &mut fmt::Formatter<'_>, full: bool) -> fmt::Result {
        write!(f, "[{}; {}] [", self.elem_type, self.values.len())?;
        let shown = if full {
            self.values.len()
        } else {
            f.precision().unwrap_or(SHORT_ARRAY_ELEMENTS)
        };
        for (i, v) in self.values.iter().take(shown).enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            v.render(f, full)?;
        }
        if self.values.len() > shown {
            f.write_str(if shown > 0 { ", ..." } else { "..." })?;
        }
        f.write_str("]")
    }
}

impl fmt::Display for MetaArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.render(f, f.alternate())
    }
}

impl<'a> IntoIterator for &'a MetaArray {
    type Item = &'a MetaValue;
    type IntoIter = std::slice::Iter<'a, MetaValue>;
    fn into_iter(self) -> Self::IntoIter {
        self.values.iter()
    }
}

macro_rules! scalar_conversions {
    ($($t:ty => $variant:ident),* $(,)?) => {$(
        impl From<$t> for MetaValue {
            fn from(v: $t) -> Self {
                MetaValue::$variant(v)
            }
        }
        impl From<Vec<$t>> for MetaArray {
            fn from(values: Vec<$t>) -> Self {
                MetaArray {
                    elem_type: MetaType::$variant,
                    values: values.into_iter().map(MetaValue::$variant).collect(),
                }
            }
        }
        impl From<Vec<$t>> for MetaValue {
            fn from(values: Vec<$t>) -> Self {
                MetaValue::Array(values.into())
            }
        }
    )*};
}

scalar_conversions! {
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    bool => Bool, String => String, MetaArray => Array, u64 => U64, i64 => I64, f64 => F64,
}

impl From<&str> for MetaValue {
    fn from(v: &str) -> Self {
        MetaValue::String(v.to_owned())
    }
}

impl From<Vec<&str>> for MetaArray {
    fn from(values: Vec<&str>) -> Self {
        values
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
            .into()
    }
}

impl From<Vec<&str>> for MetaValue {
    fn from(values: Vec<&str>) -> Self {
        MetaValue::Array(values.into())
    }
}

impl From<&[&str]> for MetaValue {
    fn from(values: &[&str]) -> Self {
        values.to_vec().into()
    }
}
