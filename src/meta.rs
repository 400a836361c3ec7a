//! Facts of this build, for every layer: the version, and the files built in (rules, fixtures,
//! lint checks, kernels) as (path relative to the repository, content).

pub static EMBEDDED: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const VERSION_LINE: &str = concat!(env!("CARGO_PKG_VERSION"), " (rev ", env!("EPDOCTOR_GIT_REV"), ")");
