//! The plan that is printed is the plan that runs: `model::plan` (what `inspect --plan`
//! and `decode --plan` print) against the model a live device loads, its pipelines
//! against the dispatch ledger, for the default model and a synthetic Q4_K_M model.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use brass::device::{Device, DeviceProfile};
use brass::gguf::GgufFile;
use brass::hub::default_model_path;
use brass::model::{plan, Input, LoadOptions, Model, DECODE_MATRIX_UNITS_FROM};
use brass::router::Overrides;

fn models() -> [PathBuf; 2] {
    [
        default_model_path().unwrap(),
        common::reference_path("synkq_q4_k_m.gguf"),
    ]
}

fn options() -> [LoadOptions; 2] {
    let context = Some(16);
    [
        LoadOptions {
            context,
            ..Default::default()
        },
        // Every norm and every down projection handing its matrices x quantized: the
        // routes that read it in place and that copy it; and the f32 cache.
        LoadOptions {
            context,
            kv: brass::kernels::attention::KvType::F32,
            routing: Overrides {
                x_q8: Some(true),
                glu_q8: Some(true),
                ..Overrides::default()
            },
            ..Default::default()
        },
    ]
}

/// The matvec pipelines the model's ledger counts, and asserts every pipeline it made
/// was dispatched.
fn dispatched_matvecs(model: &Model) -> BTreeSet<String> {
    model.forward(Input::Token(1), 0).unwrap();
    let audit = model.audit();
    assert!(audit.defects().is_empty(), "{audit}");
    audit
        .entries
        .iter()
        .filter(|e| e.name.starts_with("matvec/"))
        .map(|e| e.name.clone())
        .collect()
}

fn planned_matvecs(plan: &brass::model::Plan) -> BTreeSet<String> {
    plan.matrices().map(|m| m.route.pipeline_key()).collect()
}

/// The plan for the live profile is the loaded model's, field for field and as JSON,
/// and its pipelines are the ones the ledger counts.
#[test]
fn the_plan_for_a_device_is_what_the_model_loaded_there_runs() {
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    for path in models() {
        let file = GgufFile::open(&path).unwrap();
        for options in options() {
            let printed = plan(&file, device.profile(), &options).unwrap();
            let model = Model::from_gguf(device.clone(), &file, &options).unwrap();
            let ctx = format!("{} {:?}", path.display(), options.routing);
            assert_eq!(model.plan(), &printed, "{ctx}");
            assert_eq!(model.plan().to_json(), printed.to_json(), "{ctx}");
            assert_eq!(
                dispatched_matvecs(&model),
                planned_matvecs(&printed),
                "{ctx}"
            );
            // The attention the plan prints is the one that ran (the step above).
            let attention = printed.attention.launch();
            let audit = model.audit();
            for key in [
                attention.pipeline_key(),
                attention.rope_kv_root().replace(".wgsl", ""),
            ] {
                assert!(
                    audit
                        .entries
                        .iter()
                        .any(|e| e.name == key && e.dispatches > 0),
                    "{ctx}: `{key}` not dispatched:\n{audit}"
                );
            }
        }
    }
}

/// A preset's plan (what `inspect --plan --profile lavapipe` prints) loads and runs on
/// the live lavapipe as printed. The preset is lavapipe at 8 lanes; CI also runs at 4
/// and 16, so its subgroup range is the live one's, which the kernels must match.
#[test]
fn a_presets_plan_runs_as_printed() {
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    let live = device.profile();
    let preset = DeviceProfile {
        subgroup_min: live.subgroup_min,
        subgroup_max: live.subgroup_max,
        ..DeviceProfile::preset("lavapipe").unwrap()
    };
    for path in models() {
        let file = GgufFile::open(&path).unwrap();
        for options in options() {
            let printed = plan(&file, &preset, &options).unwrap();
            let model = Model::from_plan(device.clone(), &file, printed.clone()).unwrap();
            assert_eq!(model.plan(), &printed);
            assert_eq!(dispatched_matvecs(&model), planned_matvecs(&printed));
            // The same routes as the live profile's plan: the preset describes this
            // device.
            let on_live = plan(&file, live, &options).unwrap();
            assert_eq!(
                printed.to_json()["matvecs"],
                on_live.to_json()["matvecs"],
                "{}: the lavapipe preset routes otherwise than the live lavapipe",
                path.display()
            );
        }
    }
}

/// A plan the device cannot run is refused before anything is allocated.
#[test]
fn a_plan_the_device_cannot_run_is_refused() {
    let device: Arc<dyn Device> = Arc::new(common::gpu());
    let file = GgufFile::open(common::reference_path("synkq_q4_k_m.gguf")).unwrap();
    let wider = device.profile().max_invocations_per_workgroup * 2;
    let bigger = DeviceProfile {
        max_invocations_per_workgroup: wider,
        max_workgroup_size_x: wider,
        ..device.profile().clone()
    };
    let options = LoadOptions {
        routing: Overrides {
            workgroup_size: Some(wider),
            ..Overrides::default()
        },
        ..LoadOptions::default()
    };
    let printed = plan(&file, &bigger, &options).unwrap();
    let before = device.memory_in_use();
    let err = Model::from_plan(device.clone(), &file, printed).unwrap_err();
    assert!(
        err.to_string().contains("invocations per workgroup"),
        "{err}"
    );
    assert_eq!(device.memory_in_use(), before);
}

/// Where the steps of many sequences go to the matrix units: a model serving
/// `DECODE_MATRIX_UNITS_FROM` sequences or more on an adapter with cooperative matrices
/// (the H200 preset), each quant matrix over dot4 weights with its decode columns and
/// the plan saying so; not at one fewer, not with cooperative matrices turned off, not
/// on lavapipe. A run that moves the crossover (`decode_units_from`) moves all of it: 4
/// sequences take the matrix units from steps of 4 rows, 3 do not.
#[test]
fn steps_of_many_rows_go_to_the_matrix_units_where_planned() {
    let file = GgufFile::open(common::reference_path("synkq_q4_k_m.gguf")).unwrap();
    let h200 = DeviceProfile::preset("h200").unwrap();
    let lavapipe = DeviceProfile::preset("lavapipe").unwrap();
    let asking = |sequences: usize, coop_matrix: Option<bool>, from: Option<u64>| LoadOptions {
        context: Some(16),
        sequences,
        routing: Overrides {
            coop_matrix,
            decode_units_from: from,
            ..Overrides::default()
        },
        ..Default::default()
    };
    let with = |sequences: usize, coop_matrix: Option<bool>| asking(sequences, coop_matrix, None);
    let on_units = |p: &brass::model::Plan| {
        let clause = p.decode_rows.iter().find_map(|c| match c {
            brass::router::Clause::DecodeRowsOnMatrixUnits { from, matrices, .. } => {
                Some((*from, *matrices))
            }
            _ => None,
        });
        let with_columns = p.matrices().filter(|m| m.decode_columns.is_some()).count();
        (clause, with_columns as u64)
    };
    let from = DECODE_MATRIX_UNITS_FROM;
    let many = plan(&file, &h200, &with(from as usize, None)).unwrap();
    let (clause, with_columns) = on_units(&many);
    let dot4 = many
        .matrices()
        .filter(|m| m.route.launch().family() == brass::kernels::matvec::Family::Dot4)
        .count() as u64;
    assert!(dot4 > 0);
    assert_eq!(clause, Some((from, dot4)), "{many}");
    assert_eq!(with_columns, dot4);
    assert!(
        many.to_string()
            .contains(&format!("steps of {from} rows or more multiply")),
        "{many}"
    );
    assert_eq!(many.decode_units_from, from);
    let four = plan(&file, &h200, &asking(4, None, Some(4))).unwrap();
    assert_eq!(on_units(&four), (Some((4, dot4)), dot4));
    assert_eq!(four.decode_units_from, 4);
    assert!(
        four.to_string()
            .contains("steps of 4 rows or more multiply"),
        "{four}"
    );
    for (profile, options) in [
        (&h200, with(from as usize - 1, None)),
        (&h200, asking(3, None, Some(4))),
        (&h200, with(32, Some(false))),
        (&lavapipe, with(32, None)),
    ] {
        assert_eq!(
            on_units(&plan(&file, profile, &options).unwrap()),
            (None, 0)
        );
    }
}

/// The decode columns sum K in `DECODE_COLUMN_SPANS` spans (the H200 preset), or as
/// many as the run asks, and the plan says so; where the spans' sums of a step would
/// not fit one binding (64 sequences on bindings of 1 MiB), K in one span, and the
/// plan says why.
#[test]
fn decode_columns_sum_k_in_spans_that_fit_a_binding() {
    use brass::model::DECODE_COLUMN_SPANS;
    let file = GgufFile::open(common::reference_path("synkq_q4_k_m.gguf")).unwrap();
    let h200 = DeviceProfile::preset("h200").unwrap();
    let options = |sequences: usize, spans: Option<u32>| LoadOptions {
        context: Some(16),
        sequences,
        routing: Overrides {
            decode_column_spans: spans,
            ..Overrides::default()
        },
        ..Default::default()
    };
    let spans_of = |p: &brass::model::Plan| {
        let clause = p.decode_rows.iter().find_map(|c| match c {
            brass::router::Clause::DecodeRowsOnMatrixUnits { k_spans, .. } => Some(*k_spans),
            _ => None,
        });
        let engines: Vec<u32> = p
            .matrices()
            .filter_map(|m| m.decode_columns.as_ref())
            .flat_map(|c| [c.narrow.engine().k_spans(), c.wide.engine().k_spans()])
            .collect();
        (clause, engines)
    };
    let from = DECODE_MATRIX_UNITS_FROM as usize;
    let default = plan(&file, &h200, &options(from, None)).unwrap();
    let (clause, engines) = spans_of(&default);
    let k = DECODE_COLUMN_SPANS;
    assert_eq!(clause, Some((k, k)), "{default}");
    assert!(!engines.is_empty() && engines.iter().all(|&s| s == k));
    assert!(
        default.to_string().contains(&format!("K in {k} spans")),
        "{default}"
    );
    let three = plan(&file, &h200, &options(from, Some(3))).unwrap();
    assert_eq!(spans_of(&three).0, Some((3, 3)), "{three}");
    assert!(three.decode_span_scratch(from as u64).is_some());
    let mut small = h200.clone();
    small.max_binding_bytes = 1024 * 1024;
    let crowded = plan(&file, &small, &options(64, None)).unwrap();
    let (clause, engines) = spans_of(&crowded);
    assert_eq!(clause, Some((1, k)), "{crowded}");
    assert!(engines.iter().all(|&s| s == 1));
    assert_eq!(crowded.decode_span_scratch(64), None);
    assert!(
        crowded.to_string().contains("would exceed a binding"),
        "{crowded}"
    );
}

/// The decode columns' blocks of rows: by default 2 in the narrow tile and 4 in the
/// wide one, both in 4 parts of K, so that a row's sums stay the same in either; as
/// the run asks (`Overrides::decode_row_blocks`), both tiles of every matrix alike, the
/// plan's clause saying so (64 rows at 4 blocks of 16); a count whose tile does not
/// fit the H200's 48 KiB of workgroup memory (8 blocks: 59,904 bytes), or is not one
/// the kernel takes (3), is refused with the setting named.
#[test]
fn decode_columns_take_the_row_blocks_asked_or_refuse_them() {
    use brass::kernels::matmul::MatmulEngine;
    let file = GgufFile::open(common::reference_path("synkq_q4_k_m.gguf")).unwrap();
    let h200 = DeviceProfile::preset("h200").unwrap();
    let options = |row_blocks: Option<u32>| LoadOptions {
        context: Some(16),
        sequences: DECODE_MATRIX_UNITS_FROM as usize,
        routing: Overrides {
            decode_row_blocks: row_blocks,
            ..Overrides::default()
        },
        ..Default::default()
    };
    // Each matrix's (narrow, wide) tiles as (row blocks, K parts).
    let tiles_of = |p: &brass::model::Plan| {
        let tile = |e: MatmulEngine| match e {
            MatmulEngine::CoopColumns {
                row_blocks,
                k_parts,
                ..
            } => (row_blocks, k_parts),
            other => panic!("{other:?}"),
        };
        let tiles: BTreeSet<_> = p
            .matrices()
            .filter_map(|m| m.decode_columns.as_ref())
            .map(|c| (tile(c.narrow.engine()), tile(c.wide.engine())))
            .collect();
        tiles.into_iter().collect::<Vec<_>>()
    };
    let clause_rows = |p: &brass::model::Plan| {
        p.decode_rows.iter().find_map(|c| match c {
            brass::router::Clause::DecodeRowsOnMatrixUnits { rows, k_parts, .. } => {
                Some((*rows, *k_parts))
            }
            _ => None,
        })
    };
    let default = plan(&file, &h200, &options(None)).unwrap();
    assert_eq!(tiles_of(&default), [((2, 4), (4, 4))], "{default}");
    assert_eq!(clause_rows(&default), Some(((32, 64), 4)), "{default}");
    let four = plan(&file, &h200, &options(Some(4))).unwrap();
    assert_eq!(tiles_of(&four), [((4, 2), (4, 2))], "{four}");
    assert_eq!(clause_rows(&four), Some(((64, 64), 2)), "{four}");
    for refused in [8, 3] {
        let err = plan(&file, &h200, &options(Some(refused)))
            .err()
            .unwrap_or_else(|| panic!("{refused} row blocks planned"))
            .to_string();
        assert!(
            err.contains("Overrides::decode_row_blocks") && err.contains("49152 bytes"),
            "{refused}: {err}"
        );
    }
}

/// A prompt batch's quant matrices unpacked where the run asks for it (on the H200's
/// profile, cooperative matrices forced so the synthetic model's small matrices take
/// them): every layer matrix's matmul is `matmul/unpacked` with its clause, the
/// lm-head stays tiled, the scratch is the largest matrix's, and the printed plan
/// says so; with 24 sequences a decode step's rows take the layer matrices unpacked
/// too; not asked for, nothing is unpacked; asked for on lavapipe (no matrix units),
/// the load is refused with the reason.
#[test]
fn prompt_matmuls_unpack_where_asked() {
    use brass::router::{BatchLaunch, Clause};
    let file = GgufFile::open(common::reference_path("synkq_q4_k_m.gguf")).unwrap();
    let h200 = DeviceProfile::preset("h200").unwrap();
    let lavapipe = DeviceProfile::preset("lavapipe").unwrap();
    let options = |unpacked_matmul| LoadOptions {
        context: Some(64),
        routing: Overrides {
            coop_matrix: Some(true),
            unpacked_matmul,
            ..Overrides::default()
        },
        ..Default::default()
    };
    let p = plan(&file, &h200, &options(Some(true))).unwrap();
    let text = p.to_string();
    let mut largest = (0, 0);
    for m in p.layers.iter().flat_map(|l| l.matrices()) {
        let route = m.batch.as_ref().unwrap();
        let BatchLaunch::Unpacked(u) = route.launch() else {
            panic!("{} not unpacked: {text}", m.name());
        };
        assert!(
            matches!(route.clauses()[0], Clause::MatmulUnpacked { .. }),
            "{text}"
        );
        let ubatch = p.prefill.ubatch();
        largest.0 = largest.0.max(u.weight_scratch_bytes());
        largest.1 = largest.1.max(u.x_scratch_bytes(ubatch));
    }
    assert!(
        matches!(
            p.output.batch.as_ref().unwrap().launch(),
            BatchLaunch::Tiled(_)
        ),
        "{text}"
    );
    assert_eq!(p.unpacked_scratch(), Some(largest));
    assert!(text.contains("matmul/unpacked 16x16 f16"), "{text}");
    assert!(text.contains("unpacked on cooperative matrices"), "{text}");

    let tiled = plan(&file, &h200, &options(None)).unwrap();
    assert_eq!(tiled.unpacked_scratch(), None);
    assert!(!tiled.to_string().contains("unpacked"), "{tiled}");

    // 24 sequences: steps of many rows take the layer matrices unpacked too, the
    // lm-head the decode columns.
    let many = LoadOptions {
        sequences: 24,
        ..options(Some(true))
    };
    let p = plan(&file, &h200, &many).unwrap();
    for m in p.layers.iter().flat_map(|l| l.matrices()) {
        assert!(
            m.decode_unpacked.is_some() && m.decode_columns.is_none(),
            "{p}"
        );
    }
    assert!(p.output.decode_columns.is_some() && p.output.decode_unpacked.is_none());
    assert!(
        p.decode_rows
            .iter()
            .any(|c| matches!(c, Clause::DecodeRowsUnpacked { .. })),
        "{p}"
    );
    let (weights, x) = p.decode_unpacked_scratch(24).unwrap();
    assert!(weights > 0 && x > 0);
    assert!(
        p.to_string().contains("quant matrices unpacked, as asked"),
        "{p}"
    );
    let columns = plan(
        &file,
        &h200,
        &LoadOptions {
            sequences: 24,
            ..options(None)
        },
    )
    .unwrap();
    assert_eq!(columns.decode_unpacked_scratch(24), None);

    let lavapipe_options = LoadOptions {
        routing: Overrides {
            unpacked_matmul: Some(true),
            ..Overrides::default()
        },
        ..options(Some(true))
    };
    let err = plan(&file, &lavapipe, &lavapipe_options)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unpacked matmuls asked for"), "{err}");
}

/// Where prompts' attention goes to the matrix units: by default or asked for
/// (`matrix_attention`) on the H200 preset (cooperative matrices, no loop limit), the
/// plan routes `attention/flash` and says so, over an f32 cache only where asked; by
/// default over an f32 cache, with it or cooperative matrices turned off, and on
/// lavapipe (no matrix units), the scalar kernel, with the clause that says why.
#[test]
fn prompt_attention_goes_to_the_matrix_units_where_planned() {
    use brass::kernels::attention::{KvType, NoMatrixAttention, PrefillEngine};
    use brass::model::PrefillPlan;
    use brass::router::Clause;
    let file = GgufFile::open(common::reference_path("synkq_q4_k_m.gguf")).unwrap();
    let h200 = DeviceProfile::preset("h200").unwrap();
    let lavapipe = DeviceProfile::preset("lavapipe").unwrap();
    let attention_over = |kv, profile: &DeviceProfile, coop_matrix, matrix_attention| {
        let options = LoadOptions {
            context: Some(64),
            kv,
            routing: Overrides {
                coop_matrix,
                matrix_attention,
                ..Overrides::default()
            },
            ..Default::default()
        };
        let p = plan(&file, profile, &options).unwrap();
        let PrefillPlan::Batched(b) = &p.prefill else {
            panic!("prompts not batched: {p}");
        };
        (b.attention.clone(), p.to_string())
    };
    let attention = |profile, coop_matrix, matrix_attention| {
        attention_over(KvType::F16, profile, coop_matrix, matrix_attention)
    };
    // By default, and where asked, over an f32 cache too.
    for (kv, matrix) in [
        (KvType::F16, None),
        (KvType::Q8_0, None),
        (KvType::F16, Some(true)),
        (KvType::F32, Some(true)),
    ] {
        let (on_units, text) = attention_over(kv, &h200, None, matrix);
        assert!(
            matches!(on_units.launch().engine(), PrefillEngine::Matrix { .. }),
            "{kv} {matrix:?}: {text}"
        );
        assert!(matches!(
            on_units.clauses(),
            [Clause::PrefillAttentionOnMatrixUnits { .. }]
        ));
        assert!(
            text.contains("causal flash attention on 16x16 f16 matrix units"),
            "{text}"
        );
    }
    let (over_f32, text) = attention_over(KvType::F32, &h200, None, None);
    assert_eq!(over_f32.launch().engine(), PrefillEngine::Scalar, "{text}");
    assert_eq!(
        over_f32.clauses().first(),
        Some(&Clause::PrefillAttentionScalar {
            why: NoMatrixAttention::F32Cache
        }),
        "{text}"
    );
    for (profile, coop, matrix, why) in [
        (&h200, Some(false), Some(true), NoMatrixAttention::Asked),
        (&h200, Some(false), None, NoMatrixAttention::Asked),
        (&h200, None, Some(false), NoMatrixAttention::Asked),
        (&lavapipe, None, Some(true), NoMatrixAttention::NoShape),
        (&lavapipe, None, None, NoMatrixAttention::NoShape),
    ] {
        let (route, text) = attention(profile, coop, matrix);
        assert_eq!(route.launch().engine(), PrefillEngine::Scalar, "{text}");
        assert_eq!(
            route.clauses().first(),
            Some(&Clause::PrefillAttentionScalar { why }),
            "{text}"
        );
    }
    // A device that ends an invocation's loops after a count (lavapipe's, here with
    // matrix units as the tests emulate them): flash attention where its walk over the
    // context stays within half the count, which the plan states; past that, the scalar
    // kernel's passes.
    let mut limited = lavapipe.clone();
    limited.coop_matrix = Some(brass::device::CoopMatrix {
        size: 8,
        input: brass::device::CoopInput::F16,
        vector_loads: true,
    });
    let limit = limited.loop_iterations.unwrap();
    let walk = |context: usize| {
        let options = LoadOptions {
            context: Some(context),
            allow_past_trained_context: true,
            ..Default::default()
        };
        let p = plan(&file, &limited, &options).unwrap();
        let PrefillPlan::Batched(b) = &p.prefill else {
            panic!("prompts not batched: {p}");
        };
        (b.attention.clone(), p.to_string())
    };
    let (short, text) = walk(64);
    let [Clause::PrefillAttentionOnMatrixUnits { .. }, Clause::PrefillMatrixWalkWithinLoopLimit {
        limit: l,
        keys: 64,
        iterations,
    }] = short.clauses()
    else {
        panic!("{text}");
    };
    assert!(*l == limit && *iterations <= limit / 2, "{text}");
    assert_eq!(short.launch().max_keys(), Some(64));
    assert!(text.contains("the walk over 64 keys takes"), "{text}");
    let (long, text) = walk(100_000);
    assert_eq!(long.launch().engine(), PrefillEngine::Scalar, "{text}");
    let Some(Clause::PrefillAttentionScalar {
        why:
            NoMatrixAttention::LoopLimit {
                keys: 100_000,
                iterations,
                limit: l,
            },
    }) = long.clauses().first()
    else {
        panic!("{text}");
    };
    assert!(*l == limit && *iterations > limit / 2, "{text}");
}

/// A model serving several sequences hands every dot4 matrix its x quantized once (the
/// norms write q8, silu(gate) * up has its own dispatch), with the clause naming the
/// steps' rows; one serving a single conversation keeps the rule by weight size, which
/// the synthetic model's small matrices stay under.
#[test]
fn many_sequences_quantize_x_once() {
    let file = GgufFile::open(common::reference_path("synkq_q4_k_m.gguf")).unwrap();
    let h200 = DeviceProfile::preset("h200").unwrap();
    let serving = |sequences: usize| LoadOptions {
        context: Some(16),
        sequences,
        ..Default::default()
    };
    let q8_clauses = |p: &brass::model::Plan| {
        let text = p.to_string();
        (
            text.matches("by the norm that produced it, for steps of up to")
                .count(),
            text.matches("quantized once by its own dispatch, for steps of up to")
                .count(),
        )
    };
    let one = plan(&file, &h200, &serving(1)).unwrap();
    assert_eq!(q8_clauses(&one), (0, 0), "{one}");
    assert!(
        !one.to_string().contains("by the norm that produced it"),
        "{one}"
    );
    let eight = plan(&file, &h200, &serving(8)).unwrap();
    let (norms, glus) = q8_clauses(&eight);
    assert!(norms > 0 && glus > 0, "{eight}");
    assert!(
        eight.to_string().contains("steps of up to 8 rows"),
        "{eight}"
    );
    assert!(
        !eight.to_string().contains("computed while staging x"),
        "{eight}"
    );
}

/// The plan states who keeps the kernels' indices in range, as the device will create
/// them: on Vulkan (the H200's preset) the matrix-unit kernels keep their own, on
/// Metal (the M4 Max's) every kernel has wgpu's clamps.
#[test]
fn the_plan_states_who_checks_the_kernels_indices() {
    let file = GgufFile::open(common::reference_path("synkq_q4_k_m.gguf")).unwrap();
    let options = LoadOptions {
        context: Some(16),
        ..Default::default()
    };
    for (preset, own) in [("h200", true), ("m4-max", false)] {
        let profile = DeviceProfile::preset(preset).unwrap();
        assert_eq!(profile.kernel_index_checks, own, "{preset}");
        let p = plan(&file, &profile, &options).unwrap();
        assert_eq!(
            p.index_checks,
            brass::router::Clause::IndexChecks { kernels_own: own }
        );
        let text = p.to_string();
        let said = if own {
            "index checks: the matrix-unit kernels (tiled matmuls, decode columns, flash \
             attention) and the dot4 matvecs keep their indices in range themselves"
        } else {
            "index checks: every kernel has wgpu's index clamps"
        };
        assert!(text.contains(said), "{text}");
    }
}
