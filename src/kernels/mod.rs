//! Kernels: one WGSL file per kernel under `wgsl/`, a Rust spec beside its siblings
//! here (bindings, launch geometry, requirements as data) and a CPU reference.

pub mod attention;
pub mod matmul;
pub mod matvec;
pub mod ops;
pub mod spirv;
pub mod timing;
pub mod wgsl;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::device::{Device, PipelineDesc, PipelineId};
use crate::Result;

/// Creates each distinct pipeline once, on first use, so a run only compiles the
/// kernels its routes need.
#[derive(Default)]
pub struct PipelineCache {
    by_key: Mutex<HashMap<String, PipelineId>>,
    /// With [`PipelineCache::owning`], the device its pipelines are destroyed on when
    /// the cache is dropped.
    owner: Option<Arc<dyn Device>>,
}

impl PipelineCache {
    /// A cache whose pipelines stay on the device (tools and tests that keep one device
    /// for a run).
    pub fn new() -> Self {
        Self::default()
    }

    /// A cache that destroys its pipelines on `device` when dropped: a model holds one,
    /// so that an app switching models, or retrying a load that failed half way, does
    /// not collect pipelines it no longer uses.
    pub fn owning(device: Arc<dyn Device>) -> Self {
        PipelineCache {
            by_key: Mutex::default(),
            owner: Some(device),
        }
    }

    /// `key` must identify the source and constants completely; `make` composes the
    /// source only when the key is new.
    pub fn get_or_create(
        &self,
        device: &dyn Device,
        key: &str,
        make: impl FnOnce() -> Result<(String, PipelineTemplate)>,
    ) -> Result<PipelineId> {
        let mut map = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(id) = map.get(key) {
            return Ok(*id);
        }
        let (source, t) = make()?;
        let id = device.create_pipeline(&PipelineDesc {
            name: key,
            wgsl: &source,
            entry: "main",
            constants: &[],
            params_bytes: t.params_bytes,
            storage: t.storage,
            fallback_reason: t.fallback_reason,
            index_checks: t.index_checks,
        })?;
        map.insert(key.to_string(), id);
        Ok(id)
    }

    /// Pipelines created through this cache.
    pub fn len(&self) -> usize {
        self.by_key.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Every pipeline this cache created.
    pub fn ids(&self) -> Vec<PipelineId> {
        let map = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        map.values().copied().collect()
    }

    /// Whether it has created none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for PipelineCache {
    fn drop(&mut self) {
        let Some(device) = &self.owner else { return };
        let map = std::mem::take(self.by_key.get_mut().unwrap_or_else(|e| e.into_inner()));
        for id in map.into_values() {
            // A lost device has freed everything already; nothing else can fail here.
            let _ = device.destroy_pipeline(id);
        }
    }
}

/// The static part of a pipeline description.
#[derive(Clone, Copy, Debug)]
pub struct PipelineTemplate {
    /// [`PipelineDesc::params_bytes`].
    pub params_bytes: u32,
    /// [`PipelineDesc::storage`].
    pub storage: &'static [crate::device::Access],
    /// [`PipelineDesc::fallback_reason`].
    pub fallback_reason: Option<&'static str>,
    /// [`PipelineDesc::index_checks`].
    pub index_checks: crate::device::IndexChecks,
}
