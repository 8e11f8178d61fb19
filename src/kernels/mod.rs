//! Kernels: one WGSL file per kernel under `wgsl/`, a Rust spec beside its siblings
//! here (bindings, launch geometry, requirements as data) and a CPU reference.

pub mod matvec;
pub mod ops;
pub mod spirv;
pub mod timing;

use std::collections::HashMap;
use std::sync::Mutex;

use crate::device::{Device, PipelineDesc, PipelineId};
use crate::Result;

/// Creates each distinct pipeline once, on first use, so a run only compiles the
/// kernels its routes need.
#[derive(Default)]
pub struct PipelineCache {
    by_key: Mutex<HashMap<String, PipelineId>>,
}

impl PipelineCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// `key` must identify the source and constants completely.
    pub fn get_or_create(
        &self,
        device: &dyn Device,
        key: &str,
        make: impl FnOnce() -> (String, PipelineTemplate),
    ) -> Result<PipelineId> {
        let mut map = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(id) = map.get(key) {
            return Ok(*id);
        }
        let (source, t) = make();
        let id = device.create_pipeline(&PipelineDesc {
            name: key,
            wgsl: &source,
            entry: "main",
            constants: &[],
            params_bytes: t.params_bytes,
            storage: t.storage,
            fallback_reason: t.fallback_reason,
        })?;
        map.insert(key.to_string(), id);
        Ok(id)
    }

    pub fn len(&self) -> usize {
        self.by_key.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Every pipeline this cache created.
    pub fn ids(&self) -> Vec<PipelineId> {
        let map = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        map.values().copied().collect()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The static part of a pipeline description.
#[derive(Clone, Copy, Debug)]
pub struct PipelineTemplate {
    pub params_bytes: u32,
    pub storage: &'static [crate::device::Access],
    pub fallback_reason: Option<&'static str>,
}
