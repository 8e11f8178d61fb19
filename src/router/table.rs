//! The route table that `decode --plan` and `inspect --plan` print.

use super::Route;

/// One row of a route table: a tensor (or a stack of them) and its route.
pub struct RouteRow<'a> {
    pub tensor: &'a str,
    pub route: &'a Route,
}

/// Writes `rows` in aligned columns. A route's reasons are numbers into a legend of
/// clauses written once after the table: a model repeats the same few clauses on every
/// layer, and whole on each row they made rows hundreds of characters long.
pub fn write_route_table(f: &mut impl std::fmt::Write, rows: &[RouteRow]) -> std::fmt::Result {
    let mut legend: Vec<String> = Vec::new();
    let mut cells = Vec::new();
    for row in rows {
        let numbers: Vec<String> = row
            .route
            .clauses()
            .iter()
            .map(|clause| {
                let clause = clause.to_string();
                let n = match legend.iter().position(|c| *c == clause) {
                    Some(i) => i,
                    None => {
                        legend.push(clause);
                        legend.len() - 1
                    }
                };
                (n + 1).to_string()
            })
            .collect();
        let launch = row.route.launch();
        cells.push((
            launch.kernel().ty.name(),
            format!("{} x {}", launch.m(), launch.k()),
            row.route.pipeline_key(),
            numbers.join(" "),
        ));
    }
    let width = |header: &str, column: &mut dyn Iterator<Item = usize>| {
        column.max().unwrap_or(0).max(header.len())
    };
    let tensor_w = width("tensor", &mut rows.iter().map(|r| r.tensor.len()));
    let ty_w = width("type", &mut cells.iter().map(|c| c.0.len()));
    let shape_w = width("M x K", &mut cells.iter().map(|c| c.1.len()));
    let kernel_w = width("kernel", &mut cells.iter().map(|c| c.2.len()));
    writeln!(
        f,
        "{:<tensor_w$}  {:<ty_w$}  {:>shape_w$}  {:<kernel_w$}  reasons",
        "tensor", "type", "M x K", "kernel"
    )?;
    for (row, (ty, shape, kernel, reasons)) in rows.iter().zip(&cells) {
        writeln!(
            f,
            "{:<tensor_w$}  {ty:<ty_w$}  {shape:>shape_w$}  {kernel:<kernel_w$}  {reasons}",
            row.tensor
        )?;
    }
    if !legend.is_empty() {
        writeln!(f, "reasons:")?;
        for (i, clause) in legend.iter().enumerate() {
            writeln!(f, "{:>4}  {clause}", i + 1)?;
        }
    }
    Ok(())
}
