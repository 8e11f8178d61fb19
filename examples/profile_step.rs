//! Where one decode step's GPU time goes, per pipeline (GPU timestamps per dispatch).

use std::sync::Arc;

use brass::device::{AdapterChoice, Device, WgpuDevice};
use brass::model::{default_model_path, Input, LoadOptions, Model};

fn main() -> brass::Result<()> {
    let path = std::env::args()
        .nth(1)
        .map(Into::into)
        .map_or_else(default_model_path, Ok)?;
    let device: Arc<dyn Device> = Arc::new(WgpuDevice::open(&AdapterChoice::from_env())?);
    let model = Model::load(
        device,
        path,
        &LoadOptions {
            context: Some(64),
            ..Default::default()
        },
    )?;
    for pos in 0..3 {
        model.forward(Input::Token(1), pos)?;
    }
    let t = std::time::Instant::now();
    model.forward(Input::Token(1), 3)?;
    println!("one step, wall: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    for (name, ns, n) in model.profile_step(Input::Token(1), 4)? {
        println!("{name:<40} {n:>5} dispatches {:>9.2} ms", ns / 1e6);
    }
    Ok(())
}
