//! The dispatch ledger: per pipeline, how often it was dispatched and what it read.
//!
//! A pipeline that was created and never dispatched is a defect (a kernel compiled for
//! nothing, or a route that silently stopped being taken) unless it declared why it
//! may go unused.

use std::collections::BTreeMap;

use serde::Serialize;

use super::PipelineId;

/// One pipeline's line in the ledger.
#[derive(Clone, Debug, Serialize)]
pub struct LedgerEntry {
    /// Its [`PipelineId`]'s number.
    pub pipeline: u32,
    /// [`PipelineDesc::name`](super::PipelineDesc::name).
    pub name: String,
    /// Dispatches recorded since the pipeline was created.
    pub dispatches: u64,
    /// The sum of those dispatches' [`Dispatch::bytes_read`](super::Dispatch::bytes_read).
    pub bytes_read: u64,
    /// [`PipelineDesc::fallback_reason`](super::PipelineDesc::fallback_reason): why going
    /// undispatched is not a defect.
    pub fallback_reason: Option<String>,
}

#[derive(Default)]
pub(crate) struct Ledger {
    entries: BTreeMap<PipelineId, LedgerEntry>,
}

impl Ledger {
    pub fn register(&mut self, id: PipelineId, name: &str, fallback_reason: Option<&str>) {
        self.entries.insert(
            id,
            LedgerEntry {
                pipeline: id.0,
                name: name.to_string(),
                dispatches: 0,
                bytes_read: 0,
                fallback_reason: fallback_reason.map(str::to_string),
            },
        );
    }

    /// A destroyed pipeline leaves the ledger: it lists what is loaded.
    pub fn forget(&mut self, id: PipelineId) {
        self.entries.remove(&id);
    }

    pub fn count(&mut self, id: PipelineId, bytes_read: u64) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.dispatches += 1;
            e.bytes_read += bytes_read;
        }
    }

    pub fn report(&self) -> LedgerReport {
        LedgerReport {
            entries: self.entries.values().cloned().collect(),
        }
    }
}

/// The ledger at one moment: [`Device::ledger`](super::Device::ledger) and
/// [`Model::audit`](crate::model::Model::audit) return it, `Display` prints it as a
/// table ending in the count of defects.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LedgerReport {
    /// Every live pipeline, by id.
    pub entries: Vec<LedgerEntry>,
}

impl LedgerReport {
    /// Pipelines created and never dispatched without a declared reason.
    pub fn defects(&self) -> Vec<&LedgerEntry> {
        self.entries
            .iter()
            .filter(|e| e.dispatches == 0 && e.fallback_reason.is_none())
            .collect()
    }

    /// Dispatches of every pipeline together.
    pub fn total_dispatches(&self) -> u64 {
        self.entries.iter().map(|e| e.dispatches).sum()
    }
}

impl std::fmt::Display for LedgerReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // As wide as the longest pipeline name, so the columns line up.
        let w = self
            .entries
            .iter()
            .map(|e| e.name.len())
            .fold(36, usize::max);
        writeln!(
            f,
            "{:<w$} {:>12} {:>14}  note",
            "pipeline", "dispatches", "MB read"
        )?;
        for e in &self.entries {
            let note = match (&e.fallback_reason, e.dispatches) {
                (_, d) if d > 0 => String::new(),
                (Some(why), _) => format!("unused fallback: {why}"),
                (None, _) => "DEFECT: created, never dispatched".to_string(),
            };
            writeln!(
                f,
                "{:<w$} {:>12} {:>14.1}  {note}",
                e.name,
                e.dispatches,
                e.bytes_read as f64 / 1e6
            )?;
        }
        let defects = self.defects();
        if defects.is_empty() {
            write!(
                f,
                "0 defects: every pipeline created was dispatched or is a declared fallback"
            )
        } else {
            write!(
                f,
                "{} DEFECT(S): pipelines created and never dispatched",
                defects.len()
            )
        }
    }
}
