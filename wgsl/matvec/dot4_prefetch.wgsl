// Loading a slice ahead, for a route with PREFETCH (router clause 6), and a loaded slice
// dotted with several columns (COLUMNS_AT_ONCE): included after dot4.wgsl by the
// per-type files that split a slice into `slice_load` (its loads, as a `Raw`) and
// `slice_math` (the rest), itself `slice_prep` (what of the weights any column needs)
// then `prep_math` (one column's part). Without either the driver never calls them.

// Slice s of `row` (nothing past the rows or the row's slices), x in one tile.
fn load_slice(row: u32, s: u32, n_slices: u32) -> Raw {
    var r: Raw;
    if (row < params.m && s < n_slices) {
        r = slice_load(row * params.row_bytes, s / SLICES, s % SLICES);
    }
    return r;
}

// x in one tile, no queue: a lane's slices of its rows, one batch after another, as one
// sequence, each slice's weights loaded before the previous slice's arithmetic, so
// that a lane has loads in flight while it computes, also across the end of a row.
// Every lane runs the same number of steps a row (some past the row's last slice), so
// the lanes of a subgroup reach each row's end together.
//
// Columns (see dot4.wgsl's `batch_rows`): the sequence runs each row once per column,
// its weights loaded again (from L1 or L2) for the next column; x is staged at the start
// of each column of each row, or with one column once, by the one call of stage_x.
fn rows_prefetched(first: u32, stride: u32, offset: u32, tl: u32, lanes: u32, lid: u32) {
    let n_slices = (params.k / BLOCK) * SLICES;
    let steps = (n_slices + lanes - 1u) / lanes;
    var base = first;
    if (base >= params.m) {
        return;
    }
    var i = 0u;
    var s = tl;
    var c = 0u;
    var staged = false;
    var raw = load_slice(base + offset, s, n_slices);
    var acc = 0.0;
    loop {
        x_col = c * params.x_stride;
        // The first slice's loads are in flight while x is staged.
        if (!X_DIRECT && i == 0u && (!staged || params.cols > 1u)) {
            workgroupBarrier();
            stage_x(0u, lid);
            workgroupBarrier();
            staged = true;
        }
        let row = base + offset;
        let row_end = i + 1u == steps;
        let last_col = c + 1u == params.cols;
        let next_base = select(base, base + stride, row_end && last_col);
        let next_s = select(s + lanes, tl, row_end);
        let next = load_slice(next_base + offset, next_s, n_slices);
        if (row < params.m && s < n_slices) {
            let b = s / SLICES;
            acc += slice_math(raw, s % SLICES, b * (BLOCK / 32u));
        }
        if (row_end) {
            let total = row_total(acc);
            if (tl == 0u && row < params.m) {
                y[params.y_offset + c * params.y_stride + row] = total;
            }
            acc = 0.0;
            if (next_base >= params.m) {
                break;
            }
            c = select(c + 1u, 0u, last_col);
        }
        base = next_base;
        s = next_s;
        i = select(i + 1u, 0u, row_end);
        raw = next;
    }
}

// x in place or staged (column c0 + c as staged column c), `n` columns from c0 (1 to
// COLUMNS_AT_ONCE): each of the lane's slices of the row at byte `rb` loaded and
// prepared once (`slice_prep`) and dotted with every column, one accumulator each,
// then each column's row total written. A column's slices are summed in the order
// row_partial sums them with STEP = 1 whatever `n` is; every lane of the subgroup calls
// it (the totals are subgroup operations).
fn columns_at_once(rb: u32, ok: bool, c0: u32, n: u32, row: u32, tl: u32, lanes: u32) {
    columns_of_tile(rb, ok, c0, n, row, tl, lanes, 0u, (params.k / BLOCK) * SLICES, false);
}

// `columns_at_once` over the `n_slices` slices of one tile of x, the row's blocks from
// `blk0` on: with `after` (a tile past the first), each column's total is added to what
// y holds for the tiles before it, tile after tile in K's order, by the lane that
// wrote it.
fn columns_of_tile(rb: u32, ok: bool, c0: u32, n: u32, row: u32, tl: u32, lanes: u32,
                   blk0: u32, n_slices: u32, after: bool) {
    var sums: ColumnSums;
    for (var s = tl; ok && s < n_slices; s += lanes) {
        let b = s / SLICES;
        let prep = slice_prep(slice_load(rb, blk0 + b, s % SLICES), s % SLICES);
        dot_run(&sums, prep, b * (BLOCK / 32u), c0, n);
    }
    store_run(&sums, c0, n, row, tl, ok, after);
}

// One accumulator per column of a run.
alias ColumnSums = array<f32, COLUMNS_AT_ONCE>;

// A prepared slice whose first weight is x group g dotted with each of the run's `n`
// columns from c0 (staged column c, or in place), into its accumulator. A full run
// has no branch per column, which leaves the driver free to interleave the columns'
// loads and dot products: on an H100 at 8 columns 747.7 tok/s against 720.7 with one
// (results/parallel/staged_prefetch). A shorter run (sequences that left the step)
// branches per column rather than compute columns it does not have.
fn dot_run(sums: ptr<function, ColumnSums>, prep: Prep, g: u32, c0: u32, n: u32) {
    if (n == COLUMNS_AT_ONCE) {
        for (var c = 0u; c < COLUMNS_AT_ONCE; c++) {
            dot_column(sums, prep, g, c0, c);
        }
        return;
    }
    for (var c = 0u; c < COLUMNS_AT_ONCE; c++) {
        if (c < n) {
            dot_column(sums, prep, g, c0, c);
        }
    }
}

// Column c0 + c of a prepared slice (x group g on), into accumulator c.
fn dot_column(sums: ptr<function, ColumnSums>, prep: Prep, g: u32, c0: u32, c: u32) {
    x_col = (c0 + c) * params.x_stride;
    xs_col = select(c, 0u, X_DIRECT);
    (*sums)[c] += prep_math(prep, g);
}

// Each of the run's columns' row totals (subgroup sums: every lane of the subgroup
// calls it) written to y by lane 0 where the row is `ok`, or with `after` added to what
// y holds.
fn store_run(sums: ptr<function, ColumnSums>, c0: u32, n: u32, row: u32, tl: u32, ok: bool,
             after: bool) {
    for (var c = 0u; c < COLUMNS_AT_ONCE; c++) {
        let total = row_total((*sums)[c]);
        if (c < n && tl == 0u && ok) {
            let at = params.y_offset + (c0 + c) * params.y_stride + row;
            if (after) {
                y[at] += total;
            } else {
                y[at] = total;
            }
        }
    }
}

// The run of `n` columns from c0 staged as staged columns 0 .. n, the tile of x from
// t0, between barriers (the workgroup's previous reads of the stage come first).
fn stage_run(c0: u32, n: u32, t0: u32, lid: u32) {
    workgroupBarrier();
    for (var c = 0u; c < n; c++) {
        x_col = (c0 + c) * params.x_stride;
        xs_col = c;
        stage_x(t0, lid);
    }
    workgroupBarrier();
}

// x staged, COLUMNS_AT_ONCE > 1, no queue: the columns in runs of up to
// COLUMNS_AT_ONCE, each run's x staged once per workgroup and tile (X_COLS staged
// columns, by the one stage_x, so a column's int8 x is the same code whichever of the
// run it is), then every row of the workgroup's batches, each loaded slice dotted with
// every column of the run (`columns_of_tile`). Where the one-column route restages x
// per column and row batch, and reloads the weights per column, a step of up to
// COLUMNS_AT_ONCE rows reads each weight once and stages each x once per workgroup and
// tile. Past the first tile a row's totals are added to the earlier tiles' in y.
fn staged_columns(first: u32, stride: u32, offset: u32, tl: u32, lanes: u32, lid: u32) {
    if (PREFETCH) {
        staged_columns_prefetched(first, stride, offset, tl, lanes, lid);
        return;
    }
    for (var c0 = 0u; c0 < params.cols; c0 += COLUMNS_AT_ONCE) {
        let n = min(COLUMNS_AT_ONCE, params.cols - c0);
        for (var t0 = 0u; t0 < params.k; t0 += TILE) {
            stage_run(c0, n, t0, lid);
            let n_slices = min(TILE, params.k - t0) / BLOCK * SLICES;
            for (var base = first; base < params.m; base += stride) {
                let row = base + offset;
                columns_of_tile(row * params.row_bytes, row < params.m, c0, n, row, tl, lanes,
                                t0 / BLOCK, n_slices, t0 != 0u);
            }
        }
    }
}

// `staged_columns` with PREFETCH (x in one tile): as `rows_prefetched` does for one
// column, a lane's slices of its rows run as one sequence, each slice's weights loaded
// before the previous slice's arithmetic (also across a row's end), and a run's first
// slice loaded before its x is staged, so that a lane has loads in flight while it
// computes. A row's slices are those `columns_at_once` takes, in its order, each column
// summed from zero, so a column's total is the same code whichever of the run it is and
// however many columns the dispatch has. Every lane runs the same number of steps a row
// (some past the row's last slice), so the lanes of a subgroup reach each row's end,
// where the totals are subgroup operations, together.
fn staged_columns_prefetched(first: u32, stride: u32, offset: u32, tl: u32, lanes: u32,
                             lid: u32) {
    let n_slices = (params.k / BLOCK) * SLICES;
    let steps = (n_slices + lanes - 1u) / lanes;
    for (var c0 = 0u; c0 < params.cols; c0 += COLUMNS_AT_ONCE) {
        let n = min(COLUMNS_AT_ONCE, params.cols - c0);
        var base = first;
        var i = 0u;
        var s = tl;
        var raw = load_slice(base + offset, s, n_slices);
        stage_run(c0, n, 0u, lid);
        var sums: ColumnSums;
        // base is the workgroup's, so every subgroup leaves together.
        loop {
            if (base >= params.m) {
                break;
            }
            let row = base + offset;
            let row_end = i + 1u == steps;
            let next_base = select(base, base + stride, row_end);
            let next_s = select(s + lanes, tl, row_end);
            let next = load_slice(next_base + offset, next_s, n_slices);
            if (row < params.m && s < n_slices) {
                let b = s / SLICES;
                dot_run(&sums, slice_prep(raw, s % SLICES), b * (BLOCK / 32u), c0, n);
            }
            if (row_end) {
                store_run(&sums, c0, n, row, tl, row < params.m, false);
                sums = ColumnSums();
            }
            base = next_base;
            s = next_s;
            i = select(i + 1u, 0u, row_end);
            raw = next;
        }
    }
}
