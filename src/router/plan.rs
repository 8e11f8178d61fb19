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

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "plan for {}:", self.device)?;
        writeln!(
            f,
            "{:<28} {:<6} {:>16}  {:<34} reason",
            "tensor", "type", "M x K", "kernel"
        )?;
        for e in &self.entries {
            let shape = format!("{} x {}", e.shape[0], e.shape[1]);
            match &e.route {
                Ok(r) => writeln!(
                    f,
                    "{:<28} {:<6} {:>16}  {:<34} {}",
                    e.tensor,
                    e.ty,
                    shape,
                    r.pipeline_key(),
                    r.reason()
                )?,
                Err(err) => writeln!(
                    f,
                    "{:<28} {:<6} {:>16}  {:<34} {err}",
                    e.tensor, e.ty, shape, "-"
                )?,
            }
        }
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
