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

use std::cell::RefCell;

/// The kernel `source` (composed for matrices of `size` x `size`) with its matrices
/// emulated on subgroups of `lanes` lanes: each array (workgroup or storage) it loads
/// matrices from gets a load function, each it stores them to a store function, over
/// the element type the array is declared with.
pub fn emulate(source: &str, size: u32, lanes: u32) -> String {
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
    // The arrays loaded from and stored to, as the calls name them: a read-only storage
    // array can take no store function.
    let (loaded, stored) = (RefCell::new(Vec::new()), RefCell::new(Vec::new()));
    let note = |arrays: &RefCell<Vec<String>>, array: &str| {
        let mut arrays = arrays.borrow_mut();
        if !arrays.iter().any(|a| a == array) {
            arrays.push(array.to_string());
        }
    };
    // coopLoadT before coopLoad, whose name begins it.
    for (call, row_major) in [("coopLoadT", true), ("coopLoad", false)] {
        out = rewrite(&out, call, |_, array, index, stride| {
            note(&loaded, array);
            format!("emu_load_{array}({index}, {stride}, {row_major})")
        });
    }
    out = rewrite(&out, "coopStore", |head, array, index, stride| {
        note(&stored, array);
        let matrix = head.trim_start_matches('(').trim_end_matches(", ");
        format!("emu_store_{array}({matrix}, {index}, {stride})")
    });
    let (loaded, stored) = (loaded.into_inner(), stored.into_inner());
    out = out.replace("coopMultiplyAdd(", "emu_mma(");
    // The entry point's lane index, added where it takes none.
    let lane = match out.find("@builtin(subgroup_invocation_id) ") {
        Some(at) => {
            let name = &out[at + "@builtin(subgroup_invocation_id) ".len()..];
            name[..name.find(':').unwrap()].to_string()
        }
        None => {
            out = out.replacen(
                "fn main(",
                "fn main(@builtin(subgroup_invocation_id) emu_lane_in: u32, ",
                1,
            );
            "emu_lane_in".to_string()
        }
    };
    let main = out.find("fn main(").expect("an entry point");
    let body = main + out[main..].find('{').unwrap() + 1;
    out.insert_str(body, &format!("\n    emu_lane = {lane};"));
    let left = out
        .lines()
        .find(|l| l.contains("coop") && !l.trim_start().starts_with("//"));
    assert!(left.is_none(), "a matrix operation left: {left:?}");
    out += &format!(
        "\nconst EMU_L: u32 = {lanes}u;\nconst EMU_SLOTS: u32 = {}u;\nvar<private> emu_lane: u32;\n",
        size * size / lanes
    );
    out += &mma(size, lanes);
    for array in &loaded {
        out += &load(array, &element_of(source, array), size, lanes);
    }
    for array in &stored {
        out += &store(array, &element_of(source, array), size, lanes);
    }
    out
}

/// The element type `source` declares `array` with (`var<...> array: array<T, ...>`),
/// which a store converts to, through the alias it names where it names one.
fn element_of(source: &str, array: &str) -> String {
    let decl = format!("> {array}: array<");
    let at = source.find(&decl).unwrap_or_else(|| {
        panic!("`{array}`, which matrices are loaded from or stored to, declared as an array")
    });
    let t = &source[at + decl.len()..];
    // Up to the array's `,` or closing `>`, past those of a nested type (vec4<f16>).
    let mut depth = 0;
    let end = t
        .find(|c| {
            depth += match c {
                '<' => 1,
                '>' => -1,
                _ => 0,
            };
            depth < 0 || (depth == 0 && c == ',')
        })
        .unwrap_or(t.len());
    let named = t[..end].trim();
    match source.find(&format!("alias {named} = ")) {
        Some(alias) => {
            let t = &source[alias + format!("alias {named} = ").len()..];
            t[..t.find(';').unwrap_or(t.len())].trim().to_string()
        }
        None => named.to_string(),
    }
}

/// The emulated multiply-add, written out whole: lavapipe ends an invocation's loops
/// after 65,535 iterations, so the emulation adds none.
fn mma(size: u32, lanes: u32) -> String {
    let mut f = String::from(
        "\nfn emu_mma(a: MatA, b: MatB, c: MatC) -> MatC {\n    var r = c;\n    var aik: f32;\n",
    );
    for k in 0..size {
        for i in 0..size {
            let slot = i + size * (k / lanes);
            f += &format!("    aik = subgroupShuffle(a[{slot}], {}u);\n", k % lanes);
            for jc in 0..size / lanes {
                f += &format!("    r[{}] += aik * b[{}];\n", i + size * jc, k + size * jc);
            }
        }
    }
    f + "    return r;\n}\n"
}

/// The load of a matrix from `array`, whose elements are `element`, column-major or
/// row-major where asked, written out whole. Where the elements are vectors of 4 (as
/// a matrix load may read them), the base and the stride count vectors, and a row (or
/// column) runs on through the vectors' components.
fn load(array: &str, element: &str, size: u32, lanes: u32) -> String {
    // Element (i, j): `along` its row (row-major) or column, `outer` the row or column.
    let value = if element.starts_with("vec4<") {
        format!("{array}[base + outer * stride + along / 4u][along % 4u]")
    } else {
        format!("{array}[base + outer * stride + along]")
    };
    let mut f = format!(
        "\nfn emu_at_{array}(base: u32, stride: u32, row_major: bool, i: u32, j: u32) -> f32 {{\n    \
         let outer = select(j, i, row_major);\n    let along = select(i, j, row_major);\n    \
         return f32({value});\n}}\n\nfn emu_load_{array}(base: u32, stride: u32, row_major: bool) \
         -> MatC {{\n    var m: MatC;\n"
    );
    for jc in 0..size / lanes {
        f += &format!("    let j{jc} = emu_lane + {}u;\n", lanes * jc);
        for i in 0..size {
            let slot = i + size * jc;
            f +=
                &format!("    m[{slot}] = emu_at_{array}(base, stride, row_major, {i}u, j{jc});\n");
        }
    }
    f + "    return m;\n}\n"
}

/// The column-major store of a matrix to `array`, whose elements are `element`, written
/// out whole.
fn store(array: &str, element: &str, size: u32, lanes: u32) -> String {
    let mut f = format!("\nfn emu_store_{array}(m: MatC, base: u32, stride: u32) {{\n");
    for jc in 0..size / lanes {
        f += &format!("    let j{jc} = emu_lane + {}u;\n", lanes * jc);
        for i in 0..size {
            let slot = i + size * jc;
            f += &format!("    {array}[base + j{jc} * stride + {i}u] = {element}(m[{slot}]);\n");
        }
    }
    f + "}\n"
}

/// Each call of `call` whose last arguments are `&array[index], stride` made
/// `make(head, array, index, stride)`, where `head` is what stands between the call's
/// name and the `&` (a matrix type and the parenthesis, or the parenthesis and a matrix
/// to store).
fn rewrite(text: &str, call: &str, make: impl Fn(&str, &str, &str, &str) -> String) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(call) {
        out += &rest[..at];
        let args = &rest[at + call.len()..];
        let amp = args.find('&').expect("a pointer into a workgroup array");
        let open = args[amp..].find('[').expect("an index") + amp;
        let close = args[open..].find("], ").expect("an index, then a stride") + open;
        let end = args[close..].find(')').expect("the call's end") + close;
        out += &make(
            &args[..amp],
            &args[amp + 1..open],
            &args[open + 1..close],
            &args[close + 3..end],
        );
        rest = &args[end + 1..];
    }
    out + rest
}
