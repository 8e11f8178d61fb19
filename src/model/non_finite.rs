//! NaN and infinity in a model: [`check_weights`] scans a file's weights for them up
//! front.

use crate::gguf::GgufFile;
use crate::quant::first_non_finite;
use crate::{Error, Result};

/// Fails on the first tensor holding NaN or infinity, naming it, the block and the
/// scale field (or, for F32/F16/BF16 tensors, the element). Reads every block's scales,
/// so it touches most pages of the file; loading does not run it.
pub fn check_weights(file: &GgufFile) -> Result<()> {
    for t in file.tensors() {
        let found = first_non_finite(t.ty, file.tensor_data(t)).map_err(|e| match e {
            Error::UnsupportedType(what) => Error::UnsupportedType(format!("`{}`: {what}", t.name)),
            other => other,
        })?;
        if let Some(bad) = found {
            let n = t.n_elements() / t.ty.block_size() as u64;
            let (ty, b, v) = (t.ty, bad.block, bad.value);
            let where_ = match bad.field {
                "value" => format!("element {b} of {n} is {v}"),
                field => format!("block {b} of {n} has scale `{field}` = {v}"),
            };
            return Err(Error::NonFinite(format!(
                "non-finite weight: `{}` ({ty}) {where_}",
                t.name
            )));
        }
    }
    Ok(())
}
