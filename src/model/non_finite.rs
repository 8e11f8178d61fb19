//! NaN and infinity in a model: [`check_weights`] scans a file's weights for them up
//! front; a decode step whose logits hold any fails, and is replayed op by op to name
//! the first op that produced them.

use super::{Matrix, Model};
use crate::device::{read_f32, CommandList, Slice};
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

/// Where a replayed step reads back what its ops wrote, to find the first that was not
/// finite. `None` outside replays: the fast path records nothing.
#[derive(Default)]
pub(super) struct Probes(Option<Vec<Probe>>);

pub(super) struct Probe {
    /// Commands of the step's list that run before `out` is read.
    after: usize,
    /// The op that wrote `out`, as the error names it.
    source: String,
    out: Slice,
}

impl Probes {
    /// `out` holds what `source()` wrote once `list`'s commands so far have run.
    pub(super) fn at(&mut self, list: &CommandList, source: impl FnOnce() -> String, out: Slice) {
        if let Some(probes) = &mut self.0 {
            probes.push(Probe {
                after: list.commands.len(),
                source: source(),
                out,
            });
        }
    }

    /// Matrices `ms` wrote `outs`, one per tensor.
    pub(super) fn stacked<const N: usize>(
        &mut self,
        list: &CommandList,
        ms: &[Matrix],
        outs: [Slice; N],
    ) {
        let names = ms.iter().flat_map(|m| &m.plan.tensors);
        for (name, out) in names.zip(outs) {
            self.at(list, || format!("`{name}`"), out);
        }
    }
}

impl Model {
    /// The error for the step at `pos` whose logits held `count` NaN or infinite
    /// values, `embedded` its input token. Replays the step op by op to name the first
    /// whose output was not finite: slow, and run only on this path.
    pub(super) fn non_finite_logits(&self, pos: usize, embedded: u32, count: u32) -> Error {
        let source = match self.first_non_finite_op(pos, embedded) {
            Ok(Some(op)) => format!("; the first non-finite values came out of {op}"),
            Ok(None) => "; replayed, the step's ops all gave finite values".into(),
            Err(e) => format!("; replaying the step to find where failed: {e}"),
        };
        Error::NonFinite(format!(
            "non-finite logits at position {pos}: {count} of {} are NaN or infinite{source} \
             (check_weights, or decode --check-weights, scans the weights)",
            self.config.vocab
        ))
    }

    fn first_non_finite_op(&self, pos: usize, embedded: u32) -> Result<Option<String>> {
        let dev = self.device.as_ref();
        dev.upload(self.token_buffer().buffer, 0, &embedded.to_le_bytes())?;
        let mut probes = Probes(Some(Vec::new()));
        let list = self.record_step_probed(pos as u64, &mut probes)?;
        let mut done = 0;
        for p in probes.0.unwrap_or_default() {
            let part = CommandList {
                commands: list.commands[done..p.after].to_vec(),
            };
            done = p.after;
            dev.submit(&part)?;
            let values = read_f32(dev, p.out.buffer, p.out.offset, (p.out.size / 4) as usize)?;
            if values.iter().any(|v| !v.is_finite()) {
                return Ok(Some(p.source));
            }
        }
        Ok(None)
    }
}
