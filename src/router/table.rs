//! The route table that `decode --plan` and `inspect --plan` print.

use super::{Clause, MatmulRoute, Route};

/// One row of a route table: a tensor (or a stack of them), its kernel and the clauses
/// that chose it.
pub struct RouteRow<'a> {
    /// The tensor's name, or the stacked tensors' names joined.
    pub tensor: &'a str,
    /// The weights' type ([`GgmlType::name`](crate::quant::GgmlType::name)).
    pub ty: &'static str,
    /// M x K.
    pub shape: (u64, u64),
    /// The pipeline's ledger name.
    pub kernel: String,
    /// Why the route is what it is.
    pub clauses: &'a [Clause],
}

impl<'a> RouteRow<'a> {
    /// A matrix's matvec.
    pub fn matvec(tensor: &'a str, route: &'a Route) -> RouteRow<'a> {
        let launch = route.launch();
        RouteRow {
            tensor,
            ty: launch.kernel().ty.name(),
            shape: (launch.m(), launch.k()),
            kernel: route.pipeline_key(),
            clauses: route.clauses(),
        }
    }

    /// A matrix's matmul.
    pub fn matmul(tensor: &'a str, route: &'a MatmulRoute) -> RouteRow<'a> {
        let launch = route.launch();
        RouteRow {
            tensor,
            ty: launch.ty().name(),
            shape: launch.shape(),
            kernel: launch.pipeline_key(),
            clauses: route.clauses(),
        }
    }
}

/// Writes `rows` in aligned columns. A route's reasons are numbers into a legend of
/// clauses written once after the table: a model repeats the same few clauses on every
/// layer, and whole on each row they made rows hundreds of characters long.
pub fn write_route_table(f: &mut impl std::fmt::Write, rows: &[RouteRow]) -> std::fmt::Result {
    let mut legend: Vec<String> = Vec::new();
    let mut cells = Vec::new();
    for row in rows {
        let numbers: Vec<String> = row
            .clauses
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
        cells.push((
            row.ty,
            format!("{} x {}", row.shape.0, row.shape.1),
            row.kernel.clone(),
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
