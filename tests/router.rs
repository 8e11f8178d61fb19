//! The router over a catalog of real shapes × every preset profile. Pure: no GPU.

use brass::device::{DeviceProfile, PRESETS};
use brass::kernels::matmul::MatmulEngine;
use brass::kernels::matvec::{
    Batches, Dot4Launch, Dot4X, Family, LaunchConfig, StagedFrom, XForm, XStage, MATVEC_KERNELS,
};
use brass::quant::GgmlType;
use brass::router::{
    linear_kind, route_batch, route_matmul, route_matmul_engine, route_matvec, BatchLaunch, Clause,
    Force, LinearKind, MatvecQuery, Overrides, Route, XInput,
};

/// The route of an M x K matvec of `ty` on f32 x, with `overrides`.
fn route_with(
    p: &DeviceProfile,
    (ty, m, k): (GgmlType, u64, u64),
    x: XInput,
    overrides: &Overrides,
) -> brass::Result<Route> {
    route_matvec(
        p,
        &MatvecQuery {
            ty,
            m,
            k,
            x,
            columns: 1,
        },
        overrides,
    )
}

fn route(p: &DeviceProfile, ty: GgmlType, m: u64, k: u64) -> brass::Result<Route> {
    route_with(p, (ty, m, k), XInput::F32, &Overrides::default())
}

fn forced(force: Force) -> Overrides {
    Overrides {
        force: Some(force),
        ..Overrides::default()
    }
}

/// A dot4 route's launch choices.
fn dot4(r: &Route) -> Dot4Launch {
    match r.launch().config() {
        LaunchConfig::Dot4(c) => c,
        other => panic!("not dot4: {other:?} ({})", r.reason()),
    }
}

/// A staging dot4 route's tile, source and batches.
fn staged(r: &Route) -> (u32, StagedFrom, Batches) {
    match dot4(r).x {
        Dot4X::Staged {
            tile,
            from,
            batches,
        } => (tile, from, batches),
        Dot4X::InPlace => panic!("reads x in place: {}", r.reason()),
    }
}

/// (model, M, K): every matvec shape of the synthetic presets (the catalog the matvec
/// bench shares), and square/FFN shapes at the hidden sizes that have broken engines
/// before.
fn catalog() -> Vec<(String, u64, u64)> {
    let mut shapes = Vec::new();
    for preset in brass::gguf::synthetic::PRESETS {
        let spec = brass::gguf::synthetic::SyntheticSpec::preset(preset).unwrap();
        for (matrix, m, k) in spec.matvec_shapes() {
            shapes.push((format!("{preset} {matrix}"), m, k));
        }
    }
    for h in [4096u64, 6656, 8192, 12288, 16384] {
        shapes.push(("hidden square".into(), h, h));
        shapes.push(("hidden ffn up".into(), 4 * h, h));
        shapes.push(("hidden ffn down".into(), h, 4 * h));
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
                let r = route(&profile, ty, m, k)
                    .unwrap_or_else(|e| panic!("{preset} {model} {ty} {m}x{k}: {e}"));
                // Quant weights take dot4, float weights coop.
                let expected = if !matches!(ty, GgmlType::F32 | GgmlType::F16) {
                    Family::Dot4
                } else {
                    Family::Coop
                };
                assert_eq!(
                    r.family(),
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
                for x in [XInput::F32, XInput::Norm, XInput::Glu { up: k + 4 }] {
                    for (force, columns) in [
                        (None, 1),
                        (None, 8),
                        (None, 32),
                        (Some(Force::Family(Family::Scalar)), 1),
                    ] {
                        let overrides = Overrides {
                            force: force.clone(),
                            x_q8: Some(true),
                            ..Overrides::default()
                        };
                        let query = MatvecQuery {
                            ty,
                            m,
                            k,
                            x,
                            columns,
                        };
                        let r = route_matvec(&profile, &query, &overrides).unwrap();
                        let ctx = format!("{preset} {model} {ty} {m}x{k}: {}", r.reason());
                        let launch = r.launch();
                        // Parts tile the rows exactly, each within one binding.
                        let mut next = 0;
                        for p in launch.parts() {
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
                        let (wg, tile) = match launch.config() {
                            LaunchConfig::Scalar => (None, None),
                            LaunchConfig::Coop(c) => (Some(c.wg), Some((c.tile, 1))),
                            LaunchConfig::Dot4(c) => match c.x {
                                Dot4X::Staged { tile, .. } => {
                                    (Some(c.wg), Some((tile, c.staged_columns())))
                                }
                                Dot4X::InPlace => (Some(c.wg), None),
                            },
                        };
                        if let Some((tile, columns)) = tile {
                            let bytes = launch
                                .x_stage()
                                .columns_tile_bytes(tile as u64, columns as u64);
                            assert!(bytes <= profile.workgroup_storage_bytes as u64, "{ctx}");
                            assert_eq!(tile % 256, 0, "{ctx}");
                        }
                        assert!(wg.is_none_or(|wg| wg <= profile.max_invocations_per_workgroup));
                        assert!(launch.x_stage() != XStage::F16 || profile.f16, "{ctx}");
                        assert!(!r.clauses().is_empty(), "every route says why");
                    }
                }
            }
        }
    }
}

#[test]
fn the_muse_lm_head_is_split_on_lavapipe_and_whole_on_the_h200() {
    let (m, k) = (202_048, 6_656);
    let lavapipe = DeviceProfile::preset("lavapipe").unwrap();
    let r = route(&lavapipe, GgmlType::Q5_K, m, k).unwrap();
    assert_eq!(
        r.launch().parts().len(),
        7,
        "925 MB over 128 MiB bindings: {}",
        r.reason()
    );
    assert!(r
        .clauses()
        .iter()
        .any(|c| matches!(c, Clause::SplitAcrossBindings { parts: 7, .. })));
    let h200 = DeviceProfile::preset("h200").unwrap();
    let r = route(&h200, GgmlType::Q5_K, m, k).unwrap();
    assert_eq!(r.launch().parts().len(), 1, "{}", r.reason());
    assert_eq!(r.family(), Family::Dot4);
    // 26 blocks of 4 slices a row: 8 lanes per row share them evenly, 32 would idle.
    assert_eq!(dot4(&r).lanes, 8, "{}", r.reason());
    assert!(r.reason().contains("8 lanes per row"), "{}", r.reason());
}

#[test]
fn dot4_workgroups_stage_x_in_proportion_to_the_weights() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    let groups = |m, k| {
        let r = route(&h200, GgmlType::Q4_K, m, k).unwrap();
        let capped = r
            .clauses()
            .iter()
            .any(|c| matches!(c, Clause::StagingCapsWorkgroups { .. }));
        assert_eq!(
            capped,
            r.reason()
                .contains("would stage more than 1/4 of the weights")
        );
        (r.launch().parts()[0].workgroups[0], capped)
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

/// The workgroup counts are tuning, per device: a preset with fewer compute units
/// spreads a matvec over fewer persistent workgroups.
#[test]
fn workgroup_counts_follow_the_device_tuning() {
    let rdna4 = DeviceProfile::preset("rdna4").unwrap();
    assert_eq!(rdna4.compute_units, Some(64));
    // 1,024 persistent workgroups for the H200's 132 SMs, so 497 for 64 CUs.
    assert_eq!(rdna4.tuning.persistent_workgroups, 497);
    let r = route(&rdna4, GgmlType::Q4_K, 128_256, 4096).unwrap();
    assert_eq!(r.launch().parts()[0].workgroups[0], 497, "{}", r.reason());
}

/// On the H200 preset, the dot4 routes that take their row batches from the queue: those
/// whose workgroups have at least 4 batches of at least 32 KB each.
#[test]
fn dot4_workgroups_queue_for_their_batches_where_they_have_several_big_ones() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    let queued = |ty, m, k| {
        let r = route(&h200, ty, m, k).unwrap();
        let queue = staged(&r).2 == Batches::Queue;
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

/// On the H200 preset: the Q4_K and Q5_K routes whose workgroups take at least 8 row
/// batches each, x in one tile and no queue, load each lane's next slice ahead: the
/// Llama-3-8B head does; the FFN shapes (2-3.6 batches per workgroup) and the queued
/// 202,048 x 6,656 head do not, nor does any other type.
#[test]
fn k_quant_heads_load_a_slice_ahead() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    for (model, m, k) in catalog() {
        for ty in kernel_types() {
            // K-quants need K to be a multiple of 256 (not SmolLM2's 576).
            let Ok(r) = route(&h200, ty, m, k) else {
                continue;
            };
            if r.family() != Family::Dot4 {
                continue;
            }
            let prefetch = staged(&r).2 == Batches::Prefetch;
            let k_quant = matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K);
            if model == "llama3-8b lm_head" {
                assert_eq!(prefetch, k_quant, "{model} {ty}: {}", r.reason());
            }
            if !k_quant || model.contains("ffn") || model == "muse-30b lm_head" {
                assert!(!prefetch, "{model} {ty}: {}", r.reason());
            }
            assert_eq!(
                prefetch,
                r.reason().contains("next slice ahead, across rows: ")
                    && r.reason().contains(" row batches per workgroup"),
                "{}",
                r.reason()
            );
            // Read in place (one batch per workgroup), nothing is loaded ahead.
            let in_place = Overrides {
                x_q8: Some(true),
                x_in_place: Some(true),
                ..Overrides::default()
            };
            let direct = route_with(&h200, (ty, m, k), XInput::Norm, &in_place).unwrap();
            assert_eq!(dot4(&direct).x, Dot4X::InPlace);
        }
    }
}

/// x that arrives quantized is read in place by the types whose lanes each take a whole
/// 32-weight block (consecutive x groups), copied into workgroup memory by the K-quants;
/// read in place, nothing is staged and a workgroup is one row batch.
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
    let staged_types = [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K];
    let q8 = |in_place: Option<bool>| Overrides {
        x_q8: Some(true),
        x_in_place: in_place,
        ..Overrides::default()
    };
    for (m, k) in [
        (4_096, 4_096),
        (14_336, 4_096),
        (4_096, 14_336),
        (128_256, 4_096),
    ] {
        for ty in direct.into_iter().chain(staged_types) {
            let r = route_with(&h200, (ty, m, k), XInput::Norm, &q8(None)).unwrap();
            assert_eq!(r.launch().x_form(), XForm::Q8);
            let in_place = dot4(&r).x == Dot4X::InPlace;
            assert_eq!(
                in_place,
                direct.contains(&ty),
                "{ty} {m}x{k}: {}",
                r.reason()
            );
            if in_place {
                assert!(r.reason().contains("read it in place"));
                let batches = m.div_ceil(r.launch().rows_per_workgroup(h200.subgroup_max));
                assert_eq!(r.launch().parts()[0].workgroups, [batches as u32, 1, 1]);
            } else {
                assert_eq!(staged(&r).1, StagedFrom::Q8);
                assert!(r.reason().contains("staging copies it"));
            }
        }
    }
    // Forced either way, and no effect on the other families.
    let shape = (GgmlType::Q4_K, 4_096, 4_096);
    let r = route_with(&h200, shape, XInput::Norm, &q8(Some(true))).unwrap();
    assert!(dot4(&r).x == Dot4X::InPlace && r.reason().contains("(forced)"));
    let shape = (GgmlType::Q8_0, 4_096, 4_096);
    let r = route_with(&h200, shape, XInput::Norm, &q8(Some(false))).unwrap();
    assert_eq!(staged(&r).1, StagedFrom::Q8);
    let coop = Overrides {
        force: Some(Force::Family(Family::Coop)),
        ..q8(None)
    };
    let r = route_with(&h200, shape, XInput::Norm, &coop).unwrap();
    assert_eq!(r.launch().x_form(), XForm::F32);
}

/// The form x arrives in is part of the query: a norm's output is quantized for the
/// large matrices it feeds, silu(gate) * up is computed while staging for small down
/// projections and by its own dispatch for large ones, by the device's tuning.
#[test]
fn the_x_form_follows_the_tuning_thresholds() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    let t = h200.tuning;
    let default = Overrides::default();
    let form = |ty, m, k, x| {
        route_with(&h200, (ty, m, k), x, &default)
            .unwrap()
            .launch()
            .x_form()
    };
    // The Llama-3-8B head (Q6_K, 538 MB) takes quantized x from its norm; its q/k/v
    // (Q4_K, 25 MB) f32.
    assert!(128_256 * GgmlType::Q6_K.bytes_for(4096).unwrap() >= t.norm_q8_min_bytes);
    assert_eq!(form(GgmlType::Q6_K, 128_256, 4096, XInput::Norm), XForm::Q8);
    assert_eq!(form(GgmlType::Q4_K, 6144, 4096, XInput::Norm), XForm::F32);
    // Its down projection (Q4_K, 33 MB) takes silu(gate) * up quantized by its own
    // dispatch; SmolLM2's (Q4_1, 0.5 MB) computes it while staging.
    let up = 14_336 + 4;
    assert_eq!(
        form(GgmlType::Q4_K, 4096, 14_336, XInput::Glu { up }),
        XForm::Q8
    );
    let up = 1536 + 4;
    assert_eq!(
        form(GgmlType::Q4_1, 576, 1536, XInput::Glu { up }),
        XForm::Glu { up }
    );
    // Only dot4 takes either: coop multiplies f32.
    let coop = forced(Force::Family(Family::Coop));
    let r = route_with(
        &h200,
        (GgmlType::Q4_1, 576, 1536),
        XInput::Glu { up },
        &coop,
    )
    .unwrap();
    assert_eq!(r.launch().x_form(), XForm::F32);
}

#[test]
fn dot4_short_rows_take_a_whole_subgroup() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    // SmolLM2: 18 and 48 slices a row, under two rounds of 32 lanes.
    for (m, k) in [(1536, 576), (576, 1536), (49152, 576)] {
        let r = route(&h200, GgmlType::Q8_0, m, k).unwrap();
        assert_eq!(dot4(&r).lanes, 0, "{m}x{k}: {}", r.reason());
    }
}

#[test]
fn dot4_rows_take_a_whole_subgroup_where_it_divides_them() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0] {
        for (m, k) in [(4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096)] {
            let r = route(&h200, ty, m, k).unwrap();
            assert_eq!(dot4(&r).lanes, 0, "{ty} {m}x{k}: {}", r.reason());
        }
    }
}

/// Staged columns (a model of 8 sequences on the 8B shape, the H200's tuning) take a
/// row with teams of 8 lanes where that leaves at least 128 row batches, 16 where only
/// that does, and a whole subgroup otherwise; one column keeps a whole subgroup.
#[test]
fn staged_columns_take_rows_in_teams_where_batches_remain() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    assert_eq!(h200.tuning.staged_team_min_batches, 128);
    // (M, K, lanes): 256 invocations make 32 rows a batch with 8 lanes, 16 with 16.
    let cases = [
        (14336, 4096, 8),
        (4096, 4096, 8),
        (4096, 14336, 8),
        (2048, 4096, 16),
        (1024, 4096, 0),
        (128256, 4096, 8),
    ];
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
        for (m, k, lanes) in cases {
            let query = |columns| MatvecQuery {
                ty,
                m,
                k,
                x: XInput::Norm,
                columns,
            };
            let r = route_matvec(&h200, &query(8), &Overrides::default()).unwrap();
            assert!(dot4(&r).columns_at_once > 1, "{ty} {m}x{k}: {}", r.reason());
            assert_eq!(dot4(&r).lanes, lanes, "{ty} {m}x{k}: {}", r.reason());
            assert_eq!(
                r.reason().contains(&format!(
                    "{lanes} lanes per row of staged columns: each column's subgroup sums \
                     serve {} rows at once",
                    32 / lanes.max(1)
                )),
                lanes != 0,
                "{ty} {m}x{k}: {}",
                r.reason()
            );
            let one = route_matvec(&h200, &query(1), &Overrides::default()).unwrap();
            assert_eq!(dot4(&one).lanes, 0, "{ty} {m}x{k}: {}", one.reason());
            // The override decides where given.
            let asked = Overrides {
                lanes: Some(16),
                ..Overrides::default()
            };
            let r = route_matvec(&h200, &query(8), &asked).unwrap();
            assert_eq!(dot4(&r).lanes, 16, "{ty} {m}x{k}: {}", r.reason());
        }
    }
    // Where subgroups run at 32 or 64 lanes (RADV's wave32 and wave64), teams are cut
    // from the smaller, and a sum serves twice the rows in the wider: the clause says
    // both.
    let rdna4 = DeviceProfile::preset("rdna4").unwrap();
    assert_eq!((rdna4.subgroup_min, rdna4.subgroup_max), (32, 64));
    let query = MatvecQuery {
        ty: GgmlType::Q4_K,
        m: 128_256,
        k: 4096,
        x: XInput::Norm,
        columns: 8,
    };
    let r = route_matvec(&rdna4, &query, &Overrides::default()).unwrap();
    assert_eq!(dot4(&r).lanes, 8, "{}", r.reason());
    assert!(
        r.reason().contains(
            "8 lanes per row of staged columns: each column's subgroup sums serve 4-8 rows"
        ),
        "{}",
        r.reason()
    );
}

/// Staged columns run on at most one workgroup per compute unit (the H200's 132), each
/// staging the step's columns of x once for its share of the row batches, and the
/// clause says so where it capped a matrix; a matrix of fewer batches keeps one
/// workgroup a batch, one column is not capped, and the override decides where given.
#[test]
fn staged_columns_take_a_workgroup_per_compute_unit() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    assert_eq!(h200.tuning.staged_columns_workgroups, 132);
    let query = |m, columns| MatvecQuery {
        ty: GgmlType::Q4_K,
        m,
        k: 4096,
        x: XInput::Norm,
        columns,
    };
    let workgroups = |r: &brass::router::Route| -> Vec<u32> {
        r.launch().parts().iter().map(|p| p.workgroups[0]).collect()
    };
    let capped = "staged columns on at most 132 workgroups";
    // (M, workgroups at 8 columns): teams of 8 lanes make 32 rows a batch.
    for (m, expected) in [(14336, 132), (128_256, 132), (4096, 128)] {
        let r = route_matvec(&h200, &query(m, 8), &Overrides::default()).unwrap();
        assert!(dot4(&r).columns_at_once > 1, "{m}: {}", r.reason());
        assert!(
            workgroups(&r).iter().all(|&g| g == expected),
            "{m}: {:?}",
            workgroups(&r)
        );
        assert_eq!(
            r.reason().contains(capped),
            expected == 132,
            "{m}: {}",
            r.reason()
        );
        let one = route_matvec(&h200, &query(m, 1), &Overrides::default()).unwrap();
        assert!(!one.reason().contains(capped), "{m}: {}", one.reason());
    }
    let one = route_matvec(&h200, &query(14336, 1), &Overrides::default()).unwrap();
    assert!(
        workgroups(&one).iter().any(|&g| g > 132),
        "{:?}",
        workgroups(&one)
    );
    let asked = Overrides {
        max_workgroups: Some(264),
        ..Overrides::default()
    };
    let r = route_matvec(&h200, &query(14336, 8), &asked).unwrap();
    assert_eq!(workgroups(&r), [264], "{}", r.reason());
    assert!(!r.reason().contains(capped), "{}", r.reason());
}

#[test]
fn k_beyond_workgroup_memory_is_tiled_not_rejected() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    // 48 KiB holds 23,040 padded f16 values (90 quanta of 256, 544 bytes each); a
    // 65,536-wide row takes three tiles.
    let coop = forced(Force::Family(Family::Coop));
    let shape = (GgmlType::Q4_K, 1024, 65_536);
    let r = route_with(&h200, shape, XInput::F32, &coop).unwrap();
    let LaunchConfig::Coop(c) = r.launch().config() else {
        panic!("{}", r.reason())
    };
    assert_eq!(c.tile, 23_040);
    assert!(r.reason().contains("3 tiles"), "{}", r.reason());
    // As int8 with a scale and sum per 32, and bank padding (360 bytes per quantum
    // plus 272), it holds 34,560: two.
    let r = route(&h200, GgmlType::Q4_K, 1024, 65_536).unwrap();
    assert_eq!((r.launch().x_stage(), staged(&r).0), (XStage::Int8, 34_560));
    assert!(r.reason().contains("2 tiles"), "{}", r.reason());
}

#[test]
fn a_profile_without_subgroups_routes_scalar_and_says_why() {
    let mut p = DeviceProfile::preset("rdna4").unwrap();
    p.subgroups = false;
    let r = route(&p, GgmlType::Q4_K, 4096, 4096).unwrap();
    assert_eq!(r.family(), Family::Scalar);
    assert_eq!(r.clauses(), [Clause::ScalarNoSubgroups]);
    assert!(r.reason().contains("no subgroups"), "{}", r.reason());
    let coop = forced(Force::Family(Family::Coop));
    let err = route_with(&p, (GgmlType::Q4_K, 4096, 4096), XInput::F32, &coop).unwrap_err();
    assert!(err.to_string().contains("coop"), "{err}");
}

#[test]
fn overrides_and_bad_shapes() {
    let p = DeviceProfile::preset("h200").unwrap();
    let scalar = forced("q4_k_scalar".parse().unwrap());
    let r = route_with(&p, (GgmlType::Q4_K, 4096, 4096), XInput::F32, &scalar).unwrap();
    assert_eq!(r.launch().kernel().name, "matvec/q4_k_scalar");
    assert!(route_with(&p, (GgmlType::Q6_K, 4096, 4096), XInput::F32, &scalar).is_err());
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
        route(&p, GgmlType::Q4_K, 4096, 576).is_err(),
        "576 is not a whole Q4_K block"
    );
    assert!(route(&p, GgmlType::IQ2_XS, 4096, 4096).is_err());
    assert!(route(&p, GgmlType::Q8_0, 0, 4096).is_err());
    // A launch the device cannot run is refused, not routed.
    let bad = [
        // Lanes wider than the smallest subgroup, or not a power of two.
        Overrides {
            lanes: Some(64),
            ..Overrides::default()
        },
        Overrides {
            lanes: Some(6),
            ..Overrides::default()
        },
        // More invocations than a workgroup may have.
        Overrides {
            workgroup_size: Some(2048),
            ..Overrides::default()
        },
        // Loading ahead with a kernel that does not split its slices.
        Overrides {
            batches: Some(Batches::Prefetch),
            ..Overrides::default()
        },
    ];
    for o in bad {
        let r = route_with(&p, (GgmlType::Q8_0, 4096, 4096), XInput::F32, &o);
        assert!(r.is_err(), "{o:?}: {:?}", r.map(|r| r.reason()));
    }
}

/// The plan table stays narrow however many layers repeat a route: each row numbers its
/// reasons, and each clause is written once, in a legend after the aligned rows.
#[test]
fn a_plan_prints_each_reason_once_in_a_legend() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/reference/synkq_q4_k_m.gguf"
    );
    let file = brass::gguf::GgufFile::open(path).unwrap();
    let profile = DeviceProfile::preset("lavapipe").unwrap();
    let plan = brass::model::plan(&file, &profile, &Default::default()).unwrap();
    let text = plan.to_string();
    let lines: Vec<&str> = text.lines().collect();
    let header = lines[1];
    let reasons_at = header.find("reason").unwrap();
    let matrices: Vec<_> = plan.matrices().collect();
    let rows = &lines[2..2 + matrices.len()];
    for (row, m) in rows.iter().zip(&matrices) {
        assert!(row.starts_with(&m.name()), "{row}");
        assert!(row.len() < 160, "{} characters: {row}", row.len());
        let (columns, numbers) = row.split_at(reasons_at);
        assert!(
            columns.ends_with("  ") && !numbers.starts_with(' '),
            "{row}"
        );
        assert_eq!(numbers.split(' ').count(), m.route.clauses().len(), "{row}");
    }
    for m in &matrices {
        for clause in m.route.clauses() {
            let clause = clause.to_string();
            assert_eq!(text.matches(clause.as_str()).count(), 1, "{clause}\n{text}");
        }
    }
}

/// Prefill's engine: cooperative matrices where the adapter has them, on the matrices
/// a batch fills the device with their tiles (dot4 for the rest, with the clause that
/// says so), dot4 when asked or where there are none; asked for where there are none,
/// a clear refusal. Float weights and exact-x routes multiply f32 x whatever the engine.
#[test]
fn matmuls_take_cooperative_matrices_where_they_fill_the_device() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    let coop = route_matmul_engine(&h200, None).unwrap();
    assert!(
        matches!(coop.engine(), MatmulEngine::CoopMatrix { .. }),
        "{coop:?}"
    );
    // 4,096 rows at 512 tokens: 32 x 4 tiles of 128; 1,024 rows: 8 x 4.
    let matmul = |m: u64| {
        let matvec = route(&h200, GgmlType::Q4_K, m, 4096).unwrap();
        route_matmul(&h200, &coop, matvec.launch(), 512).unwrap()
    };
    let big = matmul(4096);
    assert_eq!(big.launch().tiled().unwrap().engine(), coop.engine());
    assert!(
        matches!(big.clauses()[0], Clause::MatmulCoopMatrix { .. }),
        "{:?}",
        big.clauses()
    );
    let small = matmul(1024);
    assert!(matches!(
        small.launch().tiled().unwrap().engine(),
        MatmulEngine::Dot4 { .. }
    ));
    assert!(
        small.clauses()[0].to_string().contains("fewer than the 64"),
        "{}",
        small.clauses()[0]
    );
    let off = route_matmul_engine(&h200, Some(false)).unwrap();
    assert!(matches!(off.engine(), MatmulEngine::Dot4 { k_groups: 4 }));
    assert!(off.clauses()[0].to_string().contains("off, as asked"));

    let lavapipe = DeviceProfile::preset("lavapipe").unwrap();
    let dot4 = route_matmul_engine(&lavapipe, None).unwrap();
    assert!(matches!(dot4.engine(), MatmulEngine::Dot4 { .. }));
    let why = dot4.clauses()[0].to_string();
    assert!(why.contains("no cooperative matrix"), "{why}");
    let err = route_matmul_engine(&lavapipe, Some(true))
        .unwrap_err()
        .to_string();
    assert!(err.contains("cooperative matrices asked for"), "{err}");
    let f16 = route(&h200, GgmlType::F16, 1024, 4096).unwrap();
    let float = route_matmul(&h200, &coop, f16.launch(), 512).unwrap();
    assert_eq!(float.launch().tiled().unwrap().engine(), MatmulEngine::Fma);
    assert!(matches!(
        float.clauses()[0],
        Clause::MatmulFloatWeights { .. }
    ));
}

/// Unpacked matmuls where a run asks for them: on the H200's profile a matrix that
/// fills the device takes `matmul/unpacked` (its clause gives the tile and the scratch
/// it needs: its rows in whole tiles of f16, and the batch's x), one a batch splits
/// into too few tiles still takes dot4, one whose unpacked weights would not fit a
/// binding stays tiled, not asking leaves them tiled, and asking where the batch is
/// not on cooperative matrices is refused.
#[test]
fn matmuls_unpack_where_asked() {
    let h200 = DeviceProfile::preset("h200").unwrap();
    let coop = route_matmul_engine(&h200, None).unwrap();
    let unpacked = coop.clone().with_unpacked(&h200, Some(true)).unwrap();
    let matmul = |engine, m: u64| {
        let matvec = route(&h200, GgmlType::Q4_K, m, 4096).unwrap();
        route_matmul(&h200, engine, matvec.launch(), 512).unwrap()
    };
    let big = matmul(&unpacked, 14336);
    let BatchLaunch::Unpacked(u) = big.launch() else {
        panic!("{big:?}");
    };
    assert_eq!(u.weight_scratch_bytes(), 14336 * 4096 * 2);
    assert_eq!(u.x_scratch_bytes(512), 512 * 4096 * 2);
    assert_eq!(
        u.x_scratch_bytes(300),
        384 * 4096 * 2,
        "whole tiles of 128 tokens"
    );
    let why = big.clauses()[0].to_string();
    assert!(
        why.contains("16x16 f16") && why.contains("tiles of 128 rows by 128 tokens"),
        "{why}"
    );
    assert!(matches!(big.clauses().last(), Some(Clause::MatmulXQ8)));
    let small = matmul(&unpacked, 1024);
    assert!(matches!(
        small.launch().tiled().map(|l| l.engine()),
        Some(MatmulEngine::Dot4 { .. })
    ));
    // A device whose bindings hold 64 MiB: the 117 MB of 14,336 x 4,096 unpacked stay
    // tiled, and the clause says why.
    let small_bindings = DeviceProfile {
        max_binding_bytes: 64 << 20,
        ..h200.clone()
    };
    let matvec = route(&small_bindings, GgmlType::Q4_K, 14336, 4096).unwrap();
    let tiled = route_matmul(&small_bindings, &unpacked, matvec.launch(), 512).unwrap();
    assert!(matches!(tiled.launch(), BatchLaunch::Tiled(_)), "{tiled:?}");
    let why: Vec<String> = tiled.clauses().iter().map(|c| c.to_string()).collect();
    assert!(
        why.iter().any(|c| c.contains("exceed the largest binding")),
        "{why:?}"
    );
    let not_asked = coop.clone().with_unpacked(&h200, None).unwrap();
    assert!(not_asked.unpacked().is_none());
    assert!(matches!(
        matmul(&not_asked, 14336).launch(),
        BatchLaunch::Tiled(_)
    ));
    let dot4 = route_matmul_engine(&h200, Some(false)).unwrap();
    let err = dot4
        .with_unpacked(&h200, Some(true))
        .unwrap_err()
        .to_string();
    assert!(err.contains("unpacked matmuls asked for"), "{err}");
    assert!(err.contains("cooperative matrices off, as asked"), "{err}");
}

/// One place decides matvec or matmul, by token count.
#[test]
fn one_token_takes_the_matvec_and_more_the_matmul() {
    assert_eq!(linear_kind(1), LinearKind::Matvec);
    for n in [2, 7, 512, 4096] {
        assert_eq!(linear_kind(n), LinearKind::Matmul);
    }
}

/// The batch size: the default or what was asked, cut by a binding (with the numbers)
/// and by the context; a batch of one, or room for fewer than two tokens, is token at
/// a time.
#[test]
fn the_batch_size_is_routed_with_its_reason() {
    let lavapipe = DeviceProfile::preset("lavapipe").unwrap();
    let (tokens, why) = route_batch(&lavapipe, (None, 512), 4096, 8192);
    assert_eq!(tokens, Some(512));
    assert_eq!(why.to_string(), "batches of 512 tokens, the default");
    let (tokens, why) = route_batch(&lavapipe, (Some(64), 512), 4096, 8192);
    assert_eq!(
        (tokens, why.to_string()),
        (Some(64), "batches of 64 tokens, as asked".into())
    );
    // A row of 1 MiB: a 128 MiB binding holds 128 of them.
    let (tokens, why) = route_batch(&lavapipe, (None, 512), 1 << 20, 8192);
    assert_eq!(tokens, Some(128));
    assert!(why.to_string().contains("binding"), "{why}");
    let (tokens, why) = route_batch(&lavapipe, (None, 512), 4096, 100);
    assert_eq!(tokens, Some(100));
    assert!(why.to_string().contains("context"), "{why}");
    let (tokens, why) = route_batch(&lavapipe, (Some(1), 512), 4096, 8192);
    assert_eq!(tokens, None);
    assert!(matches!(why, Clause::BatchOfOneAsked));
    let (tokens, _) = route_batch(&lavapipe, (None, 512), 100 << 20, 8192);
    assert_eq!(tokens, None, "one 100 MiB row fits, two do not");
}
