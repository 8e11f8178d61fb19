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
    // Half a second of steps first: GPUs lower their clocks while the CPU loads the
    // model, and a profile taken straight after loading Llama-3-8B read three times the
    // step time of the same build's decode.
    let warm_until = std::time::Instant::now() + std::time::Duration::from_millis(500);
    for pos in 0.. {
        model.forward(Input::Token(1), pos % 3)?;
        if pos >= 3 && std::time::Instant::now() >= warm_until {
            break;
        }
    }
    let t = std::time::Instant::now();
    model.forward(Input::Token(1), 3)?;
    println!("one step, wall: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    for (name, ns, n) in model.profile_step(Input::Token(1), 4)? {
        println!("{name:<40} {n:>5} dispatches {:>9.2} ms", ns / 1e6);
    }
    Ok(())
}
