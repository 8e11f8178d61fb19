//! The plan report: for every weight tensor of a GGUF file, the route it takes.
//!
//! It needs no model architecture: every 2-D tensor is a matvec candidate, which is
//! what a llama-family forward pass does with it. A tensor on a slow path on a device
//! that has the fast path's features is flagged loudly.

use serde::Serialize;

use super::{route_matvec, Force, Route};
use crate::device::DeviceProfile;
use crate::gguf::GgufFile;
use crate::kernels::matvec::Family;

#[derive(Clone, Debug, Serialize)]
pub struct PlanEntry {
    pub tensor: String,
    pub ty: String,
    /// Rows (M) and columns (K).
    pub shape: [u64; 2],
    pub route: Result<Route, String>,
    /// Set when the tensor runs slower than the device allows.
    pub warning: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub device: String,
    pub entries: Vec<PlanEntry>,
}

impl Plan {
    pub fn warnings(&self) -> impl Iterator<Item = &PlanEntry> {
        self.entries.iter().filter(|e| e.warning.is_some())
    }
}

/// Routes every 2-D tensor of `file` on `profile`.
pub fn plan_gguf(file: &GgufFile, profile: &DeviceProfile, force: Option<&Force>) -> Plan {
    let entries = file
        .tensors()
        .iter()
        .filter(|t| t.dims.len() == 2)
        .map(|t| {
            let (m, k) = (t.rows(), t.cols());
            let route = route_matvec(profile, t.ty, m, k, force).map_err(|e| e.to_string());
            let warning = match &route {
                Err(e) => Some(format!("NO KERNEL: {e}")),
                Ok(r) if r.family == Family::Scalar && profile.subgroups && force.is_none() => {
                    Some(format!(
                        "SLOW PATH: {} runs scalar on a device with subgroups ({})",
                        t.name,
                        r.reason()
                    ))
                }
                Ok(_) => None,
            };
            PlanEntry {
                tensor: t.name.clone(),
                ty: t.ty.name().to_string(),
                shape: [m, k],
                route,
                warning,
            }
        })
        .collect();
    Plan {
        device: profile.name.clone(),
        entries,
    }
}

/// One row of a route table: a tensor (or a stack of them) and its route or the
/// reason it has none.
pub struct RouteRow<'a> {
    pub tensor: &'a str,
    pub ty: &'a str,
    pub m: u64,
    pub k: u64,
    pub route: Result<&'a Route, &'a str>,
}

/// Writes `rows` in aligned columns. A route's reasons are numbers into a legend of
/// clauses written once after the table: a model repeats the same few clauses on every
/// layer, and whole on each row they made rows hundreds of characters long.
pub fn write_route_table(f: &mut impl std::fmt::Write, rows: &[RouteRow]) -> std::fmt::Result {
    let mut legend: Vec<&str> = Vec::new();
    let mut cells = Vec::new();
    for row in rows {
        let (kernel, reasons) = match row.route {
            Ok(route) => {
                let numbers: Vec<String> = route
                    .clauses
                    .iter()
                    .map(|clause| {
                        let n = match legend.iter().position(|c| c == clause) {
                            Some(i) => i,
                            None => {
                                legend.push(clause);
                                legend.len() - 1
                            }
                        };
                        (n + 1).to_string()
                    })
                    .collect();
                (route.pipeline_key(), numbers.join(" "))
            }
            Err(e) => ("-".to_string(), format!("no kernel: {e}")),
        };
        cells.push((format!("{} x {}", row.m, row.k), kernel, reasons));
    }
    let width = |header: &str, column: &mut dyn Iterator<Item = usize>| {
        column.max().unwrap_or(0).max(header.len())
    };
    let tensor_w = width("tensor", &mut rows.iter().map(|r| r.tensor.len()));
    let ty_w = width("type", &mut rows.iter().map(|r| r.ty.len()));
    let shape_w = width("M x K", &mut cells.iter().map(|c| c.0.len()));
    let kernel_w = width("kernel", &mut cells.iter().map(|c| c.1.len()));
    writeln!(
        f,
        "{:<tensor_w$}  {:<ty_w$}  {:>shape_w$}  {:<kernel_w$}  reasons",
        "tensor", "type", "M x K", "kernel"
    )?;
    for (row, (shape, kernel, reasons)) in rows.iter().zip(&cells) {
        writeln!(
            f,
            "{:<tensor_w$}  {:<ty_w$}  {shape:>shape_w$}  {kernel:<kernel_w$}  {reasons}",
            row.tensor, row.ty
        )?;
    }
    if !legend.is_empty() {
        writeln!(f, "reasons:")?;
        for (i, clause) in legend.iter().enumerate() {
            writeln!(f, "{:>4}  {clause}", i + 1)?;
        }
    }
    Ok(())
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "plan for {}:", self.device)?;
        let rows: Vec<RouteRow> = self
            .entries
            .iter()
            .map(|e| RouteRow {
                tensor: &e.tensor,
                ty: &e.ty,
                m: e.shape[0],
                k: e.shape[1],
                route: e.route.as_ref().map_err(String::as_str),
            })
            .collect();
        write_route_table(f, &rows)?;
        let n_warn = self.warnings().count();
        for e in self.warnings() {
            writeln!(f, "WARNING: {}", e.warning.as_deref().unwrap_or_default())?;
        }
        write!(
            f,
            "{} tensors routed, {n_warn} warning(s)",
            self.entries.len()
        )
    }
}
