//! The effect summary: which rules (and outcomes) appear or vanish when only one axis changes,
//! and for each rule, the axis values it fired under.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::run::{AxisOut, Cell, CellStatus, Change, Effect, Site};

/// Outcomes are compared like rules, under these names.
pub fn outcome_items(c: &Cell) -> Vec<String> {
    let mut v = Vec::new();
    if c.status != CellStatus::Ok {
        v.push(format!("outcome:{}", c.status.as_str()));
    }
    if !c.leftovers.is_empty() {
        v.push("outcome:leftovers".into());
    }
    v
}

struct Group {
    items: BTreeSet<String>,
    warn: f64,
}

/// Repeats of a setting merge: an item counts when any repeat showed it, WARN lines are averaged.
fn groups(cells: &[Cell]) -> BTreeMap<Vec<usize>, Group> {
    let mut acc: BTreeMap<Vec<usize>, (BTreeSet<String>, u64, usize)> = BTreeMap::new();
    for c in cells.iter().filter(|c| c.comparable()) {
        let e = acc.entry(c.values.clone()).or_default();
        e.0.extend(c.rules.iter().map(|r| r.id.clone()));
        e.0.extend(outcome_items(c));
        e.1 += c.warn_lines;
        e.2 += 1;
    }
    acc.into_iter().map(|(k, (items, w, n))| (k, Group { items, warn: w as f64 / n as f64 })).collect()
}

/// `name=label` of every multi-valued axis except `skip`.
fn setting_label(axes: &[AxisOut], values: &[usize], skip: Option<usize>) -> String {
    axes.iter()
        .enumerate()
        .filter(|(i, a)| Some(*i) != skip && a.values.len() > 1)
        .map(|(i, a)| format!("{}={}", a.name, a.values[values[i]].label))
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn effects(axes: &[AxisOut], cells: &[Cell]) -> Vec<Effect> {
    let groups = groups(cells);
    let mut out = Vec::new();
    for (a, axis) in axes.iter().enumerate().filter(|(_, x)| x.values.len() > 1) {
        for v in 1..axis.values.len() {
            let mut appear: BTreeMap<String, Vec<String>> = BTreeMap::new();
            let mut vanish: BTreeMap<String, Vec<String>> = BTreeMap::new();
            let (mut n, mut wb, mut wv) = (0, 0.0, 0.0);
            for (key, g) in groups.iter().filter(|(k, _)| k[a] == v) {
                let mut base_key = key.clone();
                base_key[a] = 0;
                let Some(b) = groups.get(&base_key) else { continue };
                n += 1;
                wb += b.warn;
                wv += g.warn;
                let ctx = setting_label(axes, key, Some(a));
                for it in g.items.difference(&b.items) {
                    appear.entry(it.clone()).or_default().push(ctx.clone());
                }
                for it in b.items.difference(&g.items) {
                    vanish.entry(it.clone()).or_default().push(ctx.clone());
                }
            }
            let to_changes = |m: BTreeMap<String, Vec<String>>| {
                m.into_iter().map(|(item, contexts)| Change { item, contexts }).collect()
            };
            out.push(Effect {
                axis: axis.name.clone(),
                value: axis.values[v].label.clone(),
                baseline: axis.values[0].label.clone(),
                comparisons: n,
                appear: to_changes(appear),
                vanish: to_changes(vanish),
                warn_baseline: wb,
                warn_value: wv,
            });
        }
    }
    out
}

pub fn sites(axes: &[AxisOut], cells: &[Cell]) -> Vec<Site> {
    let groups = groups(cells);
    let all: BTreeSet<&String> = groups.values().flat_map(|g| g.items.iter()).collect();
    let mut out = Vec::new();
    for item in all {
        let fired: Vec<&Vec<usize>> = groups.iter().filter(|(_, g)| g.items.contains(item)).map(|(k, _)| k).collect();
        let mut when = Vec::new();
        let mut conds: Vec<(usize, usize)> = Vec::new();
        for (a, axis) in axes.iter().enumerate().filter(|(_, x)| x.values.len() > 1) {
            let vals: BTreeSet<usize> = fired.iter().map(|k| k[a]).collect();
            let seen: BTreeSet<usize> = groups.keys().map(|k| k[a]).collect();
            if vals.len() == 1 && seen.len() > 1 {
                let v = *vals.iter().next().unwrap();
                conds.push((a, v));
                when.push((axis.name.clone(), axis.values[v].label.clone()));
            }
        }
        let matching = groups.keys().filter(|k| conds.iter().all(|&(a, v)| k[a] == v)).count();
        out.push(Site {
            item: item.clone(),
            fired: fired.len(),
            total: groups.len(),
            exact: !conds.is_empty() && matching == fired.len(),
            when,
            settings: fired.iter().map(|k| setting_label(axes, k, None)).collect(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::run::{effect_line, site_line, AxisKind, AxisValueOut, Leftovers, RuleHit};
    use crate::model::Severity;

    fn axis(name: &str, labels: &[&str]) -> AxisOut {
        AxisOut {
            name: name.into(),
            kind: AxisKind::Env,
            values: labels.iter().map(|l| AxisValueOut { value: l.to_string(), label: l.to_string() }).collect(),
        }
    }

    fn cell(values: Vec<usize>, rules: &[&str], warn: u64, status: CellStatus) -> Cell {
        Cell {
            index: 0,
            id: String::new(),
            repeat: 1,
            values,
            env: Default::default(),
            status,
            detail: String::new(),
            wall_s: 1.0,
            teardown_s: None,
            hung: vec![],
            processes: vec![],
            markers: Default::default(),
            nccl_version: None,
            transport: None,
            warn_lines: warn,
            verdict: None,
            rules: rules
                .iter()
                .map(|r| RuleHit { id: r.to_string(), count: 1, benign: true, severity: Severity::Warning })
                .collect(),
            primary: None,
            explain_error: None,
            leftovers: Leftovers::default(),
            launch: Default::default(),
            stacks: vec![],
            stack_groups: vec![],
            stack_notes: vec![],
        }
    }

    /// The H200 finding: the abort trio only with NCCL 2.22.3 and abort.
    fn two_by_two() -> (Vec<AxisOut>, Vec<Cell>) {
        let axes = vec![axis("nccl-lib", &["2.22.3", "2.28.3"]), axis("teardown", &["clean", "abort"])];
        let cells = vec![
            cell(vec![0, 0], &[], 0, CellStatus::Ok),
            cell(vec![0, 1], &["abort-trio"], 6, CellStatus::Ok),
            cell(vec![1, 0], &[], 0, CellStatus::Ok),
            cell(vec![1, 1], &[], 0, CellStatus::Ok),
        ];
        (axes, cells)
    }

    #[test]
    fn trio_only_in_one_cell() {
        let (axes, cells) = two_by_two();
        let e = effects(&axes, &cells);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].axis, "nccl-lib");
        assert_eq!(e[0].vanish, vec![Change { item: "abort-trio".into(), contexts: vec!["teardown=abort".into()] }]);
        assert!(e[0].appear.is_empty());
        assert_eq!(e[1].appear, vec![Change { item: "abort-trio".into(), contexts: vec!["nccl-lib=2.22.3".into()] }]);
        assert_eq!(
            effect_line(&e[1]),
            "teardown=abort vs teardown=clean (2 pairs): appears +abort-trio (only with nccl-lib=2.22.3); WARN lines 0 -> 6"
        );
        assert_eq!(
            effect_line(&e[0]),
            "nccl-lib=2.28.3 vs nccl-lib=2.22.3 (2 pairs): vanishes -abort-trio (only with teardown=abort); WARN lines 6 -> 0 (-100 %)"
        );
        let s = sites(&axes, &cells);
        assert_eq!(s.len(), 1);
        assert!(s[0].exact);
        assert_eq!(site_line(&s[0]), "abort-trio: in 1 of 4 settings, exactly when nccl-lib=2.22.3 and teardown=abort");
    }

    #[test]
    fn outcomes_compare_like_rules_and_repeats_merge() {
        let axes = vec![axis("teardown", &["clean", "early-exit"])];
        let mut hang = cell(vec![1], &[], 1, CellStatus::Hang);
        hang.repeat = 1;
        let mut hang2 = cell(vec![1], &[], 2, CellStatus::Ok);
        hang2.repeat = 2;
        let cells = vec![cell(vec![0], &[], 0, CellStatus::Ok), hang, hang2];
        let e = effects(&axes, &cells);
        assert_eq!(e[0].appear[0].item, "outcome:hang");
        assert_eq!(e[0].warn_value, 1.5);
        assert_eq!(
            effect_line(&e[0]),
            "teardown=early-exit vs teardown=clean (1 pair): appears +outcome:hang; WARN lines 0 -> 1.5"
        );
    }

    #[test]
    fn unfinished_cells_are_not_compared() {
        let (axes, mut cells) = two_by_two();
        cells[1].status = CellStatus::Interrupted;
        let e = effects(&axes, &cells);
        assert!(e[1].appear.is_empty());
        assert_eq!(e[1].comparisons, 1);
        cells[0].explain_error = Some("x".into());
        assert_eq!(effects(&axes, &cells)[1].comparisons, 1);
        assert_eq!(
            effect_line(&effects(&axes, &cells[2..])[0]),
            "nccl-lib=2.28.3 vs nccl-lib=2.22.3: no pair of finished cells to compare"
        );
    }

    #[test]
    fn rule_everywhere_and_not_exact() {
        let axes = vec![axis("A", &["0", "1"]), axis("B", &["x", "y"])];
        let cells = vec![
            cell(vec![0, 0], &["r", "q"], 1, CellStatus::Ok),
            cell(vec![0, 1], &["r"], 1, CellStatus::Ok),
            cell(vec![1, 0], &["r"], 1, CellStatus::Ok),
            cell(vec![1, 1], &["r", "q"], 1, CellStatus::Ok),
        ];
        let s = sites(&axes, &cells);
        assert_eq!(site_line(&s[1]), "r: in 4 of 4 settings, every setting");
        assert_eq!(site_line(&s[0]), "q: in 2 of 4 settings: A=0 B=x; A=1 B=y");
        let cells2 = vec![
            cell(vec![0, 0], &["q"], 1, CellStatus::Ok),
            cell(vec![0, 1], &[], 1, CellStatus::Ok),
            cell(vec![1, 0], &[], 1, CellStatus::Ok),
            cell(vec![1, 1], &[], 1, CellStatus::Ok),
        ];
        let mut c3 = cells2.clone();
        c3.push(cell(vec![0, 0], &[], 1, CellStatus::Ok));
        assert!(sites(&axes, &c3)[0].exact, "a repeat that did not show it does not undo the setting");
        let cells4 = vec![
            cell(vec![0, 0], &["q"], 1, CellStatus::Ok),
            cell(vec![0, 1], &[], 1, CellStatus::Ok),
            cell(vec![1, 0], &[], 1, CellStatus::Ok),
        ];
        let axes3 = vec![axis("A", &["0", "1"]), axis("B", &["x", "y", "z"])];
        let mut c5 = cells4.clone();
        c5.push(cell(vec![0, 2], &["q"], 1, CellStatus::Ok));
        let s = sites(&axes3, &c5);
        assert_eq!(site_line(&s[0]), "q: in 2 of 4 settings, only with A=0 (not in every such setting)");
    }
}
