//! Cooperative matrices emulated on subgroups, for running kernels written for matrix
//! units on an adapter without them (lavapipe): the kernel's WGSL with its matrix
//! types turned into per-lane fragments and its matrix loads, stores and
//! multiply-adds into functions over them. It tests everything in such a kernel but
//! the adapter's matrix instructions themselves (those run on the H200).
//!
//! A matrix of S x S is held by the subgroup's L lanes (L <= S, L dividing S): lane l
//! holds the columns j with j % L == l, column j's element i in slot i + S (j / L). A
//! multiply-add gets row i of A one column k at a time from the lane that holds it
//! (a shuffle whose slot is the same for every lane), and adds it times its own
//! columns of B.

/// The kernel `source` (composed for matrices of `size` x `size` f32, as
/// `PrefillAttention::matrix_with_budget` makes them) with its matrices emulated on
/// subgroups of `lanes` lanes; `arrays` names the workgroup arrays it loads matrices
/// from and stores them to, each with its element type.
pub fn emulate(source: &str, size: u32, lanes: u32, arrays: &[(&str, &str)]) -> String {
    assert!(
        lanes <= size && size.is_multiple_of(lanes),
        "lanes {lanes}, matrices {size}"
    );
    let mut out = String::new();
    for line in source.lines() {
        let trimmed = line.trim_start();
        if trimmed == "enable wgpu_cooperative_matrix;" {
            continue;
        }
        if trimmed.starts_with("alias Mat") {
            let name = &trimmed["alias ".len()..trimmed.find(" =").unwrap()];
            out += &format!("alias {name} = array<f32, EMU_SLOTS>;\n");
            continue;
        }
        out += line;
        out.push('\n');
    }
    for (array, _) in arrays {
        for (call, row_major) in [("coopLoadT", true), ("coopLoad", false)] {
            for mat in ["MatA", "MatB", "MatC"] {
                out = replace_calls(
                    &out,
                    &format!("{call}<{mat}>(&{array}["),
                    |index, stride| format!("emu_load_{array}({index}, {stride}, {row_major})"),
                );
            }
        }
        out = replace_store(&out, array);
    }
    out = out.replace("coopMultiplyAdd(", "emu_mma(");
    let entry = "@builtin(subgroup_size) lanes: u32) {";
    assert!(
        out.contains(entry),
        "the kernel's entry point names its lanes"
    );
    out = out.replacen(entry, &format!("{entry}\n    emu_lane = lane;"), 1);
    let left = out
        .lines()
        .find(|l| l.contains("coop") && !l.trim_start().starts_with("//"));
    assert!(left.is_none(), "a matrix operation left: {left:?}");
    out += &format!(
        "\nconst EMU_L: u32 = {lanes}u;\nconst EMU_SLOTS: u32 = {}u;\nvar<private> emu_lane: u32;\n",
        size * size / lanes
    );
    out += MMA;
    for (array, element) in arrays {
        out += &LOAD_STORE
            .replace("ARRAY", array)
            .replace("ELEMENT", element);
    }
    out
}

/// `prefix` + `index], stride)` calls, each made `make(index, stride)`.
fn replace_calls(text: &str, prefix: &str, make: impl Fn(&str, &str) -> String) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        out += &rest[..at];
        let args = &rest[at + prefix.len()..];
        let close = args.find("], ").expect("an index, then a stride");
        let end = args[close..].find(')').expect("the call's end") + close;
        out += &make(&args[..close], &args[close + 3..end]);
        rest = &args[end + 1..];
    }
    out + rest
}

/// `coopStore(matrix, &array[index], stride)` calls made emulated stores.
fn replace_store(text: &str, array: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("coopStore(") {
        let args = &rest[at + "coopStore(".len()..];
        let Some(comma) = args.find(&format!(", &{array}[")) else {
            out += &rest[..at + 1];
            rest = &rest[at + 1..];
            continue;
        };
        if args[..comma].contains(')') {
            out += &rest[..at + 1];
            rest = &rest[at + 1..];
            continue;
        }
        out += &rest[..at];
        let matrix = &args[..comma];
        let index_at = comma + format!(", &{array}[").len();
        let close = args[index_at..].find("], ").unwrap() + index_at;
        let end = args[close..].find(')').unwrap() + close;
        out += &format!(
            "emu_store_{array}({matrix}, {}, {})",
            &args[index_at..close],
            &args[close + 3..end]
        );
        rest = &args[end + 1..];
    }
    out + rest
}

const MMA: &str = "
fn emu_mma(a: MatA, b: MatB, c: MatC) -> MatC {
    var av = a;
    var bv = b;
    var r = c;
    for (var k = 0u; k < S; k++) {
        for (var i = 0u; i < S; i++) {
            let aik = subgroupShuffle(av[i + S * (k / EMU_L)], k % EMU_L);
            for (var jc = 0u; jc < S / EMU_L; jc++) {
                r[i + S * jc] += aik * bv[k + S * jc];
            }
        }
    }
    return r;
}
";

const LOAD_STORE: &str = "
fn emu_load_ARRAY(base: u32, stride: u32, row_major: bool) -> MatC {
    var m: MatC;
    for (var jc = 0u; jc < S / EMU_L; jc++) {
        let j = emu_lane + EMU_L * jc;
        for (var i = 0u; i < S; i++) {
            m[i + S * jc] = f32(ARRAY[select(base + j * stride + i, base + i * stride + j, row_major)]);
        }
    }
    return m;
}

fn emu_store_ARRAY(m: MatC, base: u32, stride: u32) {
    var mv = m;
    for (var jc = 0u; jc < S / EMU_L; jc++) {
        let j = emu_lane + EMU_L * jc;
        for (var i = 0u; i < S; i++) {
            ARRAY[base + j * stride + i] = ELEMENT(mv[i + S * jc]);
        }
    }
}
";
