//! An adapter without matrix units (lavapipe) presented as one with them: its profile
//! offers cooperative matrices (8 x 8 up to 8 lanes, 16 x 16 at 16, f16 operands where
//! it has f16, else f32), and every pipeline whose WGSL multiplies on them is compiled
//! with its matrices emulated on subgroups (`coop_emulation`). A model loaded on it
//! plans and runs its matrix-unit routes end to end, through the one forward pass,
//! with everything but the matrix instructions themselves (those run on the H200).

use std::sync::Arc;

use brass::device::{
    BufferId, BufferUse, Clock, CommandList, CoopInput, CoopMatrix, Device, DeviceProfile,
    LedgerReport, MemoryInUse, PipelineDesc, PipelineId, ReadTicket, Slice, Timing, WgpuDevice,
};
use brass::Result;

use crate::coop_emulation;

pub struct EmulatedUnits {
    inner: WgpuDevice,
    profile: DeviceProfile,
}

/// `inner` on its own matrix units where it has them, else on emulated ones where the
/// emulation runs, else as it is: the caller reads the profile's `coop_matrix` to know
/// which.
pub fn on_matrix_units(inner: WgpuDevice) -> Arc<dyn Device> {
    match emulated_profile(inner.profile()) {
        Some(profile) => Arc::new(EmulatedUnits { inner, profile }),
        None => Arc::new(inner),
    }
}

/// `p` with emulated matrix units, or None where the emulation does not run: the
/// adapter has matrix units of its own, no subgroups, or subgroups of other than one
/// size from 4 to 16.
fn emulated_profile(p: &DeviceProfile) -> Option<DeviceProfile> {
    let lanes = p.subgroup_max;
    if p.coop_matrix.is_some()
        || !p.subgroups
        || p.subgroup_min != lanes
        || !(4..=16).contains(&lanes)
    {
        return None;
    }
    let mut profile = p.clone();
    profile.coop_matrix = Some(CoopMatrix {
        size: lanes.max(8),
        input: if p.f16 {
            CoopInput::F16
        } else {
            CoopInput::F32
        },
        // lavapipe is a Vulkan driver: SPIR-V's loads.
        vector_loads: true,
    });
    profile.name = format!("{} (matrix units emulated)", p.name);
    Some(profile)
}

impl Device for EmulatedUnits {
    fn profile(&self) -> &DeviceProfile {
        &self.profile
    }

    fn create_buffer(&self, label: &str, bytes: u64, usage: BufferUse) -> Result<BufferId> {
        self.inner.create_buffer(label, bytes, usage)
    }

    fn upload(&self, buffer: BufferId, offset: u64, data: &[u8]) -> Result<()> {
        self.inner.upload(buffer, offset, data)
    }

    fn buffer_size(&self, buffer: BufferId) -> Result<u64> {
        self.inner.buffer_size(buffer)
    }

    fn destroy_buffer(&self, buffer: BufferId) -> Result<()> {
        self.inner.destroy_buffer(buffer)
    }

    fn create_pipeline(&self, desc: &PipelineDesc) -> Result<PipelineId> {
        if !desc.wgsl.contains("enable wgpu_cooperative_matrix;") {
            return self.inner.create_pipeline(desc);
        }
        let shape = self.profile.coop_matrix.expect("emulated units");
        let wgsl = coop_emulation::emulate(desc.wgsl, shape.size, self.profile.subgroup_max);
        self.inner.create_pipeline(&PipelineDesc {
            wgsl: &wgsl,
            ..*desc
        })
    }

    fn destroy_pipeline(&self, pipeline: PipelineId) -> Result<()> {
        self.inner.destroy_pipeline(pipeline)
    }

    fn submit(&self, list: &CommandList) -> Result<()> {
        self.inner.submit(list)
    }

    fn submit_timed(&self, list: &CommandList, timing: Timing) -> Result<Vec<f64>> {
        self.inner.submit_timed(list, timing)
    }

    fn clock(&self) -> Clock {
        self.inner.clock()
    }

    fn submit_read(&self, list: &CommandList, src: Slice) -> Result<ReadTicket> {
        self.inner.submit_read(list, src)
    }

    fn finish_read(&self, ticket: ReadTicket) -> Result<Vec<u8>> {
        self.inner.finish_read(ticket)
    }

    fn read(&self, buffer: BufferId, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.inner.read(buffer, offset, len)
    }

    fn wait(&self) -> Result<()> {
        self.inner.wait()
    }

    fn ledger(&self) -> LedgerReport {
        self.inner.ledger()
    }

    fn memory_in_use(&self) -> MemoryInUse {
        self.inner.memory_in_use()
    }
}
