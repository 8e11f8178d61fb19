//! The router over a catalog of real shapes × every preset profile. Pure: no GPU.

use brass::device::{DeviceProfile, PRESETS};
use brass::kernels::matvec::{Family, XStage, MATVEC_KERNELS};
use brass::quant::GgmlType;
use brass::router::{route_matvec, take_x_q8, Force};

/// (model, M, K): every matvec shape of these models, and square/FFN shapes at the
/// hidden sizes that have broken engines before.
fn catalog() -> Vec<(&'static str, u64, u64)> {
    let mut shapes = vec![
        ("smollm2-135m q", 576, 576),
        ("smollm2-135m kv", 192, 576),
        ("smollm2-135m up", 1536, 576),
        ("smollm2-135m down", 576, 1536),
        ("smollm2-135m lm-head", 49152, 576),
        ("llama3-8b q", 4096, 4096),
        ("llama3-8b kv", 1024, 4096),
        ("llama3-8b up", 14336, 4096),
        ("llama3-8b down", 4096, 14336),
        ("llama3-8b lm-head", 128256, 4096),
        ("qwen3-8b up", 12288, 4096),
        ("qwen3-8b down", 4096, 12288),
        ("qwen3-8b lm-head", 151936, 4096),
        ("muse-30b lm-head", 202048, 6656),
    ];
    for h in [4096u64, 6656, 8192, 12288, 16384] {
        shapes.push(("hidden square", h, h));
        shapes.push(("hidden ffn up", 4 * h, h));
        shapes.push(("hidden ffn down", h, 4 * h));
    }
    shapes
}

fn kernel_types() -> Vec<GgmlType> {
    let mut types: Vec<GgmlType> = MATVEC_KERNELS.iter().map(|k| k.ty).collect();
    types.sort();
    types.dedup();
    types
}

#[test]
fn no_catalog_shape_lands_on_scalar_where_subgroups_exist() {
    for preset in PRESETS {
        let profile = DeviceProfile::preset(preset).unwrap();
        assert!(profile.subgroups);
        for (model, m, k) in catalog() {
            for ty in kernel_types() {
                if ty.bytes_for(k).is_none() {
                    continue; // e.g. K-quants need K % 256 == 0; SmolLM2's 576 is not
                }
                let r = route_matvec(&profile, ty, m, k, None)
                    .unwrap_or_else(|e| panic!("{preset} {model} {ty} {m}x{k}: {e}"));
                // Quant weights take dot4, float weights coop.
                let expected = if !matches!(ty, GgmlType::F32 | GgmlType::F16) {
                    Family::Dot4
                } else {
                    Family::Coop
                };
                assert_eq!(
                    r.family,
                    expected,
                    "{preset} {model} {ty} {m}x{k}: {}",
                    r.reason()
                );
            }
        }
    }
}

#[test]
fn routes_respect_the_profile_limits() {
    for preset in PRESETS {
        let profile = DeviceProfile::preset(preset).unwrap();
        for (model, m, k) in catalog() {
            for ty in kernel_types() {
                let Some(row_bytes) = ty.bytes_for(k) else {
                    continue;
                };
                for force in [None, Some(Force::Family(Family::Scalar))] {
                    let r = route_matvec(&profile, ty, m, k, force.as_ref()).unwrap();
                    let ctx = format!("{preset} {model} {ty} {m}x{k}: {}", r.reason());
                    // Parts tile the rows exactly, each within one binding.
                    let mut next = 0;
                    for p in &r.parts {
                        assert_eq!(p.first_row, next, "{ctx}");
                        assert!(
                            p.rows * row_bytes <= profile.usable_binding_bytes(),
                            "{ctx}"
                        );
                        assert!(
                            p.workgroups
                                .iter()
                                .all(|&g| g >= 1 && g <= profile.max_workgroups_per_dim),
                            "{ctx}"
                        );
                        next += p.rows;
                    }
                    assert_eq!(next, m, "{ctx}");
                    if let Some(c) = r.coop {
                        assert!(
                            c.workgroup_bytes() <= profile.workgroup_storage_bytes as u64,
                            "{ctx}"
                        );
                        assert_eq!(c.tile % 256, 0, "{ctx}");
                        assert!(c.wg <= profile.max_invocations_per_workgroup, "{ctx}");
                        assert!(c.x != XStage::F16 || profile.f16, "{ctx}");
                    }
                    assert!(!r.clauses.is_empty(), "every route says why");
                }
            }
        }
    }
}

#[test]
fn the_muse_lm_head_is_split_on_lavapipe_and_whole_on_the_h200() {
    let (m, k) = (202_048, 6_656);
    let lavapipe = DeviceProfile::preset("lavapipe").unwrap();
    let r = route_matvec(&lavapipe, GgmlType::Q5_K, m, k, None).unwrap();
    assert_eq!(
        r.parts.len(),
        7,
        "925 MB over 128 MiB bindings: {}",
        r.reason()
    );
    assert!(r.reason().contains("parts"));
    let h200 = DeviceProfile::preset("h200").unwrap();
    let r = route_matvec(&h200, GgmlType::Q5_K, m, k, None).unwrap();
    assert_eq!(r.parts.len(), 1, "{}", r.reason());
    assert_eq!(r.family, Family::Dot4);
    // 26 blocks of 4 slices a row: 8 lanes per row share them evenly, 32 would idle.
    assert_eq!(r.coop.unwrap().lanes, 8, "{}", r.reason());
    assert!(r.reason().contains("8 lanes per row"), "{}", r.reason());
}

#[test]
fn dot4_workgroups_stage_x_in_proportion_to_the_weights() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    let groups = |m, k| {
        let r = route_matvec(&h200, GgmlType::Q4_K, m, k, None).unwrap();
        let capped = r
            .reason()
            .contains("would stage more than 1/4 of the weights");
        (r.parts[0].workgroups[0], capped)
    };
    // 33 MB of weights: 4 x 57 KB of x per workgroup caps 14,336-wide rows at 144,
    // lifted to the floor of 256; 16 KB per workgroup allows 504 for 4,096-wide ones.
    assert_eq!(groups(4096, 14336), (256, true));
    assert_eq!(groups(14336, 4096), (504, true));
    // The head is capped by the persistent-workgroup count instead, and a small matrix
    // by its 72 row batches.
    assert_eq!(groups(128256, 4096), (1024, false));
    assert_eq!(groups(576, 1536), (72, false));
}

/// On the H200 preset, the dot4 routes that take their row batches from the queue: those
/// whose workgroups have at least 4 batches of at least 32 KB each.
#[test]
fn dot4_workgroups_queue_for_their_batches_where_they_have_several_big_ones() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    let queued = |ty, m, k| {
        let r = route_matvec(&h200, ty, m, k, None).unwrap();
        let queue = r.coop.unwrap().queue;
        assert_eq!(queue, r.reason().contains("from a queue"), "{}", r.reason());
        queue
    };
    // 202,048 rows in batches of 32 (8 lanes a row) over 1,024 workgroups: 6.17 batches
    // of 146 KB each.
    assert!(queued(GgmlType::Q5_K, 202_048, 6_656));
    // 15.7 batches of 8 rows each: 35 KB of Q8_0, but 18 KB of Q4_K and 27 KB of Q6_K.
    assert!(queued(GgmlType::Q8_0, 128_256, 4_096));
    assert!(!queued(GgmlType::Q4_K, 128_256, 4_096));
    assert!(!queued(GgmlType::Q6_K, 128_256, 4_096));
    // The FFN shapes: 3.5 batches per workgroup or fewer.
    for (m, k) in [(14_336, 4_096), (4_096, 14_336)] {
        assert!(!queued(GgmlType::Q8_0, m, k));
    }
}

/// Clause 6, on the H200 preset: the Q4_K and Q5_K routes whose workgroups take at least
/// 8 row batches each, x in one tile and no queue, load each lane's next slice ahead. Of
/// the catalog that is the 128,256- and 151,936-row heads; the FFN shapes (2-3.6 batches
/// per workgroup) and the queued 202,048 x 6,656 head do not, nor does any other type.
#[test]
fn k_quant_heads_load_a_slice_ahead() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    for (model, m, k) in catalog() {
        for ty in kernel_types() {
            // K-quants need K to be a multiple of 256 (not SmolLM2's 576).
            let Ok(r) = route_matvec(&h200, ty, m, k, None) else {
                continue;
            };
            let Some(c) = r.coop else { continue };
            let expected = matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K)
                && matches!(model, "llama3-8b lm-head" | "qwen3-8b lm-head");
            assert_eq!(c.prefetch, expected, "{model} {ty}: {}", r.reason());
            assert_eq!(
                c.prefetch,
                r.reason().contains("next slice ahead, across rows: ")
                    && r.reason().contains(" row batches per workgroup"),
                "{}",
                r.reason()
            );
            assert!(!(c.prefetch && c.queue));
            // Read in place (one batch per workgroup), nothing is loaded ahead.
            let mut direct = r.clone();
            take_x_q8(&h200, &mut direct, Some(true));
            assert!(!direct.coop.unwrap().prefetch);
        }
    }
}

/// Clause 5: x that arrives quantized is read in place by the types whose lanes each
/// take a whole 32-weight block (consecutive x groups), copied into workgroup memory by
/// the K-quants; read in place, nothing is staged and a workgroup is one row batch.
#[test]
fn prequantized_x_is_read_in_place_where_lanes_read_consecutive_groups() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    let direct = [
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
    ];
    let staged = [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K];
    for (m, k) in [
        (4_096, 4_096),
        (14_336, 4_096),
        (4_096, 14_336),
        (128_256, 4_096),
    ] {
        for ty in direct.into_iter().chain(staged) {
            let mut r = route_matvec(&h200, ty, m, k, None).unwrap();
            take_x_q8(&h200, &mut r, None);
            let c = r.coop.unwrap();
            assert!(c.x_q8);
            assert_eq!(
                c.x_direct,
                direct.contains(&ty),
                "{ty} {m}x{k}: {}",
                r.reason()
            );
            if c.x_direct {
                assert!(!c.queue && r.reason().contains("read it in place"));
                let batches = m.div_ceil(c.rows_per_workgroup(h200.subgroup_max));
                assert_eq!(r.parts[0].workgroups, [batches as u32, 1, 1]);
            } else {
                assert!(r.reason().contains("staging copies it"));
            }
        }
    }
    // Forced either way, and no effect on the other families.
    let mut r = route_matvec(&h200, GgmlType::Q4_K, 4_096, 4_096, None).unwrap();
    take_x_q8(&h200, &mut r, Some(true));
    assert!(r.coop.unwrap().x_direct && r.reason().contains("(forced)"));
    let mut r = route_matvec(&h200, GgmlType::Q8_0, 4_096, 4_096, None).unwrap();
    take_x_q8(&h200, &mut r, Some(false));
    assert!(!r.coop.unwrap().x_direct);
    let coop = Force::Family(Family::Coop);
    let mut r = route_matvec(&h200, GgmlType::Q8_0, 4_096, 4_096, Some(&coop)).unwrap();
    take_x_q8(&h200, &mut r, None);
    assert!(!r.coop.unwrap().x_q8);
}

#[test]
fn dot4_short_rows_take_a_whole_subgroup() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    // SmolLM2: 18 and 48 slices a row, under two rounds of 32 lanes.
    for (m, k) in [(1536, 576), (576, 1536), (49152, 576)] {
        let r = route_matvec(&h200, GgmlType::Q8_0, m, k, None).unwrap();
        assert_eq!(r.coop.unwrap().lanes, 0, "{m}x{k}: {}", r.reason());
    }
}

#[test]
fn dot4_rows_take_a_whole_subgroup_where_it_divides_them() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0] {
        for (m, k) in [(4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096)] {
            let r = route_matvec(&h200, ty, m, k, None).unwrap();
            assert_eq!(r.coop.unwrap().lanes, 0, "{ty} {m}x{k}: {}", r.reason());
        }
    }
}

#[test]
fn k_beyond_workgroup_memory_is_tiled_not_rejected() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    // 48 KiB holds 23,040 padded f16 values (90 quanta of 256, 544 bytes each); a
    // 65,536-wide row takes three tiles.
    let coop = Force::Family(Family::Coop);
    let r = route_matvec(&h200, GgmlType::Q4_K, 1024, 65_536, Some(&coop)).unwrap();
    let c = r.coop.unwrap();
    assert_eq!(c.tile, 23_040);
    assert!(r.reason().contains("3 tiles"), "{}", r.reason());
    // As int8 with a scale and sums per 32, and bank padding (432 bytes per quantum
    // plus 240), it holds 28,928: three.
    let r = route_matvec(&h200, GgmlType::Q4_K, 1024, 65_536, None).unwrap();
    let c = r.coop.unwrap();
    assert_eq!((c.x, c.tile), (XStage::Int8, 28_928));
    assert!(r.reason().contains("3 tiles"), "{}", r.reason());
}

#[test]
fn a_profile_without_subgroups_routes_scalar_and_says_why() {
    let mut p = DeviceProfile::preset("rdna4").unwrap();
    p.subgroups = false;
    let r = route_matvec(&p, GgmlType::Q4_K, 4096, 4096, None).unwrap();
    assert_eq!(r.family, Family::Scalar);
    assert!(r.reason().contains("no subgroups"), "{}", r.reason());
    let err = route_matvec(
        &p,
        GgmlType::Q4_K,
        4096,
        4096,
        Some(&Force::Family(Family::Coop)),
    )
    .unwrap_err();
    assert!(err.to_string().contains("coop"), "{err}");
}

#[test]
fn overrides_and_bad_shapes() {
    let p = DeviceProfile::preset("h200").unwrap();
    let forced: Force = "q4_k_scalar".parse().unwrap();
    let r = route_matvec(&p, GgmlType::Q4_K, 4096, 4096, Some(&forced)).unwrap();
    assert_eq!(r.kernel, "matvec/q4_k_scalar");
    assert!(route_matvec(&p, GgmlType::Q6_K, 4096, 4096, Some(&forced)).is_err());
    // The refusal lists what would have been accepted.
    let err = "no_such_kernel".parse::<Force>().unwrap_err().to_string();
    for valid in [
        "no_such_kernel",
        "dot4",
        "coop",
        "scalar",
        "q4_k_scalar",
        "q4_1_coop",
    ] {
        assert!(err.contains(valid), "{valid}: {err}");
    }
    assert!(
        route_matvec(&p, GgmlType::Q4_K, 4096, 576, None).is_err(),
        "576 is not a whole Q4_K block"
    );
    assert!(route_matvec(&p, GgmlType::IQ2_XS, 4096, 4096, None).is_err());
    assert!(route_matvec(&p, GgmlType::Q8_0, 0, 4096, None).is_err());
}

/// The plan table stays narrow however many layers repeat a route: each row numbers its
/// reasons, and each clause is written once, in a legend after the aligned rows.
#[test]
fn a_plan_prints_each_reason_once_in_a_legend() {
    use brass::gguf::{GgufBuilder, GgufFile};
    use brass::router::plan_gguf;
    let mut b = GgufBuilder::new();
    for layer in 0..4 {
        for (name, m) in [("attn_q", 576u64), ("attn_k", 192)] {
            let bytes = GgmlType::Q4_1.bytes_for(576 * m).unwrap() as usize;
            b.add_tensor(
                format!("blk.{layer}.{name}.weight"),
                GgmlType::Q4_1,
                &[576, m],
                vec![0; bytes],
            )
            .unwrap();
        }
    }
    let file = GgufFile::from_bytes(b.to_bytes()).unwrap();
    let plan = plan_gguf(&file, &DeviceProfile::preset("lavapipe").unwrap(), None);
    let text = plan.to_string();
    let lines: Vec<&str> = text.lines().collect();
    let header = lines[1];
    let reasons_at = header.find("reason").unwrap();
    let rows = &lines[2..2 + plan.entries.len()];
    for (row, entry) in rows.iter().zip(&plan.entries) {
        assert!(row.starts_with(&entry.tensor), "{row}");
        assert!(row.len() < 120, "{} characters: {row}", row.len());
        let (columns, numbers) = row.split_at(reasons_at);
        assert!(
            columns.ends_with("  ") && !numbers.starts_with(' '),
            "{row}"
        );
        let clauses = &entry.route.as_ref().unwrap().clauses;
        assert_eq!(numbers.split(' ').count(), clauses.len(), "{row}");
    }
    for entry in &plan.entries {
        for clause in &entry.route.as_ref().unwrap().clauses {
            assert_eq!(text.matches(clause.as_str()).count(), 1, "{clause}\n{text}");
        }
    }
}
