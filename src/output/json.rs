//! `--format json`: the contract of docs/json-contract.md, one object.
use crate::model::Analysis;

pub fn render(a: &Analysis) -> String {
    let mut s = serde_json::to_string_pretty(a).expect("the model always serialises");
    s.push('\n');
    s
}
